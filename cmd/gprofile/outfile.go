package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// outFile writes a profile atomically: into a temporary file beside the
// target, created before sampling starts (so an unwritable path fails
// early), renamed over the target only once everything is written and
// synced. "-" writes to stdout directly.
type outFile struct {
	path string
	tmp  *os.File
}

func createOut(path string) (*outFile, error) {
	if path == "-" {
		return &outFile{path: path}, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", path, err)
	}
	return &outFile{path: path, tmp: tmp}, nil
}

// writer returns where the profile goes.
func (o *outFile) writer() io.Writer {
	if o.tmp == nil {
		return os.Stdout
	}
	return o.tmp
}

// commit syncs and renames the temporary file over the target, keeping an
// existing target as NAME.old (as perf keeps perf.data.old), and gives the
// file to the user who ran sudo.
func (o *outFile) commit() error {
	if o.tmp == nil {
		return nil
	}
	if err := o.tmp.Chmod(0o644); err != nil {
		return o.fail(err)
	}
	chownToSudoUser(o.tmp)
	if err := o.tmp.Sync(); err != nil {
		return o.fail(err)
	}
	if err := o.tmp.Close(); err != nil {
		return o.fail(err)
	}
	if fi, err := os.Stat(o.path); err == nil && fi.Mode().IsRegular() {
		if err := os.Rename(o.path, o.path+".old"); err != nil {
			return o.fail(err)
		}
	}
	if err := os.Rename(o.tmp.Name(), o.path); err != nil {
		return o.fail(err)
	}
	o.tmp = nil
	return nil
}

func (o *outFile) fail(err error) error {
	o.abort()
	return fmt.Errorf("write %s: %w", o.path, err)
}

// abort removes the temporary file; the target is left as it was.
func (o *outFile) abort() {
	if o.tmp != nil {
		o.tmp.Close()
		os.Remove(o.tmp.Name())
		o.tmp = nil
	}
}

// chownToSudoUser gives f to SUDO_UID:SUDO_GID when gprofile runs under sudo.
func chownToSudoUser(f *os.File) {
	uid, err1 := strconv.Atoi(os.Getenv("SUDO_UID"))
	gid, err2 := strconv.Atoi(os.Getenv("SUDO_GID"))
	if err1 == nil && err2 == nil && os.Geteuid() == 0 {
		f.Chown(uid, gid)
	}
}
