package dwarfline

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sync"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"

	// Faster than compress/flate on distributions' debug files
	// (BenchmarkSectionCacheLibc/inflate inflates glibc's .debug_info).
	"github.com/klauspost/compress/flate"
)

// elfCompressZlib is ELFCOMPRESS_ZLIB, the ch_type of an SHF_COMPRESSED
// section compressed with zlib.
const elfCompressZlib = 1

// lazySectionMin is the size (bytes, decompressed) from which a section
// of lazySections is read on demand rather than whole: below it the
// saving is too small to matter.
var lazySectionMin uint64 = 64 << 10 // a variable for tests

// lazyInflateStep is the least a lazySection inflates at a time (bytes):
// each step costs a flate Read call, so steps of a few hundred bytes
// (one unit header) would cost more than they save.
var lazyInflateStep = 64 << 10 // a variable for tests

// compressedReadStep is how much of a compressed section's file a
// lazySection reads at a time as it inflates (bytes).
const compressedReadStep = 64 << 10

// lazySections are the DWARF sections (by name without ".debug_") whose
// readers know how to ask for a span: .debug_info (by unit),
// .debug_abbrev (by table), .debug_line (by line program), the string
// sections (by string, cstrIn) and the range lists (by list, inSpan).
// .debug_info, .debug_abbrev and .debug_line are the large ones: in
// glibc's debug file they are 5.8, 1.0 and 1.3 MB of its 8.4 MB of
// DWARF; libpython's .debug_str and .debug_rnglists are 0.5 MB each.
var lazySections = []string{"info", "abbrev", "line", "str", "line_str", "ranges", "rnglists"}

// sectionBytes is a DWARF section's contents, decompressed: data, and
// for a section read on demand the lazySection that fills it (nil when
// data is complete).
type sectionBytes struct {
	data []byte
	lazy *lazySection
}

// sectionPage is the unit in which a lazySection reads its paged part
// (bytes): a unit header costs a page, not the units before it.
var sectionPage = 4096 // a variable for tests

// lazySection is a section whose bytes are read on demand into buf,
// which has the section's whole size and lives outside the Go heap
// (elfio.Buffer), so that only what was read counts in RSS. It has up to
// two parts:
//
//   - [0, paged) is read from src a page at a time, wherever a lookup
//     asks: an uncompressed section from its file (a Python built from
//     source has 9 MB of .debug_info in libpython), or the prefix of an
//     inflated one that the SectionCache holds;
//   - [paged, len(buf)) is inflated from zr, a zlib stream, front to back,
//     since a zlib stream cannot be entered in the middle: its first
//     avail bytes are valid. A profile that samples a few functions of
//     glibc thus inflates the units before theirs instead of all 8 MB.
//
// A section stored whole in a file (uncompressed in the binary, or whole
// in the SectionCache) is mapped instead (newMappedSection): buf is the
// mapping, its pages come from the page cache as they are touched, and
// the paged part's bookkeeping (have) only records what was asked for.
//
// Safe for concurrent use.
type lazySection struct {
	mu     sync.Mutex
	buf    []byte
	mem    discarder // holds buf
	mapped bool      // buf is a mapping of a file (elfio.Mapping): always valid

	src     io.ReaderAt // reads [0, paged); nil when paged is 0
	paged   int
	have    []uint64 // a bit per sectionPage of [0, paged): read
	pageErr bool     // a read of src failed: no more are tried

	avail int       // [paged, avail) is valid; avail >= paged
	zr    io.Reader // nil once buf is complete or the stream failed
	// zopen opens zr at the first inflate that needs it (the
	// compressed section is read from its file only then); nil once
	// called, or when zr was given.
	zopen  func() io.Reader
	failed bool // the stream ended or failed before filling buf
	step   int  // inflate at least this much at a time; 0: lazyInflateStep
	skip   int  // bytes zr must inflate and drop first: the paged part
	slot   *cacheSlot
	saved  int    // bytes of the section's prefix the cache holds
	sum    uint32 // their CRC-32C, when saved > 0 and not mapped (cacheSlot.extend)
}

// discarder gives back the pages of a lazySection's buffer
// (elfio.Buffer, elfio.Mapping).
type discarder interface {
	Discard(off, n int) (lo, hi int)
}

// newLazySection returns a lazySection of size bytes with nothing read,
// its buffer outside the Go heap.
func newLazySection(size int) *lazySection {
	mem := elfio.NewBuffer(size)
	return &lazySection{buf: mem.Data, mem: mem}
}

// newMappedSection returns a lazySection whose bytes are the mapping m:
// nothing is read with a system call, and a page counts in RSS only once
// touched, until released. Readers of a mapping recover from memory
// faults (a file truncated under it): see Table.LinesRange.
func newMappedSection(m *elfio.Mapping) *lazySection {
	return &lazySection{buf: m.Data, mem: m, mapped: true, paged: len(m.Data), avail: len(m.Data)}
}

// cstrIn returns the NUL-terminated string at off in sec, a section read
// on demand by z (nil when complete): "" when off is outside sec or the
// string is unterminated. It makes a span valid that grows 16-fold until
// it holds the NUL.
func cstrIn(z *lazySection, sec []byte, off uint64) string {
	if z == nil {
		return cstrAt(sec, off)
	}
	for want := uint64(256); off < uint64(len(sec)); want *= 16 {
		e := validSpan(z, sec, off, off+want)
		if i := bytes.IndexByte(sec[off:e], 0); i >= 0 {
			return string(sec[off : off+uint64(i)])
		}
		if e == len(sec) || uint64(e) < off+want { // the end, a failed read or a corrupt stream
			return ""
		}
	}
	return ""
}

// inSpan calls parse with sec, a section read on demand by z (nil when
// complete), valid from off for a span of at least a few hundred bytes;
// when parse reports that it ran out of bytes (and there are more), it
// calls it again with a span 16 times longer, up to the whole section.
// A list is read by its own bytes, not the section's.
func inSpan(z *lazySection, sec []byte, off uint64, parse func(data []byte) (ranOut bool)) {
	if z == nil {
		parse(sec)
		return
	}
	for want := uint64(512); ; want *= 16 {
		e := validSpan(z, sec, off, off+want)
		if !parse(sec[:e]) || e == len(sec) || uint64(e) < off+want {
			return
		}
	}
}

// validSpan makes bytes [off, end) of data, a section read on demand by
// z (nil when complete), valid and returns e such that data[off:e] is
// valid: all of data when z is nil, else see lazySection.span.
func validSpan(z *lazySection, data []byte, off, end uint64) int {
	if z == nil {
		return len(data)
	}
	return z.span(off, end)
}

// span makes bytes [off, end) of the section valid (to its end when end
// is past it) and returns e such that buf[off:e] is valid: min(end,
// len(buf)) unless a read fails or the stream is corrupt, and never
// less than min(off, len(buf)). Bytes before off may not be valid. The
// stream is inflated at least lazyInflateStep bytes at a time.
func (s *lazySection) span(off, end uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := uint64(len(s.buf))
	end = min(end, n)
	off = min(off, end)
	if off < uint64(s.paged) {
		if !s.readPages(int(off), int(min(end, uint64(s.paged)))) {
			return int(off)
		}
		if end <= uint64(s.paged) {
			return int(end)
		}
	}
	s.inflate(int(end))
	return max(int(off), min(s.avail, int(end)))
}

// readPages reads the pages of [off, end) of the paged part that are
// not read yet, a run of missing pages at a time; false when a read
// fails (then and ever after). Called with s.mu held.
func (s *lazySection) readPages(off, end int) bool {
	if s.have == nil {
		s.have = make([]uint64, (s.paged+64*sectionPage-1)/(64*sectionPage))
	}
	for p, last := off/sectionPage, (end-1)/sectionPage; p <= last; {
		if s.hasPage(p) {
			p++
			continue
		}
		q := p
		for q+1 <= last && !s.hasPage(q+1) {
			q++
		}
		if s.pageErr {
			return false
		}
		lo, hi := p*sectionPage, min((q+1)*sectionPage, s.paged)
		if !s.mapped { // a mapping reads them as they are touched
			if got, _ := s.src.ReadAt(s.buf[lo:hi], int64(lo)); got < hi-lo {
				s.pageErr = true
				return false
			}
		}
		for ; p <= q; p++ {
			s.have[p/64] |= 1 << (p % 64)
		}
	}
	return true
}

// release gives back the pages of the paged part that lie wholly inside
// [off, end) (elfio.Buffer.Discard) and marks them unread: a later span
// reads them again from src. The inflated part is never released (the
// stream cannot be entered again). Only the caller knows no other reader
// is using those bytes.
func (s *lazySection) release(off, end int) {
	if s == nil || s.mem == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	page := os.Getpagesize()
	if s.have == nil || (page%sectionPage != 0 && sectionPage%page != 0) {
		return
	}
	unit := max(page, sectionPage) // a page that is both kinds of page
	lo := (max(off, 0) + unit - 1) / unit * unit
	hi := min(end, s.paged) / unit * unit
	if hi <= lo {
		return
	}
	if dlo, dhi := s.mem.Discard(lo, hi-lo); !s.mapped && (dlo != lo || dhi != hi) {
		return // not a mapping, or not discarded: the bytes are still there
	}
	// A file's mapping is valid whether or not a page was dropped (one
	// that straddles lo or hi is kept): only the bookkeeping changes.
	for p := lo / sectionPage; p < hi/sectionPage; p++ {
		s.have[p/64] &^= 1 << (p % 64)
	}
}

// inflate makes the stream's part valid through at least want bytes of
// the section (all of it when want is past the end), inflating at least
// lazyInflateStep bytes at a time. Called with s.mu held.
func (s *lazySection) inflate(want int) {
	if want <= s.avail {
		return
	}
	if s.zr == nil && s.zopen != nil {
		s.zr, s.zopen = s.zopen(), nil
	}
	if s.zr == nil {
		return
	}
	step := s.step
	if step == 0 {
		step = lazyInflateStep
	}
	if s.skip > 0 {
		// The paged part came from the cache; the stream starts at 0.
		if _, err := io.CopyN(io.Discard, s.zr, int64(s.skip)); err != nil {
			s.zr, s.failed = nil, true
			return
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
}

// hasPage reports whether page p of the paged part is read. Called
// with s.mu held.
func (s *lazySection) hasPage(p int) bool {
	return s.have != nil && s.have[p/64]&(1<<(p%64)) != 0
}

// valid returns how many bytes of the section have been made valid: the
// pages read and the part inflated.
func (s *lazySection) valid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.avail - s.paged
	for _, w := range s.have {
		n += bits.OnesCount64(w) * sectionPage
	}
	if last := (s.paged - 1) / sectionPage; s.paged%sectionPage != 0 && s.hasPage(last) {
		n -= sectionPage - s.paged%sectionPage // the last page is short
	}
	return n
}

// Save writes the prefix of the section that is valid to the section
// cache, if longer than what the cache has: what was inflated past the
// cache's prefix, appended to its entry (cacheSlot.extend), or else the
// whole prefix, the paged part read from its source (the cache's own
// file).
func (s *lazySection) Save() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slot == nil || s.avail <= s.saved {
		return
	}
	if s.saved > 0 && s.saved >= s.paged && !s.mapped {
		// buf holds [saved, avail): it was inflated.
		if sum, ok := s.slot.extend(s.saved, s.sum, s.buf[s.saved:s.avail], len(s.buf)); ok {
			s.saved, s.sum = s.avail, sum
			return
		}
	}
	var head io.Reader = bytes.NewReader(nil)
	if s.paged > 0 {
		head = io.NewSectionReader(s.src, 0, int64(s.paged))
	}
	if sum, ok := s.slot.saveFrom(io.MultiReader(head, bytes.NewReader(s.buf[s.paged:s.avail])), s.avail, len(s.buf)); ok {
		s.saved, s.sum = s.avail, sum
	}
}

// Save writes what was inflated on demand of every section of d read
// on demand to the section cache it came with (see lazySection.Save);
// nothing without one. Failures are ignored.
func (d *Data) Save() {
	for _, z := range []*lazySection{d.InfoZ, d.AbbrevZ, d.LineZ, d.strZ, d.lineStrZ, d.rangesZ, d.rnglistsZ} {
		z.Save()
	}
}

// complete reports whether the whole section is valid, or cannot be:
// nothing is left to inflate and every page is read (or a read failed).
// True for nil (a section read whole).
func (s *lazySection) complete() bool {
	if s == nil {
		return true
	}
	if s.valid() == len(s.buf) {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.zr == nil && s.zopen == nil && (s.paged == 0 || s.pageErr)
}

// retainOf calls retain, when not nil.
func retainOf(retain func() *elfio.ReaderAt) *elfio.ReaderAt {
	if retain == nil {
		return nil
	}
	return retain()
}

// dwarfSectionData returns the contents of the DWARF section s of f,
// decompressed, when they are at most max bytes and lie inside the file.
// Other uncompressed sections are read with one ReadAt. SHF_COMPRESSED zlib
// sections (as distributions and the Go linker write them) are inflated
// without the zlib Adler-32 check (a corrupt stream still fails to
// inflate or gives corrupt DWARF, which the reader survives): when lazy
// and at least lazySectionMin bytes, on demand (sectionBytes.lazy: mapped
// from the cache file when the cache slot holds them whole, else with the
// prefix it holds read from it a page at a time), else whole, straight
// into a buffer of the size their header gives (from the cache when it
// holds them whole, and saved to it at once). Uncompressed lazy sections
// of lazySectionMin bytes or more are mapped from the file
// (elfio.MapSection), or when that fails read a page at a time through
// retain's reader (one that outlives the caller's file; nil: the section
// is read whole). Other compressions (zstd, GNU .zdebug) go through
// sectionData.
func dwarfSectionData(lr *elfio.ReaderAt, f *elf.File, s *elf.Section, max uint64, lazy bool, slot *cacheSlot, retain func() *elfio.ReaderAt) (sectionBytes, error) {
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
		if lazy && s.FileSize >= lazySectionMin && s.FileSize <= math.MaxInt {
			if m := elfio.MapSection(lr, s, max); m != nil {
				return sectionBytes{data: m.Data, lazy: newMappedSection(m)}, nil
			}
			if kept := retain(); kept != nil {
				z := newLazySection(int(s.FileSize))
				z.src, z.paged, z.avail = io.NewSectionReader(kept, int64(s.Offset), int64(s.FileSize)), len(z.buf), len(z.buf)
				return sectionBytes{data: z.buf, lazy: z}, nil
			}
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
	if lazy && size >= lazySectionMin {
		file, n, sum := slot.open(int(size))
		if file != nil && uint64(n) == size {
			if m := elfio.MapFile(file, cacheHeaderLen, size); m != nil {
				file.Close()
				z := newMappedSection(m)
				z.slot, z.saved = slot, n
				return sectionBytes{data: z.buf, lazy: z}, nil
			}
		}
		z := newLazySection(int(size))
		z.slot = slot
		if file != nil {
			z.src, z.paged, z.avail, z.saved, z.skip = io.NewSectionReader(file, cacheHeaderLen, int64(n)), n, n, n, n
			z.sum = sum
			if n == len(z.buf) {
				return sectionBytes{data: z.buf, lazy: z}, nil
			}
		}
		if kept := retainOf(retain); kept != nil {
			// The compressed bytes are read as far as a lookup
			// inflates, and not at all while the cache's prefix
			// holds what lookups ask for.
			start := int64(s.Offset) + int64(hdr) + 2
			z.zopen = func() io.Reader {
				zs := io.NewSectionReader(kept, start, int64(s.FileSize)-int64(hdr)-2)
				return flate.NewReader(bufio.NewReaderSize(zs, compressedReadStep))
			}
			return sectionBytes{data: z.buf, lazy: z}, nil
		}
		raw, err := read(s.FileSize)
		if err != nil {
			return sectionBytes{}, err
		}
		z.zr = flate.NewReader(bytes.NewReader(raw[hdr+2:]))
		return sectionBytes{data: z.buf, lazy: z}, nil
	}
	out := make([]byte, size)
	if slot.load(out) == len(out) {
		return sectionBytes{data: out}, nil
	}
	raw, err := read(s.FileSize)
	if err != nil {
		return sectionBytes{}, err
	}
	if _, err := io.ReadFull(flate.NewReader(bytes.NewReader(raw[hdr+2:])), out); err != nil {
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
