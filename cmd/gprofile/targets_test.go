package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/testutil"
)

// runGprofile runs the built gprofile and returns stdout, stderr and the
// exit status.
func runGprofile(t *testing.T, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	cmd := exec.Command(buildGprofile(t), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run gprofile %v: %v", args, err)
	}
	t.Logf("gprofile %s: exit %d\nstderr: %s", strings.Join(args, " "), code, e.Bytes())
	return o.Bytes(), e.Bytes(), code
}

// samplesWith sums the counts of folded lines whose frames hold chain in
// order (after the comm frame), and of all lines.
func samplesWith(t *testing.T, folded []byte, chain ...string) (with, total int) {
	for _, l := range parseFolded(t, folded) {
		total += l.count
		if hasChain(l.frames[1:], chain) {
			with += l.count
		}
	}
	return with, total
}

// TestCommandWithChildren profiles `sh -c 'chain & chain; wait; exit 3'`:
// both children are sampled in their chain (told apart by the pid label),
// nothing of gprofile itself is, and gprofile exits with the command's 3.
func TestCommandWithChildren(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", "-fno-omit-frame-pointer")
	script := bin + " 2 >/dev/null & " + bin + " 2 >/dev/null; wait; exit 3"
	path := filepath.Join(t.TempDir(), "cmd.pb.gz")
	_, _, code := runGprofile(t, "-f", "499", "-o", path, "--", "sh", "-c", script)
	if code != 3 {
		t.Errorf("exit status %d, want the command's 3", code)
	}
	p := parseProfile(t, path)
	perPID := map[int64]int64{}
	for _, s := range p.Sample {
		names := ""
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				names = ln.Function.Name + ";" + names
			}
		}
		if comm := s.Label["comm"]; len(comm) > 0 && comm[0] == "gprofile" {
			t.Errorf("gprofile's own startup was sampled: %s", names)
		}
		if strings.Contains(names, "main;chain_a;chain_b;chain_c;") {
			perPID[s.NumLabel["pid"][0]] += s.Value[0]
		}
	}
	// Each child spins 1-2 s; even on a loaded machine each gets 100+.
	if len(perPID) != 2 {
		t.Fatalf("samples in the chain per pid: %v, want two children", perPID)
	}
	for pid, n := range perPID {
		if n < 100 {
			t.Errorf("child %d: %d samples in its chain, want at least 100", pid, n)
		}
	}
}

// TestCommandNotFound exits 127 with the shell's message.
func TestCommandNotFound(t *testing.T) {
	testutil.RequirePrivileges(t)
	_, stderr, code := runGprofile(t, "-E", "--", "no-such-command-gprofile")
	if code != 127 || !strings.Contains(string(stderr), "no-such-command-gprofile: command not found") {
		t.Errorf("exit %d, stderr %q; want 127 and 'command not found'", code, stderr)
	}
}

// TestThreadFilter profiles one thread of a two-thread workload with -t.
func TestThreadFilter(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, "testdata/threads.c", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread")
	cmd := exec.Command(bin, "20")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line := make([]byte, 100)
	n, _ := stdout.Read(line)
	m := regexp.MustCompile(`tid_a=(\d+) tid_b=(\d+)`).FindSubmatch(line[:n])
	if m == nil {
		t.Fatalf("workload said %q", line[:n])
	}
	cpu := testutil.StartCPU(t, strconv.Itoa(cmd.Process.Pid)+"/task/"+string(m[2]))
	out, _, code := runGprofile(t, "-E", "-f", "499", "-d", "1.5", "-t", string(m[2]))
	want := cpu.ExpectedSamples(499, 1500*time.Millisecond)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	b, total := samplesWith(t, out, "thread_b_outer", "thread_b_spin")
	a, _ := samplesWith(t, out, "thread_a_spin")
	if a != 0 || float64(b) < 0.8*want || want < 50 || b*10 < total*9 {
		t.Errorf("-t tid_b: %d samples of thread b (%.0f expected from its CPU time), %d of thread a, %d in all\n%s",
			b, want, a, total, out)
	}
}

// TestCgroupFilter moves a workload into a cgroup made by the test and
// profiles that cgroup alone while another copy runs outside it.
func TestCgroupFilter(t *testing.T) {
	testutil.RequirePrivileges(t)
	dir := testutil.MakeCgroup(t, "gprofile-test-") // removed after the deferred kill
	if root, err := attach.Cgroup2Root(); err != nil || root != filepath.Dir(dir) {
		t.Fatalf("Cgroup2Root() = %q, %v; /proc/self/mountinfo has cgroup2 at %s", root, err, filepath.Dir(dir))
	}
	bin := testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", "-fno-omit-frame-pointer")
	other := testutil.BuildC(t, "testdata/threads.c", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread")
	inside := exec.Command(bin, "20")
	outside := exec.Command(other, "20")
	for _, c := range []*exec.Cmd{inside, outside} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range []*exec.Cmd{inside, outside} {
			c.Process.Kill()
			c.Wait()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(inside.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	cpu := testutil.StartCPU(t, strconv.Itoa(inside.Process.Pid))
	out, _, code := runGprofile(t, "-E", "-f", "499", "-d", "1.5", "--cgroup", filepath.Base(dir))
	want := cpu.ExpectedSamples(499, 1500*time.Millisecond)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	with, total := samplesWith(t, out, "chain_a", "chain_c")
	if float64(with) < 0.8*want || want < 50 || with*10 < total*9 {
		t.Errorf("--cgroup: %d of %d samples from the workload inside, %.0f expected from its CPU time\n%s",
			with, total, want, out)
	}
	if bytes.Contains(out, []byte("thread_a_spin")) {
		t.Errorf("samples of a process outside the cgroup:\n%s", out)
	}

	// Whole system with --cgroup-labels: the chain's samples carry the
	// cgroup's path, the other workload's do not.
	path := filepath.Join(t.TempDir(), "cg.pb.gz")
	if _, _, code := runGprofile(t, "-f", "199", "-d", "1", "--cgroup-labels", "-o", path); code != 0 {
		t.Fatalf("exit %d", code)
	}
	cgPath := "/" + filepath.Base(dir)
	labeled, mislabeled := 0, 0
	for _, s := range parseProfile(t, path).Sample {
		cg := s.Label["cgroup"]
		switch pid := s.NumLabel["pid"][0]; {
		case pid == int64(inside.Process.Pid) && len(cg) == 1 && cg[0] == cgPath:
			labeled++
		case pid == int64(outside.Process.Pid) && len(cg) == 1 && cg[0] == cgPath:
			mislabeled++
		}
	}
	if labeled == 0 || mislabeled != 0 {
		t.Errorf("cgroup label %s on %d samples of the workload inside, %d of the one outside", cgPath, labeled, mislabeled)
	}
}

// TestBadTargets: bad -C, --cgroup and -e values fail before sampling.
func TestBadTargets(t *testing.T) {
	testutil.RequirePrivileges(t)
	type badCase struct {
		args []string
		code int // 2: a bad value (usage); 1: what the machine lacks
		msg  string
	}
	cases := []badCase{
		{[]string{"-C", "4096", "-d", "1"}, 2, "not online"},
		{[]string{"--cgroup", "/proc", "-d", "1"}, 2, "not a cgroup v2 directory"},
		{[]string{"--cgroup", "no/such/group", "-d", "1"}, 2, "no such file"},
		{[]string{"-e", "cyles", "-d", "1"}, 2, "cycles"},
		{[]string{"-e", "sched:no_such_tracepoint", "-d", "1"}, 2, `no tracepoint "no_such_tracepoint" in /`}, // not the echoed argument
		{[]string{"-t", "999999999", "-d", "1"}, 2, "tid 999999999: no such thread"},
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/cpu/events"); err != nil {
		// No PMU (a VM): hardware events fail, naming the way out.
		cases = append(cases, badCase{[]string{"-e", "cycles", "-d", "1"}, 1, "-e cpu-clock"})
	}
	for _, c := range cases {
		_, stderr, code := runGprofile(t, c.args...)
		if code != c.code || !strings.Contains(string(stderr), c.msg) || bytes.Count(stderr, []byte("\n")) > 2 {
			t.Errorf("%v: exit %d, stderr %q; want %d and a short error with %q", c.args, code, stderr, c.code, c.msg)
		}
	}
}
