package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/testutil"
)

// TestInterruptsWindow: a repeat of the first signal within
// repeatWindow is the same interrupt; a later one aborts.
func TestInterruptsWindow(t *testing.T) {
	var in interrupts
	t0 := time.Now()
	for _, c := range []struct {
		after time.Duration
		abort bool
	}{{0, false}, {10 * time.Microsecond, false}, {repeatWindow - time.Millisecond, false}, {repeatWindow, true}, {5 * time.Second, true}} {
		if got := in.abort(t0.Add(c.after)); got != c.abort {
			t.Errorf("signal %v after the first: abort %v, want %v", c.after, got, c.abort)
		}
	}
}

// summaryLine returns the sample count and duration of gprofile's
// summary line ("gprofile: N samples (L lost) in S s ...").
func summaryLine(t *testing.T, stderr string) (int64, time.Duration) {
	t.Helper()
	m := regexp.MustCompile(`gprofile: (\d+) samples \(\d+ lost\) in ([\d.]+) s`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no summary line in:\n%s", stderr)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	secs, _ := strconv.ParseFloat(m[2], 64)
	return n, time.Duration(secs * float64(time.Second))
}

// TestSignalWritesProfile: SIGINT and SIGTERM, sent once sampling runs,
// stop it and write everything gathered: the profile holds as many
// samples as the summary says, and the chain workload's samples (its pid's:
// other processes may be called chain) match the CPU it got meanwhile.
func TestSignalWritesProfile(t *testing.T) {
	testutil.RequirePrivileges(t)
	chain, _ := startChain(t, 30)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sig.pb.gz")
			p := startGprofile(t, nil, "-v", "-f", "499", "-o", path)
			p.waitFor("gprofile: sampling started", 30*time.Second)
			// The chain's CPU time over the second sampled, as the kernel
			// counted it (a loaded machine gives it less than the second),
			// read from sampling's start to the signal that ends it.
			chainStat := strconv.Itoa(chain.Process.Pid)
			cpu0, err := testutil.CPUTime(chainStat)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // the window sampled, not a synchronisation
			cpu1, err := testutil.CPUTime(chainStat)
			if err != nil {
				t.Fatal(err)
			}
			p.cmd.Process.Signal(sig)
			if code := p.wait(60 * time.Second); code != 0 {
				t.Fatalf("exit %d:\n%s", code, p.said())
			}
			total, elapsed := summaryLine(t, p.said())
			prof := parseProfile(t, path)
			var written, chainSamples int64
			for _, s := range prof.Sample {
				written += s.Value[0]
				if pid := s.NumLabel["pid"]; len(pid) == 1 && pid[0] == int64(chain.Process.Pid) {
					chainSamples += s.Value[0]
				}
			}
			if written != total {
				t.Errorf("%d samples written, the summary says %d", written, total)
			}
			got := cpu1 - cpu0
			want := got.Seconds() * 499
			if float64(chainSamples) < want*0.5 || float64(chainSamples) > want*1.5+20 {
				t.Errorf("%d samples of the chain (pid %d) in %v sampled, want about %.0f (%v of CPU at 499 Hz)", chainSamples, chain.Process.Pid, elapsed, want, got)
			}
		})
	}
}

// TestTimeoutInterrupt: GNU timeout -s INT signals gprofile and then its
// process group: two SIGINTs microseconds apart are one interrupt, and
// the profile is written.
func TestTimeoutInterrupt(t *testing.T) {
	testutil.RequirePrivileges(t)
	timeout := testutil.RequireTool(t, "timeout")
	startChain(t, 30)
	for i := range 3 { // the two signals race: several tries
		path := filepath.Join(t.TempDir(), "t.pb.gz")
		cmd := exec.Command(timeout, "-s", "INT", "--preserve-status", "2", buildGprofile(t), "-f", "499", "-o", path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("try %d: timeout -s INT 2 gprofile: %v\n%s", i, err, out)
		}
		if total, _ := summaryLine(t, string(out)); total == 0 || len(parseProfile(t, path).Sample) == 0 {
			t.Errorf("try %d: %d samples in the summary; profile:\n%s", i, total, out)
		}
	}
}

// TestDoubleInterrupt: a second SIGINT, a second after the first was
// acted on, aborts: exit 130, no file (nor temporary file), and the
// command is ended. The command ignores SIGINT, so the first leaves
// gprofile waiting for it (and saying so).
func TestDoubleInterrupt(t *testing.T) {
	testutil.RequirePrivileges(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "twice.pb.gz")
	script := `trap "" INT; echo ready >&2; while :; do sleep 0.05; done`
	p := startGprofile(t, func(c *exec.Cmd) { c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }, "-v", "-o", path, "--", "sh", "-c", script)
	p.waitFor("\nready\n", 30*time.Second) // its trap is set (the first SIGINT is passed on to it)
	p.cmd.Process.Signal(syscall.SIGINT)
	p.waitFor("waiting for the command", 10*time.Second)
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(10 * time.Second); code != 130 {
		t.Fatalf("exit %d, want 130:\n%s", code, p.said())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("aborted, but left %v", entries)
	}
	pgid := p.cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(-pgid, 0) == nil { // the command, in gprofile's group
		if time.Now().After(deadline) {
			syscall.Kill(-pgid, syscall.SIGKILL)
			t.Fatal("the command still runs 10 s after gprofile aborted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFullDisk writes to a tiny tmpfs: the error says so, that the
// samples are lost and where else to write, and the previous profile is
// untouched, with no temporary file left behind.
func TestFullDisk(t *testing.T) {
	testutil.RequirePrivileges(t)
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "gprofile-test", dir).CombinedOutput(); err != nil {
		testutil.Skipf(t, "cannot mount a tmpfs: %v %s", err, out) // mount(8), not gprofile, failed
	}
	defer exec.Command("umount", dir).Run()
	path := filepath.Join(dir, "p.txt")
	if err := os.WriteFile(path, []byte("previous 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Leave about one page free.
	filler := bytes.Repeat([]byte{'x'}, 56<<10)
	os.WriteFile(filepath.Join(dir, "filler"), filler, 0o644)
	startChain(t, 20)
	_, stderr, code := runGprofile(t, "-d", "1", "-f", "999", "-o", path, "--labels", "pid,tid,comm,cpu", "--format", "text")
	if code != 1 || !strings.Contains(string(stderr), "no space left on device: the ") ||
		!strings.Contains(string(stderr), "samples of this run are lost; write to ") || !strings.Contains(string(stderr), "-o ") {
		t.Errorf("exit %d, stderr %q; want 1, 'no space left on device', the samples lost and where else to write", code, stderr)
	}
	if b, _ := os.ReadFile(path); string(b) != "previous 1\n" {
		t.Errorf("previous profile changed to %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("tmpfs holds %v, want only the previous profile and the filler", entries)
	}
}
