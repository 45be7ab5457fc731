package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// The tests here run end-to-end tests again where tracefs is not mounted
// (testutil.WithoutTracefs: a private mount namespace with tracefs and
// debugfs unmounted), as on minimal VMs, in containers and on systems
// without systemd: gprofile mounts tracefs there (as perf does), and
// where it cannot (no CAP_SYS_ADMIN), it follows forks with a raw
// tracepoint.

// TestCommandWithChildrenWithoutTracefs: the children of a command are
// followed on a machine where tracefs is not mounted, which gprofile
// mounts.
func TestCommandWithChildrenWithoutTracefs(t *testing.T) {
	if !testutil.WithoutTracefs(t) {
		return
	}
	TestCommandWithChildren(t)
	if !slices.Contains(testutil.TracingMounts(t), "/sys/kernel/tracing") {
		t.Errorf("gprofile did not mount tracefs at /sys/kernel/tracing (mounts: %v)", testutil.TracingMounts(t))
	}
}

// TestCommandWithChildrenNoMount: without CAP_SYS_ADMIN, gprofile cannot
// mount tracefs, and follows the children of a command with the raw
// tracepoint.
func TestCommandWithChildrenNoMount(t *testing.T) {
	if !testutil.WithoutTracefs(t) {
		return
	}
	withoutSysAdmin(t)
	TestCommandWithChildren(t)
	if m := testutil.TracingMounts(t); len(m) > 0 {
		t.Errorf("tracefs was mounted without CAP_SYS_ADMIN: %v", m)
	}
}

// TestSymShortLivedWithoutTracefs: short-lived processes a command forks
// are followed and symbolized where tracefs is not mounted.
func TestSymShortLivedWithoutTracefs(t *testing.T) {
	if !testutil.WithoutTracefs(t) {
		return
	}
	TestSymShortLived(t)
}

// TestSchedSwitchWithoutTracefs: -e sched:sched_switch reads its id from
// the tracefs gprofile mounts, and -l lists the tracepoints there.
func TestSchedSwitchWithoutTracefs(t *testing.T) {
	if !testutil.WithoutTracefs(t) {
		return
	}
	TestSchedSwitch(t)
	out, _, code := runGprofile(t, "-l")
	if code != 0 || !strings.Contains(string(out), "\n  sched:sched_switch\n") {
		t.Errorf("gprofile -l: exit %d, want 0 and sched:sched_switch listed:\n%s", code, out)
	}
}

// withoutSysAdmin makes the gprofile the tests run start without
// CAP_SYS_ADMIN (setpriv drops it from the bounding set, so root's
// exec does not get it back): it has CAP_BPF and CAP_PERFMON, as in a
// container granted those alone, and cannot mount anything.
func withoutSysAdmin(t *testing.T) {
	t.Helper()
	setpriv := testutil.RequireTool(t, "setpriv")
	real := buildGprofile(t)
	wrap := filepath.Join(t.TempDir(), "gprofile")
	script := "#!/bin/sh\nexec " + setpriv + " --bounding-set -sys_admin --inh-caps -sys_admin " + real + " \"$@\"\n"
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	gprofile = wrap
	t.Cleanup(func() { gprofile = real })
}
