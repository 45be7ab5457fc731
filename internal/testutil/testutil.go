// Package testutil holds helpers shared by gprofile's tests: the one gate
// for tests that need privileges, and builders for test workloads.
package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// RequireEnv is set to "1" in GPROFILE_REQUIRE_PRIV by CI (.ci/run),
// which runs as root on a machine with every tool installed: there, a test
// that cannot run is a failure, not a skip.
const RequireEnv = "GPROFILE_REQUIRE_PRIV"

// Required reports whether GPROFILE_REQUIRE_PRIV=1 is set, that is whether
// Skipf fails instead of skipping.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Skipf is the one way a test skips for want of something in its
// environment (root, a tool, a kernel interface, a debug file): it skips t
// with the reason, or fails t with it under GPROFILE_REQUIRE_PRIV=1, so a
// CI machine that lost a package or a privilege fails instead of passing
// on skips. Skips that depend on nothing CI provides (-short) use t.Skip.
func Skipf(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s=1 but cannot run: %s", RequireEnv, why)
	}
	t.Skip("skipping: " + why)
}

// SkipKernelFeature skips t because the running kernel was built without
// a feature the test exercises (CONFIG_KPROBES, say). Unlike Skipf it
// skips under GPROFILE_REQUIRE_PRIV=1 too: CI installs packages, not
// kernels. Use it only where a sibling test checks, on such a kernel, the
// one-line error gprofile gives there (so one of the two always runs).
func SkipKernelFeature(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Skip("skipping: the running kernel lacks it: " + fmt.Sprintf(format, args...))
}

// RequirePrivileges skips t, saying why, unless the test runs as root
// (fails it under GPROFILE_REQUIRE_PRIV=1; see Skipf).
func RequirePrivileges(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skipf(t, "needs root for BPF and perf events (run: sudo go test ./...)")
	}
}

// RequireTool returns the path of the command name on PATH; without it it
// skips t (fails it under GPROFILE_REQUIRE_PRIV=1, where CI has installed
// every tool; see Skipf). why says what the test needs the tool for.
func RequireTool(t testing.TB, name string, why ...string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Skipf(t, "%s not found on PATH (.ci/run installs it)%s", name, strings.Join(append([]string{""}, why...), "; "))
	}
	return p
}

// RequireFile skips t when path does not exist (fails it under
// GPROFILE_REQUIRE_PRIV=1; see Skipf); install says which package
// provides it. Use it to check a precondition independently of the code
// under test: a test of debug-file lookup stats the file the package
// installs, then fails if the lookup does not find it.
func RequireFile(t testing.TB, path, install string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Skipf(t, "%v (%s)", err, install)
	}
}

// BuildC compiles the C source file src (a path, usually under testdata/)
// with gcc and the given flags into t.TempDir() and returns the binary's
// path. It skips t when gcc is missing (see RequireTool).
func BuildC(t testing.TB, src string, flags ...string) string {
	t.Helper()
	gcc := RequireTool(t, "gcc")
	out := filepath.Join(t.TempDir(), filepath.Base(src[:len(src)-len(filepath.Ext(src))]))
	args := append(append([]string{}, flags...), "-o", out, src)
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	return out
}

// BuildGo builds the Go program src (a .go file, or a directory of one
// package main, usually under testdata/) with go build and the given
// flags into t.TempDir() and returns the binary's path, named after src.
// It builds in GOPATH mode (GO111MODULE=off), so a testdata program needs
// no go.mod and imports the standard library only. It skips t when go is
// missing (see RequireTool).
func BuildGo(t testing.TB, src string, flags ...string) string {
	t.Helper()
	gotool := RequireTool(t, "go")
	name := filepath.Base(src)
	out := filepath.Join(t.TempDir(), name[:len(name)-len(filepath.Ext(name))])
	args := append(append([]string{"build"}, flags...), "-o", out)
	cmd := exec.Command(gotool, append(args, ".")...)
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		cmd.Dir = src
	} else {
		cmd = exec.Command(gotool, append(args, src)...)
	}
	cmd.Env = append(os.Environ(), "GO111MODULE=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", cmd.Args[1:], err, b)
	}
	return out
}

// SetSysctl writes value to the sysctl name ("kernel.kptr_restrict", read
// and written under /proc/sys) and returns restore, which writes the old
// value back: call it as soon as the test is done with the new value
// (other tests and processes on the machine see it meanwhile); it also
// runs when the test ends, however it ends, and does its work once. It
// skips t when the sysctl cannot be read or written (fails it with
// GPROFILE_REQUIRE_PRIV=1).
func SetSysctl(t testing.TB, name, value string) (restore func()) {
	t.Helper()
	path := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
	old, err := os.ReadFile(path)
	if err == nil {
		err = os.WriteFile(path, []byte(value), 0o644)
	}
	if err != nil {
		Skipf(t, "cannot set %s: %v", name, err)
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			if err := os.WriteFile(path, old, 0o644); err != nil {
				t.Errorf("restore %s=%s: %v", name, strings.TrimSpace(string(old)), err)
			}
		})
	}
	t.Cleanup(restore)
	return restore
}

// RunAsNobody runs the tests of the current test binary that match run
// (a -test.run pattern) again as the unprivileged user nobody (uid and gid
// 65534, no supplementary groups, through util-linux's setpriv), and fails
// t if they fail or none ran. A test that needs a non-root user calls it
// when it runs as root, so that CI (root) runs it too. The binary is
// copied to a directory nobody can read and run.
func RunAsNobody(t testing.TB, run string) {
	t.Helper()
	setpriv := RequireTool(t, "setpriv", "it runs the test as nobody")
	dir := t.TempDir()
	bin := filepath.Join(dir, "test.bin")
	b, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(bin, b, 0o755)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} { // t.TempDir and its parent are 0700
		if err == nil {
			err = os.Chmod(d, 0o755)
		}
	}
	if err != nil {
		t.Fatalf("copy the test binary for nobody: %v", err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		bin, "-test.run="+run, "-test.v", "-test.count=1")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") || strings.Contains(string(out), "--- SKIP") {
		t.Fatalf("as nobody: %s -test.run=%s: %v (want a pass)\n%s", bin, run, err, out)
	}
	t.Logf("as nobody:\n%s", out)
}
