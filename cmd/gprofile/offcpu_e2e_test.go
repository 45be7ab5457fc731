package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/testutil"
)

// offCPUWorkload builds internal/attach's off-CPU workload and runs it in
// mode for 60 s (the test's profile ends first).
func offCPUWorkload(t *testing.T, mode string) *exec.Cmd {
	t.Helper()
	bin := testutil.BuildC(t, "../../internal/attach/testdata/offcpu.c", "-O2", "-g", "-pthread", "-fno-omit-frame-pointer")
	cmd := exec.Command(bin, mode, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestOffCPUAlternate profiles, with --off-cpu, a thread that spins
// 50 ms then sleeps 50 ms: the pprof has the cpu, offcpu and wall columns
// (wall the default), the sleep chain holds the off-CPU time (state S,
// ending in [off-cpu:S] in folded) and the spin chain the on-CPU time,
// about as much of each, and each sample's wall is its cpu plus offcpu.
func TestOffCPUAlternate(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	w := offCPUWorkload(t, "alternate")
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	var stderr bytes.Buffer
	cmd := exec.Command(gp, "--off-cpu", "--off-cpu-runnable", "-p", strconv.Itoa(w.Process.Pid), "-d", "3", "-o", out)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gprofile: %v\n%s", err, stderr.Bytes())
	}
	t.Logf("%s", stderr.Bytes())
	p := parseProfileFile(t, out)
	col := map[string]int{}
	for i, st := range p.SampleType {
		col[st.Type] = i
	}
	ci, ok1 := col["cpu"]
	oi, ok2 := col["offcpu"]
	wi, ok3 := col["wall"]
	if !ok1 || !ok2 || !ok3 || p.DefaultSampleType != "wall" {
		t.Fatalf("sample types %v (default %q), want cpu, offcpu and wall (default)", p.SampleType, p.DefaultSampleType)
	}
	var spinCPU, sleepOff, other int64
	for _, s := range p.Sample {
		if s.Value[wi] != s.Value[ci]+s.Value[oi] {
			t.Errorf("sample with wall %d, cpu %d, offcpu %d", s.Value[wi], s.Value[ci], s.Value[oi])
		}
		var names []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
		}
		stack := strings.Join(names, ";")
		state := s.Label["state"]
		switch {
		case strings.Contains(stack, "sleep_inner;sleep_outer") && len(state) == 1 && state[0] == "S":
			sleepOff += s.Value[oi]
			if s.Value[ci] != 0 {
				t.Errorf("off-CPU sample with cpu %d", s.Value[ci])
			}
		case strings.Contains(stack, "spin_inner;spin_outer"),
			len(state) == 1 && state[0] == "R" && !strings.Contains(stack, "sleep_inner"):
			// 50 ms of wall time: on CPU, or preempted (R) on a busy
			// machine, where a long preemption's record has the
			// registers of the user leaf but no stack (no system call to
			// take it at) and short ones are summed per process with no
			// stack at all; the sleeping thread is not preempted.
			spinCPU += s.Value[wi]
		default:
			other += s.Value[wi]
		}
	}
	ratio := float64(sleepOff) / float64(spinCPU)
	t.Logf("sleep chain off CPU %d ns, spin chain wall (on CPU or preempted) %d ns (ratio %.2f), elsewhere %d ns", sleepOff, spinCPU, ratio, other)
	if sleepOff < 1e9 || spinCPU < 5e8 {
		t.Fatalf("sleep chain %d ns off CPU, spin chain %d ns on CPU in 3 s of 50/50", sleepOff, spinCPU)
	}
	// The spin is 50 ms of wall time, on CPU or preempted (R, counted
	// with --off-cpu-runnable); the sleep is 50 ms and its wakeup.
	if ratio < 0.85 || ratio > 1.15 {
		t.Errorf("off/on = %.2f, want 1 ± 15%% (50 ms of each; within 10%% on a quiet machine)", ratio)
	}
	if other > (sleepOff+spinCPU)/10 {
		t.Errorf("%d ns outside the two chains (of %d)", other, sleepOff+spinCPU)
	}

	// Folded: the off-CPU stack ends in the state's marker frame.
	fold := exec.Command(gp, "--off-cpu", "-p", strconv.Itoa(w.Process.Pid), "-d", "1", "-E")
	folded, err := fold.Output()
	if err != nil {
		t.Fatalf("gprofile -E: %v", err)
	}
	marked := false
	for _, l := range parseFolded(t, folded) {
		last := l.frames[len(l.frames)-1]
		if strings.HasPrefix(last, "[off-cpu") {
			marked = marked || last == "[off-cpu:S]" && hasChain(l.frames, []string{"sleep_outer", "sleep_inner"})
		}
	}
	if !marked {
		t.Errorf("no folded stack sleep_outer;sleep_inner;…;[off-cpu:S]:\n%s", folded)
	}
}

// TestOffCPUMutex: a thread waiting for a mutex is off CPU in
// lock_waiter, through pthread_mutex_lock and the futex wait.
func TestOffCPUMutex(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	w := offCPUWorkload(t, "mutex")
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	var stderr bytes.Buffer
	cmd := exec.Command(gp, "--off-cpu-only", "-p", strconv.Itoa(w.Process.Pid), "-d", "2", "-o", out)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gprofile: %v\n%s", err, stderr.Bytes())
	}
	p := parseProfileFile(t, out)
	oi := -1
	for i, st := range p.SampleType {
		if st.Type == "offcpu" {
			oi = i
		}
	}
	if oi < 0 {
		t.Fatalf("no offcpu sample type: %v", p.SampleType)
	}
	var waiting, cpu int64
	for _, s := range p.Sample {
		names := ""
		for _, l := range s.Location {
			for _, ln := range l.Line {
				names += ";" + ln.Function.Name
			}
		}
		if strings.Contains(names, "lock_waiter") && strings.Contains(names, "futex") {
			waiting += s.Value[oi]
		}
		if s.Label["state"] != nil && s.Label["state"][0] == "on-cpu" {
			cpu++
		}
	}
	if waiting < 5e8 || cpu != 0 {
		t.Errorf("%d ns off CPU in lock_waiter through a futex wait in 2 s, %d on-CPU samples (want none with --off-cpu-only)\n%s", waiting, cpu, stderr.Bytes())
	}
}

// TestOffCPUFlags: off-CPU flags that cannot work are refused in one line
// before anything is attached.
func TestOffCPUFlags(t *testing.T) {
	gp := buildGprofile(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--off-cpu", "-d", "1"}, "--off-cpu needs a target"},
		{[]string{"--off-cpu", "-e", "page-faults", "-p", "1", "-d", "1"}, "use -e cpu-clock"},
		{[]string{"--off-cpu-min", "2ms", "-p", "1", "-d", "1"}, "--off-cpu-min needs --off-cpu"},
		{[]string{"--off-cpu", "-e", "uprobe:libc:malloc", "-p", "1", "-d", "1"}, "not probe hits"},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(gp, tc.args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		first, _, _ := strings.Cut(stderr.String(), "\n")
		if code := exitCode(err); code != 2 || !strings.Contains(first, tc.want) {
			t.Errorf("gprofile %v: exit %d, first line %q; want exit 2 and %q", tc.args, code, first, tc.want)
		}
	}
}

func parseProfileFile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	p, err := readProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// offCPUProfile runs gprofile with args (a target and -d among them)
// and -o, and returns the profile, the index of its offcpu column and
// gprofile's stderr.
func offCPUProfile(t *testing.T, gp string, args ...string) (*profile.Profile, int, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	var stderr bytes.Buffer
	cmd := exec.Command(gp, append([]string{"-o", out}, args...)...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gprofile %v: %v\n%s", args, err, stderr.Bytes())
	}
	t.Logf("%s", stderr.Bytes())
	p := parseProfileFile(t, out)
	for i, st := range p.SampleType {
		if st.Type == "offcpu" {
			return p, i, stderr.String()
		}
	}
	t.Fatalf("no offcpu sample type: %v", p.SampleType)
	return nil, 0, ""
}

// sampleStack is a sample's function names, leaf first, joined by ";".
func sampleStack(s *profile.Sample) string {
	var names []string
	for _, l := range s.Location {
		for _, ln := range l.Line {
			names = append(names, ln.Function.Name)
		}
	}
	return strings.Join(names, ";")
}

// TestOffCPUPipe: a thread reading a pipe that another fills with a byte
// every 10 ms is off CPU in pipe_reader, through read, in state S, for
// most of the recording.
func TestOffCPUPipe(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	w := offCPUWorkload(t, "pipe")
	p, oi, stderr := offCPUProfile(t, gp, "--off-cpu-only", "-p", strconv.Itoa(w.Process.Pid), "-d", "2")
	var reading, total int64
	for _, s := range p.Sample {
		total += s.Value[oi]
		st := sampleStack(s)
		if strings.Contains(st, "pipe_reader") && strings.Contains(st, "read") && s.Label["state"] != nil && s.Label["state"][0] == "S" {
			reading += s.Value[oi]
		}
	}
	t.Logf("pipe_reader off CPU %d ns of %d ns in %d ns", reading, total, p.DurationNanos)
	if reading < p.DurationNanos/2 || reading > p.DurationNanos*11/10 {
		t.Errorf("pipe_reader blocked in read %d ns in a recording of %d ns; want most of it\n%s", reading, p.DurationNanos, stderr)
	}
}

// TestOffCPUFutexMigrating: two threads ping-pong on a futex, each
// waiting about half the time, while their CPUs are changed every 3 ms
// (a switch-out on one CPU, a switch-in on another). Each thread's off-CPU
// time is counted once: neither lost (a per-CPU start map misses it) nor
// more than the recording (merged or fabricated intervals).
func TestOffCPUFutexMigrating(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	w := offCPUWorkload(t, "futex")
	p, oi, stderr := offCPUProfile(t, gp, "--off-cpu", "--off-cpu-min", "100us", "--labels", "pid,tid", "-p", strconv.Itoa(w.Process.Pid), "-d", "3")
	byTID := map[int64]int64{}
	players := map[string]int64{}
	for _, s := range p.Sample {
		st := sampleStack(s)
		for _, f := range []string{"futex_ping", "futex_pong"} {
			if strings.Contains(st, f) {
				players[f] += s.Value[oi]
				if tid := s.NumLabel["tid"]; len(tid) == 1 {
					byTID[tid[0]] += s.Value[oi]
				}
			}
		}
	}
	t.Logf("off CPU: %v by player, %v by thread, in %d ns", players, byTID, p.DurationNanos)
	for _, f := range []string{"futex_ping", "futex_pong"} {
		// Each waits while the other spins 1 ms: about half the time,
		// less when the machine is busy (a preempted thread is R, not S).
		if v := players[f]; v < p.DurationNanos/5 || v > p.DurationNanos*21/20 {
			t.Errorf("%s off CPU %d ns in a recording of %d ns; want a share of it, never more\n%s", f, v, p.DurationNanos, stderr)
		}
	}
	for tid, v := range byTID {
		if v > p.DurationNanos*21/20 {
			t.Errorf("thread %d off CPU %d ns in a recording of %d ns", tid, v, p.DurationNanos)
		}
	}
}

// TestOffCPUSleepSpans: a nanosleep that began before the recording and
// ends after it is recorded as ongoing: long_sleep holds about the whole
// recording's length, not nothing.
func TestOffCPUSleepSpans(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	w := offCPUWorkload(t, "sleep")
	p, oi, stderr := offCPUProfile(t, gp, "--off-cpu", "-p", strconv.Itoa(w.Process.Pid), "-d", "2")
	var sleeping int64
	for _, s := range p.Sample {
		if strings.Contains(sampleStack(s), "long_sleep") {
			sleeping += s.Value[oi]
		}
	}
	t.Logf("long_sleep off CPU %d ns in a recording of %d ns", sleeping, p.DurationNanos)
	if sleeping < p.DurationNanos*8/10 || sleeping > p.DurationNanos*11/10 {
		t.Errorf("long_sleep (asleep all along) off CPU %d ns in a recording of %d ns; want about all of it\n%s", sleeping, p.DurationNanos, stderr)
	}
}

// TestOffCPUPidReuse: a process forks children that sleep 2 ms and exit
// as fast as it can, so pids come back: no process is off CPU longer
// than the recording (a stale start time under a reused pid would make a
// huge block), and the children's sleeps are there, named: most children
// exit before the reader sees them, and are named through their parent's
// mappings (fork records).
func TestOffCPUPidReuse(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	bin := testutil.BuildC(t, "../../internal/attach/testdata/offcpu.c", "-O2", "-g", "-pthread", "-fno-omit-frame-pointer")
	p, oi, stderr := offCPUProfile(t, gp, "--off-cpu", "--labels", "pid", "--", bin, "churn", "2")
	byPID := map[int64]int64{}
	var children int64
	for _, s := range p.Sample {
		if pid := s.NumLabel["pid"]; len(pid) == 1 {
			byPID[pid[0]] += s.Value[oi]
		}
		if strings.Contains(sampleStack(s), "churn_child") {
			children += s.Value[oi]
		}
	}
	t.Logf("%d processes, children's sleeps %d ns, recording %d ns", len(byPID), children, p.DurationNanos)
	// Each child sleeps at least 2 ms: half of that per child is a bar
	// that unnamed children (process-gone) miss by far.
	if len(byPID) < 20 || children < int64(len(byPID)-1)*int64(time.Millisecond) {
		t.Errorf("%d processes, %d ns in churn_child: want most children's 2 ms sleeps named\n%s", len(byPID), children, stderr)
	}
	for pid, v := range byPID {
		if v > p.DurationNanos*21/20 {
			t.Errorf("process %d off CPU %d ns in a recording of %d ns", pid, v, p.DurationNanos)
		}
	}
}
