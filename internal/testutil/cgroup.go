package testutil

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"
)

// Cgroup2Mount returns the first cgroup2 mount point in
// /proc/self/mountinfo, parsed here on its own so that tests can check the
// code under test against it. Without one it skips t (fails it under
// GPROFILE_REQUIRE_PRIV=1; see Skipf).
func Cgroup2Mount(t testing.TB) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		Skipf(t, "read mountinfo: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if f == "-" && i >= 5 && i+1 < len(fields) {
				if fields[i+1] == "cgroup2" {
					return fields[4]
				}
				break
			}
		}
	}
	Skipf(t, "no cgroup2 file system in /proc/self/mountinfo")
	return ""
}

// MakeCgroup makes a cgroup (a directory named prefix*) under the cgroup2
// mount and returns its path; it is removed when the test ends, once the
// test has killed its tasks. It skips t when the cgroup cannot be made
// (fails it under GPROFILE_REQUIRE_PRIV=1).
func MakeCgroup(t testing.TB, prefix string) string {
	t.Helper()
	root := Cgroup2Mount(t)
	dir, err := os.MkdirTemp(root, prefix)
	if err != nil {
		Skipf(t, "cannot make a cgroup under %s: %v", root, err)
	}
	t.Cleanup(func() {
		// The kernel frees a cgroup's last tasks a moment after they die.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := os.Remove(dir)
			if err == nil || os.IsNotExist(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("remove cgroup %s: %v", dir, err)
				return
			}
		}
	})
	return dir
}
