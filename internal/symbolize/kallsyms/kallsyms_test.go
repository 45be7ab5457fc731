package kallsyms

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/testutil"
)

func loadFixtureKallsyms(t *testing.T) *Table {
	t.Helper()
	k, err := Load("../testdata/kallsyms.txt")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKallsymsLookup(t *testing.T) {
	k := loadFixtureKallsyms(t)
	if k.Hidden() {
		t.Fatal("Hidden() = true for a file with addresses")
	}
	tests := []struct {
		addr         uint64
		name, module string
		start        uint64
	}{
		{0x1000, "", "", 0},                                        // before the first symbol
		{0xffffffff80ffffff, "", "", 0},                            // just before _stext
		{0xffffffff81000000, "startup_64", "", 0xffffffff81000000}, // global wins, markers dropped
		{0xffffffff810000ff, "startup_64", "", 0xffffffff81000000},
		{0xffffffff81000100, "secondary_startup_64", "", 0xffffffff81000100},
		{0xffffffff81000300, "secondary_startup_64", "", 0xffffffff81000100}, // data symbols dropped
		{0xffffffff81001000, "__pfx_abort", "", 0xffffffff81001000},          // padding, its name shared
		{0xffffffff81001010, "abort", "", 0xffffffff81001010},                // weak symbols kept
		{0xffffffff810027ff, "do_syscall_64", "", 0xffffffff81002000},        // last byte of text
		{0xffffffff81002800, "", "", 0},                                      // _etext bounds it
		{0xffffffff83000123, "start_kernel", "", 0xffffffff83000000},         // init text
		{0xffffffff83000400, "", "", 0},                                      // _einittext bounds it
		{0xffffffffa0000010, "xfs_foo", "xfs", 0xffffffffa0000000},           // out of order in file
		{0xffffffffc0001000, "ext4_foo", "ext4", 0xffffffffc0001000},
		{0xffffffffc0001150, "ext4_bar", "ext4", 0xffffffffc0001100},
		{0xffffffffc0001200, "ext4_bar", "ext4", 0xffffffffc0001100}, // no module end known
		{0xffffffffc0300010, "bpf_prog_6deef7357e7b4530_sd_fw_egress", "bpf", 0xffffffffc0300000},
		{0xffffffffc0300800, "bpf_prog_aaaaaaaaaaaaaaaa_handle", "bpf", 0xffffffffc0300800},
		{0xffffffffc0300800 + maxKernelTail, "", "", 0}, // past the tail of the last symbol
	}
	for _, tt := range tests {
		sym, ok := k.Lookup(tt.addr)
		if ok != (tt.name != "") || sym.Name != tt.name || sym.Module != tt.module || sym.Start != tt.start {
			t.Errorf("Lookup(%#x) = %+v, %v; want {%s %#x %s}", tt.addr, sym, ok, tt.name, tt.start, tt.module)
		}
	}
	if start, end, ok := k.TextRange(); !ok || start != 0xffffffff81000000 || end != 0xffffffff81002800 {
		t.Errorf("TextRange() = %#x, %#x, %v", start, end, ok)
	}
	if n := k.Len(); n != 12 {
		t.Errorf("Len() = %d, want 12", n)
	}
}

func TestKallsymsModules(t *testing.T) {
	k := loadFixtureKallsyms(t)
	if err := k.LoadModules("../testdata/modules.txt"); err != nil {
		t.Fatal(err)
	}
	if sym, ok := k.Lookup(0xffffffffc0001fff); !ok || sym.Name != "ext4_bar" {
		t.Errorf("Lookup(last byte of ext4) = %+v, %v; want ext4_bar", sym, ok)
	}
	if sym, ok := k.Lookup(0xffffffffc0002000); ok {
		t.Errorf("Lookup(end of ext4) = %+v; want no symbol", sym)
	}
	if sym, ok := k.Lookup(0xffffffffa0001000); ok {
		t.Errorf("Lookup(end of xfs) = %+v; want no symbol", sym)
	}
	got := map[string]Module{}
	for _, m := range k.Modules() {
		got[m.Name] = m
	}
	if m := got["ext4"]; m.Start != 0xffffffffc0000000 || m.End != 0xffffffffc0002000 {
		t.Errorf("ext4 module = %+v", m)
	}
	if m := got["bpf"]; m.Start != 0xffffffffc0300000 || m.End != 0xffffffffc0300800+maxKernelTail {
		t.Errorf("bpf module = %+v", m)
	}
	if _, ok := got["gone"]; ok || len(got) != 4 {
		t.Errorf("Modules() = %+v; want ext4, xfs, __builtin__ftrace, bpf", got)
	}
	if err := k.LoadModules("../testdata/missing"); err == nil {
		t.Error("LoadModules(missing file) succeeded")
	}
}

func TestKallsymsHidden(t *testing.T) {
	k, err := Load("../testdata/kallsyms_hidden.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !k.Hidden() {
		t.Fatal("Hidden() = false for all-zero addresses")
	}
	if sym, ok := k.Lookup(0); ok {
		t.Errorf("Lookup(0) = %+v on hidden kallsyms", sym)
	}
	if _, _, ok := k.TextRange(); ok {
		t.Error("TextRange() ok on hidden kallsyms")
	}
	if m := k.Modules(); len(m) != 0 {
		t.Errorf("Modules() = %v on hidden kallsyms", m)
	}
}

func TestParseKallsymsErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"\n\n",
		"ffffffff81000000 T\n",
		"zzzz T foo\n",
		"ffffffff81000000 T _stext\nffffffff81000000T foo\n",
		"1ffffffff81000000 T foo\n", // 17 digits
	} {
		if k, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("ParseKallsyms(%q) = %d symbols, want error", in, k.Len())
		}
	}
	k, err := Parse(strings.NewReader("ffffffff81000000 T foo")) // no final newline
	if err != nil || k.Len() != 1 {
		t.Errorf("ParseKallsyms(no newline) = %v, %v", k, err)
	}
}

// TestKallsymsChunks: lines split across the reader's chunks, at every
// place, parse as the whole file does.
func TestKallsymsChunks(t *testing.T) {
	data, err := os.ReadFile("../testdata/kallsyms.txt")
	if err != nil {
		t.Fatal(err)
	}
	want, err := parseKallsyms(data)
	if err != nil {
		t.Fatal(err)
	}
	for chunk := 1; chunk <= 70; chunk++ {
		k, err := loadKallsyms(bytes.NewReader(data), chunk)
		if err != nil {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
		if k.Len() != want.Len() || len(k.Modules()) != len(want.Modules()) || k.text != want.text {
			t.Fatalf("chunk %d: %d symbols, %v, text %v; want %d, %v, %v",
				chunk, k.Len(), k.Modules(), k.text, want.Len(), want.Modules(), want.text)
		}
		for i := range want.syms {
			addr := want.syms[i].addr
			if got, w := lookupString(k, addr), lookupString(want, addr); got != w {
				t.Errorf("chunk %d: Lookup(%#x) = %s, want %s", chunk, addr, got, w)
			}
		}
	}
}

func lookupString(k *Table, addr uint64) string {
	sym, ok := k.Lookup(addr)
	return fmt.Sprint(sym, ok)
}

func TestKallsymsStreamErrors(t *testing.T) {
	long := "ffffffff81000000 T " + strings.Repeat("x", 2*maxKallsymsLine) + "\n"
	if _, err := Parse(strings.NewReader(long)); err == nil || !strings.Contains(err.Error(), "line 1: longer than") {
		t.Errorf("ParseKallsyms(line over 64 KiB) error = %.200v", err)
	}
	name := "ffffffff81000000 T " + strings.Repeat("x", ksymNameMask+1) + "\n"
	if _, err := Parse(strings.NewReader(name)); err == nil || len(err.Error()) > 200 {
		t.Errorf("ParseKallsyms(name over 32 KiB) error = %.200v, want a short one", err)
	}
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("ffffffff81000000 T foo\n"), iotest.ErrReader(boom))
	if _, err := Parse(r); !errors.Is(err, boom) {
		t.Errorf("ParseKallsyms(failing reader) error = %v, want %v", err, boom)
	}
	// A parse error stops the reader; the error names the line.
	bad := strings.Repeat("ffffffff81000000 T foo\n", 10000) + "bad line\n" + strings.Repeat("ffffffff81000000 T foo\n", 10000)
	if _, err := Parse(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 10001") {
		t.Errorf("ParseKallsyms(bad line 10001) error = %v", err)
	}
}

// TestKallsymsAliases: of symbols at one address, in a sorted file, the
// first global one is kept.
func TestKallsymsAliases(t *testing.T) {
	k, err := Parse(strings.NewReader(`ffffffff81000000 t a_local
ffffffff81000000 T a_global
ffffffff81000000 T a_global2
ffffffff81000010 T b_global
ffffffff81000010 t b_local
ffffffff81000020 t c_local
ffffffff81000020 t c_local2
`))
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[uint64]string{0xffffffff81000000: "a_global", 0xffffffff81000010: "b_global", 0xffffffff81000020: "c_local"} {
		if sym, ok := k.Lookup(addr); !ok || sym.Name != want {
			t.Errorf("Lookup(%#x) = %+v, %v; want %s", addr, sym, ok, want)
		}
	}
	if k.Len() != 3 {
		t.Errorf("Len() = %d, want 3", k.Len())
	}
}

func TestKallsymsReal(t *testing.T) {
	data := symtest.RequireKallsymsAddresses(t)
	k, err := Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if k.Hidden() {
		t.Fatal("Hidden() with real addresses in /proc/kallsyms")
	}
	start, end, ok := k.TextRange()
	if !ok {
		t.Fatal("no _stext/_etext in /proc/kallsyms")
	}
	sym, ok := k.Lookup(start + (end-start)/2)
	if !ok || sym.Module != "" || sym.Start < start {
		t.Errorf("Lookup(middle of text) = %+v, %v", sym, ok)
	}
}

// BenchmarkKallsymsLoad measures Load of /proc/kallsyms, read and
// parse, and reports the heap the table keeps (table-B).
func BenchmarkKallsymsLoad(b *testing.B) {
	if _, err := os.ReadFile("/proc/kallsyms"); err != nil {
		testutil.Skipf(b, "cannot read /proc/kallsyms: %v", err)
	}
	var k *Table
	for b.Loop() {
		var err error
		if k, err = Load("/proc/kallsyms"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var before, after runtime.MemStats
	k = nil
	runtime.GC()
	runtime.ReadMemStats(&before)
	k, _ = Load("/proc/kallsyms")
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)), "table-B")
	runtime.KeepAlive(k)
}

// BenchmarkKallsymsRead measures reading /proc/kallsyms alone, in
// kallsymsChunk reads, the floor of BenchmarkKallsymsLoad.
func BenchmarkKallsymsRead(b *testing.B) {
	buf := make([]byte, kallsymsChunk)
	for b.Loop() {
		f, err := os.Open("/proc/kallsyms")
		if err != nil {
			testutil.Skipf(b, "cannot read /proc/kallsyms: %v", err)
		}
		for err == nil {
			_, err = io.ReadFull(f, buf)
		}
		f.Close()
	}
}

// BenchmarkKallsymsParse measures the parse alone: reading /proc/kallsyms
// costs the kernel tens of milliseconds by itself.
func BenchmarkKallsymsParse(b *testing.B) {
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		testutil.Skipf(b, "cannot read /proc/kallsyms: %v", err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := parseKallsyms(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKallsymsSortTail checks the merge of a sorted head with an
// unsorted tail (BPF programs listed newest first) against the full
// stable sort, with addresses that repeat across the two runs.
func TestKallsymsSortTail(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 2 + r.IntN(60)
		from := 1 + r.IntN(n-1)
		syms := make([]ksym, n)
		addr := uint64(0)
		for i := range from {
			addr += uint64(r.IntN(3))
			syms[i] = ksym{addr: addr, name: uint32(i), nlen: uint16(r.IntN(2)) * ksymGlobal}
		}
		for i := from; i < n; i++ {
			syms[i] = ksym{addr: uint64(r.IntN(int(addr) + 3)), name: uint32(i), nlen: uint16(r.IntN(2)) * ksymGlobal}
		}
		got := &Table{syms: slices.Clone(syms)}
		want := &Table{syms: slices.Clone(syms)}
		got.sortTail(from)
		want.sortSyms()
		if !slices.Equal(got.syms, want.syms) {
			t.Fatalf("round %d (head %d of %d): sortTail\n%v\nsortSyms\n%v", round, from, n, got.syms, want.syms)
		}
	}
}
