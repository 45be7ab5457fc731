package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/testutil"
)

// buildProbedCLI builds internal/attach's probe workload (testdata/probed.c).
func buildProbedCLI(t *testing.T) string {
	t.Helper()
	return testutil.BuildC(t, "../../internal/attach/testdata/probed.c", "-O2", "-g", "-fno-omit-frame-pointer", "-I/usr/include/x86_64-linux-gnu")
}

// TestProbeCommand samples every hit of two uprobes of a command it
// starts: probed() 2,000 times from loop(), loop() once. The pprof has a
// column per probe with exactly those hits, and each probed() sample has
// the whole stack main;loop;probed.
func TestProbeCommand(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	bin := buildProbedCLI(t)
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	probedSpec, loopSpec := "uprobe:"+bin+":probed", "uprobe:"+bin+":loop"
	cmd := exec.Command(gp, "-e", probedSpec, "-e", loopSpec, "-o", out, "--", bin, "call", "2000")
	cmd.Stdin = strings.NewReader("go\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gprofile: %v\n%s", err, stderr.Bytes())
	}
	p := parseProfileFile(t, out)
	col := map[string]int{}
	for i, st := range p.SampleType {
		col[st.Type] = i
	}
	pi, ok1 := col[probedSpec]
	li, ok2 := col[loopSpec]
	if !ok1 || !ok2 {
		t.Fatalf("sample types %v, want one per probe", p.SampleType)
	}
	var probed, loop, whole int64
	for _, s := range p.Sample {
		probed += s.Value[pi]
		loop += s.Value[li]
		var names []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
		}
		if s.Value[pi] > 0 && hasChain(reversed(names), []string{"main", "loop", "probed"}) {
			whole += s.Value[pi]
		}
	}
	if probed != 2000 || loop != 1 {
		t.Errorf("%d hits of probed(), %d of loop(); want 2000 and 1\n%s", probed, loop, stderr.Bytes())
	}
	if whole != probed {
		t.Errorf("%d of %d probed() samples have the stack main;loop;probed\n%s", whole, probed, stderr.Bytes())
	}
}

func reversed(s []string) []string {
	r := make([]string, len(s))
	for i, v := range s {
		r[len(s)-1-i] = v
	}
	return r
}

// TestProbeList: -l PATTERN lists what a probe pattern matches: a
// binary's functions by glob, its USDT probes (with their semaphores);
// -l alone ends with the probe syntax.
func TestProbeList(t *testing.T) {
	gp := buildGprofile(t)
	bin := buildProbedCLI(t)
	for _, tc := range []struct {
		pattern string
		want    []string
	}{
		{"uprobe:" + bin + ":loop*", []string{"uprobe:" + bin + ":loop", "uprobe:" + bin + ":loop_malloc"}},
		{"usdt:" + bin, []string{"usdt:" + bin + ":gprofile:tick (semaphore)"}},
	} {
		out, err := exec.Command(gp, "-l", tc.pattern).Output()
		if err != nil {
			t.Fatalf("gprofile -l %s: %v", tc.pattern, err)
		}
		if got := strings.TrimSpace(string(out)); got != strings.Join(tc.want, "\n") {
			t.Errorf("gprofile -l %s:\n%s\nwant:\n%s", tc.pattern, out, strings.Join(tc.want, "\n"))
		}
	}
	out, err := exec.Command(gp, "-l").Output()
	if err != nil || !bytes.Contains(out, []byte("uprobe:PATH:SYM")) || !bytes.Contains(out, []byte("usdt:PATH:PROVIDER:NAME")) {
		t.Errorf("gprofile -l: %v; no probe syntax in:\n%s", err, out)
	}
}

// TestProbeBadSpecs: a probe that cannot be attached is one line saying
// why, before anything runs: exit 2 for what the user wrote, exit 1 for
// a kernel that cannot do it.
func TestProbeBadSpecs(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	bin := buildProbedCLI(t)
	cases := []struct {
		spec string
		code int
		want string
	}{
		{"uprobe:" + bin + ":no_such_function", 2, "no_such_function"},
		{"uprobe:/no/such/binary:main", 2, "/no/such/binary"},
		{"usdt:" + bin + ":gprofile:no_such_probe", 2, "no_such_probe"},
	}
	if !attach.KprobesAvailable() {
		cases = append(cases, struct {
			spec string
			code int
			want string
		}{"kprobe:do_sys_openat2", 1, "no kprobes"})
	}
	for _, tc := range cases {
		cmd := exec.Command(gp, "-e", tc.spec, "-d", "1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		first, _, _ := strings.Cut(stderr.String(), "\n")
		if code := exitCode(err); code != tc.code || !strings.Contains(first, tc.want) {
			t.Errorf("gprofile -e %s: exit %d, stderr %q; want exit %d and a first line naming %q", tc.spec, code, stderr.String(), tc.code, tc.want)
		}
	}
}

// TestProbeCostGuard: a uprobe on a function called without pause would
// cost more than a CPU to sample; gprofile counts its hits first and
// refuses with the numbers, and --force samples it anyway.
func TestProbeCostGuard(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	bin := buildProbedCLI(t)
	w := exec.Command(bin, "call", "2000000000")
	stdin, err := w.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Process.Kill(); w.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("workload said %q, %v", line, err)
	}
	stdin.Write([]byte("go\n"))
	spec := "uprobe:" + bin + ":probed"
	pid := strconv.Itoa(w.Process.Pid)
	var stderr bytes.Buffer
	guard := exec.Command(gp, "-e", spec, "-p", pid, "-d", "1", "-E")
	guard.Stderr = &stderr
	out, err := guard.Output()
	if code := exitCode(err); code != 1 || !strings.Contains(stderr.String(), "% of a CPU") || !strings.Contains(stderr.String(), "--force") || len(out) != 0 {
		t.Fatalf("gprofile -e %s on a hot function: exit %d, %d bytes out, stderr %q; want exit 1, nothing out, the cost and --force", spec, code, len(out), stderr.String())
	}
	t.Logf("%s", stderr.Bytes())
	stderr.Reset()
	forced := exec.Command(gp, "-e", spec, "-p", pid, "-d", "0.5", "-E", "--force")
	forced.Stderr = &stderr
	out, err = forced.Output()
	if err != nil || !bytes.Contains(out, []byte(";probed ")) {
		t.Errorf("gprofile --force: %v, stderr %s; no probed stack in:\n%s", err, stderr.Bytes(), out)
	}
}

// TestStatProbes: gprofile stat counts a uprobe's and a USDT probe's
// hits exactly (the workload is the only user of its fresh binary): with
// -a through the probe PMUs; for a command whose shell forks the probed
// processes, one of which forks a probed child (40 times); and for -p of
// such a process.
// The tracefs events made for the latter two are gone afterwards.
func TestStatProbes(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	bin := buildProbedCLI(t)
	uspec, dspec := "uprobe:"+bin+":probed", "usdt:"+bin+":gprofile:tick"
	events := "-e" + uspec + "," + dspec
	want := func(args []string, stderr []byte, u, d string) {
		t.Helper()
		got := map[string]string{}
		for _, line := range strings.Split(string(stderr), "\n") {
			if f := strings.Split(line, ","); len(f) > 2 {
				got[f[2]] = f[0]
			}
		}
		if got[uspec] != u || got[dspec] != d {
			t.Errorf("gprofile %s: counts %v; want %s %s and %s %s\n%s", strings.Join(args, " "), got, uspec, u, dspec, d, stderr)
		}
	}
	run := func(args ...string) []byte {
		t.Helper()
		var stderr bytes.Buffer
		cmd := exec.Command(gp, args...)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("gprofile %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return stderr.Bytes()
	}
	work := "echo go | " + bin + " call 1234 >/dev/null && echo go | " + bin + " usdt 77 >/dev/null"
	args := []string{"stat", "-a", "-x,", events, "--", "sh", "-c", work}
	want(args, run(args...), "1234", "77")
	// 40 runs: the kernel lost all the hits of one process in a few
	// percent of the runs when it chose the processes to probe by
	// counter (ProbeEvent); any loss moves the mean.
	work = "echo go | " + bin + " fork 1000 234 >/dev/null && echo go | " + bin + " usdt 77 >/dev/null"
	args = []string{"stat", "-r", "40", "-x,", events, "--", "sh", "-c", work}
	want(args, run(args...), "1234", "311")
	args, stderr := statProbesPID(t, gp, bin, events)
	want(args, stderr, "1300", "300")
	tracefs, err := attach.TracefsEvents()
	if err != nil {
		t.Fatal(err)
	}
	defs, err := os.ReadFile(filepath.Join(filepath.Dir(tracefs), "uprobe_events"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(defs), "gprofile_") {
		t.Errorf("gprofile stat left its tracefs events behind:\n%s", defs)
	}
}

// statProbesPID runs gprofile stat -v -p on a probed process that waits,
// lets it go once gprofile says its counters are enabled (-v), and
// returns gprofile's arguments and stderr once the process has exited.
func statProbesPID(t *testing.T, gp, bin, events string) ([]string, []byte) {
	w := exec.Command(bin, "fork", "1000", "300")
	stdin, err := w.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { w.Process.Kill(); w.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("workload said %q, %v", line, err)
	}
	args := []string{"stat", "-v", "-x,", events, "-p", strconv.Itoa(w.Process.Pid)}
	g := exec.Command(gp, args...)
	pipe, err := g.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	r := bufio.NewReader(pipe)
	for {
		line, err := r.ReadString('\n')
		stderr.WriteString(line)
		if line == "counters enabled\n" {
			break
		}
		if err != nil {
			g.Wait()
			t.Fatalf("gprofile %s never enabled its counters:\n%s", strings.Join(args, " "), stderr.Bytes())
		}
	}
	stdin.Write([]byte("go\n"))
	rest, _ := io.ReadAll(r)
	stderr.Write(rest)
	if err := g.Wait(); err != nil {
		t.Fatalf("gprofile %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return args, stderr.Bytes()
}

// TestStatKprobe: gprofile stat -e kprobe:do_sys_openat2 -- CMD counts
// the opens of a command that opens /dev/null 1,000 times (and its
// loader's few). On a kernel without kprobes it checks the one-line
// error there and skips.
func TestStatKprobe(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	bin := buildProbedCLI(t)
	args := []string{"stat", "-x,", "-e", "kprobe:do_sys_openat2", "--", bin, "open", "1000"}
	cmd := exec.Command(gp, args...)
	cmd.Stdin = strings.NewReader("go\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if !attach.KprobesAvailable() {
		first, _, _ := strings.Cut(stderr.String(), "\n")
		if code := exitCode(err); code != 1 || !strings.Contains(first, "no kprobes") || strings.Count(stderr.String(), "\n") != 1 {
			t.Fatalf("gprofile %s without kprobes: exit %d, stderr %q; want exit 1 and one line saying no kprobes", strings.Join(args, " "), code, stderr.String())
		}
		testutil.SkipKernelFeature(t, "CONFIG_KPROBES is off")
	}
	if err != nil {
		t.Fatalf("gprofile %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var n int
	for _, line := range strings.Split(stderr.String(), "\n") {
		if f := strings.Split(line, ","); len(f) > 2 && f[2] == "kprobe:do_sys_openat2" {
			n, _ = strconv.Atoi(f[0])
		}
	}
	// The loader opens a few libraries before main.
	if n < 1000 || n > 1020 {
		t.Errorf("gprofile %s: %d opens counted, want 1000 and the loader's few\n%s", strings.Join(args, " "), n, stderr.Bytes())
	}
}
