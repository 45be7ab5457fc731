package attach

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gprofile/gprofile/internal/testutil"
)

// TestSamplerPID samples a spinning workload through the real BPF program
// and checks records: its pid and comm, user stacks, sane periods, and
// counters that agree with what was read.
func TestSamplerPID(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, "testdata/spin.c", "-O2", "-fno-omit-frame-pointer")
	cmd := exec.Command(bin, "20")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := uint32(cmd.Process.Pid)

	s, err := Open(Config{FrequencyHz: 499, PIDs: []uint32{pid}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cpu := testutil.StartCPU(t, strconv.Itoa(cmd.Process.Pid))
	var n, withUser, other int
	err = s.Run(ctx, func(smp *Sample) {
		n++
		if smp.PID != pid || string(smp.Comm) != "spin" {
			other++
		}
		if len(smp.UserIPs) >= 3 {
			withUser++
		}
		if smp.Period == 0 || smp.TimeNs == 0 {
			t.Errorf("sample with period %d, time %d", smp.Period, smp.TimeNs)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := cpu.ExpectedSamples(499, time.Second)
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("event %s, %d samples read (%.0f expected from its CPU time), counters %+v", s.Event().Name, n, want, c)
	if float64(n) < 0.8*want || want < 50 {
		t.Errorf("read %d samples in 1 s at 499 Hz of a workload, want at least 80%% of the %.0f its CPU share gives", n, want)
	}
	if other != 0 {
		t.Errorf("%d samples of other processes passed the pid filter", other)
	}
	if withUser < n*9/10 {
		t.Errorf("%d of %d samples have a user stack of 3+ frames", withUser, n)
	}
	if c.Samples != uint64(n)+c.Lost {
		t.Errorf("BPF counted %d samples, %d lost, reader got %d", c.Samples, c.Lost, n)
	}
}

// TestSamplerCloseTwice checks Close is idempotent.
func TestSamplerCloseTwice(t *testing.T) {
	testutil.RequirePrivileges(t)
	s, err := Open(Config{FrequencyHz: 99, SoftwareEvent: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestSamplerLosses fills a one-page ring buffer without reading it: the
// BPF program must count every sample it could not deliver, so that
// samples read + lost == samples taken, exactly.
func TestSamplerLosses(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, "testdata/spin.c", "-O2", "-fno-omit-frame-pointer")
	cmd := exec.Command(bin, "20")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()

	s, err := Open(Config{FrequencyHz: 999, PIDs: []uint32{uint32(cmd.Process.Pid)}, RingBytes: os.Getpagesize()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Enable(); err != nil {
		t.Fatal(err)
	}
	// Nobody reads: wait until the one-page ring is full and the BPF
	// program has counted a loss.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := s.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if c.Lost > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample lost in 30 s with a one-page ring nobody reads: %+v", c)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	read := 0
	if err := s.Run(ctx, func(*Sample) { read++ }); err != nil {
		t.Fatal(err)
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read %d, counters %+v", read, c)
	if c.Lost == 0 || read == 0 {
		t.Errorf("read %d, lost %d: want both above 0 with a one-page ring", read, c.Lost)
	}
	if c.Samples != uint64(read)+c.Lost {
		t.Errorf("BPF took %d samples, reader got %d, BPF lost %d: they must add up", c.Samples, read, c.Lost)
	}
}

// TestSamplerEventsLost: exec and exit records the ring buffer has no
// room for are counted (Counters.EventsLost), and EventsDelivered says
// so: a one-page ring that nobody reads fills with samples, then
// processes run.
func TestSamplerEventsLost(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, "testdata/spin.c", "-O2", "-fno-omit-frame-pointer")
	spin := exec.Command(bin, "20")
	if err := spin.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { spin.Process.Kill(); spin.Wait() }()
	s, err := Open(Config{FrequencyHz: 999, SoftwareEvent: true, ReportExits: true, RingBytes: os.Getpagesize()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.EventsDelivered() {
		t.Fatal("EventsDelivered is false before sampling began")
	}
	if err := s.Enable(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := exec.Command("true").Run(); err != nil {
			t.Fatal(err)
		}
		c, err := s.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if c.EventsLost > 0 {
			t.Logf("counters %+v", c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no exec or exit record lost in 30 s with a one-page ring nobody reads: %+v", c)
		}
	}
	if s.EventsDelivered() {
		t.Error("EventsDelivered is true with records lost")
	}
}

// TestOpenBadRingSize rejects a ring size that is not a power of two.
func TestOpenBadRingSize(t *testing.T) {
	testutil.RequirePrivileges(t)
	if s, err := Open(Config{FrequencyHz: 99, RingBytes: 5000}); err == nil {
		s.Close()
		t.Error("opened a 5000-byte ring buffer")
	}
}

// TestSamplerReportsExits: with ReportExits, a process that is forked,
// execs and ends yields a FlagProcessFork record naming its parent, a
// FlagProcessExec and a FlagProcessExit record with its pid and no stacks.
func TestSamplerReportsExits(t *testing.T) {
	testutil.RequirePrivileges(t)
	s, err := Open(Config{FrequencyHz: 99, SoftwareEvent: true, ReportExits: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Enable(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	found, exec := false, false
	var parents []uint32 // of pid, from fork records
	err = s.Run(ctx, func(smp *Sample) {
		if smp.Flags&FlagProcessFork != 0 && smp.PID == pid {
			parents = append(parents, smp.ParentPID)
		}
		if smp.Flags&FlagProcessExec != 0 && smp.PID == pid {
			exec = true
		}
		if smp.Flags&FlagProcessExit != 0 && smp.PID == pid {
			found = true
			if len(smp.KernelIPs)+len(smp.UserIPs) != 0 || string(smp.Comm) != "true" {
				t.Errorf("exit record with stacks %x %x, comm %q", smp.KernelIPs, smp.UserIPs, smp.Comm)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !found || !exec {
		t.Errorf("pid %d: exit record %v, exec record %v; want both", pid, found, exec)
	}
	if c, err := s.Counters(); err != nil || c.EventsLost != 0 || !s.EventsDelivered() {
		t.Errorf("with the ring read: %+v, %v; EventsDelivered %v, want none lost", c, err, s.EventsDelivered())
	}
	if me := uint32(os.Getpid()); !slices.Equal(parents, []uint32{me}) {
		t.Errorf("pid %d: fork records naming parents %v, want one naming this process (%d)", pid, parents, me)
	}
}

// TestSamplerFollowsForks profiles a process by pid (with ReportExits)
// that, once sampling runs, starts a spinning thread and forks a child
// that execs a spinning program: the child's samples arrive under its own
// pid, with its exec and exit records; the thread counts as no fork and
// its exit reports nothing; the parent's exit is reported once.
func TestSamplerFollowsForks(t *testing.T) {
	testutil.RequirePrivileges(t)
	checkFollowsForks(t, nil)
}

// TestSamplerFollowsForksMountsTracefs: on a machine where tracefs is not
// mounted, Open mounts it (as perf does) and follows forks with the
// task_newtask tracepoint.
func TestSamplerFollowsForksMountsTracefs(t *testing.T) {
	if !testutil.WithoutTracefs(t) {
		return
	}
	var verbose bytes.Buffer
	checkFollowsForks(t, &verbose)
	if !MountedTracefs() || !slices.Contains(testutil.TracingMounts(t), TracefsMountPoint) {
		t.Errorf("tracefs not mounted at %s (mounts %v)", TracefsMountPoint, testutil.TracingMounts(t))
	}
	if strings.Contains(verbose.String(), "raw tracepoint") {
		t.Errorf("followed forks with the raw tracepoint, tracefs being mountable:\n%s", verbose.String())
	}
}

// TestSamplerFollowsForksRaw: where tracefs is neither mounted nor
// mountable (no CAP_SYS_ADMIN, read-only /sys), forks are followed by the
// raw tracepoint program of bpf/follow.bpf.c.
func TestSamplerFollowsForksRaw(t *testing.T) {
	testutil.RequirePrivileges(t)
	saved := hostEvents
	defer func() { hostEvents = saved }()
	hostEvents.tracefs = []string{filepath.Join(t.TempDir(), "absent")}
	hostEvents.mount = func(string) error { return unix.EPERM }
	var verbose bytes.Buffer
	checkFollowsForks(t, &verbose)
	if !strings.Contains(verbose.String(), "following forks with a raw tracepoint") {
		t.Errorf("verbose output does not say forks are followed by the raw tracepoint:\n%s", verbose.String())
	}
}

// checkFollowsForks runs the fork-following scenario of
// TestSamplerFollowsForks, with the sampler's verbose output to verbose
// (nil: none).
func checkFollowsForks(t *testing.T, verbose *bytes.Buffer) {
	t.Helper()
	spin := testutil.BuildC(t, "testdata/spin.c", "-O2", "-fno-omit-frame-pointer")
	forker := testutil.BuildC(t, "testdata/forker.c", "-O2", "-pthread")
	cmd := exec.Command(forker, spin, "2") // the child spins 1-2 s
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
	parent := uint32(cmd.Process.Pid)

	var notes bytes.Buffer
	cfg := Config{FrequencyHz: 499, SoftwareEvent: true, PIDs: []uint32{parent}, ReportExits: true, Log: &notes}
	if verbose != nil {
		cfg.Verbose = verbose
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if notes.Len() != 0 {
		t.Errorf("Open said: %s", notes.Bytes())
	}
	if err := s.Enable(); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	var child uint32
	if _, err := fmt.Fscanf(stdout, "child=%d\n", &child); err != nil {
		t.Fatalf("read the child's pid: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	samples := map[uint32]int{} // by pid
	exits, execs := map[uint32]int{}, map[uint32]int{}
	forks := map[uint32][]uint32{} // parents by child
	threadSamples := 0
	err = s.Run(ctx, func(smp *Sample) {
		switch {
		case smp.Flags&FlagProcessFork != 0:
			forks[smp.PID] = append(forks[smp.PID], smp.ParentPID)
			if samples[smp.PID] > 0 {
				t.Errorf("fork record of %d after %d of its samples", smp.PID, samples[smp.PID])
			}
		case smp.Flags&FlagProcessExit != 0:
			exits[smp.PID]++
			if smp.PID == parent {
				cancel() // the child exited before: all is in
			}
		case smp.Flags&FlagProcessExec != 0:
			execs[smp.PID]++
		default:
			samples[smp.PID]++
			if smp.PID == parent && smp.TID != parent {
				threadSamples++
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("parent %d, child %d: samples %v (%d of the parent's thread), execs %v, exits %v, counters %+v",
		parent, child, samples, threadSamples, execs, exits, c)
	// 1-2 s of spinning at 499 Hz (500-1000 samples on an idle CPU); an
	// unfollowed child has none. A machine loaded by other jobs (6 runnable
	// on 2 CPUs) gave it 42, so the bar is low: the fork counter and the
	// exec record below say it was followed.
	if samples[child] < 10 {
		t.Errorf("%d samples of the forked child, want at least 10", samples[child])
	}
	if threadSamples == 0 {
		t.Error("no samples of the parent's spinning thread")
	}
	if len(samples) != 2 {
		t.Errorf("samples of pids %v, want only the parent and the child", samples)
	}
	if c.Forks != 1 {
		t.Errorf("%d forks counted, want 1 (the thread is no fork)", c.Forks)
	}
	if execs[child] != 1 || exits[child] != 1 || exits[parent] != 1 || len(exits) != 2 {
		t.Errorf("exec records %v, exit records %v; want one exec of the child, one exit each of it and the parent", execs, exits)
	}
	if len(forks) != 1 || !slices.Equal(forks[child], []uint32{parent}) {
		t.Errorf("fork records (parents by child) %v, want one: %d forked by %d (the thread is no fork)", forks, child, parent)
	}
}

// BenchmarkOpenSampler: the start-up cost of a sampler as gprofile opens
// it for a whole-system run (exit and exec records on): load the BPF
// object, create the ring buffer, open and attach the perf events and
// tracepoints, enable, then close. With -benchtime 10x each op is a cold
// open, as in a run; compare CPU with `-cpuprofile` or /usr/bin/time.
// The dwarf case loads the stack-copy path too, bounded by the stack
// tops as gprofile runs it (bpf_find_vma and the BTF-typed helpers are
// resolved by the kernel: no BTF is decoded here): profile_loop where the
// kernel takes it, and profile, the bounded loops, in dwarf-bounded.
func BenchmarkOpenSampler(b *testing.B) {
	testutil.RequirePrivileges(b)
	for _, cg := range []CallGraph{CallGraphFP, CallGraphDWARF} {
		b.Run(cg.String(), func(b *testing.B) {
			benchOpenEnableClose(b, Config{FrequencyHz: 999, SoftwareEvent: true, ReportExits: true, CallGraph: cg, StackTops: cg == CallGraphDWARF, Log: io.Discard})
		})
	}
	// The program older kernels load (bounded loops) beside profile_loop.
	b.Run("dwarf-bounded", func(b *testing.B) {
		benchOpenEnableClose(b, Config{FrequencyHz: 999, SoftwareEvent: true, ReportExits: true, CallGraph: CallGraphDWARF, StackTops: true, boundedCopy: true, Log: io.Discard})
	})
}

// BenchmarkOpenSamplerFollow: the start-up cost of a sampler that follows
// forks (-p), with the task_newtask tracepoint from tracefs and with the
// raw tracepoint that replaces it where tracefs cannot be mounted (its
// CO-RE load decodes kernel BTF). With -benchtime 10x each op is an open,
// enable and close; the BTF decode is cached by cilium/ebpf after the
// first, so compare the first op (-benchtime 1x -count 5) for a cold run.
func BenchmarkOpenSamplerFollow(b *testing.B) {
	testutil.RequirePrivileges(b)
	if _, err := TracefsEvents(); err != nil {
		b.Fatal(err)
	}
	for _, raw := range []bool{false, true} {
		name := "tracefs"
		if raw {
			name = "raw"
		}
		b.Run(name, func(b *testing.B) {
			saved := hostEvents
			defer func() { hostEvents = saved }()
			if raw {
				hostEvents.tracefs = []string{filepath.Join(b.TempDir(), "absent")}
				hostEvents.mount = func(string) error { return unix.EPERM }
			}
			benchOpenEnableClose(b, Config{FrequencyHz: 999, SoftwareEvent: true, PIDs: []uint32{uint32(os.Getpid())}, ReportExits: true, Log: io.Discard})
		})
	}
}

// benchOpenEnableClose opens a sampler with cfg, enables and closes it,
// b.N times.
func benchOpenEnableClose(b *testing.B, cfg Config) {
	b.Helper()
	for range b.N {
		s, err := Open(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Enable(); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTargetMapsSized checks that a whole-system sampler creates its pid
// and tid target maps with one entry (it never fills them), that -p
// and -t keep 65536, and that programs loaded apart that share them load
// (the exec, exit and fork tracepoints of ReportExits; with -t, the
// off-CPU programs, which share the one-entry pid map).
func TestTargetMapsSized(t *testing.T) {
	testutil.RequirePrivileges(t)
	for _, tc := range []struct {
		name           string
		pids, tids     []uint32
		offCPU         *OffCPUConfig
		wantPID, wantT uint32
	}{
		{"whole system", nil, nil, nil, 1, 1},
		{"pids", []uint32{uint32(os.Getpid())}, nil, nil, 65536, 1},
		{"tids off-CPU", nil, []uint32{uint32(os.Getpid())}, &OffCPUConfig{}, 1, 65536},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(Config{FrequencyHz: 99, SoftwareEvent: true, ReportExits: true, PIDs: tc.pids, TIDs: tc.tids, OffCPU: tc.offCPU, Log: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.objs.Targets.MaxEntries(); got != tc.wantPID {
				t.Errorf("targets: %d entries, want %d", got, tc.wantPID)
			}
			if got := s.objs.TargetTids.MaxEntries(); got != tc.wantT {
				t.Errorf("target_tids: %d entries, want %d", got, tc.wantT)
			}
			if len(s.links) == 0 {
				t.Error("no tracepoint attached beside the sampler")
			}
			if tc.offCPU != nil && s.off == nil {
				t.Error("off-CPU programs not loaded")
			}
		})
	}
}

// TestLoadsOneSamplingProgram checks that a sampler loads only the
// sampling program its event attaches: profile for cpu-clock, profile_tp
// for a tracepoint, and with CallGraphDWARF profile_loop where the kernel
// has bpf_loop (the verifier's work is start-up's).
func TestLoadsOneSamplingProgram(t *testing.T) {
	testutil.RequirePrivileges(t)
	tp, err := ParseEvent("sched:sched_switch")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		event *Event
		cg    CallGraph
		want  string
	}{{"cpu-clock", nil, CallGraphFP, "profile"}, {"tracepoint", &tp, CallGraphFP, "profile_tp"},
		{"dwarf", nil, CallGraphDWARF, wantProgram(false)}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(Config{FrequencyHz: 99, SoftwareEvent: true, Event: tc.event, CallGraph: tc.cg, Log: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tpProg := tc.want == "profile_tp"
			if s.program != tc.want || (s.objs.ProfileTP != nil) != tpProg || (s.objs.Profile != nil) == tpProg {
				t.Errorf("loaded %s (profile %v, profile_tp %v); want only %s", s.program, s.objs.Profile != nil, s.objs.ProfileTP != nil, tc.want)
			}
		})
	}
}

// TestExecsReported checks that a sampler says it reports execs when it
// was asked to (ReportExits) and the exec program attached, and not
// otherwise.
func TestExecsReported(t *testing.T) {
	testutil.RequirePrivileges(t)
	for _, report := range []bool{false, true} {
		s, err := Open(Config{FrequencyHz: 99, SoftwareEvent: true, ReportExits: report, Log: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.ExecsReported(); got != report {
			t.Errorf("ReportExits %v: ExecsReported() = %v", report, got)
		}
		s.Close()
	}
}

// TestPlannedRate: FrequencyHz times the CPUs sampled (every online CPU
// when CPUs is nil), and no planned rate when the workload sets it.
func TestPlannedRate(t *testing.T) {
	online, err := OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	tp := &Event{Name: "sched:sched_switch", Type: unix.PERF_TYPE_TRACEPOINT, Config: 1}
	clock := &Event{Name: "cpu-clock", Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
	for _, c := range []struct {
		name string
		cfg  Config
		rate uint64
		ok   bool
	}{
		{"two CPUs", Config{FrequencyHz: 999, CPUs: []int{0, 1}}, 1998, true},
		{"cpu-clock on one CPU", Config{FrequencyHz: 4999, CPUs: []int{3}, Event: clock}, 4999, true},
		{"every online CPU", Config{FrequencyHz: 99}, 99 * uint64(len(online)), true},
		{"a period", Config{FrequencyHz: 999, Period: 10000}, 0, false},
		{"probes", Config{FrequencyHz: 999, Probes: []Probe{{}}}, 0, false},
		{"a tracepoint", Config{FrequencyHz: 999, Event: tp}, 0, false},
		{"off-CPU", Config{FrequencyHz: 999, OffCPU: &OffCPUConfig{}}, 0, false},
	} {
		rate, ok := c.cfg.PlannedRate()
		if rate != c.rate || ok != c.ok {
			t.Errorf("%s: PlannedRate() = %d, %v; want %d, %v", c.name, rate, ok, c.rate, c.ok)
		}
	}
}
