package dwarfline

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// DefaultSectionCacheBytes bounds the section cache on disk (bytes): past
// it, the files used least recently are removed.
const DefaultSectionCacheBytes = 256 << 20

// SectionCache keeps the inflated bytes of zlib-compressed DWARF sections
// on disk, keyed by the build ID of the file that holds them, so that the
// next run reads glibc's .debug_info instead of inflating it again
// (objfile's BenchmarkSectionCacheLibc: inflate against cache). For a
// section inflated on demand it keeps the prefix inflated so far, which
// a later run reads a page at a time as lookups need it (after checking
// its CRC-32C once) and extends. It is a cache: every failure to read or write it
// is a miss, and a file whose header or CRC-32C does not check out is
// ignored. Files are written whole under a temporary name and renamed,
// but for a prefix that a later run extends, which is appended in place
// (cacheSlot.extend), and an entry that Update replaces, overwritten in
// place.
//
// Layout: <dir>/<build ID>/<section>-<compressed size>, each a 32-byte
// header (cacheMagic, the section's inflated size, the prefix's length,
// the prefix's CRC-32C, 4 zero bytes; little-endian) and the prefix.
type SectionCache struct {
	dir      string
	maxBytes int64
}

const (
	cacheMagic     = "gpdwarf1"
	cacheHeaderLen = 32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entryHeader is what an entry's header says: the section's inflated
// size (total), the length of the prefix that follows (n) and its
// CRC-32C (sum).
type entryHeader struct {
	total, n uint64
	sum      uint32
}

// readHeader reads the header of the entry f; false when it does not
// read or lacks cacheMagic.
func readHeader(f *os.File) (entryHeader, bool) {
	var b [cacheHeaderLen]byte
	if _, err := f.ReadAt(b[:], 0); err != nil || string(b[:8]) != cacheMagic {
		return entryHeader{}, false
	}
	le := binary.LittleEndian
	return entryHeader{total: le.Uint64(b[8:]), n: le.Uint64(b[16:]), sum: le.Uint32(b[24:])}, true
}

// encode returns h in the header's layout (see SectionCache).
func (h entryHeader) encode() [cacheHeaderLen]byte {
	var b [cacheHeaderLen]byte
	copy(b[:], cacheMagic)
	le := binary.LittleEndian
	le.PutUint64(b[8:], h.total)
	le.PutUint64(b[16:], h.n)
	le.PutUint32(b[24:], h.sum)
	return b
}

// copyBufs holds the buffers that entries' CRC-32Cs are read through
// (32 KiB, io.Copy's size), reused rather than one allocated an entry:
// a run checks a dozen entries and more at start-up.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// NewSectionCache returns the cache in dir, or nil (no cache) when dir
// is "".
func NewSectionCache(dir string, maxBytes int64) *SectionCache {
	if dir == "" {
		return nil
	}
	return &SectionCache{dir: dir, maxBytes: maxBytes}
}

// cacheSlot is one section's place in the cache; the zero value (and
// nil) caches nothing.
type cacheSlot struct {
	c    *SectionCache
	path string
}

// slot returns the place of section name (without ".debug_"), whose
// compressed form is compressed bytes, of the file with build ID id; a
// nil slot when c is nil or id is "".
func (c *SectionCache) slot(id, name string, compressed uint64) *cacheSlot {
	if c == nil || id == "" {
		return nil
	}
	return &cacheSlot{c: c, path: filepath.Join(c.dir, id, name+"-"+strconv.FormatUint(compressed, 10))}
}

// load reads the cached prefix of the section into out (len(out) is the
// section's inflated size) and returns its length: 0 on a miss.
func (s *cacheSlot) load(out []byte) int {
	if s == nil {
		return 0
	}
	f, err := os.Open(s.path)
	if err != nil {
		return 0
	}
	defer f.Close()
	h, ok := readHeader(f)
	total, n, sum := h.total, h.n, h.sum
	if !ok || total != uint64(len(out)) || n > total || n == 0 {
		return 0
	}
	if got, _ := f.ReadAt(out[:n], cacheHeaderLen); uint64(got) != n || crc32.Checksum(out[:n], castagnoli) != sum {
		clear(out[:got])
		return 0
	}
	now := time.Now()
	os.Chtimes(s.path, now, now) // recently used: evicted last
	return int(n)
}

// open opens the slot's entry for a section of total bytes, checks its
// header and the CRC-32C of its prefix (reading it through once, not
// keeping it) and returns the file, the prefix's length, which starts
// at cacheHeaderLen in it, and its CRC-32C (for extend): nil and 0 on a
// miss.
func (s *cacheSlot) open(total int) (*os.File, int, uint32) {
	return s.openIf(func(size, n uint64) bool { return size == uint64(total) && n <= size })
}

// openWhole is open for an entry that Put kept whole, of at most max
// bytes, whatever its size.
func (s *cacheSlot) openWhole(max int) (*os.File, int) {
	f, n, _ := s.openIf(func(size, n uint64) bool { return size == n && n <= uint64(max) })
	return f, n
}

// openIf is open for an entry whose header's section size and prefix
// length (never 0) pass ok.
func (s *cacheSlot) openIf(ok func(size, n uint64) bool) (*os.File, int, uint32) {
	if s == nil {
		return nil, 0, 0
	}
	f, err := os.Open(s.path)
	if err != nil {
		return nil, 0, 0
	}
	hd, read := readHeader(f)
	n, sum := hd.n, hd.sum
	if !read || n == 0 || !ok(hd.total, n) {
		f.Close()
		return nil, 0, 0
	}
	h := crc32.New(castagnoli)
	buf := copyBufs.Get().(*[]byte)
	got, _ := io.CopyBuffer(h, io.NewSectionReader(f, cacheHeaderLen, int64(n)), *buf)
	copyBufs.Put(buf)
	if uint64(got) != n || h.Sum32() != sum {
		f.Close()
		return nil, 0, 0
	}
	now := time.Now()
	os.Chtimes(s.path, now, now) // recently used: evicted last
	return f, int(n), sum
}

// extend appends more to the slot's entry in place, when its header
// still says it holds the first n bytes, with CRC-32C sum, of a section
// of total bytes (what open found, or saveFrom wrote), and returns the
// CRC-32C of the longer prefix: a run that inflated further than the
// cache held writes what it added, not the whole prefix again
// (BenchmarkSectionCacheExtend). The bytes go first and the header
// after them, so that a reader, or a crash, between the two sees the
// entry as it was; two runs that extend one entry at once write the
// same bytes at the same offsets (one section's inflated bytes), and
// whichever header lands last describes a valid prefix. False when the
// entry changed or a write failed: the caller saves it whole instead.
func (s *cacheSlot) extend(n int, sum uint32, more []byte, total int) (uint32, bool) {
	if s == nil || n <= 0 || n+len(more) > total {
		return 0, false
	}
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	was := entryHeader{total: uint64(total), n: uint64(n), sum: sum}
	if h, ok := readHeader(f); !ok || h != was {
		return 0, false
	}
	if _, err := f.WriteAt(more, int64(cacheHeaderLen+n)); err != nil {
		return 0, false
	}
	sum = crc32.Update(sum, castagnoli, more)
	hdr := entryHeader{total: uint64(total), n: uint64(n + len(more)), sum: sum}.encode()
	if _, err := f.WriteAt(hdr[:], 0); err != nil {
		return 0, false
	}
	s.c.wrote(int64(len(more)))
	return sum, true
}

// save writes prefix, the first bytes of a section of total bytes, as
// the slot's entry (see saveFrom).
func (s *cacheSlot) save(prefix []byte, total int) {
	if len(prefix) > 0 {
		s.saveFrom(bytes.NewReader(prefix), len(prefix), total)
	}
}

// saveFrom writes the n bytes of r, the first bytes of a section of
// total bytes, as the slot's entry, then trims the cache to its bound
// when it may have passed it (wrote), and returns their CRC-32C and
// whether it did. Failures are ignored (the next run inflates again),
// and a reader that gives fewer than n bytes writes nothing.
func (s *cacheSlot) saveFrom(r io.Reader, n, total int) (uint32, bool) {
	if s == nil || n <= 0 {
		return 0, false
	}
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, false
	}
	var replaced int64 // the size of the entry this one replaces
	if info, err := os.Stat(s.path); err == nil {
		replaced = info.Size()
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return 0, false
	}
	h := crc32.New(castagnoli)
	_, err1 := tmp.Seek(cacheHeaderLen, io.SeekStart)
	got, err2 := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, int64(n)))
	hdr := entryHeader{total: uint64(total), n: uint64(n), sum: h.Sum32()}.encode()
	_, err3 := tmp.WriteAt(hdr[:], 0)
	err4 := tmp.Close()
	if err1 != nil || err2 != nil || got != int64(n) || err3 != nil || err4 != nil || os.Rename(tmp.Name(), s.path) != nil {
		os.Remove(tmp.Name())
		return 0, false
	}
	s.c.wrote(int64(cacheHeaderLen+n) - replaced)
	return h.Sum32(), true
}

// usage holds, by cache directory, the bytes it held at its last walk
// (trim) plus what was written since, as this process knows them, and
// when that walk was, so that a save walks the directory only when the
// bound is passed or the walk is older than walkEvery, not at every
// save: the end of a run saves an entry for each binary it read. A
// process learns both from the directory's ledger (usageFile), which
// every save rewrites, so that a run does not walk the directory at its
// first save either (BenchmarkSectionCacheSave).
var usage struct {
	sync.Mutex
	dirs map[string]dirUsage
}

// dirUsage is a cache directory's bytes and the time of its last walk.
type dirUsage struct {
	bytes  int64
	walked time.Time
}

const (
	// usageFile is the ledger of a cache directory: ledgerMagic, its
	// bytes and the Unix time in ns of its last walk, in decimal. Two runs
	// that save at once may each count only their own writes; the next
	// walk, at most walkEvery later, counts again.
	usageFile   = "usage"
	ledgerMagic = "gpusage1"
	walkEvery   = time.Hour
)

// wrote counts delta bytes written to the cache and trims it when the
// ledger is missing or older than walkEvery, and once past maxBytes.
func (c *SectionCache) wrote(delta int64) {
	usage.Lock()
	u, known := usage.dirs[c.dir]
	if !known {
		u, known = c.readLedger()
	}
	if known && time.Since(u.walked) > walkEvery {
		known = false
	}
	if known {
		u.bytes += delta
		c.setUsageLocked(u)
	}
	usage.Unlock()
	if !known || u.bytes > c.maxBytes {
		c.trim()
		return
	}
	c.writeLedger(u)
}

// setUsageLocked records u as what this process knows of the directory.
// The caller holds usage.
func (c *SectionCache) setUsageLocked(u dirUsage) {
	if usage.dirs == nil {
		usage.dirs = make(map[string]dirUsage)
	}
	usage.dirs[c.dir] = u
}

// readLedger returns the directory's ledger, and false when it has none
// or cannot read it.
func (c *SectionCache) readLedger() (dirUsage, bool) {
	b, err := os.ReadFile(filepath.Join(c.dir, usageFile))
	if err != nil {
		return dirUsage{}, false
	}
	var magic string
	var n, walked int64
	if k, err := fmt.Sscanf(string(b), "%s %d %d", &magic, &n, &walked); k != 3 || err != nil || magic != ledgerMagic || n < 0 {
		return dirUsage{}, false
	}
	return dirUsage{bytes: n, walked: time.Unix(0, walked)}, true
}

// writeLedger writes u as the directory's ledger; a failure leaves the
// next process to walk.
func (c *SectionCache) writeLedger(u dirUsage) {
	line := fmt.Sprintf("%s %d %d\n", ledgerMagic, u.bytes, u.walked.UnixNano())
	os.WriteFile(filepath.Join(c.dir, usageFile), []byte(line), 0o600)
}

// trim removes the files used least recently (by modification time,
// which load refreshes) until the cache holds at most maxBytes, and
// temporary files an interrupted save left behind over an hour ago.
func (c *SectionCache) trim() {
	type entry struct {
		path string
		size int64
		mod  time.Time
	}
	var all []entry
	var total int64
	ledger := filepath.Join(c.dir, usageFile)
	walked := time.Now()
	filepath.WalkDir(c.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path == ledger {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if filepath.Base(path)[0] == '.' && time.Since(info.ModTime()) > time.Hour {
			os.Remove(path)
			return nil
		}
		all = append(all, entry{path, info.Size(), info.ModTime()})
		total += info.Size()
		return nil
	})
	defer func() {
		u := dirUsage{bytes: total, walked: walked}
		usage.Lock()
		c.setUsageLocked(u)
		usage.Unlock()
		c.writeLedger(u)
	}()
	if total <= c.maxBytes {
		return
	}
	slices.SortFunc(all, func(a, b entry) int { return a.mod.Compare(b.mod) })
	for _, e := range all {
		if total <= c.maxBytes {
			break
		}
		if os.Remove(e.path) == nil {
			total -= e.size
			os.Remove(filepath.Dir(e.path)) // once empty
		}
	}
}

// Get returns the bytes that Put kept under name for the file with
// build ID id, or nil on a miss: no cache, no entry, a bad header, size
// or CRC-32C, or more than max bytes. A hit makes the entry recently used.
func (c *SectionCache) Get(id, name string, max int) []byte {
	if c == nil || id == "" {
		return nil
	}
	s := &cacheSlot{c: c, path: filepath.Join(c.dir, id, name)}
	f, err := os.Open(s.path)
	if err != nil {
		return nil
	}
	h, ok := readHeader(f)
	info, serr := f.Stat()
	f.Close()
	if !ok || serr != nil {
		return nil
	}
	total, n := h.total, h.n
	if total != n || n == 0 || n > uint64(max) || uint64(info.Size()) != cacheHeaderLen+n {
		return nil
	}
	out := make([]byte, n)
	if s.load(out) != len(out) {
		return nil
	}
	return out
}

// Map is Get for a reader that uses the bytes in place: they are mapped
// from the entry's file (elfio.MapFile), read from the page cache as they
// are touched and counted in RSS only then, instead of copied into the
// heap; the CRC-32C is checked by reading the entry through once. The
// mapping lasts until the Mapping is unreachable; like any
// elfio.Mapping, reads of it fault if the file shrinks. nil on a miss,
// as Get.
func (c *SectionCache) Map(id, name string, max int) *elfio.Mapping {
	if c == nil || id == "" {
		return nil
	}
	s := &cacheSlot{c: c, path: filepath.Join(c.dir, id, name)}
	f, n := s.openWhole(max)
	if f == nil {
		return nil
	}
	defer f.Close()
	return elfio.MapFile(f, cacheHeaderLen, uint64(n))
}

// Put keeps data under name for the file with build ID id, in the
// layout of a section cached whole, and trims the cache to its bound.
// Failures are ignored: the entry is a cache.
func (c *SectionCache) Put(id, name string, data []byte) {
	if c == nil || id == "" || len(data) == 0 {
		return
	}
	s := &cacheSlot{c: c, path: filepath.Join(c.dir, id, name)}
	s.save(data, len(data))
}

// Update is Put for an entry that later runs replace (a line memo that
// grows), which is read with Get only, never mapped (Map): an entry that
// exists is overwritten in place, the bytes and then the header, and cut
// to its new length, rather than replaced by a new file, which frees and
// allocates the file's inode and pages again (BenchmarkSectionCacheUpdate).
// A Get that reads while Update writes, or after a write cut short, finds
// a length or CRC-32C that does not check out: a miss, which the next
// Update writes again. Failures are ignored, as Put's.
func (c *SectionCache) Update(id, name string, data []byte) {
	if c == nil || id == "" || len(data) == 0 {
		return
	}
	s := &cacheSlot{c: c, path: filepath.Join(c.dir, id, name)}
	if !s.overwrite(data) {
		s.save(data, len(data))
	}
}

// overwrite writes data as the slot's whole entry over the file that holds
// it now, in place; false when there is none or a write failed.
func (s *cacheSlot) overwrite(data []byte) bool {
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return false
	}
	hdr := entryHeader{total: uint64(len(data)), n: uint64(len(data)), sum: crc32.Checksum(data, castagnoli)}.encode()
	size := int64(cacheHeaderLen + len(data))
	if _, err := f.WriteAt(data, cacheHeaderLen); err != nil {
		return false
	}
	if _, err := f.WriteAt(hdr[:], 0); err != nil {
		return false
	}
	if info.Size() > size && f.Truncate(size) != nil {
		return false
	}
	s.c.wrote(size - info.Size())
	return true
}
