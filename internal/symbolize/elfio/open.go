package elfio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// MaxBinaryBytes caps the size of a file read as a binary, a debug file
// or a perf map's directory entry (bytes). It is above the 2 GiB that
// the debug builds of large C++ programs pass; reading stays lazy and
// capped per section (see elf_limits.go), so a sparse file of this size
// costs no more than a small one.
const MaxBinaryBytes = 4 << 30

// openFlags open a file for reading without side effects: O_NONBLOCK
// so that a FIFO or a device node where a binary was expected does not
// block open or read, O_NOCTTY so that a terminal does not become ours.
const openFlags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY

// ErrNotRegular is returned for a path that is not a regular file (a
// FIFO, a device, a directory, a socket).
var ErrNotRegular = errors.New("not a regular file")

// errTooLarge is returned for a file over maxBinaryBytes.
var errTooLarge = errors.New("file too large")

// OpenRegular opens the host path for reading, without blocking on a
// FIFO or a device, and checks that it is a regular file of at most
// maxBytes. Magic links such as /proc/PID/map_files/… and
// /proc/PID/exe are followed.
func OpenRegular(path string, maxBytes int64) (*os.File, error) {
	fd, err := unix.Open(path, openFlags, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return checkRegular(fd, path, maxBytes)
}

// checkRegular wraps fd as an *os.File when it is a regular file of at
// most maxBytes, and closes it otherwise.
func checkRegular(fd int, path string, maxBytes int64) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	case st.Size > maxBytes:
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: %d bytes, at most %d", errTooLarge, st.Size, maxBytes)}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Root is a directory that paths are resolved in as if it were "/": a
// process's root (/proc/PID/root), held open so that the process's
// files can be found even after it has exited or changed its root.
// Symlinks inside it (absolute ones too) resolve inside it, ".." stops
// at it, and magic links (/proc/self/…) are refused: a process cannot
// make us read a host file it could not read itself.
type Root struct {
	fd   int
	path string // the directory as opened, for errors and the fallback
}

// openat2Missing is set when openat2 failed with ENOSYS (a kernel before
// 5.6, or a seccomp filter that refuses it): paths are then opened as
// <root>/<path>, where an absolute symlink leads outside the root.
var openat2Missing atomic.Bool

// OpenInRootNote returns one line when files inside processes' roots
// are opened without openat2's RESOLVE_IN_ROOT (openat2 failed with
// ENOSYS), else "".
func OpenInRootNote() string {
	if !openat2Missing.Load() {
		return ""
	}
	return "openat2 is not available (ENOSYS): files of processes in other mount namespaces are opened through /proc/PID/root without RESOLVE_IN_ROOT, and their absolute symlinks resolve on the host"
}

// OpenRoot opens dir (normally <ProcRoot>/PID/root, a magic link that
// this open follows) as a Root.
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &Root{fd: fd, path: dir}, nil
}

// Dup returns a second Root on the same directory.
func (r *Root) Dup() (*Root, error) {
	fd, err := unix.FcntlInt(uintptr(r.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", r.path, err)
	}
	return &Root{fd: fd, path: r.path}, nil
}

// Close closes the directory; it is a no-op on a nil or closed Root.
func (r *Root) Close() {
	if r != nil && r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// Open opens path (absolute or relative, as the process sees it) inside
// r for reading, as OpenRegular does: a regular file of at most
// maxBytes, never blocking.
func (r *Root) Open(path string, maxBytes int64) (*os.File, error) {
	name := r.path + "/" + strings.TrimLeft(path, "/")
	if openat2Missing.Load() {
		return OpenRegular(name, maxBytes)
	}
	how := unix.OpenHow{Flags: openFlags, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	var err error
	for range 4 { // EAGAIN: a rename raced with the lookup
		if fd, err = unix.Openat2(r.fd, path, &how); err != unix.EAGAIN && err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.ENOSYS) {
		openat2Missing.Store(true)
		return OpenRegular(name, maxBytes)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "openat2", Path: name, Err: err}
	}
	return checkRegular(fd, name, maxBytes)
}
