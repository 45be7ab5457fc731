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
// synced. "-" writes to stdout directly, and so does a target that
// exists and is not a regular file (/dev/null, a FIFO, a terminal),
// which is opened as it is: renaming over it would replace the device.
type outFile struct {
	path   string
	tmp    *os.File
	direct *os.File // the target itself, when it is not a regular file
}

func createOut(path string) (*outFile, error) {
	if path == "-" {
		return &outFile{path: path}, nil
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return nil, fmt.Errorf("cannot write %s: it is a directory; give a file name with -o", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("cannot write %s: %w", path, err)
		}
		return &outFile{path: path, direct: f}, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", path, err)
	}
	return &outFile{path: path, tmp: tmp}, nil
}

// writer returns where the profile goes.
func (o *outFile) writer() io.Writer {
	switch {
	case o.direct != nil:
		return o.direct
	case o.tmp == nil:
		return os.Stdout
	}
	return o.tmp
}

// commit syncs and renames the temporary file over the target, keeping an
// existing target as NAME.old (as perf keeps perf.data.old), and gives the
// file to the user who ran sudo.
func (o *outFile) commit() error {
	if o.direct != nil {
		err := o.direct.Close()
		o.direct = nil
		if err != nil {
			return fmt.Errorf("write %s: %w", o.path, err)
		}
		return nil
	}
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

// abort removes the temporary file; the target is left as it was (a
// target written directly keeps what was written to it).
func (o *outFile) abort() {
	if o.direct != nil {
		o.direct.Close()
		o.direct = nil
	}
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
