package attach

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

func TestOpenCgroupAndNames(t *testing.T) {
	testutil.RequirePrivileges(t)
	dir := testutil.MakeCgroup(t, "gprofile-cg-")
	if root, err := Cgroup2Root(); err != nil || root != filepath.Dir(dir) {
		t.Fatalf("Cgroup2Root() = %q, %v; /proc/self/mountinfo has cgroup2 at %s", root, err, filepath.Dir(dir))
	}
	child := filepath.Join(dir, "child")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(child)
	for _, path := range []string{child, filepath.Base(dir) + "/child", "/" + filepath.Base(dir) + "/child"} {
		cg, err := OpenCgroup(path)
		if err != nil {
			t.Fatalf("OpenCgroup(%q): %v", path, err)
		}
		if cg.Level != 2 || cg.Path != child || cg.ID == 0 {
			t.Errorf("OpenCgroup(%q) = %+v, want level 2 at %s", path, cg, child)
		}
	}
	if _, err := OpenCgroup("/proc"); err == nil {
		t.Error("OpenCgroup(/proc) succeeded")
	}
	names, err := NewCgroupNames()
	if err != nil {
		t.Fatal(err)
	}
	cg, _ := OpenCgroup(child)
	if got, want := names.Name(cg.ID), "/"+filepath.Base(dir)+"/child"; got != want {
		t.Errorf("Name(%d) = %q, want %q", cg.ID, got, want)
	}
	if got := names.Name(1 << 62); got != "" {
		t.Errorf("unknown id named %q", got)
	}
}
