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

// TestOutFileFIFO: a target that is not a regular file (here a FIFO, as
// /dev/null is a device) is written in place, never renamed over, and
// keeps no .old; a directory is refused with a hint.
func TestOutFileFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo in the test's temporary directory: %v", err)
	}
	got := make(chan []byte)
	go func() {
		b, _ := os.ReadFile(fifo) // opens the read end, until the writer closes
		got <- b
	}()
	o, err := createOut(fifo)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(o.writer(), "profile bytes")
	if err := o.commit(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; string(b) != "profile bytes" {
		t.Errorf("the FIFO's reader got %q", b)
	}
	fi, err := os.Lstat(fifo)
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("after commit the target is %v (%v), want the FIFO", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %v, want only the FIFO", entries)
	}
	if _, err := createOut(dir); err == nil {
		t.Error("createOut(a directory) succeeded")
	}
}

// TestOutputDevNull runs gprofile -o /dev/null, which perf users type to
// measure without keeping a file: /dev/null must stay the null device
// (the rename of a temporary file over it used to make it a regular
// file, breaking everything on the machine that writes to it). If it is
// broken anyway, the test puts the device back.
func TestOutputDevNull(t *testing.T) {
	testutil.RequirePrivileges(t)
	isNullDev := func() bool {
		fi, err := os.Lstat("/dev/null")
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		return fi.Mode()&os.ModeCharDevice != 0 && ok && st.Rdev == 1<<8|3
	}
	if !isNullDev() {
		t.Skip("skipping: /dev/null is not the null device on this machine already")
	}
	t.Cleanup(func() {
		if !isNullDev() {
			os.Remove("/dev/null")
			syscall.Mknod("/dev/null", syscall.S_IFCHR|0o666, 1<<8|3)
			os.Chmod("/dev/null", 0o666) // mknod applies the umask
			os.Remove("/dev/null.old")
		}
	})
	_, stderr, code := runGprofile(t, "-q", "-d", "1", "-f", "99", "-o", "/dev/null")
	if code != 0 {
		t.Fatalf("gprofile -o /dev/null: exit %d\n%s", code, stderr)
	}
	if !isNullDev() {
		t.Error("gprofile -o /dev/null replaced the null device")
	}
	if _, err := os.Lstat("/dev/null.old"); err == nil {
		t.Error("gprofile -o /dev/null left /dev/null.old")
	}
}
