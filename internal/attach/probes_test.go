package attach

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// probeRun is what runProbes saw: the samples of the workload per probe,
// the samples of other processes, and the workload's output.
type probeRun struct {
	perProbe    []int
	other       int
	withRegs    int // FlagUserRegs set, sp inside the window
	withKernel  int // a kernel stack
	withUserIPs int
	rips        map[uint64]int
	sampler     *Sampler
	out         string
}

// runProbes starts testdata/probed MODE N, opens a sampler on specs for
// that process, enables it, lets the workload run to its end and
// returns what was sampled.
func runProbes(t *testing.T, bin string, args []string, cg CallGraph, specs ...string) probeRun {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := bufio.NewReader(stdout)
	if l, err := lines.ReadString('\n'); l != "ready\n" {
		t.Fatalf("%s: %q, %v; want ready", bin, l, err)
	}
	pid := uint32(cmd.Process.Pid)
	var probes []Probe
	for _, sp := range specs {
		p, err := ParseProbe(sp, []uint32{pid})
		if err != nil {
			t.Fatal(err)
		}
		probes = append(probes, p)
	}
	s, err := Open(Config{PIDs: []uint32{pid}, Probes: probes, CallGraph: cg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Enable(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := probeRun{perProbe: make([]int, len(specs)), rips: map[uint64]int{}, sampler: s}
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(smp *Sample) {
			if smp.PID != pid {
				res.other++
				return
			}
			if int(smp.Probe) < len(res.perProbe) {
				res.perProbe[smp.Probe]++
			}
			if smp.Flags&FlagUserRegs != 0 && len(smp.Stack) > 0 {
				res.withRegs++
				res.rips[smp.Regs[16]]++
			}
			if len(smp.KernelIPs) > 0 {
				res.withKernel++
			}
			if len(smp.UserIPs) > 0 {
				res.withUserIPs++
			}
		})
	}()
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	rest, _ := io.ReadAll(lines)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	res.out = string(rest)
	for i := range specs {
		how, n, refused := s.ProbeAttachment(i)
		t.Logf("%s: %s, %d attached, %d refused; %d samples of the workload", specs[i], how, n, refused, res.perProbe[i])
	}
	return res
}

func buildProbed(t *testing.T) string {
	return testutil.BuildC(t, "testdata/probed.c", "-O2", "-g", "-fno-omit-frame-pointer", "-I/usr/include/x86_64-linux-gnu")
}

// TestProbeKernelOpen: a kprobe on do_sys_openat2 takes one sample per
// open(2) of the workload (1,000, exact with its pid), each with the user
// registers and stack of the caller (dwarf mode) and a kernel stack.
func TestProbeKernelOpen(t *testing.T) {
	testutil.RequirePrivileges(t)
	requireKernelProbes(t)
	bin := buildProbed(t)
	r := runProbes(t, bin, []string{"open", "1000"}, CallGraphDWARF, "kprobe:do_sys_openat2")
	if r.perProbe[0] != 1000 {
		t.Errorf("kprobe:do_sys_openat2: %d samples of the workload's 1000 opens", r.perProbe[0])
	}
	if r.withRegs < 1000 || r.withKernel < 1000 {
		t.Errorf("%d samples with user registers and stack, %d with a kernel stack, want at least 1000", r.withRegs, r.withKernel)
	}
}

// TestProbeKretprobeAndGlob: kretprobe on the same function, and a glob
// matching it, count the same opens.
func TestProbeKretprobeAndGlob(t *testing.T) {
	testutil.RequirePrivileges(t)
	requireKernelProbes(t)
	bin := buildProbed(t)
	r := runProbes(t, bin, []string{"open", "500"}, CallGraphFP, "kretprobe:do_sys_openat2", "kprobe:do_sys_opena*")
	for i, name := range []string{"kretprobe", "glob"} {
		if r.perProbe[i] != 500 {
			t.Errorf("%s: %d samples of the workload's 500 opens", name, r.perProbe[i])
		}
	}
	if r.withUserIPs < 1000 {
		t.Errorf("%d samples with a user stack, want every one of %d", r.withUserIPs, r.perProbe[0]+r.perProbe[1])
	}
}

// TestProbeUprobe: a uprobe on the workload's probed() samples every one
// of its 2,000 calls, in user mode (no kernel stack), with registers at
// probed's first instruction.
func TestProbeUprobe(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := buildProbed(t)
	r := runProbes(t, bin, []string{"call", "2000"}, CallGraphDWARF, "uprobe:"+bin+":probed")
	if r.perProbe[0] != 2000 || r.other != 0 {
		t.Errorf("uprobe on probed: %d samples of the workload, %d of others, want 2000 and 0", r.perProbe[0], r.other)
	}
	if r.withKernel != 0 || r.withRegs != 2000 || len(r.rips) != 1 {
		t.Errorf("%d samples with a kernel stack (want 0), %d with registers (want 2000), %d distinct rips (want 1: probed)", r.withKernel, r.withRegs, len(r.rips))
	}
}

// TestProbeUprobeLibc: uprobe:libc:malloc finds libc in the workload's
// maps and samples its malloc calls (at least the 3,000 of loop_malloc).
func TestProbeUprobeLibc(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := buildProbed(t)
	r := runProbes(t, bin, []string{"malloc", "3000"}, CallGraphFP, "uprobe:libc:malloc")
	if r.perProbe[0] < 3000 || r.perProbe[0] > 3100 {
		t.Errorf("uprobe:libc:malloc: %d samples, want 3000 (and a few of stdio)", r.perProbe[0])
	}
}

// TestProbeUSDT: a USDT probe with a semaphore fires once per tick.
func TestProbeUSDT(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := buildProbed(t)
	r := runProbes(t, bin, []string{"usdt", "700"}, CallGraphDWARF, "usdt:"+bin+":gprofile:tick")
	if r.perProbe[0] != 700 {
		t.Errorf("usdt gprofile:tick: %d samples, want 700", r.perProbe[0])
	}
}

// TestProbeUSDTSemaphore: the kernel sets the USDT probe's semaphore in
// the process while the probe is attached and clears it after Close.
func TestProbeUSDTSemaphore(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := buildProbed(t)
	cmd := exec.Command(bin, "sem")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("workload ended: %v", lines.Err())
		}
		return lines.Text()
	}
	if l := next(); l != "sem 0" {
		t.Fatalf("before attach: %q, want sem 0", l)
	}
	pid := uint32(cmd.Process.Pid)
	p, err := ParseProbe("usdt:"+bin+":gprofile:tick", []uint32{pid})
	if err != nil {
		t.Fatal(err)
	}
	if p.Sites[0].RefCtrOffset == 0 {
		t.Fatalf("probe %+v has no semaphore", p)
	}
	s, err := Open(Config{PIDs: []uint32{pid}, Probes: []Probe{p}})
	if err != nil {
		t.Fatal(err)
	}
	if l := next(); l != "sem 1" {
		t.Errorf("attached: %q, want sem 1", l)
	}
	s.Close()
	if l := next(); l != "sem 0" {
		t.Errorf("after Close: %q, want sem 0", l)
	}
}

// TestProbeErrors: a function, binary or USDT probe that does not exist
// is one line wrapping ErrBadProbe.
func TestProbeErrors(t *testing.T) {
	bin := buildProbed(t)
	for _, spec := range []string{
		"uprobe:/nonexistent/bin:main",
		"uprobe:" + bin + ":no_such_function",
		"usdt:" + bin + ":gprofile:nope",
		"uprobe:" + bin,
		"usdt:" + bin + ":tick",
		"uprobe:" + bin + ":probed+zz",
		"uretprobe:" + bin + ":probed+4",
		"uprobe:libnosuchlibrary:f",
	} {
		_, err := ParseProbe(spec, nil)
		if !errors.Is(err, ErrBadProbe) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseProbe(%q) = %v, want one line wrapping ErrBadProbe", spec, err)
		}
	}
	if _, err := os.Stat("/proc/kallsyms"); err == nil {
		for _, spec := range []string{"kprobe:no_such_kernel_function_x", "kprobe:", "kretprobe:vfs_read+4", "kprobe:zzzz_*"} {
			_, err := ParseProbe(spec, nil)
			if !errors.Is(err, ErrBadProbe) {
				t.Errorf("ParseProbe(%q) = %v, want ErrBadProbe", spec, err)
			}
		}
	}
}

// requireKernelProbes skips (fails under GPROFILE_REQUIRE_PRIV=1) on a
// kernel that can probe no kernel function: no kprobes and no fentry.
func requireKernelProbes(t *testing.T) {
	t.Helper()
	p, err := ParseProbe("kprobe:do_sys_openat2", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{Probes: []Probe{p}})
	if errors.Is(err, ErrNoKprobes) {
		// TestProbeNoKprobesError checks this error on such a kernel.
		testutil.SkipKernelFeature(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestProbeNoKprobesError: where the kernel cannot probe its functions,
// a kprobe is one line saying so (ErrNoKprobes), not a permission error.
func TestProbeNoKprobesError(t *testing.T) {
	testutil.RequirePrivileges(t)
	p, err := ParseProbe("kprobe:do_sys_openat2", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{Probes: []Probe{p}})
	if err == nil {
		s.Close()
		t.Skip("skipping: this kernel probes kernel functions (TestProbeKernelOpen tests them)")
	}
	if !errors.Is(err, ErrNoKprobes) || errors.Is(err, ErrPermission) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Open(kprobe) = %v, want one line wrapping ErrNoKprobes", err)
	}
}

// TestProbeEventRemovesStale: OpenProbeEvent removes the tracefs events
// a gprofile process that is gone left behind (a SIGKILLed gprofile
// stat), and leaves those of a live process.
func TestProbeEventRemovesStale(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := buildProbed(t)
	p, err := ParseProbe("uprobe:"+bin+":probed", nil)
	if err != nil {
		t.Fatal(err)
	}
	events, err := TracefsEvents()
	if err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(filepath.Dir(events), "uprobe_events")
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("gprofile_%d/stale", gone.Process.Pid)
	const live = "gprofile_1/live" // pid 1 always runs
	for _, ev := range []string{stale, live} {
		if err := appendLine(control, fmt.Sprintf("p:%s %s:%#x", ev, bin, p.Sites[0].Offset)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { appendLine(control, "-:"+ev) })
	}
	e, err := OpenProbeEvent(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := os.ReadFile(control)
	if cerr := e.Close(); cerr != nil {
		t.Error(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(defs), stale+" ") {
		t.Errorf("%s (its process is gone) is still defined:\n%s", stale, defs)
	}
	if !strings.Contains(string(defs), live+" ") {
		t.Errorf("%s (pid 1 lives) was removed:\n%s", live, defs)
	}
}
