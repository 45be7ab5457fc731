package dwarfline

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"sync"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"

	// Faster than compress/flate on distributions' debug files
	// (BenchmarkSectionCacheLibc/inflate inflates glibc's .debug_info).
	"github.com/klauspost/compress/flate"
)

// elfCompressZlib is ELFCOMPRESS_ZLIB, the ch_type of an SHF_COMPRESSED
// section compressed with zlib.
const elfCompressZlib = 1

// lazySectionMin is the size (bytes, decompressed) from which a
// zlib-compressed section of lazySections is inflated on demand rather
// than whole: below it the saving is too small to matter.
var lazySectionMin uint64 = 256 << 10 // a variable for tests

// lazyInflateStep is the least a lazySection inflates at a time (bytes):
// each step costs a flate Read call, so steps of a few hundred bytes
// (one unit header) would cost more than they save.
var lazyInflateStep = 64 << 10 // a variable for tests

// lazySections are the DWARF sections (by name without ".debug_") whose
// readers know how to ask for a prefix: .debug_info (by unit),
// .debug_abbrev (by table) and .debug_line (by line program). They are
// the large ones: in glibc's debug file they are 5.8, 1.0 and 1.3 MB of
// its 8.4 MB of DWARF.
var lazySections = []string{"info", "abbrev", "line"}

// sectionBytes is a DWARF section's contents, decompressed: data, and
// for a lazily inflated section the inflater that fills it (nil when
// data is complete).
type sectionBytes struct {
	data []byte
	lazy *lazySection
}

// lazySection is a zlib-compressed section inflated on demand, front to
// back, since a zlib stream cannot be entered in the middle (or a large
// uncompressed one read from the file on demand the same way): buf has
// the section's whole decompressed size (from its compression header)
// and its first avail bytes are valid; the rest is zero until prefix
// asks for it. A profile that samples a few functions of glibc thus
// inflates the units before theirs instead of all 8 MB. Safe for
// concurrent use.
type lazySection struct {
	mu     sync.Mutex
	buf    []byte
	avail  int
	zr     io.Reader // nil once buf is complete or the stream failed
	failed bool      // the stream ended or failed before filling buf
	step   int       // inflate at least this much at a time; 0: lazyInflateStep
	skip   int       // bytes zr must inflate and drop first: buf has them from the cache
	slot   *cacheSlot
	saved  int // bytes of buf the cache holds
}

// validPrefix makes at least the first n bytes of data, a section
// inflated on demand by z (nil when complete), valid and returns how
// many are: all of data when z is nil, else see lazySection.prefix.
func validPrefix(z *lazySection, data []byte, n uint64) int {
	if z == nil {
		return len(data)
	}
	return z.prefix(n)
}

// prefix makes at least the first n bytes of the section valid (all of
// it when n is past the end) and returns how many are: fewer than
// min(n, len(buf)) only when the stream is corrupt. It inflates at
// least lazyInflateStep bytes at a time.
func (s *lazySection) prefix(n uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := int(min(n, uint64(len(s.buf))))
	if want <= s.avail || s.zr == nil {
		return s.avail
	}
	step := s.step
	if step == 0 {
		step = lazyInflateStep
	}
	if s.skip > 0 {
		// The cache gave the first bytes; the stream starts at 0.
		if _, err := io.CopyN(io.Discard, s.zr, int64(s.skip)); err != nil {
			s.zr, s.failed = nil, true
			return s.avail
		}
		s.skip = 0
	}
	end := min(max(want, s.avail+step), len(s.buf))
	got, err := io.ReadFull(s.zr, s.buf[s.avail:end])
	s.avail += got
	if err != nil {
		s.zr, s.failed = nil, true
	} else if s.avail == len(s.buf) {
		s.zr = nil
	}
	return s.avail
}

// Save writes what is valid to the section cache, if more than it has.
func (s *lazySection) Save() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slot != nil && s.avail > s.saved {
		s.slot.save(s.buf[:s.avail], len(s.buf))
		s.saved = s.avail
	}
}

// complete reports whether the whole section is valid, or cannot be.
func (s *lazySection) complete() bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.zr == nil
}

// dwarfSectionData returns the contents of the DWARF section s of f,
// decompressed, when they are at most max bytes and lie inside the file.
// Other uncompressed sections are read with one ReadAt. SHF_COMPRESSED zlib
// sections (as distributions and the Go linker write them) are inflated
// without the zlib Adler-32 check (a corrupt stream still fails to
// inflate or gives corrupt DWARF, which the reader survives): when lazy
// and at least lazySectionMin bytes, on demand (sectionBytes.lazy), else
// whole, straight into a buffer of the size their header gives.
// Uncompressed lazy sections of lazySectionMin bytes or more are read
// from the file on demand the same way. With a
// cache slot, the bytes the cache has are read rather than inflated, and
// a section inflated whole is saved to it at once (a lazy one by
// lazySection.save). Other compressions (zstd, GNU .zdebug) go through
// sectionData.
func dwarfSectionData(lr *elfio.ReaderAt, f *elf.File, s *elf.Section, max uint64, lazy bool, slot *cacheSlot) (sectionBytes, error) {
	whole := func(data []byte, err error) (sectionBytes, error) { return sectionBytes{data: data}, err }
	if s.Type == elf.SHT_NOBITS || !lr.InFile(s) || s.FileSize > max {
		return whole(elfio.SectionData(lr, s, max)) // for its error
	}
	compressed := s.Flags&elf.SHF_COMPRESSED != 0
	if !compressed && s.Name[1] == 'z' { // .zdebug_*
		return whole(elfio.SectionData(lr, s, max))
	}
	read := func(n uint64) ([]byte, error) {
		b := make([]byte, n)
		if got, err := lr.ReadAt(b, int64(s.Offset)); got < len(b) {
			return nil, fmt.Errorf("read section %s: %w", s.Name, err)
		}
		return b, nil
	}
	if !compressed {
		if lazy && s.FileSize >= lazySectionMin {
			// Read on demand as an inflated section is: a binary with
			// uncompressed DWARF (a Python built from source: 9 MB of
			// .debug_info in libpython) keeps the units before the
			// sampled ones, not the whole section, in its pages.
			out := make([]byte, s.FileSize)
			return sectionBytes{data: out, lazy: &lazySection{buf: out,
				zr: io.NewSectionReader(lr, int64(s.Offset), int64(s.FileSize))}}, nil
		}
		raw, err := read(s.FileSize)
		return sectionBytes{data: raw}, err
	}
	// The compression header and the zlib header first: a section the
	// cache holds whole needs nothing more from the file.
	head, err := read(min(s.FileSize, 24+2))
	if err != nil {
		return sectionBytes{}, err
	}
	typ, size, hdr := compressionHeader(f, head)
	if typ != elfCompressZlib || len(head) < hdr+2 {
		return whole(elfio.SectionData(lr, s, max))
	}
	if size > max {
		return sectionBytes{}, fmt.Errorf("section %s: %d bytes, over the cap of %d", s.Name, size, max)
	}
	cmf, flg := head[hdr], head[hdr+1]
	if cmf&0x0f != 8 || (uint16(cmf)<<8|uint16(flg))%31 != 0 || flg&0x20 != 0 {
		return sectionBytes{}, fmt.Errorf("section %s: bad zlib header", s.Name)
	}
	out := make([]byte, size)
	cached := slot.load(out)
	if cached == len(out) {
		return sectionBytes{data: out}, nil
	}
	raw, err := read(s.FileSize)
	if err != nil {
		return sectionBytes{}, err
	}
	zr := flate.NewReader(bytes.NewReader(raw[hdr+2:]))
	if lazy && size >= lazySectionMin {
		return sectionBytes{data: out, lazy: &lazySection{buf: out, zr: zr,
			avail: cached, skip: cached, slot: slot, saved: cached}}, nil
	}
	if _, err := io.ReadFull(zr, out); err != nil {
		return sectionBytes{}, fmt.Errorf("inflate section %s: %w", s.Name, err)
	}
	slot.save(out, len(out))
	return sectionBytes{data: out}, nil
}

// compressionHeader decodes the Elf32_Chdr or Elf64_Chdr at the start
// of raw: the compression type, the uncompressed size (bytes) and the
// header's size; type 0 when raw is too short.
func compressionHeader(f *elf.File, raw []byte) (typ uint32, size uint64, hdr int) {
	bo := f.ByteOrder
	if f.Class == elf.ELFCLASS64 {
		if len(raw) < 24 {
			return 0, 0, 0
		}
		return bo.Uint32(raw), bo.Uint64(raw[8:]), 24
	}
	if len(raw) < 12 {
		return 0, 0, 0
	}
	return bo.Uint32(raw), uint64(bo.Uint32(raw[4:])), 12
}
