// Package testutil holds helpers shared by gprofile's tests: the one gate
// for tests that need privileges, and builders for test workloads.
package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// RequirePrivileges skips t, saying why, unless the test runs as root.
// With GPROFILE_REQUIRE_PRIV=1 in the environment (CI sets it) it fails t
// instead, so privileged tests cannot skip silently there.
func RequirePrivileges(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	const why = "needs root for BPF and perf events (run: sudo go test ./...)"
	if os.Getenv("GPROFILE_REQUIRE_PRIV") == "1" {
		t.Fatalf("GPROFILE_REQUIRE_PRIV=1 but %s", why)
	}
	t.Skip(why)
}

// RequireTool skips t when the command is not on PATH (fails it under
// GPROFILE_REQUIRE_PRIV=1, where CI has installed every tool) and returns
// its path.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("GPROFILE_REQUIRE_PRIV") == "1" {
		t.Fatalf("%s not found on PATH (CI installs it in .ci/run)", name)
	}
	t.Skipf("%s not found on PATH", name)
	return ""
}

// BuildC compiles the C source file src (a path, usually under testdata/)
// with gcc and the given flags into t.TempDir() and returns the binary's
// path. It skips t when gcc is missing.
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
		if os.Getenv("GPROFILE_REQUIRE_PRIV") == "1" {
			t.Fatalf("cannot set %s: %v", name, err)
		}
		t.Skipf("skipping: cannot set %s: %v", name, err)
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
