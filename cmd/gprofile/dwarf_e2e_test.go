package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/recorder"
	"github.com/gprofile/gprofile/internal/testutil"
)

// The end-to-end tests of whole user stacks (issue 13): each builds a
// workload from testdata/dwarf/ (or testdata/sym/) into t.TempDir() the
// way a distribution builds by default, without frame pointers, profiles
// it with gprofile --call-graph dwarf at 999 Hz, and requires its whole
// expected chain, in order, in at least 95% of its samples (others may
// sit between), with no stack of the chain cut ([truncated]).

const dwarfSrc = "testdata/dwarf/"

// dwarfProfile runs gprofile -E -f 999 --call-graph dwarf -- argv and
// returns the folded stacks.
func dwarfProfile(t *testing.T, argv ...string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cmd.folded") // stdout is the command's
	_, stderr, code := runGprofile(t, append([]string{"-E", "-f", "999", "--call-graph", "dwarf", "-o", path, "--"}, argv...)...)
	if code != 0 {
		t.Fatalf("gprofile -- %v: exit %d", argv, code)
	}
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stderr), "user stacks: ") {
		t.Errorf("no user stacks line in the summary: %s", stderr)
	}
	return out
}

// dwarfCheck requires want (root first, after the comm) in at least 95%
// of the samples of comm that hold anchor (all of comm's when anchor is
// ""), and at least 100 such samples; a chained stack must not be cut.
func dwarfCheck(t *testing.T, folded []byte, comm, anchor string, want ...string) {
	t.Helper()
	total, chained, cut := 0, 0, 0
	var top []foldedLine
	for _, l := range parseFolded(t, folded) {
		if l.frames[0] != comm || anchor != "" && !slices.Contains(l.frames, anchor) {
			continue
		}
		frames := make([]string, len(l.frames)-1)
		for i, f := range l.frames[1:] {
			frames[i] = symFrame(f)
		}
		total += l.count
		if hasChain(frames, want) {
			chained += l.count
			if slices.Contains(frames, recorder.TruncatedFrame) {
				cut += l.count
			}
		}
		top = append(top, l)
	}
	slices.SortFunc(top, func(a, b foldedLine) int { return b.count - a.count })
	var sb strings.Builder
	for i := 0; i < len(top) && i < 8; i++ {
		fmt.Fprintf(&sb, "%d× %s\n", top[i].count, strings.Join(top[i].frames, ";"))
	}
	t.Logf("%s: %d samples, %d hold the chain (%d of them cut)", comm, total, chained, cut)
	if total < 100 {
		t.Fatalf("%d samples of %s, want at least 100\n%s", total, comm, sb.String())
	}
	if chained*100 < total*95 {
		t.Errorf("%d of %d samples of %s hold %s, want 95%%\n%s", chained, total, comm, strings.Join(want, ";"), sb.String())
	}
	if cut != 0 {
		t.Errorf("%d samples hold the chain under a %s root", cut, recorder.TruncatedFrame)
	}
}

// TestDwarfChainNoFramePointers: the chain workload built without frame
// pointers in C, C++ and Rust unwinds whole from .eh_frame.
func TestDwarfChainNoFramePointers(t *testing.T) {
	testutil.RequirePrivileges(t)
	t.Run("c", func(t *testing.T) {
		bin := testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", "-fomit-frame-pointer")
		out := dwarfProfile(t, "sh", "-c", bin+" 1.5 >/dev/null") // it prints its pid
		dwarfCheck(t, out, symComm(bin), "", "main", "chain_a", "chain_b", "chain_c")
	})
	t.Run("c++", func(t *testing.T) {
		gxx := testutil.RequireTool(t, "g++")
		bin := symBuild(t, gxx, "chaincxx", "-O2", "-g", "-fomit-frame-pointer", dwarfSrc+"chain.cpp")
		out := dwarfProfile(t, bin, "1.5")
		dwarfCheck(t, out, symComm(bin), "", "main", "chain::a", "chain::b", "chain::c")
	})
	t.Run("rust", func(t *testing.T) {
		rustc := dwarfRustc(t)
		bin := symBuild(t, rustc, "chainrs", "-O", "-g", "-C", "force-frame-pointers=no", "--crate-name", "chainrs", dwarfSrc+"chain.rs")
		out := dwarfProfile(t, bin, "1.5")
		dwarfCheck(t, out, symComm(bin), "", "main", "chainrs::chain_a", "chainrs::chain_b", "chainrs::chain_c")
	})
}

// dwarfRustc returns rustc from PATH, else from rustup's ~/.cargo/bin
// (which a non-login shell may not have on PATH), else fails the test
// under GPROFILE_REQUIRE_PRIV=1 (CI installs Debian's rustc) or skips it.
func dwarfRustc(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("rustc"); err != nil {
		for _, dir := range []string{os.Getenv("HOME"), "/root"} {
			if p := filepath.Join(dir, ".cargo/bin/rustc"); dir != "" {
				if _, err := os.Stat(p); err == nil {
					return p
				}
			}
		}
	}
	return testutil.RequireTool(t, "rustc")
}

// TestDwarfFramelessLeaf: a leaf that sets up no frame keeps its caller,
// in C (frame pointers everywhere else) and in Go.
func TestDwarfFramelessLeaf(t *testing.T) {
	testutil.RequirePrivileges(t)
	t.Run("c", func(t *testing.T) {
		bin := testutil.BuildC(t, dwarfSrc+"leaf.c", "-O2", "-g", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer")
		out := dwarfProfile(t, bin, "1.5")
		dwarfCheck(t, out, symComm(bin), "", "main", "chain_a", "chain_b", "chain_c")
	})
	t.Run("go", func(t *testing.T) {
		bin := testutil.BuildGo(t, dwarfSrc+"goleaf.go")
		out := dwarfProfile(t, bin, "1.5")
		dwarfCheck(t, out, symComm(bin), "main.leaf", "runtime.main", "main.main", "main.outer", "main.middle", "main.leaf")
	})
}

// TestDwarfThroughLibc: a comparator called back by libc's qsort (libc
// has no frame pointers) keeps its callers.
func TestDwarfThroughLibc(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, dwarfSrc+"qsort.c", "-O2", "-g", "-fomit-frame-pointer")
	out := dwarfProfile(t, bin, "1.5")
	dwarfCheck(t, out, symComm(bin), "cmp_slow", "main", "sort_loop", "cmp_slow")
}

// TestDwarfSignalFrame: a signal handler spinning while it interrupts a
// chain unwinds through the kernel's signal frame to main.
func TestDwarfSignalFrame(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, dwarfSrc+"signal.c", "-O2", "-g", "-fomit-frame-pointer")
	out := dwarfProfile(t, bin, "1.5")
	dwarfCheck(t, out, symComm(bin), "sig_spin", "main", "chain_a", "chain_b", "on_signal", "sig_spin")
}

// TestDwarfDeepRecursion: 300 frames of recursion, past the 127 frames a
// frame-pointer walk stops at.
func TestDwarfDeepRecursion(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, dwarfSrc+"recurse.c", "-O2", "-g", "-fomit-frame-pointer")
	out := dwarfProfile(t, bin, "1.5")
	want := []string{"main"}
	for range 300 {
		want = append(want, "recurse")
	}
	dwarfCheck(t, out, symComm(bin), "rec_leaf", append(want, "rec_leaf")...)
}

// TestDwarfThread: a thread's stack ends, whole, at libc's clone3 and
// start_thread.
func TestDwarfThread(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, dwarfSrc+"thread.c", "-O2", "-g", "-fomit-frame-pointer", "-pthread")
	out := dwarfProfile(t, bin, "1.5")
	dwarfCheck(t, out, symComm(bin), "thr_spin", "clone3", "start_thread", "thr_mid", "thr_spin")
}

// TestDwarfStackTops: once a thread's whole stack has been unwound, its
// samples copy the stack from sp up to its top only, not a whole window:
// the thread workload's stack is under a kilobyte, and the window copied
// past it to the unreadable page above the thread's stack (12 KiB a
// sample, every copy, before tops were learned). Next to none is cut by a
// learned top.
func TestDwarfStackTops(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, dwarfSrc+"thread.c", "-O2", "-g", "-fomit-frame-pointer", "-pthread")
	w := windowStats(t, "--", bin, "2.5")
	// Until the worker has built the first tables, samples go to it and
	// teach no top: their copies run to the unreadable page.
	if samples := w.copied / max(w.per, 1); w.per == 0 || w.per > 6144 || w.faults*4 > samples {
		t.Errorf("%d bytes copied per sample, %d of %d samples' copies ran to the unreadable page above the stack; want at most 6144 and a quarter (the thread's stack top learned)", w.per, w.faults, samples)
	}
	// A top that cut stacks would cut most of them. In one run in 15 to
	// 30, one sample is taken in the worker's exit system call under
	// start_thread, where its walk reads above the learned top: at most
	// 0.5% of the samples may be cut so.
	if samples := w.copied / max(w.per, 1); w.topCuts*200 > samples {
		t.Errorf("%d of %d stacks cut at a learned stack top, want at most 0.5%%", w.topCuts, samples)
	}
}

// TestDwarfGoWindow: a Go program's samples copy its stacks only up to
// where their frame-pointer chain ends (goexit's callee, mstart's), for
// goroutines' stacks in Go's heap, with no unreadable page above them
// and no stack top a thread keeps (a thread runs many goroutines).
// Copies that a thread's learned top bounds are not cut so, which spreads
// the figure (gogc: 2.4-4.2 KB a sample here, 6.9 KB in one CI run);
// without the cut both copied most of the window: 8.5-20 KB a sample for
// gonow's vDSO calls, 22 KB for gogc's mark workers once their
// goroutines' stacks were copied. Their chains are checked by
// TestDwarfGoVDSO and TestDwarfGoSystemstack.
func TestDwarfGoWindow(t *testing.T) {
	testutil.RequirePrivileges(t)
	for _, src := range []string{"gonow.go", "gogc.go"} {
		t.Run(src, func(t *testing.T) {
			bin := testutil.BuildGo(t, dwarfSrc+src)
			w := windowStats(t, "--", bin, "2")
			if w.per == 0 || w.per > 8192 {
				t.Errorf("%d bytes copied per sample, want at most 8192", w.per)
			}
		})
	}
}

// windowCounts are the counts of the profile comment "user stack
// windows: ...".
type windowCounts struct {
	copied, per, byMax, faults, topCuts uint64 // bytes, bytes a sample, samples
}

// windowStats profiles args at 999 Hz with --call-graph dwarf into a
// pprof file and returns its window counts.
func windowStats(t *testing.T, args ...string) windowCounts {
	t.Helper()
	path := filepath.Join(t.TempDir(), "w.pb.gz")
	if _, stderr, code := runGprofile(t, append([]string{"-f", "999", "--call-graph", "dwarf", "-o", path}, args...)...); code != 0 {
		t.Fatalf("gprofile: exit %d\n%s", code, stderr)
	}
	p := parseProfileFile(t, path)
	line := ""
	for _, c := range p.Comments {
		if strings.HasPrefix(c, "user stack windows: ") {
			line = c
		}
	}
	var w windowCounts
	if _, err := fmt.Sscanf(line, "user stack windows: %d bytes copied (%d per sample), %d cut by the window size, %d ended at an unreadable page, %d stacks cut at a learned stack top",
		&w.copied, &w.per, &w.byMax, &w.faults, &w.topCuts); err != nil {
		t.Fatalf("comment %q: %v (all: %q)", line, err, p.Comments)
	}
	t.Logf("%s", line)
	return w
}

// TestDwarfDlopen: a library built without frame pointers and loaded
// with dlopen after the process was first seen.
func TestDwarfDlopen(t *testing.T) {
	testutil.RequirePrivileges(t)
	lib := testutil.BuildC(t, symSrc+"libhot.c", "-O2", "-g", "-fomit-frame-pointer", "-shared", "-fPIC")
	lib2 := filepath.Join(filepath.Dir(lib), "libhot.so")
	if err := os.Rename(lib, lib2); err != nil {
		t.Fatal(err)
	}
	bin := testutil.BuildC(t, symSrc+"dlopen_main.c", "-O2", "-g", "-fomit-frame-pointer", "-ldl")
	out := dwarfProfile(t, bin, lib2, "2")
	dwarfCheck(t, out, symComm(bin), "hot_entry", "main", "hot_entry", "hot_inner")
}

// TestDwarfShortLived: processes that live 300 ms, one after another,
// keep whole stacks from their first samples (maps read at exec, tables
// built on first use).
func TestDwarfShortLived(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, symSrc+"short.c", "-O2", "-g", "-fomit-frame-pointer")
	out := dwarfProfile(t, "sh", "-c", fmt.Sprintf("for i in 1 2 3 4 5 6; do %s 0.3; done", bin))
	dwarfCheck(t, out, symComm(bin), "", "main", "short_a", "short_b", "short_c")
}

// TestDwarfShortLived20ms: processes that live 20 ms, one after
// another, keep whole stacks through libc: the exec record reads a
// process's maps again (and after it, as after any exec) though they
// were read after the exec already, maybe before the dynamic loader
// mapped libc. Half of such samples (383 of 730) were cut at libc's
// return address when the exec record only compared /proc/PID/exe (two
// in three for 5 ms processes, 169 of 172 whole now: the ones still cut
// are processes that ended before the reader got to their exec).
func TestDwarfShortLived20ms(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, symSrc+"short.c", "-O2", "-g", "-fomit-frame-pointer")
	out := dwarfProfile(t, "sh", "-c", fmt.Sprintf("for i in $(seq 30); do %s 0.02; done", bin))
	dwarfCheck(t, out, symComm(bin), "short_c", "__libc_start_call_main", "main", "short_a", "short_b", "short_c")
}

// TestDwarfGo: a Go program's goroutine unwinds to runtime.goexit.
func TestDwarfGo(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildGo(t, symSrc+"gowork.go")
	out := dwarfProfile(t, bin, "1.5")
	dwarfCheck(t, out, symComm(bin), "main.goSpin", "runtime.main", "main.main", "main.goOuter", "main.goMid", "main.goSpin")
}

// TestDwarfGoVDSO: a Go program that spends its time in time.Now keeps
// its callers: time.now calls the vDSO on the g0 stack, and the window
// copied from there does not hold the goroutine's frames, so the sampler
// copies the goroutine's stack too (FlagStackSwitch). Samples in
// time.now or in the vDSO (anchor time.now) must hold the chain.
func TestDwarfGoVDSO(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildGo(t, dwarfSrc+"gonow.go")
	out := dwarfProfile(t, bin, "1.5")
	dwarfCheck(t, out, symComm(bin), "time.now", "runtime.main", "main.main", "main.nowOuter", "main.nowMid", "main.nowLeaf", "time.Now", "time.now")
}

// TestDwarfGoSystemstack: the Go runtime's mark workers keep their
// callers: runtime.gcBgMarkWorker drains through runtime.systemstack,
// which runs it on the g0 stack and leaves rbp at systemstack's frame on
// the goroutine's stack, so the sampler follows the frame pointers out of
// the g0 window and copies the goroutine's stack too (FlagStackSwitch),
// and systemstack's rule past its switch is rbp's. Samples in
// runtime.gcDrain must hold the chain from runtime.goexit.
func TestDwarfGoSystemstack(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildGo(t, dwarfSrc+"gogc.go")
	out := dwarfProfile(t, bin, "2")
	dwarfCheck(t, out, symComm(bin), "runtime.gcDrain", "runtime.goexit.abi0", "runtime.gcBgMarkWorker", "runtime.systemstack.abi0", "runtime.gcDrain")
}

// TestDwarfGoFirstSamples: a Go program is listed for stack switches
// (switch_tgids) at its exec, so that its first samples in
// runtime.systemstack calls (gogc's mark workers and allocations) keep
// the goroutine's frames too. Listed at its first unwound sample
// instead, as before, each of these 0.3 s processes had its first tens
// of milliseconds cut (30-50 samples of a 0.5 s run). The samples that
// stay cut are taken while a process exits (do_exit): its memory, the
// stack with it, is gone, as perf finds too (no-stack).
func TestDwarfGoFirstSamples(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildGo(t, dwarfSrc+"gogc.go")
	out := dwarfProfile(t, "sh", "-c", fmt.Sprintf("for i in 1 2 3; do %s 0.3; done", bin))
	comm := symComm(bin)
	total, cut := 0, 0
	var cuts []string
	for _, l := range parseFolded(t, out) {
		if l.frames[0] != comm {
			continue
		}
		total += l.count
		if slices.Contains(l.frames, recorder.TruncatedFrame) && !slices.Contains(l.frames, "do_exit_[k]") {
			cut += l.count
			cuts = append(cuts, fmt.Sprintf("%d× %s", l.count, strings.Join(l.frames, ";")))
		}
	}
	t.Logf("%s: %d samples, %d cut outside an exit", comm, total, cut)
	if total < 300 {
		t.Fatalf("%d samples of %s, want at least 300", total, comm)
	}
	if cut*100 > total {
		t.Errorf("%d of %d samples of %s cut outside an exit, want at most 1%%:\n%s", cut, total, comm, strings.Join(cuts, "\n"))
	}
}

// TestDwarfGoCgo: C code called from Go (cgo) keeps its Go callers:
// runtime.asmcgocall runs it on the g0 stack, so the recorder lists the
// Go program at its exec (switch_tgids; TestDwarfGoFirstSamples) and the
// sampler copies the goroutine's stack too, where rbp leads.
func TestDwarfGoCgo(t *testing.T) {
	testutil.RequirePrivileges(t)
	testutil.RequireTool(t, "gcc")
	bin := testutil.BuildGo(t, dwarfSrc+"gocgo.go")
	out := dwarfProfile(t, bin, "4")
	dwarfCheck(t, out, symComm(bin), "c_outer", "runtime.main", "main.main", "main.cgoMid", "main.cgoLeaf", "runtime.asmcgocall.abi0", "c_outer")
}

// TestDwarfGoCThread: a thread that a Go program's C code starts keeps
// the libc frames above its own: its frame-pointer chain ends under
// start_thread, in libc, where a goroutine's ends in Go code (goexit's
// callee), so its window does not end there (TestDwarfGoWindow). The
// thread starts after 0.3 s of Go code, on a stack with readable memory
// right above it: the process is listed long before, the thread has no
// learned stack top yet, and no unreadable page stops its copy. All its
// stacks were cut under start_thread when the chain's end alone ended a
// window (f22d0ba: 1492 of 1492 samples).
func TestDwarfGoCThread(t *testing.T) {
	testutil.RequirePrivileges(t)
	testutil.RequireTool(t, "gcc")
	bin := testutil.BuildGo(t, dwarfSrc+"gocthread.go")
	out := dwarfProfile(t, bin, "2")
	dwarfCheck(t, out, symComm(bin), "c_leaf", "clone3", "start_thread", "c_thread", "c_mid", "c_leaf")
}

// TestDwarfNode: node's stacks run from _start through V8's C++ frames
// (CFI), its builtins (no CFI: frame pointers) and JIT code named by its
// perf map, to the hot JavaScript function.
func TestDwarfNode(t *testing.T) {
	testutil.RequirePrivileges(t)
	node := testutil.RequireTool(t, "node")
	script, err := filepath.Abs(symSrc + "hot.js")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	before, _ := filepath.Glob("/tmp/perf-*.map")
	t.Cleanup(func() { // node's perf map, /tmp/perf-PID.map
		after, _ := filepath.Glob("/tmp/perf-*.map")
		for _, m := range after {
			if !slices.Contains(before, m) {
				os.Remove(m)
			}
		}
	})
	out := dwarfProfile(t, "sh", "-c", fmt.Sprintf("cd %s && exec %s --perf-basic-prof %s 2 >/dev/null", dir, node, script))
	// The JIT frame is named "JS:*gprofileHotLoop /path/hot.js:5:25"
	// (or without the * before V8 optimizes it).
	var sb strings.Builder
	for _, l := range parseFolded(t, out) {
		for i, f := range l.frames {
			if strings.Contains(f, "gprofileHotLoop") {
				l.frames[i] = "gprofileHotLoop"
			}
		}
		fmt.Fprintf(&sb, "%s %d\n", strings.Join(l.frames, ";"), l.count)
	}
	dwarfCheck(t, []byte(sb.String()), "node", "gprofileHotLoop", "_start", "node::Start", "Builtins_JSEntry", "gprofileHotLoop")
}
