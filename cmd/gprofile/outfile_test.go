package main

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

func TestOutFileCommitKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.pb.gz")
	if err := os.WriteFile(path, []byte("previous"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := createOut(path)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(o.writer(), "new profile")
	if b, _ := os.ReadFile(path); string(b) != "previous" {
		t.Fatalf("target changed before commit: %q", b)
	}
	if err := o.commit(); err != nil {
		t.Fatal(err)
	}
	o.abort() // after commit: a no-op
	if b, _ := os.ReadFile(path); string(b) != "new profile" {
		t.Errorf("target holds %q", b)
	}
	if b, _ := os.ReadFile(path + ".old"); string(b) != "previous" {
		t.Errorf("p.pb.gz.old holds %q", b)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v; want 0644", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("directory holds %v, want the profile and its .old", entries)
	}
}

func TestOutFileAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	o, err := createOut(filepath.Join(dir, "p.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(o.writer(), "half")
	o.abort()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("abort left %v", entries)
	}
}

func TestOutFileUnwritable(t *testing.T) {
	if _, err := createOut(filepath.Join(t.TempDir(), "no", "such", "dir", "p.pb.gz")); err == nil {
		t.Error("created a profile in a directory that does not exist")
	}
}

// TestOutFileSudoOwner: under sudo the profile belongs to the user who ran
// sudo (SUDO_UID/SUDO_GID), not to root.
func TestOutFileSudoOwner(t *testing.T) {
	testutil.RequirePrivileges(t) // chown needs root
	t.Setenv("SUDO_UID", "65534")
	t.Setenv("SUDO_GID", "65533")
	path := filepath.Join(t.TempDir(), "p.pb.gz")
	o, err := createOut(path)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(o.writer(), "profile")
	if err := o.commit(); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 65534 || st.Gid != 65533 {
		t.Errorf("owned by %d:%d, want 65534:65533", st.Uid, st.Gid)
	}
}
