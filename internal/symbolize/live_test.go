package symbolize

import (
	"debug/elf"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/procmaps"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/kallsyms"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
	"github.com/gprofile/gprofile/internal/testutil"
)

// liveTarget is a function of the test binary whose PC the live tests
// symbolize.
//
//go:noinline
func liveTarget(n int) int { return n*3 + 1 }

// liveSymbolizer returns a Symbolizer of the live system.
func liveSymbolizer(t testing.TB) *Symbolizer {
	t.Helper()
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// funcPC returns the entry PC of fn and its name in the Go runtime.
func funcPC(fn any) (uint64, string) {
	pc := reflect.ValueOf(fn).Pointer()
	return uint64(pc), runtime.FuncForPC(pc).Name()
}

func TestStackLiveGo(t *testing.T) {
	s := liveSymbolizer(t)
	pc, name := funcPC(liveTarget)
	pid := uint32(os.Getpid())
	// As a leaf at its entry, and as a return address one byte in.
	st := s.Stack(pid, nil, []uint64{pc, pc + 1})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	file, line := runtime.FuncForPC(uintptr(pc)).FileLine(uintptr(pc)) // the runtime's own pclntab
	for i, f := range st.Frames {
		if f.Function != name || f.Reason != ReasonNone || f.SymbolStart != pc {
			t.Errorf("frame %d = %+v; want %s at %#x", i, f, name, pc)
		}
		if f.File != file || f.Line != line || f.Inlined {
			t.Errorf("frame %d at %s:%d, inlined %v; want %s:%d", i, f.File, f.Line, f.Inlined, file, line)
		}
		if f.Mapping == nil || f.Mapping.Path != exe {
			t.Errorf("frame %d mapping = %+v; want %s", i, f.Mapping, exe)
		}
	}
}

func TestStackLiveVDSO(t *testing.T) {
	if !symtest.HasVDSO(t) {
		testutil.Skipf(t, "no [vdso] in /proc/self/maps (vdso=0 on the kernel command line?)")
	}
	vdso, _ := loadVDSO("/proc", nil)
	if vdso == nil || vdso.Len() == 0 {
		t.Fatal("loadVDSO found no [vdso] with symbols; /proc/self/maps has one")
	}
	entries := selfMaps(t)
	var m procmaps.Entry
	for _, e := range entries {
		if e.Path == "[vdso]" {
			m = e
		}
	}
	bias, ok := vdso.Bias(m.Start, m.Offset)
	if !ok {
		t.Fatalf("no vDSO segment for %+v", m)
	}
	var sym objfile.Symbol
	found := false
	for _, p := range vdso.Loads() {
		for a := p.Vaddr; p.Flags&elf.PF_X != 0 && a < p.Vaddr+p.Memsz && !found; a++ {
			sym, found = vdso.Lookup(a)
		}
	}
	if !found {
		t.Fatal("no symbol in the vDSO's executable segment")
	}
	want := sym.Function
	s := liveSymbolizer(t)
	st := s.Stack(uint32(os.Getpid()), nil, []uint64{sym.Start + bias})
	checkFrames(t, st.Frames, []wantFrame{{want, ReasonNone, "[vdso]"}})
	if st.Frames[0].Mapping.BuildID != vdso.BuildID() {
		t.Errorf("vDSO BuildID = %q, want %q", st.Frames[0].Mapping.BuildID, vdso.BuildID())
	}
}

func selfMaps(t *testing.T) []procmaps.Entry {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := procmaps.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func TestStackLiveKernel(t *testing.T) {
	symtest.RequireKallsymsAddresses(t)
	k, err := kallsyms.Load("/proc/kallsyms")
	if err != nil || k.Hidden() {
		t.Fatalf("kallsyms.Load: %v, hidden %v; /proc/kallsyms shows addresses", err, k != nil && k.Hidden())
	}
	start, _, ok := k.TextRange()
	if !ok {
		t.Fatal("no kernel text range (_stext.._etext) from /proc/kallsyms")
	}
	want, ok := k.Lookup(start + 0x1000)
	if !ok {
		t.Fatalf("no kernel symbol at _stext+0x1000")
	}
	s := liveSymbolizer(t)
	if s.Note() != "" {
		t.Errorf("Note() = %q with readable kallsyms", s.Note())
	}
	st := s.Stack(0, []uint64{start + 0x1000}, nil)
	checkFrames(t, st.Frames, []wantFrame{{want.Name, ReasonNone, "[kernel.kallsyms]"}})
	if f := st.Frames[0]; !f.Kernel || !f.Mapping.Kernel || f.SymbolStart != want.Start {
		t.Errorf("kernel frame = %+v", f)
	}
}

func TestStackLiveProcessGone(t *testing.T) {
	cmd := exec.Command(testutil.RequireTool(t, "true"))
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	s := liveSymbolizer(t)
	st := s.Stack(uint32(cmd.Process.Pid), nil, []uint64{0x401000})
	checkFrames(t, st.Frames, []wantFrame{{"", ReasonProcessGone, "-"}})
}

// BenchmarkStackWarm measures Stack on a warm cache: a 16-frame user stack
// of this test binary, every address already seen.
func BenchmarkStackWarm(b *testing.B) {
	s := liveSymbolizer(b)
	pid := uint32(os.Getpid())
	var ips []uint64
	for _, fn := range []any{liveTarget, liveSymbolizer, funcPC, selfMaps, New, procmaps.Parse, kallsyms.Load, objfile.Open} {
		pc, _ := funcPC(fn)
		ips = append(ips, pc+8, pc+16)
	}
	if f := s.Stack(pid, nil, ips).Frames[0]; f.Reason != ReasonNone {
		b.Fatalf("cold lookup failed: %+v", f)
	}
	for b.Loop() {
		s.Stack(pid, nil, ips)
	}
}

// TestStackLiveLibcDebugFile names a function that only the separate
// debug file of the system's libc has (Debian's libc6-dbg, found by build
// ID in /usr/lib/debug): __libc_start_call_main is local, so the stripped
// libc.so.6 has it in no symbol table.
func TestStackLiveLibcDebugFile(t *testing.T) {
	libc, debug := symtest.LibcDebugFile(t)
	b, err := objfile.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	if b.DebugFile() != debug {
		t.Fatalf("objfile.Open(%s).DebugFile() = %q, want %s (libc6-dbg installs it)", libc, b.DebugFile(), debug)
	}
	const name = "__libc_start_call_main"
	sym := symtest.ElfSymbol(t, b.DebugFile(), name)
	if got, ok := b.Lookup(sym.Value + 4); !ok || got.Function != name {
		t.Errorf("Lookup(%s+4) = %+v, %v", name, got, ok)
	}
	const pid, base = 77, 0x7f0000000000
	fp := newFakeProc(t)
	fp.setMaps(pid, textMapping(t, libc, base))
	s := fp.symbolizer("testdata/kallsyms.txt") // default DebugDirs
	st := s.Stack(pid, nil, []uint64{base + sym.Value + 4, base + sym.Value + sym.Size/2})
	checkFrames(t, st.Frames[len(st.Frames)-1:], []wantFrame{{name, ReasonNone, libc}})
	if st.Frames[0].Function != name {
		t.Errorf("leaf frame = %+v", st.Frames[0])
	}
}

// TestStackIntoReuses checks that StackInto gives the frames Stack gives,
// into the Stack it is handed, reusing its frames' array once it is big
// enough: the test binary's own call stack, then a shorter one written
// over it.
func TestStackIntoReuses(t *testing.T) {
	s := liveSymbolizer(t)
	pid := uint32(os.Getpid())
	pcs := make([]uintptr, 32)
	pcs = pcs[:runtime.Callers(1, pcs)]
	ips := make([]uint64, len(pcs))
	for i, pc := range pcs {
		ips[i] = uint64(pc)
	}
	var dst Stack
	for _, stack := range [][]uint64{ips, ips[1:3]} {
		want := s.Stack(pid, nil, stack)
		before := cap(dst.Frames)
		got := s.StackInto(&dst, pid, nil, stack)
		if got != &dst {
			t.Fatal("StackInto did not return the Stack it was given")
		}
		if !reflect.DeepEqual(got.Frames, want.Frames) {
			t.Errorf("StackInto gave %d frames, Stack %d; first %+v, want %+v", len(got.Frames), len(want.Frames), got.Frames[0], want.Frames[0])
		}
		if before >= len(want.Frames) && cap(dst.Frames) != before {
			t.Errorf("StackInto grew a frames array of capacity %d for %d frames", before, len(want.Frames))
		}
	}
	if len(dst.Frames) == 0 || dst.Frames[0].Function == "" {
		t.Errorf("the test's own stack unnamed: %+v", dst.Frames)
	}
}
