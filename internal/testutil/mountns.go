package testutil

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// noTracefsEnv marks the test process that WithoutTracefs started.
const noTracefsEnv = "GPROFILE_TEST_NO_TRACEFS"

// unmountTracing unmounts tracefs (at both its places) and debugfs, each
// as often as it is mounted there, then runs its arguments.
const unmountTracing = `for m in /sys/kernel/debug/tracing /sys/kernel/tracing /sys/kernel/debug; do
	while umount "$m" 2>/dev/null; do :; done
done
exec "$@"`

// WithoutTracefs runs the calling test again, alone, in a private mount
// namespace (unshare -m --propagation private) where tracefs and debugfs
// are unmounted, as on a machine that never mounted them (minimal VMs,
// containers, systems without systemd); whatever the test mounts there
// stays there. It returns true in that second process, whose test body
// runs, after checking that no tracefs or debugfs is mounted there; it
// returns false in the first, where the caller returns at once: the
// second's output is logged and its failure fails t, its skip skips t.
//
// It needs root and unshare (util-linux): without them it skips t, or
// fails it under GPROFILE_REQUIRE_PRIV=1.
func WithoutTracefs(t *testing.T) bool {
	t.Helper()
	if os.Getenv(noTracefsEnv) == "1" {
		if m := TracingMounts(t); len(m) > 0 {
			t.Fatalf("still mounted in the private mount namespace: %v", m)
		}
		return true
	}
	RequirePrivileges(t)
	unshare := RequireTool(t, "unshare")
	cmd := exec.Command(unshare, "-m", "--propagation", "private", "sh", "-c", unmountTracing, "sh",
		os.Args[0], "-test.run", runPattern(t.Name()), "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), noTracefsEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a private mount namespace without tracefs:\n%s", out)
	switch {
	case err != nil:
		t.Fatalf("the test failed in a private mount namespace without tracefs: %v", err)
	case bytes.Contains(out, []byte("--- SKIP: "+t.Name())):
		t.Skip("skipped in the private mount namespace")
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name())):
		t.Fatalf("%s did not run in the private mount namespace", t.Name())
	}
	return false
}

// runPattern is a -test.run pattern that matches exactly the test (or
// subtest) name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// TracingMounts returns the mount points of tracefs and debugfs in this
// process's mount namespace, from /proc/self/mounts.
func TracingMounts(t testing.TB) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 2 && (fields[2] == "tracefs" || fields[2] == "debugfs") {
			mounts = append(mounts, fields[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return mounts
}
