package attach

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ringWait parks Run's goroutine in Go's network poller until the ring
// buffer is readable (the BPF program woke it: past wakeup_bytes, or a
// forced wakeup), a timeout passes, or wake is called. The ring buffer
// map's fd is pollable (EPOLLIN while records are unread), so a duplicate
// of it is registered with the runtime's epoll like a socket.
//
// cilium/ebpf's ringbuf.Reader waits in its own epoll_wait instead: a
// goroutine in a blocking system call keeps its P, and once the call has
// lasted 10 ms the runtime's sysmon thread takes the P back and restarts
// its own polling at 20 µs intervals, so that each wait of the reader cost
// about fifty sysmon wake-ups (BENCHMARKS.md, "Issue 16, session 11").
// Parked in the poller, the goroutine holds no P, and sysmon sleeps while
// gprofile has nothing to do.
type ringWait struct {
	f       *os.File
	rc      syscall.RawConn
	stopped atomic.Bool
	woken   chan struct{} // newTimerWait's: closed by wake
}

// newTimerWait returns a ringWait that waits on a timer alone, for a ring
// whose fd the runtime cannot poll: it wakes at the wait's end, or at
// wake, not when the BPF program wakes the ring.
func newTimerWait() *ringWait {
	return &ringWait{woken: make(chan struct{})}
}

// newRingWait registers a duplicate of m's fd with the network poller. It
// fails when the runtime cannot poll the fd (then the caller waits in
// ringbuf.Reader as before).
func newRingWait(m *ebpf.Map) (*ringWait, error) {
	fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup ring buffer fd: %w", err)
	}
	// O_NONBLOCK is what makes os.NewFile register the fd with the poller;
	// the bpf() and mmap calls on the map ignore it.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ring buffer fd: set O_NONBLOCK: %w", err)
	}
	f := os.NewFile(uintptr(fd), "ringbuf")
	// Deadlines work only on a file the poller holds: the check that it does.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("ring buffer fd not pollable: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &ringWait{f: f, rc: rc}, nil
}

// wait returns once ready reports true, the fd is readable, d has passed,
// or wake was called (then every later wait returns at once).
func (w *ringWait) wait(d time.Duration, ready func() bool) {
	if w.stopped.Load() {
		return
	}
	if w.f == nil {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-w.woken:
		}
		t.Stop()
		return
	}
	w.f.SetReadDeadline(time.Now().Add(d))
	// The callback runs before every park and after every wake-up; a
	// deadline, or wake's deadline in the past, ends the Read with an
	// error, which only means "stop waiting" here.
	w.rc.Read(func(uintptr) bool { return w.stopped.Load() || ready() })
}

// wake ends the current wait and every later one.
func (w *ringWait) wake() {
	if w.stopped.Swap(true) {
		return
	}
	if w.f == nil {
		close(w.woken)
		return
	}
	w.f.SetReadDeadline(time.Unix(1, 0))
}

// close releases the duplicate fd.
func (w *ringWait) close() error {
	if w == nil || w.f == nil {
		return nil
	}
	return w.f.Close()
}
