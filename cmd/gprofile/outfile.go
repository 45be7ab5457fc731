package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// outFile writes a profile atomically: into a temporary file beside the
// target (.NAME.tmp-PID-N), created before sampling starts (so an
// unwritable path fails early), renamed over the target only once
// everything is written and synced. "-" writes to stdout directly, and so
// does a target that exists and is not a regular file (/dev/null, a FIFO,
// a terminal), which is opened as it is: renaming over it would replace
// the device. Temporary files of runs that were killed (their PID gone)
// are removed.
type outFile struct {
	path   string
	tmp    *os.File
	direct *os.File // the target itself, when it is not a regular file
	kept   bool     // commit kept the previous file (nothing sampled)
	// gone is closed when the reader of stdout or of a FIFO target went
	// away (watchReader): nothing more can be written.
	gone     chan struct{}
	goneOnce sync.Once
}

// errInterrupted: gprofile was interrupted before sampling started.
var errInterrupted = errors.New("interrupted")

func createOut(path string) (*outFile, error) {
	if path == "-" {
		return &outFile{path: path, gone: make(chan struct{})}, nil
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return nil, fmt.Errorf("cannot write %s: it is a directory; give a file name with -o", path)
		}
		f, err := openDirect(path, fi)
		if err != nil {
			return nil, err
		}
		return &outFile{path: path, direct: f, gone: make(chan struct{})}, nil
	}
	dir, base := filepath.Split(path)
	removeStaleTemps(dir, base)
	tmp, err := os.CreateTemp(dir, fmt.Sprintf(".%s.tmp-%d-*", base, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", path, err)
	}
	return &outFile{path: path, tmp: tmp, gone: make(chan struct{})}, nil
}

// openDirect opens a target that is not a regular file. A FIFO is opened
// without blocking: with no reader yet, gprofile says it waits for one
// and waits, giving up at SIGINT or SIGTERM (errInterrupted).
func openDirect(path string, fi os.FileInfo) (*os.File, error) {
	if fi.Mode()&os.ModeNamedPipe == 0 {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("cannot write %s: %w", path, err)
		}
		return f, nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for said := false; ; {
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == nil {
			if err := unix.SetNonblock(fd, false); err != nil {
				unix.Close(fd)
				return nil, fmt.Errorf("cannot write %s: %w", path, err)
			}
			return os.NewFile(uintptr(fd), path), nil
		}
		if err != unix.ENXIO { // ENXIO: no reader yet
			return nil, fmt.Errorf("cannot write %s: %w", path, err)
		}
		if !said {
			fmt.Fprintf(os.Stderr, "gprofile: waiting for a reader of the FIFO %s before sampling (Ctrl-C to give up)\n", path)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w while waiting for a reader of %s; nothing was sampled", errInterrupted, path)
		case <-tick.C:
		}
	}
}

// removeStaleTemps removes the temporary files (.BASE.tmp-PID-N) that
// runs killed before their end (SIGKILL, a crash) left in dir: those
// whose PID is no process. Names of older versions (.BASE.tmp-N, N
// random) read N as the PID: beyond pid_max, it is no process either.
func removeStaleTemps(dir, base string) {
	if dir == "" {
		dir = "."
	}
	prefix := "." + base + ".tmp-"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.ParseUint(pidText, 10, 64)
		if err != nil {
			continue
		}
		if pid > 1<<22 || unix.Kill(int(pid), 0) == unix.ESRCH {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// watchReader closes o.gone when the reader of a pipe target (stdout, or
// a FIFO) goes away: the write end then polls POLLERR. It returns a func
// that stops watching. Other targets are not watched.
func (o *outFile) watchReader() (stop func()) {
	f := o.direct
	if o.path == "-" {
		f = os.Stdout
	}
	done := make(chan struct{})
	var st unix.Stat_t
	if f == nil || unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return func() {}
	}
	fd := int(f.Fd())
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: 0}}
			n, err := unix.Poll(pfd, 200)
			if err == nil && n > 0 && pfd[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
				o.readerGone()
				return
			}
		}
	}()
	return func() { close(done) }
}

// readerGone records that the output's reader went away.
func (o *outFile) readerGone() { o.goneOnce.Do(func() { close(o.gone) }) }

// isGone reports whether the output's reader went away.
func (o *outFile) isGone() bool {
	select {
	case <-o.gone:
		return true
	default:
		return false
	}
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

// keepPrevious drops the temporary file when the target exists already,
// keeping the previous profile instead of one of nothing (a run of 0
// samples); it reports whether it did.
func (o *outFile) keepPrevious() bool {
	if o.tmp == nil {
		return false
	}
	if fi, err := os.Stat(o.path); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	o.abort()
	o.kept = true
	return true
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

// writeError says that writing the profile failed; when the disk (or the
// quota) is full, it says that the samples are lost and where else there
// is room to write them.
func writeError(path string, samples uint64, err error) error {
	if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("write %s: %w", path, err)
	}
	where := "another file system"
	for _, dir := range []string{os.TempDir(), os.Getenv("HOME"), "/dev/shm"} {
		var st unix.Statfs_t
		if dir == "" || unix.Statfs(dir, &st) != nil {
			continue
		}
		if free := st.Bavail * uint64(st.Bsize); free >= 64<<20 && !sameFS(dir, path) {
			where = fmt.Sprintf("%s (%d MiB free): -o %s", dir, free>>20, filepath.Join(dir, filepath.Base(path)))
			break
		}
	}
	return fmt.Errorf("write %s: %w: the %d samples of this run are lost; write to %s", path, err, samples, where)
}

// sameFS reports whether dir and the directory of path are on one file
// system (same device).
func sameFS(dir, path string) bool {
	var a, b unix.Stat_t
	if unix.Stat(dir, &a) != nil || unix.Stat(filepath.Dir(path), &b) != nil {
		return false
	}
	return a.Dev == b.Dev
}
