package objfile

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/dwarfline"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// loadWithCache reads the ELF at path as the symbolizer does, with the
// section cache in dir.
func loadWithCache(t testing.TB, path, dir string) *Binary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := Load(f, debuginfo.Options{Dir: filepath.Dir(path), CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// corruptEntry flips the last byte of the section cache entry at path,
// so that its CRC-32C no longer matches.
func corruptEntry(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 0xff
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLineMemoAcrossRuns checks that a binary read again with the same
// cache answers Lines from the line memo the first reading saved, with
// the answers the DWARF gives, at the addresses looked up before and at
// others of the same rows; that a corrupt memo file is ignored; and
// that a binary with no cache keeps nothing on disk.
func TestLineMemoAcrossRuns(t *testing.T) {
	bin := symtest.BuildInline(t)
	dir := t.TempDir()
	first := loadWithCache(t, bin, dir)
	if first.memo == nil || first.BuildID() == "" {
		t.Fatalf("%s: no line memo (build ID %q)", bin, first.BuildID())
	}
	var addrs []uint64
	for _, name := range []string{"main", "work", "plain"} {
		addrs = append(addrs, symtest.SymbolRange(t, bin, name)...)
	}
	want := map[uint64][]srcline.Line{}
	for i, a := range addrs {
		if i%3 == 0 { // the others are left to the memo's ranges
			want[a] = first.Lines(a)
		}
	}
	first.SaveCache()
	memoFile := filepath.Join(dir, first.BuildID(), lineMemoName)
	if _, err := os.Stat(memoFile); err != nil {
		t.Fatalf("no memo written: %v", err)
	}

	plain := loadWithCache(t, bin, "") // the DWARF's answers, no memo on disk
	again := loadWithCache(t, bin, dir)
	hits := 0
	for _, a := range addrs {
		if _, ok := again.memo.lines(a); ok {
			hits++
		}
		if got, w := again.Lines(a), plain.Lines(a); !slices.Equal(got, w) {
			t.Errorf("Lines(%#x) from the memo = %v, the DWARF gives %v", a, got, w)
		}
		if w, ok := want[a]; ok && !slices.Equal(plain.Lines(a), w) {
			t.Errorf("Lines(%#x) = %v in the first reading, %v in the second", a, w, plain.Lines(a))
		}
	}
	if hits < len(want) {
		t.Errorf("the memo read back answered %d of %d addresses, want at least the %d looked up before", hits, len(addrs), len(want))
	}
	t.Logf("%d addresses, %d looked up in the first reading, %d answered by the memo read back", len(addrs), len(want), hits)

	corruptEntry(t, memoFile)
	broken := loadWithCache(t, bin, dir)
	if _, ok := broken.memo.lines(addrs[0]); ok {
		t.Error("a memo file with a bad CRC-32C was read")
	}
	if got, w := broken.Lines(addrs[0]), plain.Lines(addrs[0]); !slices.Equal(got, w) {
		t.Errorf("Lines(%#x) beside a corrupt memo = %v, want %v", addrs[0], got, w)
	}
	plain.SaveCache() // no cache directory: nothing to write, no panic
}

// decodeAll parses an encoded memo and decodes all its ranges.
func decodeAll(data []byte) ([]memoRange, error) {
	f, err := parseLineMemo(data)
	if err != nil {
		return nil, err
	}
	return f.ranges(), nil
}

// sameRanges reports whether a and b hold the same ranges and lines.
func sameRanges(a, b []memoRange) bool {
	return slices.EqualFunc(a, b, func(a, b memoRange) bool {
		return a.lo == b.lo && a.hi == b.hi && slices.Equal(a.lines, b.lines)
	})
}

// TestLineMemoEncoding checks that a memo decodes to what was encoded and
// that every shorter prefix of its encoding, and one byte more, is
// refused.
func TestLineMemoEncoding(t *testing.T) {
	rs := []memoRange{
		{lo: 0x1000, hi: 0x1004, lines: []srcline.Line{{Function: "f", SystemName: "_Z1fv", File: "a.c", Line: 3}, {Function: "g", SystemName: "g", File: "a.c", Line: 10}}},
		{lo: 0x1004, hi: 0x1010},
		{lo: 0x2000, hi: 0x2001, lines: []srcline.Line{{File: "b.c", Line: 1 << 20}}},
	}
	enc := encodeLineMemo(&memoFile{}, rs)
	got, err := decodeAll(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !sameRanges(got, rs) {
		t.Errorf("decode(encode(rs)) = %v, want %v", got, rs)
	}
	for n := range len(enc) {
		if _, err := parseLineMemo(enc[:n]); err == nil {
			t.Errorf("a memo cut to %d of %d bytes was read", n, len(enc))
		}
	}
	if _, err := parseLineMemo(append(enc, 0)); err == nil {
		t.Error("a memo with a trailing byte was read")
	}
}

// TestLineMemoFileAndNew: a memo read back keeps its ranges' lines
// encoded and decodes a range when one of its addresses is looked up;
// ranges found in this run, before and after those of the file and
// between them, answer too; saving writes both, in order, with the
// file's lines copied as they were encoded.
func TestLineMemoFileAndNew(t *testing.T) {
	l := func(fn string, line int) []srcline.Line {
		return []srcline.Line{{Function: fn, SystemName: "_" + fn, File: fn + ".c", Line: line}}
	}
	fileRanges := []memoRange{
		{lo: 0x1000, hi: 0x1010, lines: l("a", 1)},
		{lo: 0x1010, hi: 0x1020}, // no line information
		{lo: 0x3000, hi: 0x3100, lines: append(l("b", 2), l("c", 3)...)},
	}
	f, err := parseLineMemo(encodeLineMemo(&memoFile{}, fileRanges))
	if err != nil {
		t.Fatal(err)
	}
	lm := &lineMemo{file: f}
	lm.once.Do(func() {}) // read already
	newRanges := []memoRange{
		{lo: 0x500, hi: 0x600, lines: l("d", 4)},
		{lo: 0x2000, hi: 0x2010, lines: l("e", 5)},
		{lo: 0x4000, hi: 0x4001, lines: l("a", 6)}, // a string of the file's
	}
	for _, r := range newRanges {
		lm.add(r.lo, r.hi, r.lines)
	}
	all := slices.Concat(fileRanges, newRanges)
	slices.SortFunc(all, func(a, b memoRange) int { return int(a.lo) - int(b.lo) })
	for _, r := range all {
		for _, a := range []uint64{r.lo, r.hi - 1} {
			if got, ok := lm.lines(a); !ok || !slices.Equal(got, r.lines) {
				t.Errorf("lines(%#x) = %v (%v), want %v", a, got, ok, r.lines)
			}
		}
	}
	for _, a := range []uint64{0x400, 0x600, 0x1020, 0x2010, 0x3100, 0x5000} {
		if got, ok := lm.lines(a); ok {
			t.Errorf("lines(%#x) = %v, want no answer", a, got)
		}
	}
	lm.mu.Lock()
	lm.mergeLocked()
	enc := encodeLineMemo(&lm.file, lm.sorted)
	lm.mu.Unlock()
	got, err := decodeAll(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !sameRanges(got, all) {
		t.Errorf("saved memo = %v, want %v", got, all)
	}
	// Encoded again from the file alone: the same bytes.
	if again := encodeLineMemo(&f, nil); !slices.Equal(again, encodeLineMemo(&memoFile{}, fileRanges)) {
		t.Error("a memo file encoded again differs from its first encoding")
	}
}

// FuzzLineMemoDecode feeds parseLineMemo arbitrary bytes: it must refuse
// or read without panicking, and what it reads must decode, and encode
// back to an equal memo, both from the file (its lines copied) and
// from its decoded ranges.
func FuzzLineMemoDecode(f *testing.F) {
	f.Add(encodeLineMemo(&memoFile{}, []memoRange{{lo: 1, hi: 5, lines: []srcline.Line{{Function: "f", File: "x.c", Line: 2}}}}))
	f.Add([]byte(lineMemoMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		mf, err := parseLineMemo(data)
		if err != nil {
			return
		}
		rs := mf.ranges()
		for _, enc := range [][]byte{encodeLineMemo(&mf, nil), encodeLineMemo(&memoFile{}, rs)} {
			again, err := decodeAll(enc)
			if err != nil || !sameRanges(again, rs) {
				t.Fatalf("re-encoded memo: %v, %v; want %v", again, err, rs)
			}
		}
	})
}

// BenchmarkLineMemo measures naming 400 addresses spread over libc's code
// from its separate debug file (DWARF 5, compressed) in a freshly read
// binary: from the DWARF (the section cache warm, as on any run after
// the first) and from the line memo an earlier run saved.
func BenchmarkLineMemo(b *testing.B) {
	libc, _ := symtest.LibcDebugFile(b)
	exec := symtest.ExecSegment(b, libc)
	var addrs []uint64
	for a := exec.Vaddr; a < exec.Vaddr+exec.Memsz; a += exec.Memsz / 400 {
		addrs = append(addrs, a)
	}
	run := func(b *testing.B, dir string) {
		bin := loadWithCache(b, libc, dir)
		named := 0
		for _, a := range addrs {
			if len(bin.Lines(a)) > 0 {
				named++
			}
		}
		if named < len(addrs)/2 {
			b.Fatalf("%d of %d addresses have lines", named, len(addrs))
		}
		bin.SaveCache()
	}
	sections := b.TempDir()
	run(b, sections)
	memoDir := b.TempDir()
	run(b, memoDir)
	b.Run("dwarf", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			matches, _ := filepath.Glob(filepath.Join(sections, "*", lineMemoName))
			for _, m := range matches { // the sections stay
				os.Remove(m)
			}
			b.StartTimer()
			run(b, sections)
		}
	})
	b.Run("memo", func(b *testing.B) {
		for range b.N {
			run(b, memoDir)
		}
	})
}

// TestLineSweep checks that once sweepAfter addresses of a function
// have missed the memo, the memo holds the answers for all of its
// addresses, the DWARF's own, and that a binary read again with the same
// cache answers a new address of that function from the memo file,
// reading no DWARF for it.
func TestLineSweep(t *testing.T) {
	bin := symtest.BuildInline(t)
	dir := t.TempDir()
	first := loadWithCache(t, bin, dir)
	plain := loadWithCache(t, bin, "")
	addrs := symtest.SymbolRange(t, bin, "work")
	ranges := 0
	for pc := addrs[0]; pc <= addrs[len(addrs)-1]; ranges++ {
		_, _, hi := plain.lines.(*dwarfline.Table).LinesRange(pc)
		pc = max(hi, pc+1)
	}
	if ranges <= 2*sweepAfter {
		t.Fatalf("work has %d line ranges, want more than %d", ranges, 2*sweepAfter)
	}
	missed := 0
	for _, a := range addrs {
		if _, ok := first.memo.covering(a); !ok {
			missed++
			first.Lines(a)
		}
	}
	if missed != sweepAfter {
		t.Errorf("%d of work's %d ranges read from DWARF, want %d", missed, ranges, sweepAfter)
	}
	for _, a := range addrs {
		got, ok := first.memo.lines(a)
		if w := plain.Lines(a); !ok || !slices.Equal(got, w) {
			t.Errorf("memo's lines(%#x) = %v (%v), the DWARF gives %v", a, got, ok, w)
		}
	}
	// main misses once in this run, and once in the next: swept then.
	mains := symtest.SymbolRange(t, bin, "main")
	first.Lines(mains[0])
	if _, ok := first.memo.lines(mains[len(mains)-1]); ok {
		t.Fatal("main's last address is in the memo after one lookup at its first")
	}
	first.SaveCache()
	again := loadWithCache(t, bin, dir)
	for _, a := range addrs[len(addrs)/2:] {
		if got, w := again.Lines(a), plain.Lines(a); !slices.Equal(got, w) {
			t.Errorf("Lines(%#x) after the sweep = %v, the DWARF gives %v", a, got, w)
		}
	}
	if again.memo.added != 0 {
		t.Errorf("%d answers read from DWARF for addresses of a swept function, want 0", again.memo.added)
	}
	again.Lines(mains[len(mains)-1])
	for _, a := range mains {
		got, ok := again.memo.lines(a)
		if w := plain.Lines(a); !ok || !slices.Equal(got, w) {
			t.Errorf("main, missed by two runs: memo's lines(%#x) = %v (%v), the DWARF gives %v", a, got, ok, w)
		}
	}
}

// TestLineMemoEncodingDuplicateStart checks that two ranges found with
// one start (two goroutines' lookups of one range) are saved once, so
// that the memo file still parses.
func TestLineMemoEncodingDuplicateStart(t *testing.T) {
	one := []srcline.Line{{Function: "f", SystemName: "f", File: "f.c", Line: 1}}
	f, err := parseLineMemo(encodeLineMemo(&memoFile{}, []memoRange{{lo: 0x10, hi: 0x20, lines: one}}))
	if err != nil {
		t.Fatal(err)
	}
	rs := []memoRange{{lo: 0x10, hi: 0x20, lines: one}, {lo: 0x20, hi: 0x30}, {lo: 0x20, hi: 0x30}}
	got, err := decodeAll(encodeLineMemo(&f, rs))
	if err != nil {
		t.Fatalf("memo with repeated starts: %v", err)
	}
	if want := []memoRange{{lo: 0x10, hi: 0x20, lines: one}, {lo: 0x20, hi: 0x30}}; !sameRanges(got, want) {
		t.Errorf("saved memo = %v, want %v", got, want)
	}
}

// BenchmarkLineSweep measures lookups of 16 addresses of a function of
// libc: with no memo ("first": its unit read, and every range of the
// function memoized), and in a later run whose memo file holds the
// function ("next": no DWARF read).
func BenchmarkLineSweep(b *testing.B) {
	libc, debug := symtest.LibcDebugFile(b)
	s, ok := symtest.FindSymbol(debug, "__vfprintf_internal")
	if !ok || s.Size < 64 {
		b.Fatalf("%s: no __vfprintf_internal", debug)
	}
	sections := b.TempDir()
	warm := loadWithCache(b, libc, sections)
	warm.Lines(s.Value)
	warm.SaveCache() // the inflated sections of its unit
	clearMemo := func() {
		matches, _ := filepath.Glob(filepath.Join(sections, "*", lineMemoName))
		for _, m := range matches {
			os.Remove(m)
		}
	}
	b.Run("first", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			clearMemo()
			bin := loadWithCache(b, libc, sections)
			b.StartTimer()
			for k := range uint64(16) {
				bin.Lines(s.Value + k*s.Size/16 + 1)
			}
		}
	})
	clearMemo()
	seed := loadWithCache(b, libc, sections)
	for k := range uint64(16) {
		seed.Lines(s.Value + k*s.Size/16 + 1)
	}
	seed.SaveCache()
	b.Run("next", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			bin := loadWithCache(b, libc, sections)
			b.StartTimer()
			for k := range uint64(16) {
				bin.Lines(s.Value + k*s.Size/16)
			}
			if bin.memo.added != 0 {
				b.Fatalf("%d answers read from DWARF", bin.memo.added)
			}
		}
	})
}

// TestLineMemoEncodeMerge checks encodeLineMemo's merge of a memo file's
// ranges (copied in runs) with new ones, against the merge done range by
// range: random files and new ranges, with starts shared between the two
// and within the new ones (the file's range is kept, and the first of
// the new ones), new ranges before, between and after the file's, and
// none.
func TestLineMemoEncodeMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	line := func() []srcline.Line {
		if rng.IntN(4) == 0 {
			return nil
		}
		fn := string(rune('a' + rng.IntN(20)))
		return []srcline.Line{{Function: fn, SystemName: "_" + fn, File: fn + ".c", Line: rng.IntN(1000)}}
	}
	ranges := func(n int, strict bool) []memoRange {
		var rs []memoRange
		lo := uint64(0)
		for range n {
			lo += uint64(rng.IntN(3)) * 0x10
			if strict || lo == 0 {
				lo += 0x10
			}
			rs = append(rs, memoRange{lo: lo, hi: lo + 1 + uint64(rng.IntN(0x10)), lines: line()})
		}
		return rs
	}
	for iter := range 500 {
		fileRanges := ranges(rng.IntN(40), true)
		f, err := parseLineMemo(encodeLineMemo(&memoFile{}, fileRanges))
		if err != nil {
			t.Fatal(err)
		}
		news := ranges(rng.IntN(10), false)
		// The merge range by range: the file's first where starts tie,
		// and a range dropped when its start is not past the last kept.
		var want []memoRange
		a, b := fileRanges, news
		for len(a) > 0 || len(b) > 0 {
			var r memoRange
			if len(a) > 0 && (len(b) == 0 || a[0].lo <= b[0].lo) {
				r, a = a[0], a[1:]
			} else {
				r, b = b[0], b[1:]
			}
			if len(want) == 0 || r.lo > want[len(want)-1].lo {
				want = append(want, r)
			}
		}
		got, err := decodeAll(encodeLineMemo(&f, news))
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		if !sameRanges(got, want) {
			t.Fatalf("iteration %d: file %v and new %v merged to %v, want %v", iter, fileRanges, news, got, want)
		}
	}
}

// BenchmarkLineMemoSave measures encoding a line memo for its file at
// the end of a run: a file of 16384 ranges (a busy libpython's) and 64
// new ones spread among them.
func BenchmarkLineMemoSave(b *testing.B) {
	var fileRanges, news []memoRange
	for i := range 16384 {
		lo := uint64(i+1) * 0x40
		fn := fmt.Sprintf("f%d", i%512)
		fileRanges = append(fileRanges, memoRange{lo: lo, hi: lo + 0x20, lines: []srcline.Line{{Function: fn, SystemName: fn, File: "x.c", Line: i}}})
		if i%256 == 0 {
			news = append(news, memoRange{lo: lo + 0x20, hi: lo + 0x30, lines: []srcline.Line{{Function: "new", SystemName: "new", File: "y.c", Line: i}}})
		}
	}
	f, err := parseLineMemo(encodeLineMemo(&memoFile{}, fileRanges))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if enc := encodeLineMemo(&f, news); len(enc) < len(f.body) {
			b.Fatal("short encoding")
		}
	}
}
