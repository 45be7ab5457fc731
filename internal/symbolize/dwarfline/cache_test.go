package dwarfline

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/testutil"
)

// TestSectionCacheSlot: what save writes, load reads back; a file with a
// bad magic, size, CRC or length is a miss that leaves out zero; no
// cache or no build ID means no slot.
func TestSectionCacheSlot(t *testing.T) {
	c := NewSectionCache(t.TempDir(), 1<<20)
	s := c.slot("abcd", "info", 1234)
	data := bytes.Repeat([]byte("dwarf!"), 1000)
	out := make([]byte, len(data))
	if n := s.load(out); n != 0 {
		t.Fatalf("load before save = %d", n)
	}
	s.save(data[:4000], len(data))
	if n := s.load(out); n != 4000 || !bytes.Equal(out[:n], data[:4000]) {
		t.Fatalf("load = %d bytes (equal %v), want the 4000 saved", n, bytes.Equal(out[:n], data[:4000]))
	}
	if n := s.load(make([]byte, len(data)+1)); n != 0 {
		t.Errorf("load into a section of another size = %d, want a miss", n)
	}
	good, err := os.ReadFile(s.path)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"magic":     append([]byte("gpdwarf0"), good[8:]...),
		"crc":       append(append([]byte{}, good[:len(good)-1]...), good[len(good)-1]^1),
		"truncated": good[:len(good)-10],
		"header":    good[:20],
	} {
		if err := os.WriteFile(s.path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		clear(out)
		if n := s.load(out); n != 0 || !bytes.Equal(out, make([]byte, len(out))) {
			t.Errorf("%s: load = %d, want a miss with out left zero", name, n)
		}
	}
	if c.slot("", "info", 1) != nil || (*SectionCache)(nil).slot("abcd", "info", 1) != nil || NewSectionCache("", 1) != nil {
		t.Error("a slot without a build ID or a cache")
	}
	var none *cacheSlot
	none.save(data, len(data)) // no-ops
	if none.load(out) != 0 {
		t.Error("nil slot loaded something")
	}
}

// TestSectionCacheExtend: extend appends to an entry in place (the same
// file, which load then reads whole and checked), and refuses, writing
// nothing, when the entry is not the prefix it was told of (another
// length or CRC-32C: another run replaced it), is missing, or would grow
// past its section.
func TestSectionCacheExtend(t *testing.T) {
	c := NewSectionCache(t.TempDir(), 1<<20)
	s := c.slot("abcd", "info", 1234)
	data := bytes.Repeat([]byte("inflated dwarf "), 1000)
	if _, ok := s.extend(100, 0, data[100:200], len(data)); ok {
		t.Fatal("extend of a missing entry")
	}
	sum, ok := s.saveFrom(bytes.NewReader(data[:4000]), 4000, len(data))
	if !ok {
		t.Fatal("saveFrom failed")
	}
	before, err := os.Stat(s.path)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]func() (uint32, bool){
		"length": func() (uint32, bool) { return s.extend(3999, sum, data[3999:5000], len(data)) },
		"crc":    func() (uint32, bool) { return s.extend(4000, sum^1, data[4000:5000], len(data)) },
		"too long": func() (uint32, bool) {
			return s.extend(4000, sum, append(data[4000:len(data):len(data)], 'x'), len(data))
		},
	} {
		if _, ok := bad(); ok {
			t.Errorf("%s: extend succeeded", name)
		}
	}
	sum2, ok := s.extend(4000, sum, data[4000:9000], len(data))
	if !ok {
		t.Fatal("extend failed")
	}
	after, err := os.Stat(s.path)
	if err != nil || !os.SameFile(before, after) || after.Size() != cacheHeaderLen+9000 {
		t.Fatalf("extended entry: %v (%v), want the same file, %d bytes long", after, err, cacheHeaderLen+9000)
	}
	out := make([]byte, len(data))
	if n := s.load(out); n != 9000 || !bytes.Equal(out[:n], data[:9000]) {
		t.Fatalf("load after extend = %d bytes (equal %v), want 9000", n, bytes.Equal(out[:n], data[:9000]))
	}
	if _, ok := s.extend(9000, sum2, data[9000:], len(data)); !ok {
		t.Fatal("second extend failed")
	}
	if f, n, _ := s.open(len(data)); f == nil || n != len(data) {
		t.Errorf("open after extending to the whole section = %d bytes, want %d", n, len(data))
	} else {
		f.Close()
	}
}

// BenchmarkSectionCacheExtend measures saving a section's prefix that a
// run inflated 64 KiB past the 6 MiB the cache held (libc's .debug_info
// in a busy profile): written whole again (save) and appended in place
// (extend).
func BenchmarkSectionCacheExtend(b *testing.B) {
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	const held, more = 6 << 20, 64 << 10
	for _, mode := range []string{"save", "extend"} {
		b.Run(mode, func(b *testing.B) {
			s := NewSectionCache(b.TempDir(), 1<<30).slot("abcd", "info", 1)
			for b.Loop() {
				b.StopTimer()
				sum, ok := s.saveFrom(bytes.NewReader(data[:held]), held, len(data))
				b.StartTimer()
				if !ok {
					b.Fatal("saveFrom failed")
				}
				if mode == "save" {
					_, ok = s.saveFrom(bytes.NewReader(data[:held+more]), held+more, len(data))
				} else {
					_, ok = s.extend(held, sum, data[held:held+more], len(data))
				}
				if !ok {
					b.Fatal(mode, " failed")
				}
			}
		})
	}
}

// TestSectionCacheTrim: past its bound the cache drops the files used
// least recently (a load refreshes a file), and stale temporary files.
func TestSectionCacheTrim(t *testing.T) {
	dir := t.TempDir()
	c := NewSectionCache(dir, 3500) // three entries of 1000 bytes, not four
	data := make([]byte, 1000)
	old := time.Now().Add(-time.Hour)
	for i, id := range []string{"a", "b", "c"} {
		s := c.slot(id, "info", 1)
		s.save(data, len(data))
		when := old.Add(time.Duration(i) * time.Minute)
		os.Chtimes(s.path, when, when)
	}
	c.slot("a", "info", 1).load(make([]byte, len(data))) // a is now the newest
	stale := filepath.Join(dir, "a", ".tmp-123")
	os.WriteFile(stale, data, 0o600)
	os.Chtimes(stale, old.Add(-time.Hour), old.Add(-time.Hour))
	c.slot("d", "info", 1).save(data, len(data)) // over the bound: b goes
	for id, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		_, err := os.Stat(c.slot(id, "info", 1).path)
		if (err == nil) != want {
			t.Errorf("entry %s: present %v, want %v", id, err == nil, want)
		}
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("stale temporary file kept")
	}
}

// TestDWARFSectionCache: a run that looked up one function saves the
// prefix it inflated; the next run starts from it and, asked for every
// function, inflates the rest (skipping what it read) with the same
// answers as the whole sections, and saves the longer prefix; once the
// cache holds a whole section, it is not inflated at all. A corrupt
// cache file is ignored.
func TestDWARFSectionCache(t *testing.T) {
	bin, raw, f, ref := lazyManyUnits(t)
	cache := NewSectionCache(t.TempDir(), DefaultSectionCacheBytes)
	var read atomic.Int64 // bytes the last load read from the file
	load := func() *Data {
		r := &countingReaderAt{r: bytes.NewReader(raw), n: &read}
		ef, lr, err := elfio.OpenELF(r)
		if err != nil {
			t.Fatal(err)
		}
		read.Store(0)
		d := Load(ef, lr, cache)
		if d == nil {
			t.Fatal("loadDWARF: nil")
		}
		return d
	}
	id := elfio.BuildID(f)
	if id == "" {
		testutil.Skipf(t, "the test program has no build ID")
	}
	infoPath := cache.slot(id, "info", f.Section(".debug_info").FileSize).path
	cachedLen := func() int64 {
		st, err := os.Stat(infoPath)
		if err != nil {
			return 0
		}
		return st.Size() - cacheHeaderLen
	}

	d := load()
	x := NewTable(d)
	first := symtest.ElfSymbol(t, bin, "f0_0").Value
	x.Lines(first)
	d.Save()
	part := cachedLen()
	if part == 0 || part >= int64(len(d.info)) || part != int64(d.InfoZ.avail) {
		t.Fatalf("after one lookup: %d bytes of .debug_info cached, %d inflated of %d", part, d.InfoZ.avail, len(d.info))
	}

	d = load()
	if d.InfoZ == nil || d.InfoZ.avail != int(part) {
		t.Fatalf("second load: .debug_info lazy %v, starts with %d bytes; want the %d cached", d.InfoZ != nil, d.InfoZ.avail, part)
	}
	x = NewTable(d)
	checkAllLines(t, f, ref, x)
	x.Lines(1) // a miss: the whole index, the whole section
	prefixFile, err := os.Stat(infoPath)
	if err != nil {
		t.Fatal(err)
	}
	d.Save()
	if got := cachedLen(); got != int64(len(d.info)) {
		t.Fatalf("after every lookup: %d bytes cached, want all %d", got, len(d.info))
	}
	if st, err := os.Stat(infoPath); err != nil || !os.SameFile(st, prefixFile) {
		t.Errorf("the longer prefix is a new file (%v): want the cached one extended in place", err)
	}
	if d.strZ == nil {
		t.Fatal(".debug_str is not read on demand")
	}
	strPath := cache.slot(id, "str", f.Section(".debug_str").FileSize).path
	if st, err := os.Stat(strPath); err != nil || st.Size()-cacheHeaderLen != int64(d.strZ.avail) || d.strZ.avail == 0 {
		t.Fatalf("after every lookup: .debug_str cached %v (%v), want the %d bytes inflated", st, err, d.strZ.avail)
	}

	readBefore := read.Load()
	d = load()
	if d.InfoZ == nil || d.InfoZ.zr != nil || d.InfoZ.paged != len(d.info) || d.InfoZ.valid() > len(d.info)/2 || !d.InfoZ.mapped {
		t.Errorf("third load: want .debug_info mapped from the cache, nothing inflated and at most half asked for before a lookup")
	}
	// Its compressed bytes are not even read.
	if saved := readBefore - read.Load(); saved < int64(f.Section(".debug_info").FileSize)-26 {
		t.Errorf("third load read %d bytes of the file, the second %d: want .debug_info's %d compressed bytes left unread",
			read.Load(), readBefore, f.Section(".debug_info").FileSize)
	}
	checkAllLines(t, f, ref, NewTable(d))

	b, err := os.ReadFile(infoPath)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x55
	os.WriteFile(infoPath, b, 0o600)
	d = load()
	if d.InfoZ == nil || d.InfoZ.saved != 0 {
		t.Errorf("corrupt cache: .debug_info lazy %v, %d bytes from the cache; want it inflated from the start", d.InfoZ != nil, d.InfoZ.saved)
	}
	checkAllLines(t, f, ref, NewTable(d))
}

// countingReaderAt counts the bytes read through it into n.
type countingReaderAt struct {
	r io.ReaderAt
	n *atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	got, err := c.r.ReadAt(p, off)
	c.n.Add(int64(got))
	return got, err
}

// TestSectionCacheTrimsWhenOver: a save walks the cache directory on the
// process's first write to it and then only once the bytes it knows of
// pass the bound, not at every save: a file written behind its back
// (older than every entry, so a walk would drop it first) stays through
// saves that keep the known total under the bound, and goes at the
// save that passes it.
func TestSectionCacheTrimsWhenOver(t *testing.T) {
	dir := t.TempDir()
	c := NewSectionCache(dir, 3500)
	data := make([]byte, 1000)
	c.Put("a", "info", data) // the first write: a walk
	foreign := filepath.Join(dir, "z", "info")
	if err := os.MkdirAll(filepath.Dir(foreign), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(foreign, make([]byte, 3000), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(foreign, old, old)
	c.Put("b", "info", data) // known: about 2000 bytes
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("a save under the known bound walked the cache: %v", err)
	}
	c.Put("c", "info", data)
	c.Put("d", "info", data) // known: about 4100 bytes, over
	if _, err := os.Stat(foreign); err == nil {
		t.Error("the save over the bound kept the least recently used file")
	}
	for _, id := range []string{"b", "c", "d"} {
		if c.Get(id, "info", len(data)) == nil {
			t.Errorf("entry %s dropped, want the oldest dropped first", id)
		}
	}
}

// forgetUsage makes the next save to dir behave as a new process's first.
func forgetUsage(dir string) {
	usage.Lock()
	delete(usage.dirs, dir)
	usage.Unlock()
}

// TestSectionCacheLedger: a process's first save reads the directory's
// ledger instead of walking it, so a file written behind the ledger's
// back stays while the ledger's count is under the bound, and goes once
// a save passes it; a ledger older than walkEvery, or one that does not
// parse, makes the first save walk.
func TestSectionCacheLedger(t *testing.T) {
	dir := t.TempDir()
	c := NewSectionCache(dir, 3500)
	data := make([]byte, 1000)
	c.Put("a", "info", data) // no ledger: a walk, which writes one
	u, ok := c.readLedger()
	if !ok || u.bytes < 1000 || u.bytes > 1100 || time.Since(u.walked) > time.Minute {
		t.Fatalf("ledger after the first save: %+v, %v; want about 1000 bytes, walked now", u, ok)
	}
	foreign := filepath.Join(dir, "z", "info")
	writeOld := func() {
		if err := os.MkdirAll(filepath.Dir(foreign), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(foreign, make([]byte, 3000), 0o600); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-2 * time.Hour)
		os.Chtimes(foreign, old, old)
	}
	writeOld()
	forgetUsage(dir)
	c.Put("b", "info", data) // a new process: the ledger says about 2000
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("a first save under the ledger's bound walked the cache: %v", err)
	}
	if u, _ := c.readLedger(); u.bytes < 2000 || u.bytes > 2200 {
		t.Errorf("ledger after the second save: %d bytes, want about 2000", u.bytes)
	}
	forgetUsage(dir)
	c.Put("c", "info", data)
	forgetUsage(dir)
	c.Put("d", "info", data) // about 4100: over
	if _, err := os.Stat(foreign); err == nil {
		t.Error("the save over the ledger's bound kept the least recently used file")
	}

	for name, ledger := range map[string]string{
		"stale":   fmt.Sprintf("%s %d %d\n", ledgerMagic, 0, time.Now().Add(-2*walkEvery).UnixNano()),
		"garbled": "gpusage1 many\n",
	} {
		writeOld()
		os.WriteFile(filepath.Join(dir, usageFile), []byte(ledger), 0o600)
		forgetUsage(dir)
		c.Put("e", "info", data)
		if _, err := os.Stat(foreign); err == nil {
			t.Errorf("%s ledger: the first save did not walk the cache", name)
		}
	}
}

// BenchmarkSectionCacheSave: a run's first save to a cache directory
// that holds 400 entries (a cache some weeks old), with the ledger the
// last save wrote and without one (a walk of the directory).
func BenchmarkSectionCacheSave(b *testing.B) {
	dir := b.TempDir()
	c := NewSectionCache(dir, 1<<30)
	data := make([]byte, 4096)
	for i := range 400 {
		c.Put(fmt.Sprintf("%040x", i), "info", data)
	}
	for _, ledger := range []bool{true, false} {
		b.Run(fmt.Sprintf("ledger=%v", ledger), func(b *testing.B) {
			for b.Loop() {
				forgetUsage(dir)
				if !ledger {
					os.Remove(filepath.Join(dir, usageFile))
				}
				c.Put("new", "info", data)
			}
		})
	}
}

// TestSectionCacheUpdate: Update writes an entry that Get reads back,
// over the file of the entry before it (the same file, longer or cut
// shorter), or as Put does when there is none; an entry left half
// written (new bytes under the old header) is a miss.
func TestSectionCacheUpdate(t *testing.T) {
	c := NewSectionCache(t.TempDir(), DefaultSectionCacheBytes)
	path := filepath.Join(c.dir, "beef", "memo")
	long := bytes.Repeat([]byte("line memo "), 1000)
	c.Update("beef", "memo", long[:5000])
	first, err := os.Stat(path)
	if err != nil {
		t.Fatalf("Update of a missing entry: %v", err)
	}
	for _, n := range []int{len(long), 3000} {
		c.Update("beef", "memo", long[:n])
		st, err := os.Stat(path)
		if err != nil || !os.SameFile(st, first) || st.Size() != int64(cacheHeaderLen+n) {
			t.Fatalf("Update to %d bytes: %v (%v); want the same file, %d bytes long", n, st, err, cacheHeaderLen+n)
		}
		if got := c.Get("beef", "memo", len(long)); !bytes.Equal(got, long[:n]) {
			t.Fatalf("Get after Update to %d bytes: %d bytes (equal %v)", n, len(got), bytes.Equal(got, long[:n]))
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[cacheHeaderLen+10] ^= 1 // a write cut short: the header is the old one
	os.WriteFile(path, b, 0o600)
	if got := c.Get("beef", "memo", len(long)); got != nil {
		t.Errorf("Get of a half-written entry = %d bytes, want a miss", len(got))
	}
}

// BenchmarkSectionCacheUpdate measures replacing a line memo's 240 KiB
// entry by one a little different (the end of a run that found new
// answers): as Put (a new file renamed over the old) and as Update (in
// place).
func BenchmarkSectionCacheUpdate(b *testing.B) {
	c := NewSectionCache(b.TempDir(), 1<<30)
	data := make([]byte, 240<<10)
	for _, mode := range []string{"put", "update"} {
		b.Run(mode, func(b *testing.B) {
			c.Put("beef", mode, data)
			for b.Loop() {
				data[0]++
				if mode == "put" {
					c.Put("beef", mode, data)
				} else {
					c.Update("beef", mode, data)
				}
			}
		})
	}
}

// TestSectionCacheMap: Map gives the bytes Put kept, as Get does, and
// misses as Get does: no entry, more than max bytes, a bad CRC-32C.
func TestSectionCacheMap(t *testing.T) {
	c := NewSectionCache(t.TempDir(), DefaultSectionCacheBytes)
	data := bytes.Repeat([]byte("symbols"), 1000)
	c.Put("beef", "t", data)
	m := c.Map("beef", "t", len(data))
	if m == nil || !bytes.Equal(m.Data, data) || !bytes.Equal(c.Get("beef", "t", len(data)), data) {
		t.Fatalf("Map and Get of a kept entry differ from what was kept")
	}
	if c.Map("beef", "other", len(data)) != nil || c.Map("beef", "t", len(data)-1) != nil {
		t.Error("Map of no entry, or of one over max bytes, hit")
	}
	path := filepath.Join(c.dir, "beef", "t")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if c.Map("beef", "t", len(data)) != nil {
		t.Error("Map of an entry whose CRC-32C does not match hit")
	}
}
