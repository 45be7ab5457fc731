package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/testutil"
)

// proc is a gprofile started by startGprofile, whose stderr is read as it
// comes so that tests wait for what it says instead of sleeping.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr strings.Builder
	grew   chan struct{} // receives after each stderr line
	done   chan struct{} // closed when the process has exited
	eof    chan struct{} // closed when its stderr has ended
	code   int
}

// startGprofile starts gprofile with args (extra set on cmd first, if not
// nil) and reads its stderr; the test's cleanup kills it (and its process
// group, when extra gave it one: the command of -- CMD with it).
func startGprofile(t *testing.T, extra func(*exec.Cmd), args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(buildGprofile(t), args...), grew: make(chan struct{}, 1), done: make(chan struct{}), eof: make(chan struct{})}
	if extra != nil {
		extra(p.cmd)
	}
	// An *os.File as stderr: Wait does not wait for the pipe's end, which
	// a command gprofile started may hold open after gprofile exits.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = w
	err = p.cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if attr := p.cmd.SysProcAttr; attr != nil && attr.Setpgid {
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
		p.cmd.Process.Kill()
		<-p.done
		r.Close()
	})
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.grew <- struct{}{}:
			default:
			}
		}
		close(p.eof)
	}()
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	return p
}

// said returns what gprofile wrote to stderr so far.
func (p *proc) said() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitFor waits until stderr holds s, failing the test after d.
func (p *proc) waitFor(s string, d time.Duration) {
	p.t.Helper()
	deadline := time.After(d)
	for !strings.Contains(p.said(), s) {
		select {
		case <-p.grew:
		case <-p.done:
			select { // the last lines, or a command still holding stderr
			case <-p.eof:
			case <-time.After(time.Second):
			}
			if !strings.Contains(p.said(), s) {
				p.t.Fatalf("gprofile exited (%d) without saying %q:\n%s", p.code, s, p.said())
			}
		case <-deadline:
			p.t.Fatalf("gprofile did not say %q in %v:\n%s", s, d, p.said())
		}
	}
}

// wait waits for gprofile to exit and returns its status (128+signal when
// a signal killed it), failing the test after d.
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		select { // the last lines, or a command still holding stderr
		case <-p.eof:
		case <-time.After(time.Second):
		}
		return p.code
	case <-time.After(d):
		p.t.Fatalf("gprofile still runs after %v:\n%s", d, p.said())
	}
	return -1
}

// TestFIFONoReader: -o FIFO with nobody reading says it waits for a
// reader, before sampling, and Ctrl-C ends the wait (exit 130); once a
// reader comes, the profile goes to it whole.
func TestFIFONoReader(t *testing.T) {
	testutil.RequirePrivileges(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	p := startGprofile(t, nil, "-E", "-d", "1", "-o", fifo)
	p.waitFor("waiting for a reader of the FIFO", 30*time.Second)
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(10 * time.Second); code != 130 || !strings.Contains(p.said(), "nothing was sampled") {
		t.Errorf("interrupted while waiting: exit %d, want 130 and a note:\n%s", code, p.said())
	}

	startChain(t, 20)
	p = startGprofile(t, nil, "-E", "-d", "1", "-o", fifo)
	p.waitFor("waiting for a reader of the FIFO", 30*time.Second)
	got := make(chan []byte)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- b
	}()
	if code := p.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.said())
	}
	if with, total := samplesWith(t, <-got, "main", "chain_a"); with == 0 || total == 0 {
		t.Errorf("the FIFO's reader got %d samples, %d in the chain", total, with)
	}
}

// TestPidStopsWhenTargetsExit: gprofile -p PID without -d ends when the
// target and the processes it forked have exited, and says so: here the
// target forks a 2-second chain and exits at once, so the run goes on
// until the chain ends.
func TestPidStopsWhenTargetsExit(t *testing.T) {
	testutil.RequirePrivileges(t)
	chain := testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", "-fno-omit-frame-pointer")
	target := exec.Command("sh", "-c", "read go; "+chain+" 2 & exit 0")
	stdin, err := target.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	path := filepath.Join(t.TempDir(), "p.folded")
	p := startGprofile(t, nil, "-v", "-f", "499", "-p", strconv.Itoa(target.Process.Pid), "-o", path)
	p.waitFor("gprofile: sampling started", 30*time.Second)
	start := time.Now()
	stdin.Write([]byte("go\n"))
	target.Wait()
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.said())
	}
	if !strings.Contains(p.said(), "gprofile: every target process has exited; stopping") {
		t.Errorf("gprofile did not say why it stopped:\n%s", p.said())
	}
	if d := time.Since(start); d < 1900*time.Millisecond {
		t.Errorf("stopped %v after the fork, before the 2 s child ended", d)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if with, _ := samplesWith(t, b, "main", "chain_a"); with == 0 {
		t.Errorf("no samples of the forked chain:\n%s", b)
	}
}

// TestZeroSamples: a run that samples nothing says "0 samples" and keeps
// the previous profile (no .old), even with -q; --write-empty writes the
// empty profile, keeping the previous one as .old.
func TestZeroSamples(t *testing.T) {
	testutil.RequirePrivileges(t)
	sleeper := exec.Command("sleep", "60") // never on a CPU
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	pid := strconv.Itoa(sleeper.Process.Pid)
	path := filepath.Join(t.TempDir(), "p.pb.gz")
	if err := os.WriteFile(path, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runGprofile(t, "-q", "-d", "0.5", "-p", pid, "-o", path)
	if code != 0 || !strings.Contains(string(stderr), "gprofile: 0 samples") || !strings.Contains(string(stderr), "keeps the previous profile") {
		t.Errorf("exit %d, stderr %q; want 0 and a loud 0 samples", code, stderr)
	}
	if b, _ := os.ReadFile(path); string(b) != "previous" {
		t.Errorf("the previous profile became %q", b)
	}
	if _, err := os.Stat(path + ".old"); err == nil {
		t.Error("the previous profile was rotated to .old")
	}
	if _, _, code := runGprofile(t, "-q", "-d", "0.5", "-p", pid, "-o", path, "--write-empty"); code != 0 {
		t.Fatalf("--write-empty: exit %d", code)
	}
	if p := parseProfile(t, path); len(p.Sample) != 0 {
		t.Errorf("--write-empty wrote %d samples", len(p.Sample))
	}
	if b, _ := os.ReadFile(path + ".old"); string(b) != "previous" {
		t.Errorf("--write-empty: .old holds %q", b)
	}
}

// TestStaleTempRemoved: a run killed by SIGKILL leaves its temporary
// file; the next run writing beside it removes it (a live run's is kept).
func TestStaleTempRemoved(t *testing.T) {
	testutil.RequirePrivileges(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "p.pb.gz")
	p := startGprofile(t, nil, "-v", "-o", path)
	p.waitFor("gprofile: sampling started", 30*time.Second)
	p.cmd.Process.Kill()
	p.wait(10 * time.Second)
	stale, _ := filepath.Glob(filepath.Join(dir, ".p.pb.gz.tmp-*"))
	if len(stale) != 1 {
		t.Fatalf("after SIGKILL the directory holds %v, want one temporary file", stale)
	}
	live := filepath.Join(dir, ".p.pb.gz.tmp-"+strconv.Itoa(os.Getpid())+"-1")
	if err := os.WriteFile(live, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, code := runGprofile(t, "-q", "-d", "0.5", "-o", path, "--write-empty"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if _, err := os.Stat(stale[0]); err == nil {
		t.Errorf("%s of the killed run is still there", stale[0])
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the temporary file of a live process was removed: %v", err)
	}
}

// TestClosedPipe: when the reader of stdout goes away, every format ends
// the same way, whether or not a sample was written yet: gprofile stops
// sampling (no -d here), says the profile went nowhere, and exits 141
// (as if killed by SIGPIPE, which scripts know), never "written to
// stdout" and never a silent death by SIGPIPE.
func TestClosedPipe(t *testing.T) {
	testutil.RequirePrivileges(t)
	bash := testutil.RequireTool(t, "bash") // for PIPESTATUS
	startChain(t, 60)
	for _, format := range []string{formatFolded, formatText, formatJSON, formatPprof} {
		t.Run(format, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// The reader reads at most one byte (folded and pprof come
			// at the end: none) and goes away after 0.3 s.
			pipe := buildGprofile(t) + " -f 999 --format " + format + ` -o - | timeout 0.3 head -c 1 >/dev/null; echo "status=${PIPESTATUS[0]}"`
			cmd := exec.CommandContext(ctx, bash, "-c", pipe)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) } // gprofile too
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			s := string(out)
			if !strings.Contains(s, "status=141") || !strings.Contains(s, "the reader of the output went away (broken pipe)") ||
				strings.Contains(s, "written to stdout") || strings.Contains(s, "goroutine ") {
				t.Errorf("gprofile --format %s into a pipe closed early:\n%s", format, s)
			}
		})
	}
}

// TestNoErrnoOnCPUClockFallback: without a PMU, gprofile samples
// cpu-clock without a line showing the raw perf_event_open error (the
// summary names the event); -v tells why.
func TestNoErrnoOnCPUClockFallback(t *testing.T) {
	testutil.RequirePrivileges(t)
	path := filepath.Join(t.TempDir(), "p.pb.gz")
	_, stderr, code := runGprofile(t, "-d", "0.3", "-o", path)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(string(stderr), "no hardware cycles") || strings.Contains(string(stderr), "no such file or directory") {
		t.Errorf("stderr shows the fallback's errno:\n%s", stderr)
	}
	if !strings.Contains(string(stderr), "(cpu-clock) written") {
		t.Logf("this machine has a PMU (cycles sampled): -v is not checked")
		return
	}
	_, stderr, _ = runGprofile(t, "-v", "-d", "0.3", "-o", path)
	if !strings.Contains(string(stderr), "sampling the software cpu-clock event") {
		t.Errorf("-v does not say why cpu-clock is sampled:\n%s", stderr)
	}
}

// TestStatusLineWanted: the status line shows on a terminal, without -q, and
// not with a command, which writes to the same terminal.
func TestStatusLineWanted(t *testing.T) {
	for _, c := range []struct {
		o    options
		tty  bool
		want bool
	}{
		{options{}, true, true},
		{options{}, false, false},
		{options{quiet: true}, true, false},
		{options{command: []string{"make"}}, true, false},
	} {
		if got := statusWanted(&c.o, c.tty); got != c.want {
			t.Errorf("%+v, terminal %v: status line %v, want %v", c.o, c.tty, got, c.want)
		}
	}
}

// TestMakeRunTopOnce: `make run` prints the top table once (gprofile's);
// the Makefile ran go tool pprof -top after it, a second table headed
// "File: memfd:...".
func TestMakeRunTopOnce(t *testing.T) {
	testutil.RequirePrivileges(t)
	mk := testutil.RequireTool(t, "make")
	profile := filepath.Join(t.TempDir(), "run.pb.gz")
	// A busy process, so that a quiet machine (CI's) still gives samples,
	// and with them a table, in the run's one second.
	spin := exec.Command("sh", "-c", "while :; do :; done")
	if err := spin.Start(); err != nil {
		t.Fatalf("start a busy loop: %v", err)
	}
	defer func() { spin.Process.Kill(); spin.Wait() }()
	out, err := exec.Command(mk, "-C", "../..", "run", "RUN_SECONDS=1", "PROFILE="+profile).CombinedOutput()
	if err != nil {
		t.Fatalf("make run: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "flat%"); n != 1 || strings.Contains(string(out), "File: ") {
		t.Errorf("make run printed %d top tables:\n%s", n, out)
	}
}

// TestCheckCommand: gprofile check prints one line per item and a
// verdict, and exits 0 exactly when no line is a warning; -p adds a line
// per binary of the process; a missing pid or a stray argument is a
// usage error.
func TestCheckCommand(t *testing.T) {
	for _, args := range [][]string{{"check"}, {"check", "-p", strconv.Itoa(os.Getpid())}} {
		out, stderr, code := runGprofile(t, args...)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		warn := strings.Contains(string(out), "\nwarn ") || strings.HasPrefix(string(out), "warn ")
		if len(lines) < 13 || !strings.HasPrefix(lines[len(lines)-1], "gprofile check: ") || (code == 0) == warn || (code != 0 && code != 1) {
			t.Errorf("%v: exit %d, stdout:\n%s\nstderr: %s", args, code, out, stderr)
		}
		for _, l := range lines[:len(lines)-1] {
			if !strings.HasPrefix(l, "ok    ") && !strings.HasPrefix(l, "note  ") && !strings.HasPrefix(l, "warn  ") {
				t.Errorf("%v: line %q is not ok, note or warn", args, l)
			}
		}
		if len(args) > 1 && !strings.Contains(string(out), ": "+os.Args[0]+": ") && !strings.Contains(string(out), ".test: ") {
			t.Errorf("%v: no line for the test binary:\n%s", args, out)
		}
	}
	for _, args := range [][]string{{"check", "-p", "1073741824"}, {"check", "stray"}, {"check", "--nope"}} {
		if _, stderr, code := runGprofile(t, args...); code != 2 || strings.Count(string(stderr), "\n") != 2 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with the pointer to -h", args, code, stderr)
		}
	}
}
