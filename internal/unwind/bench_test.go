package unwind

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// BenchmarkBuildLibc builds the unwind table of Debian's libc from its
// .eh_frame: time per build, and the table's rows and bytes.
func BenchmarkBuildLibc(b *testing.B) {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		testutil.Skipf(b, "%v", err)
	}
	defer f.Close()
	var tab *Table
	for b.Loop() {
		if tab, err = NewTable(f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tab.Rows()), "rows")
	b.ReportMetric(float64(tab.Rules()), "rules")
	b.ReportMetric(float64(tab.Bytes()), "table-bytes")
	b.ReportMetric(float64(tab.Bytes())/float64(tab.Rows()), "bytes/row")
}

// qsort24 returns the unwinder (tables cached) and the dump of a stack of
// about 24 frames in libc (qsort) and a test binary built without frame
// pointers.
func qsort24(t testing.TB) (*Unwinder, *dump) {
	bin := testutil.BuildC(t, "testdata/stackdump.c", "-O2", "-fomit-frame-pointer", "-pthread")
	d := stackDump(t, bin, "qsort24")
	u := New(Options{})
	if _, stop := u.Unwind(nil, d, &d.regs, d.stack); stop != StopComplete {
		t.Fatalf("qsort24 stack stops with %v", stop)
	}
	return u, d
}

// BenchmarkUnwind24 unwinds the qsort24 stack with cached tables:
// ns/frame is the cost of one step, allocs/op must be 0.
func BenchmarkUnwind24(b *testing.B) {
	u, d := qsort24(b)
	dst := make([]uint64, 0, 64)
	var n int
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = u.Unwind(dst[:0], d, &d.regs, d.stack)
		n += len(dst)
	}
	b.ReportMetric(float64(len(dst)), "frames")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/frame")
}

// TestUnwindNoAllocs: in the steady state an unwind allocates nothing.
func TestUnwindNoAllocs(t *testing.T) {
	u, d := qsort24(t)
	dst := make([]uint64, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		dst, _ = u.Unwind(dst[:0], d, &d.regs, d.stack)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per unwind, want 0", allocs)
	}
	if len(dst) < 20 {
		t.Errorf("only %d frames in the qsort24 stack", len(dst))
	}
}

// BenchmarkBuildGo builds the unwind table of testdata/gochain, a Go
// binary with its DWARF and .symtab (what a Go server on the profiled
// machine brings): time, bytes and allocations per build.
func BenchmarkBuildGo(b *testing.B) {
	f, err := elf.Open(buildGoChain(b))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.ReportAllocs()
	var tab *Table
	for b.Loop() {
		if tab, err = NewTable(f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tab.Rows()), "rows")
	b.ReportMetric(float64(tab.Bytes()), "table-bytes")
}

// BenchmarkGoTable builds the table of the Go toolchain's compile (a
// large Go binary linked with -w) and looks up one pc in each of 300 of
// its functions, as a profile of a compiler run touches: "whole" reads
// every function's SP deltas first (the reader NewTable used before
// goFuncs, kept in the tests), "lazy" is loadTable, which decodes each
// function at its first lookup.
func BenchmarkGoTable(b *testing.B) {
	out, err := exec.Command("go", "env", "GOTOOLDIR").Output()
	if err != nil {
		b.Skipf("go env GOTOOLDIR: %v", err)
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "compile")
	f, err := elf.Open(bin)
	if err != nil {
		b.Skipf("the Go toolchain's compile: %v", err)
	}
	defer f.Close()
	g := readGoPclntab(b, f)
	var pcs []uint64
	for i := 0; i < g.nfunc && len(pcs) < 300; i += g.nfunc / 300 {
		if start, end, _, ok := g.funcSP(i); ok {
			pcs = append(pcs, start+(end-start)/2)
		}
	}
	lookups := func(b *testing.B, tab *Table) {
		for _, pc := range pcs {
			tab.lookup(pc)
		}
	}
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		var tab *Table
		for b.Loop() {
			g := readGoPclntab(b, f)
			tb := newTableBuilder()
			tb.addGoPclntab(g, 0)
			var err error
			if tab, err = tb.finish(); err != nil {
				b.Fatal(err)
			}
			lookups(b, tab)
		}
		b.ReportMetric(float64(tab.Bytes()), "table-bytes")
	})
	b.Run("lazy", func(b *testing.B) {
		b.ReportAllocs()
		var tab *Table
		for b.Loop() {
			if tab, err = loadTable(bin, ""); err != nil {
				b.Fatal(err)
			}
			lookups(b, tab)
		}
		b.ReportMetric(float64(tab.Bytes()), "table-bytes")
	})
}
