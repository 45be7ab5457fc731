package unwind

import (
	"debug/elf"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// stackDump runs the stackdump binary in mode and reads the dump it writes.
func stackDump(t testing.TB, bin, mode string) *dump {
	t.Helper()
	out := filepath.Join(t.TempDir(), mode+".dump")
	if b, err := exec.Command(bin, mode, out).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, mode, err, b)
	}
	return readDump(t, out)
}

// frame is one unwound frame: its pc, name and whether it is in the test binary.
type frame struct {
	pc    uint64
	name  string
	inBin bool
}

func unwindFrames(t *testing.T, u *Unwinder, d *dump, bin string) ([]frame, Stop) {
	t.Helper()
	pcs, stop := u.Unwind(nil, d, &d.regs, d.stack)
	s := &symbolizer{d: d, syms: map[string][]elf.Symbol{}}
	var out []frame
	for i, pc := range pcs {
		at := pc // the leaf at its pc, the others at address-1, as the symbolizer does
		if i > 0 {
			at--
		}
		o, _ := d.Object(at)
		out = append(out, frame{pc: pc, name: s.name(at), inBin: o.Path == bin})
	}
	return out, stop
}

func framesText(fs []frame) string {
	var b strings.Builder
	for i, f := range fs {
		fmt.Fprintf(&b, "  #%d %#x %s\n", i, f.pc, f.name)
	}
	return b.String()
}

func binNames(fs []frame) []string {
	var out []string
	for _, f := range fs {
		if f.inBin {
			out = append(out, f.name)
		}
	}
	return out
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestUnwindStackDumps unwinds, offline, stacks that testdata/stackdump.c
// captured in its own hot leaves, built without and with frame pointers,
// and requires the whole chain from the leaf to _start (or start_thread),
// in order, ending as complete.
func TestUnwindStackDumps(t *testing.T) {
	for _, build := range []struct {
		name  string
		flags []string
	}{
		{"nofp", []string{"-O2", "-fomit-frame-pointer", "-pthread"}},
		{"fp", []string{"-O2", "-fno-omit-frame-pointer", "-pthread"}},
	} {
		t.Run(build.name, func(t *testing.T) {
			bin := testutil.BuildC(t, "testdata/stackdump.c", build.flags...)
			u := New(Options{})
			for _, tc := range []struct {
				mode string
				want []string // the frames in the test binary, leaf first
			}{
				{"qsort", []string{"cmp_leaf", "run_qsort", "main", "_start"}},
				{"qsort24", slices.Concat([]string{"cmp_leaf", "run_qsort"}, repeat("qrec", 14), []string{"main", "_start"})},
				{"signal", []string{"handler_leaf", "handler_mid", "handler", "sig_chain_b", "sig_chain_a", "run_signal", "main", "_start"}},
				{"recurse", slices.Concat([]string{"deep_leaf"}, repeat("rec", 301), []string{"main", "_start"})},
				{"thread", []string{"t_leaf", "t_chain", "thread_main"}},
				// In the fp build run_epilogue's CFA is rbp+16: the rbp
				// epi_leaf's CFI says is saved below sp must be the one
				// the pop left in the register.
				{"epilogue", []string{"epi_leaf", "run_epilogue", "main", "_start"}},
			} {
				t.Run(tc.mode, func(t *testing.T) {
					d := stackDump(t, bin, tc.mode)
					fs, stop := unwindFrames(t, u, d, bin)
					if got := binNames(fs); !slices.Equal(got, tc.want) {
						t.Errorf("frames in the binary: got %v\nwant %v\nall frames:\n%s", got, tc.want, framesText(fs))
					}
					if stop != StopComplete {
						t.Errorf("stopped with %v after %d frames, want complete:\n%s", stop, len(fs), framesText(fs))
					}
					checkMode(t, u, d, tc.mode, fs)
					checkExtent(t, u, d)
				})
			}
		})
	}
}

// checkMode checks what each mode has outside the test binary.
func checkMode(t *testing.T, u *Unwinder, d *dump, mode string, fs []frame) {
	t.Helper()
	idx := func(name string) int {
		return slices.IndexFunc(fs, func(f frame) bool { return f.inBin && f.name == name })
	}
	switch mode {
	case "qsort": // qsort's own frames (libc, no frame pointers) between the comparator and its caller
		if i, j := idx("cmp_leaf"), idx("run_qsort"); i < 0 || j-i < 2 {
			t.Errorf("no libc frame between cmp_leaf and run_qsort:\n%s", framesText(fs))
		}
	case "signal": // exactly one frame, in a signal frame's FDE (__restore_rt), between handler and the interrupted code
		i, j := idx("handler"), idx("sig_chain_b")
		if i < 0 || j != i+2 {
			t.Fatalf("want one frame between handler and sig_chain_b:\n%s", framesText(fs))
		}
		pc := fs[i+1].pc
		o, _ := d.Object(pc - 1)
		r, sub, ok := u.Table(o).lookup(pc - 1 - o.Bias)
		if !ok || r.cfaKind != cfaComplex || !sub.complex[r.cfaOff].signal {
			t.Errorf("frame %#x (%s) after the handler is not in a signal frame's FDE", pc, fs[i+1].name)
		}
	case "thread": // the root is libc's start_thread/clone3, after thread_main
		last := fs[len(fs)-1]
		if last.inBin || !strings.Contains(last.name, "libc.so") {
			t.Errorf("the root %s is not in libc:\n%s", last.name, framesText(fs))
		}
	}
}

// checkExtent checks UnwindExtent on a whole stack: its extent is
// within the dump, the stack copied up to it unwinds to the same frames
// and ends as complete, and it is no more than a frame above the
// shortest window that does (the outermost frame's CFA may be a little
// above the last byte read).
func checkExtent(t *testing.T, u *Unwinder, d *dump) {
	t.Helper()
	whole, stop, ext := u.UnwindExtent(nil, d, &d.regs, d.stack)
	if stop != StopComplete || ext == 0 || ext > uint64(len(d.stack)) {
		t.Fatalf("extent %d bytes (stack dump %d), stop %v: want a complete stack with an extent in the dump", ext, len(d.stack), stop)
	}
	pcs, stop := u.Unwind(nil, d, &d.regs, d.stack[:ext])
	if !slices.Equal(pcs, whole) || stop != StopComplete {
		t.Errorf("the window cut at the extent (%d bytes): %d frames, stop %v; want the %d frames, complete", ext, len(pcs), stop, len(whole))
	}
	shortest := uint64(len(d.stack))
	for n := uint64(0); n <= uint64(len(d.stack)); n += 8 {
		if _, stop := u.Unwind(nil, d, &d.regs, d.stack[:n]); stop == StopComplete {
			shortest = n
			break
		}
	}
	if ext < shortest || ext-shortest > 256 {
		t.Errorf("extent %d bytes, the shortest complete window %d bytes: want the extent at most 256 bytes above it", ext, shortest)
	}
	// A stack that does not reach its outermost frame has no extent.
	if _, stop, ext := u.UnwindExtent(nil, d, &d.regs, d.stack[:shortest/2]); stop == StopComplete || ext != 0 {
		t.Errorf("half the shortest window: stop %v, extent %d; want cut, extent 0", stop, ext)
	}
}

// TestWindowCut unwinds the qsort24 stack from windows cut short: each
// gives a prefix of the whole stack and stops with StopWindow (or
// complete, once the window holds the whole stack); an empty window (not
// a byte copied: a process exiting) gives the leaf alone and
// StopNoStack.
func TestWindowCut(t *testing.T) {
	u, d := qsort24(t)
	whole, _ := u.Unwind(nil, d, &d.regs, d.stack)
	for n := 0; n <= len(d.stack); n += 64 {
		pcs, stop := u.Unwind(nil, d, &d.regs, d.stack[:n])
		if !slices.Equal(pcs, whole[:len(pcs)]) {
			t.Fatalf("window of %d bytes: %d frames that are not a prefix of the whole stack", n, len(pcs))
		}
		want := StopWindow
		if n == 0 {
			want = StopNoStack
		}
		if stop != want && !(stop == StopComplete && len(pcs) == len(whole)) || n == 0 && len(pcs) != 1 {
			t.Errorf("window of %d bytes: %d frames, stop %v, want %v", n, len(pcs), stop, want)
		}
	}
	// The same stack with sp moved up past the return address: the
	// rules read below the window start.
	regs := d.regs
	regs[RegRSP] += 64
	if _, stop := u.Unwind(nil, d, &regs, d.stack[64:]); stop == StopComplete {
		t.Errorf("a stack with a wrong sp unwinds as complete")
	}
}

// TestUnwindDlopen: a library dlopened at run time, built without frame
// pointers, between the program's frames and the leaf it calls back.
func TestUnwindDlopen(t *testing.T) {
	bin := testutil.BuildC(t, "testdata/stackdump.c", "-O2", "-fomit-frame-pointer", "-pthread", "-ldl")
	lib := filepath.Join(t.TempDir(), "libchain.so")
	gcc := testutil.RequireTool(t, "gcc")
	if b, err := exec.Command(gcc, "-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-o", lib, "testdata/libchain.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc libchain: %v\n%s", err, b)
	}
	out := filepath.Join(t.TempDir(), "dump")
	if b, err := exec.Command(bin, "dlopen", out, lib).CombinedOutput(); err != nil {
		t.Fatalf("stackdump dlopen: %v\n%s", err, b)
	}
	d := readDump(t, out)
	u := New(Options{})
	fs, stop := unwindFrames(t, u, d, bin)
	var names []string
	for _, f := range fs {
		if o, _ := d.Object(f.pc); f.inBin || o.Path == lib {
			names = append(names, f.name)
		}
	}
	want := []string{"dl_leaf", "lib_mid", "lib_chain", "run_dlopen", "main", "_start"}
	if !slices.Equal(names, want) || stop != StopComplete {
		t.Errorf("got %v, stop %v; want %v\n%s", names, stop, want, framesText(fs))
	}
}
