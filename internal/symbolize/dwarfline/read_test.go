package dwarfline

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/testutil"
)

// loadBoth returns the DWARF of the ELF at path as our reader and as
// debug/dwarf read it.
func loadBoth(t *testing.T, path string) (*Data, *dwarf.Data) {
	t.Helper()
	f, lr := symtest.OpenELFFile(t, path)
	ours := Load(f, lr, nil)
	std, err := f.DWARF()
	if ours == nil || err != nil {
		t.Fatalf("load DWARF of %s: ours %v, debug/dwarf %v", path, ours != nil, err)
	}
	return ours, std
}

// TestDWARFReaderMatchesStdlib checks the reader against debug/dwarf on
// binaries built by gcc and clang with DWARF 4 and 5: the ranges of
// every compilation unit and function, every row and file name of the
// line tables, and the names of functions.
func TestDWARFReaderMatchesStdlib(t *testing.T) {
	for _, cc := range []string{"gcc", "clang"} {
		for _, v := range []string{"-gdwarf-4", "-gdwarf-5"} {
			t.Run(cc+v, func(t *testing.T) {
				tool := symtest.LookPath(t, cc, "builds testdata/inline.c")
				bin := filepath.Join(t.TempDir(), "inline")
				symtest.Run(t, tool, "-O2", "-g", v, "-o", bin, "../testdata/inline.c")
				ours, std := loadBoth(t, bin)
				compareUnits(t, ours, std)
			})
		}
	}
}

// TestDWARFReaderMatchesStdlibGo does the same on a Go binary (DWARF 5
// with compressed sections and range lists).
func TestDWARFReaderMatchesStdlibGo(t *testing.T) {
	bin := symtest.BuildGo(t, t.TempDir(), "goinline", "../testdata/goinline.go")
	ours, std := loadBoth(t, bin)
	compareUnits(t, ours, std)
}

// compareUnits compares every compile unit of ours and std.
func compareUnits(t *testing.T, ours *Data, std *dwarf.Data) {
	r := std.Reader()
	units := 0
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		u := ours.unitAt(uint64(e.Offset))
		if u == nil || u.dieOff != uint64(e.Offset) {
			t.Fatalf("no unit at %#x", e.Offset)
		}
		units++
		root := ours.rootOf(u)
		a := pcAttrs{low: root.low, high: root.high, ranges: root.rngs, hasLow: root.lowSet, hasHigh: root.highSet, hasRanges: root.rangesSet}
		want, _ := std.Ranges(e)
		if got := ours.rangesOf(u, &a, nil); fmt.Sprint(got) != fmt.Sprint(nonEmpty(want)) {
			t.Errorf("unit %#x ranges = %#x, want %#x", e.Offset, got, want)
		}
		compareLines(t, ours, std, u, e)
		compareFuncs(t, ours, std, u, r)
	}
	if units == 0 {
		t.Fatal("no compile units")
	}
}

// nonEmpty returns the ranges of rs with lo < hi.
func nonEmpty(rs [][2]uint64) [][2]uint64 {
	var out [][2]uint64
	for _, r := range rs {
		if r[0] < r[1] {
			out = append(out, r)
		}
	}
	return out
}

// compareLines compares the line table of unit u (entry e) with
// debug/dwarf's LineReader.
func compareLines(t *testing.T, ours *Data, std *dwarf.Data, u *unit, e *dwarf.Entry) {
	cu := &cuLines{u: u}
	newUnitLoader(ours).readLineTable(cu)
	rows, files := cu.lines.rows(), cu.files
	lr, err := std.LineReader(e)
	if err != nil {
		t.Fatalf("LineReader: %v", err)
	}
	if lr == nil {
		if len(rows)+len(files) > 0 {
			t.Errorf("unit %#x without a line table has %d rows", u.off, len(rows))
		}
		return
	}
	var want []lineRow
	var le dwarf.LineEntry
	for {
		if err := lr.Next(&le); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		row := lineRow{addr: le.Address, line: uint32(le.Line), file: noFile}
		if le.EndSequence {
			row = lineRow{addr: le.Address, file: endOfSequence}
		}
		for i, f := range lr.Files() {
			if !le.EndSequence && f != nil && f == le.File {
				row.file = uint32(i)
			}
		}
		want = append(want, row)
	}
	want = sortSequences(want, sequencesOf(want))
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("unit %#x: %d rows, want %d\n got %v\nwant %v", u.off, len(rows), len(want), rows, want)
	}
	checkLineAt(t, cu, rows)
	var wantFiles []string
	for _, f := range lr.Files() {
		name := ""
		if f != nil {
			name = f.Name
		}
		wantFiles = append(wantFiles, name)
	}
	if fmt.Sprint(files) != fmt.Sprint(wantFiles) {
		t.Errorf("unit %#x files = %q, want %q", u.off, files, wantFiles)
	}
}

// checkLineAt checks cu.lineAt, which runs the program from the nearest
// mark, against a binary search of rows (sequences sorted by start
// address) at every row's address and between rows.
func checkLineAt(t *testing.T, cu *cuLines, rows []lineRow) {
	t.Helper()
	want := func(pc uint64) (string, int) {
		i, _ := slices.BinarySearchFunc(rows, pc, func(r lineRow, pc uint64) int { return cmp.Compare(r.addr, pc+1) })
		if i == 0 || rows[i-1].file == endOfSequence {
			return "", 0
		}
		return cu.file(rows[i-1].file), int(rows[i-1].line)
	}
	for i, r := range rows {
		pcs := []uint64{r.addr}
		if i+1 < len(rows) && rows[i+1].addr > r.addr+1 {
			pcs = append(pcs, (r.addr+rows[i+1].addr)/2)
		}
		for _, pc := range pcs {
			gf, gl := cu.lineAt(pc, &span{0, ^uint64(0)})
			wf, wl := want(pc)
			if gf != wf || gl != wl {
				t.Errorf("unit %#x: lineAt(%#x) = %s:%d, want %s:%d", cu.u.off, pc, gf, gl, wf, wl)
				return
			}
		}
	}
}

// rows returns every row of x, its sequences sorted by start address,
// each ended by an endOfSequence row, by running the program from each
// sequence's first mark.
func (x *lineIndex) rows() []lineRow {
	var out []lineRow
	for i := range x.seqs {
		s := &x.seqs[i]
		if s.mark == s.end {
			out = append(out, lineRow{addr: s.hi, file: endOfSequence})
			continue
		}
		row, st, b := x.resume(&x.marks[s.mark])
		out = append(out, row)
		for {
			r, ok := x.prog.next(&b, &st, true)
			if !ok {
				break
			}
			out = append(out, r)
			if r.file == endOfSequence {
				break
			}
		}
	}
	return out
}

// sortSequences returns a new slice of rows with its sequences (seqs,
// as row index ranges) ordered by start address, keeping the order
// within each.
func sortSequences(rows []lineRow, seqs []pcRange) []lineRow {
	slices.SortStableFunc(seqs, func(a, b pcRange) int {
		return cmp.Compare(rows[a.lo].addr, rows[b.lo].addr)
	})
	out := make([]lineRow, 0, len(rows))
	for _, s := range seqs {
		out = append(out, rows[s.lo:s.hi]...)
	}
	return out
}

// sequencesOf returns the row index ranges of the sequences of rows.
func sequencesOf(rows []lineRow) []pcRange {
	var seqs []pcRange
	start := 0
	for i, r := range rows {
		if r.file == endOfSequence {
			seqs = append(seqs, pcRange{lo: uint64(start), hi: uint64(i + 1)})
			start = i + 1
		}
	}
	return seqs
}

// compareFuncs compares, for every subprogram and inlined subroutine
// with code in the unit r is at the children of, its ranges and name.
func compareFuncs(t *testing.T, ours *Data, std *dwarf.Data, u *unit, r *dwarf.Reader) {
	loader := newUnitLoader(ours)
	for depth := 1; depth > 0; {
		e, err := r.Next()
		if err != nil || e == nil {
			return
		}
		if e.Tag == 0 {
			depth--
			continue
		}
		if e.Children {
			depth++
		}
		if e.Tag != dwarf.TagSubprogram && e.Tag != dwarf.TagInlinedSubroutine {
			continue
		}
		want, _ := std.Ranges(e)
		if len(nonEmpty(want)) == 0 {
			continue
		}
		var tree inlineTree
		dr, _ := ours.newDIEReader(u, uint64(e.Offset))
		ab := dr.next()
		n, _ := loader.treeNode(&tree, &dr, ab, uint64(e.Offset), true)
		if n < 0 || fmt.Sprint(tree.ranges) != fmt.Sprint(nonEmpty(want)) {
			t.Errorf("DIE %#x ranges = %#x, want %#x", e.Offset, tree.ranges, want)
		}
		if got := loader.nameAt(uint64(e.Offset), maxOriginHops); got.system == "" {
			t.Errorf("DIE %#x has no name", e.Offset)
		}
	}
}

// TestDWARFReaderOnLibc compares the reader with debug/dwarf on libc's
// separate debug file (DWARF 5, compressed sections), when installed.
func TestDWARFReaderOnLibc(t *testing.T) {
	_, debug := symtest.LibcDebugFile(t)
	f, err := elf.Open(debug)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.DWARF(); err != nil { // the oracle, not the code under test
		testutil.Skipf(t, "debug/dwarf cannot read %s: %v", debug, err)
	}
	ours, std := loadBoth(t, debug)
	compareUnits(t, ours, std)
}

// TestInlineTreeLazy: a unit read for one address has the inlined calls
// of the function that holds it, and of no other of its functions; an
// address in a function nested in one not read yet (a GCC nested
// function) reads them all, and is named.
func TestInlineTreeLazy(t *testing.T) {
	bin := symtest.BuildNested(t)
	d := loadFile(t, bin)
	x := NewTable(d)
	plain := symtest.ElfSymbol(t, bin, "plain").Value
	if ls := x.Lines(plain + 4); len(ls) == 0 || ls[len(ls)-1].Function != "plain" {
		t.Fatalf("Lines(plain+4) = %v, want plain last", ls)
	}
	cu := x.unitFor(plain)
	tr := &cu.tree
	var read, lazy []string
	for i := range tr.nodes {
		n := &tr.nodes[i]
		if !n.physical {
			continue
		}
		name := x.nodeName(n).display
		if n.lazy {
			lazy = append(lazy, name)
		} else {
			read = append(read, name)
		}
	}
	if !slices.Contains(read, "plain") || !slices.Contains(lazy, "outer") || !slices.Contains(lazy, "main") || tr.unread != len(lazy) {
		t.Fatalf("after a lookup in plain: read %v, lazy %v (unread %d), want plain read and outer, main lazy", read, lazy, tr.unread)
	}
	inner := symtest.ElfSymbol(t, bin, "inner.0").Value
	if ls := x.Lines(inner); len(ls) == 0 || ls[len(ls)-1].Function != "inner" {
		t.Errorf("Lines(inner.0) = %v, want inner last", ls)
	}
	if tr.unread != 0 {
		t.Errorf("after a lookup in a nested function: %d functions unread, want 0", tr.unread)
	}
}

// BenchmarkUnitFirstLookup measures the first lookup of an address in a
// unit of 400 functions, each with three inlined calls (gcc -O2 -g): the
// unit's line table and its inline tree are read, the latter holding the
// inlined calls of the one function looked up (Table.expandNode), as a
// line memo's miss reads a large unit of an interpreter.
func BenchmarkUnitFirstLookup(b *testing.B) {
	gcc := symtest.LookPath(b, "gcc", "builds the benchmark's program")
	dir := b.TempDir()
	var src strings.Builder
	src.WriteString("static inline __attribute__((always_inline)) int h1(int x) { return x * 3 + (x >> 2); }\n")
	src.WriteString("static inline __attribute__((always_inline)) int h2(int x) { int s = 0; for (int k = 0; k < x; k++) s += h1(k ^ x); return s; }\n")
	src.WriteString("static inline __attribute__((always_inline)) int h3(int x) { return h2(x) - h1(x + 1); }\n")
	for i := range 400 {
		fmt.Fprintf(&src, "__attribute__((noinline)) int f%d(int x) { int a = h3(x + %d); for (int k = 0; k < x; k++) a += h2(k) * h1(a); return a + h3(a & %d); }\n", i, i, i+7)
	}
	src.WriteString("int main(void) { return 0; }\n")
	c := filepath.Join(dir, "big.c")
	if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(dir, "big")
	symtest.Run(b, gcc, "-O2", "-g", "-gz=none", "-o", bin, c)
	d := loadFile(b, bin)
	pc := symtest.ElfSymbol(b, bin, "f200").Value + 8
	b.ReportAllocs()
	for b.Loop() {
		x := NewTable(d)
		if ls := x.Lines(pc); len(ls) == 0 {
			b.Fatal("no lines")
		}
	}
}

// loadFile returns the DWARF of the binary at path, read with no cache
// (Load); it fails tb when there is none.
func loadFile(tb testing.TB, path string) *Data {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	ef, lr, err := elfio.OpenELF(f)
	if err != nil {
		tb.Fatal(err)
	}
	d := Load(ef, lr, nil)
	if d == nil {
		tb.Fatalf("%s: no DWARF", path)
	}
	return d
}
