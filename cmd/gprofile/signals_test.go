package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/gprofile/gprofile/internal/testutil"
)

// startProfiling starts gprofile with args (no -d) and waits until it
// samples (its stderr would be empty before that; one second is plenty).
func startProfiling(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(buildGprofile(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	time.Sleep(time.Second)
	return cmd, &stderr
}

// TestSignalWritesProfile: SIGINT and SIGTERM stop sampling and write
// everything gathered.
func TestSignalWritesProfile(t *testing.T) {
	testutil.RequirePrivileges(t)
	startChain(t, 20)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		path := filepath.Join(t.TempDir(), "sig.pb.gz")
		cmd, stderr := startProfiling(t, "-f", "499", "-o", path)
		cmd.Process.Signal(sig)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v: %v\n%s", sig, err, stderr)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(f)
		f.Close()
		if err != nil || len(p.Sample) == 0 {
			t.Errorf("%v: profile %v with %d samples", sig, err, len(p.Sample))
		}
	}
}

// TestDoubleInterrupt: a second SIGINT aborts at once. Whichever wins the
// race, there is never a partial or temporary file: either exit 130 and
// no file, or exit 0 and a complete profile.
func TestDoubleInterrupt(t *testing.T) {
	testutil.RequirePrivileges(t)
	startChain(t, 20)
	dir := t.TempDir()
	path := filepath.Join(dir, "twice.pb.gz")
	cmd, stderr := startProfiling(t, "-f", "999", "-o", path)
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	entries, _ := os.ReadDir(dir)
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 130 {
		if len(entries) != 0 {
			t.Errorf("aborted, but left %v", entries)
		}
		t.Log("the second SIGINT aborted the run")
		return
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if len(entries) != 1 {
		t.Errorf("finished, but the directory holds %v", entries)
	}
	if _, err := os.Stat(path); err != nil {
		t.Error(err)
	}
}

// TestClosedStdout: `gprofile -E | head -1` ends quietly with 0 or 141.
func TestClosedStdout(t *testing.T) {
	testutil.RequirePrivileges(t)
	startChain(t, 20)
	bash := testutil.RequireTool(t, "bash") // for PIPESTATUS
	pipe := buildGprofile(t) + ` -E -d 1 -f 999 | head -c 1 >/dev/null; echo "status=${PIPESTATUS[0]}"`
	out, err := exec.Command(bash, "-c", pipe).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "status=0") && !strings.Contains(string(out), "status=141") {
		t.Errorf("gprofile in a closed pipe: %s", out)
	}
	if strings.Contains(string(out), "panic") || strings.Contains(string(out), "goroutine ") {
		t.Errorf("Go panic on a closed stdout:\n%s", out)
	}
}

// TestFullDisk writes to a tiny tmpfs: the error says so and the previous
// profile is untouched, with no temporary file left behind.
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
	if code != 1 || !strings.Contains(string(stderr), "no space left on device") {
		t.Errorf("exit %d, stderr %q; want 1 and 'no space left on device'", code, stderr)
	}
	if b, _ := os.ReadFile(path); string(b) != "previous 1\n" {
		t.Errorf("previous profile changed to %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("tmpfs holds %v, want only the previous profile and the filler", entries)
	}
}
