package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// publicCopy copies the file at src into a world-readable temp dir, so a
// process running as nobody can execute and read it.
func publicCopy(t *testing.T, src string) string {
	t.Helper()
	// Not t.TempDir: its parent is private (0700).
	dir, err := os.MkdirTemp("", "gprofile-public-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// asNobody runs gprofile as user nobody holding only caps (e.g.
// "bpf,perfmon"), with setpriv.
func asNobody(t *testing.T, gp, caps string, args ...string) (string, int) {
	t.Helper()
	setpriv := testutil.RequireTool(t, "setpriv")
	c := "+" + strings.ReplaceAll(caps, ",", ",+")
	argv := append([]string{"--reuid=nobody", "--regid=nogroup", "--clear-groups",
		"--inh-caps=" + c, "--ambient-caps=" + c, gp}, args...)
	cmd := exec.Command(setpriv, argv...)
	cmd.Dir = filepath.Dir(gp)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("as nobody with %s: exit %d\n%s", caps, code, out)
	return string(out), code
}

// TestLeastPrivilege: CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE (+ CAP_SYSLOG
// for kernel names) are enough to profile another user's process as a
// non-root user; without CAP_PERFMON the error names it.
func TestLeastPrivilege(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := publicCopy(t, buildGprofile(t))
	bin := publicCopy(t, testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", "-fno-omit-frame-pointer"))
	cmd := exec.Command(bin, "20")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := strconv.Itoa(cmd.Process.Pid)

	out, code := asNobody(t, gp, "bpf,perfmon,sys_ptrace,syslog", "-p", pid, "-d", "1", "-E", "-o", "-")
	if code != 0 || !strings.Contains(out, "main;chain_a;chain_b;chain_c") || strings.Contains(out, "unnamed") {
		t.Errorf("with bpf,perfmon,sys_ptrace,syslog: exit %d, want named stacks:\n%s", code, out)
	}
	out, code = asNobody(t, gp, "bpf", "-p", pid, "-d", "1", "-E")
	if code != 1 || !strings.Contains(out, "missing CAP_PERFMON") {
		t.Errorf("with bpf only: exit %d, want a message naming CAP_PERFMON:\n%s", code, out)
	}
	out, _ = asNobody(t, gp, "bpf,perfmon", "-p", pid, "-d", "1", "-E")
	if !strings.Contains(out, "CAP_SYS_PTRACE") {
		t.Errorf("without CAP_SYS_PTRACE: the summary should name it:\n%s", out)
	}
}
