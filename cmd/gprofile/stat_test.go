package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/counter"
	"github.com/gprofile/gprofile/internal/testutil"
)

// statCSV runs `tool stat -x, ARGS` (tool is gprofile or perf) and
// returns the counts by event name (NaN for <not supported> or <not
// counted>) and the exit status.
func statCSV(t *testing.T, tool string, args ...string) (map[string]float64, int) {
	t.Helper()
	cmd := exec.Command(tool, append([]string{"stat", "-x,"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s stat: %v", tool, err)
	}
	counts := map[string]float64{}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if ms, ok := strings.CutPrefix(line, "statwork cpu-ms "); ok {
			counts["statwork-cpu-ms"], _ = strconv.ParseFloat(ms, 64) // the workload's own CPU time
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 4 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			v = math.NaN()
		}
		counts[f[2]] = v
	}
	return counts, code
}

// within fails t when got is not within frac of want.
func within(t *testing.T, what string, got, want, frac float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > frac*want {
		t.Errorf("%s: gprofile stat %.2f, perf stat %.2f: more than %.0f%% apart", what, got, want, 100*frac)
	} else {
		t.Logf("%s: gprofile stat %.2f, perf stat %.2f", what, got, want)
	}
}

func statSetup(t *testing.T) (gp, perf, work string) {
	testutil.RequirePrivileges(t)
	perf = testutil.RequireTool(t, "perf", "the reference counts")
	return buildGprofile(t), perf, testutil.BuildC(t, "testdata/statwork.c", "-O2")
}

// TestStatVsPerf counts the page faults of a program that touches 20,000
// pages and the task-clock of a fixed CPU loop with both tools, within 2 %
// (page faults: means of 5 runs; task-clock: each run's count over the
// CPU time the loop's process spent in main, medians of 7 runs).
func TestStatVsPerf(t *testing.T) {
	gp, perf, work := statSetup(t)
	args := []string{"-r", "5", "-e", "page-faults,task-clock", "--", work, "touch", "20000"}
	g, _ := statCSV(t, gp, args...)
	p, _ := statCSV(t, perf, args...)
	if p["page-faults"] < 20000 {
		t.Fatalf("perf counts %v page faults for 20000 pages touched", p["page-faults"])
	}
	within(t, "page-faults", g["page-faults"], p["page-faults"], 0.02)
	// task-clock of a CPU loop, against the CPU time the loop's process
	// spent in main in the same run (CLOCK_PROCESS_CPUTIME_ID): a run's
	// CPU time varies by 10 % and more on a VM, so two tools' separate
	// runs cannot be compared closely, but each tool's count against its
	// own run's can. The least ratio of 7 runs of each tool, in turns:
	// what else the machine does only adds to a run's task-clock outside
	// main (perf stat's ratios once ran from 1.01 to 1.12, median 1.08,
	// gprofile stat's from 1.01 to 1.04 in the turns between).
	var gr, pr []float64
	var runs []string
	for range 7 {
		args = []string{"-e", "task-clock", "--", work, "spin", "150"}
		g, _ = statCSV(t, gp, args...)
		p, _ = statCSV(t, perf, args...)
		if g["statwork-cpu-ms"] <= 0 || p["statwork-cpu-ms"] <= 0 {
			t.Fatalf("the workload printed no CPU time (gprofile's run %v, perf's %v)", g, p)
		}
		gr, pr = append(gr, g["task-clock"]/g["statwork-cpu-ms"]), append(pr, p["task-clock"]/p["statwork-cpu-ms"])
		runs = append(runs, fmt.Sprintf("%.1f/%.1f %.1f/%.1f", g["task-clock"], g["statwork-cpu-ms"], p["task-clock"], p["statwork-cpu-ms"]))
	}
	t.Logf("task-clock/own CPU ms, gprofile then perf, by run: %s", strings.Join(runs, ", "))
	within(t, "task-clock over the workload's own CPU time (least of 7)", slices.Min(gr), slices.Min(pr), 0.02)
}

// TestStatChildren: 4 children that touch 5,000 pages each are counted
// (inherit), as perf counts them.
func TestStatChildren(t *testing.T) {
	gp, perf, work := statSetup(t)
	args := []string{"-e", "page-faults", "--", work, "fork", "4", "5000"}
	g, _ := statCSV(t, gp, args...)
	p, _ := statCSV(t, perf, args...)
	if g["page-faults"] < 4*5000 {
		t.Errorf("gprofile stat counts %v page faults; the children alone touch 20000 pages", g["page-faults"])
	}
	within(t, "page-faults with 4 children", g["page-faults"], p["page-faults"], 0.02)
}

// TestStatSleeps: 100 sleeps are at least 100 context switches, and as
// many sched:sched_switch hits (a tracepoint counted).
func TestStatSleeps(t *testing.T) {
	gp, _, work := statSetup(t)
	g, _ := statCSV(t, gp, "-e", "context-switches,sched:sched_switch", "--", work, "sleep", "100")
	for _, ev := range []string{"context-switches", "sched:sched_switch"} {
		if !(g[ev] >= 100) {
			t.Errorf("%s = %v for 100 sleeps, want at least 100", ev, g[ev])
		}
	}
}

// TestStatExitStatus: gprofile stat exits with the command's status (127
// when it does not exist), and still prints the counts.
func TestStatExitStatus(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	g, code := statCSV(t, gp, "-e", "task-clock", "--", "sh", "-c", "exit 7")
	if code != 7 {
		t.Errorf("exit status %d, want the command's 7", code)
	}
	if !(g["task-clock"] > 0) {
		t.Errorf("no task-clock printed for a command that failed: %v", g)
	}
	if _, code := statCSV(t, gp, "--", "/nonexistent/cmd"); code != 127 {
		t.Errorf("exit status %d for a missing command, want 127", code)
	}
	if _, code := statCSV(t, gp, "-e", "no-such-event", "--", "true"); code != 2 {
		t.Errorf("exit status %d for an unknown event, want 2", code)
	}
}

// TestStatNotSupported: without a hardware PMU (this VM, most CI
// machines) cycles is <not supported> and the software events still
// count; with one, cycles counts.
func TestStatNotSupported(t *testing.T) {
	gp, _, work := statSetup(t)
	out, err := exec.Command(gp, "stat", "-e", "cycles,page-faults", "--", work, "touch", "100").CombinedOutput()
	if err != nil {
		t.Fatalf("gprofile stat: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "page-faults") || strings.Contains(s, "<not supported>      page-faults") {
		t.Errorf("page-faults not counted:\n%s", s)
	}
	if hasPMU() {
		if strings.Contains(s, "<not supported>") {
			t.Errorf("cycles not supported on a machine with a PMU:\n%s", s)
		}
		return
	}
	if !strings.Contains(s, "   <not supported>      cycles") || !strings.Contains(s, "<not supported> cycles: no hardware PMU here") {
		t.Errorf("no <not supported> line with its reason for cycles:\n%s", s)
	}
}

// hasPMU reports whether perf_event_open accepts the cycles event here,
// asked of the kernel independently of gprofile stat's printing.
func hasPMU() bool {
	specs, err := counter.ParseList("cycles", attach.ParseEvent)
	if err != nil {
		return false
	}
	set, err := counter.Open(specs, counter.Target{CPUs: []int{0}}, nil)
	if err != nil {
		return false
	}
	defer set.Close()
	c, err := set.Read()
	return err == nil && c[0].Unsupported == nil
}

// TestStatPidAndAll: -p counts a running process until it exits; -a
// counts cpu-clock on every online CPU (CPUs × elapsed, within 10 %).
func TestStatPidAndAll(t *testing.T) {
	gp, _, work := statSetup(t)
	sleeper := exec.Command(work, "sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { sleeper.Wait(); close(done) }()
	defer func() { sleeper.Process.Kill(); <-done }()
	g, code := statCSV(t, gp, "-p", strconv.Itoa(sleeper.Process.Pid), "-e", "context-switches")
	if code != 0 || !(g["context-switches"] >= 100) {
		t.Errorf("-p: exit %d, %v context switches of a process sleeping 300 times (want at least 100)", code, g["context-switches"])
	}
	cpus, err := attach.OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	g, _ = statCSV(t, gp, "-a", "-e", "cpu-clock", "--", "sleep", "0.5")
	want := float64(len(cpus)) * 500
	if math.Abs(g["cpu-clock"]-want) > 0.1*want {
		t.Errorf("-a: cpu-clock %.1f msec over 0.5 s, want about %.0f (%d CPUs)", g["cpu-clock"], want, len(cpus))
	}
}

// TestStatInterrupt: SIGINT to gprofile stat alone is passed on to the
// command, which ends; the counts are printed and the status is the
// command's (130, killed by SIGINT).
func TestStatInterrupt(t *testing.T) {
	gp, _, work := statSetup(t)
	cmd := exec.Command(gp, "stat", "-e", "context-switches", "--", work, "sleep", "1000000")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// gprofile stat handles signals once it has started the command (a
	// child of any of its threads).
	children := fmt.Sprintf("/proc/%d/task/*/children", cmd.Process.Pid)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if hasChild(children) {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("gprofile stat started no command in 30 s")
		}
	}
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("exit %v, want 130 (the command killed by SIGINT)", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("gprofile stat still runs 10 s after SIGINT")
	}
	if !strings.Contains(stderr.String(), "context-switches") {
		t.Errorf("no counts printed after SIGINT:\n%s", stderr.String())
	}
}

// hasChild reports whether any of the /proc/PID/task/TID/children files
// that pattern matches lists a process.
func hasChild(pattern string) bool {
	files, _ := filepath.Glob(pattern)
	for _, f := range files {
		if b, _ := os.ReadFile(f); len(strings.TrimSpace(string(b))) > 0 {
			return true
		}
	}
	return false
}
