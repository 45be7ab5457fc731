package counter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/privilege"
)

// Target says what a Set counts: a process (PID), or whole CPUs.
type Target struct {
	// PID is the process to count, with its children (inherit). With Exec
	// it is a process stopped before its exec, counted on its one thread
	// from the exec on (disabled + enable_on_exec): the thread that execs
	// must be the one whose tid is PID. Without Exec, every thread listed
	// in /proc/PID/task is counted from Enable on.
	PID  int
	Exec bool
	// CPUs, when PID is 0, are the CPUs to count everything on (pid -1,
	// one fd per CPU), from Enable on.
	CPUs []int
}

// Count is an event's counts summed over its fds, as read(2) returns
// them with read_format TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING.
type Count struct {
	Value   uint64 // events, or ns for task-clock and cpu-clock
	Enabled uint64 // ns the counter was enabled
	Running uint64 // ns it was on the PMU; less than Enabled when multiplexed
	// Unsupported, when not nil, says why the event could not be opened
	// here (no PMU for a hardware event, say); Value is then 0.
	Unsupported error
}

// Set is a set of open counters: fds[i] are the fds of event i, one per
// thread or CPU. Close releases them; it is idempotent.
type Set struct {
	specs  []Spec
	fds    [][]int
	unsupp []error
}

// readFormat is perf stat's read format: value, time enabled, time running.
const readFormat = unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING

// location is where one fd counts: a thread (cpu -1) or a CPU (pid -1).
type location struct{ pid, cpu int }

// Open opens every event of specs on the target, disabled (Exec: enabled
// by the kernel at the exec). With verbose, each perf_event_attr is
// printed field by field before it is opened, with the resulting fd or
// error. An event the machine lacks (a hardware event without PMU: ENOENT,
// ENODEV, EOPNOTSUPP, ENXIO, or EINVAL for a hardware event) is not an
// error: its Count says Unsupported. Other errors close what was opened;
// a permission error wraps privilege's hint.
func Open(specs []Spec, t Target, verbose io.Writer) (_ *Set, err error) {
	s := &Set{specs: specs, fds: make([][]int, len(specs)), unsupp: make([]error, len(specs))}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	locs, err := locations(t)
	if err != nil {
		return nil, err
	}
	for _, loc := range locs {
		if err := s.openAt(loc, t, verbose); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// locations lists where to open each event.
func locations(t Target) ([]location, error) {
	switch {
	case t.PID > 0 && t.Exec:
		return []location{{t.PID, -1}}, nil
	case t.PID > 0:
		tids, err := Threads(t.PID)
		if err != nil {
			return nil, err
		}
		var locs []location
		for _, tid := range tids {
			locs = append(locs, location{tid, -1})
		}
		return locs, nil
	case len(t.CPUs) > 0:
		var locs []location
		for _, cpu := range t.CPUs {
			locs = append(locs, location{-1, cpu})
		}
		return locs, nil
	}
	return nil, errors.New("counter: no process and no CPU to count")
}

// Threads returns the thread ids of process pid, ascending, from
// /proc/PID/task.
func Threads(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, fmt.Errorf("list threads of pid %d: %w", pid, err)
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	slices.Sort(tids)
	return tids, nil
}

// Attr returns the perf_event_attr of spec i in specs for target t, as
// perf stat sets it: a group leader starts disabled (Exec: enabled at
// exec), members follow their leader; inherit for a process.
func Attr(specs []Spec, i int, t Target) *unix.PerfEventAttr {
	ev := specs[i].Event
	ext1, ext2 := ev.AttrExt()
	attr := &unix.PerfEventAttr{
		Type:        ev.Type,
		Config:      ev.Config,
		Ext1:        ext1,
		Ext2:        ext2,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Read_format: readFormat,
		Bits:        unix.PerfBitExcludeGuest,
	}
	if specs[i].Leader(i) {
		attr.Bits |= unix.PerfBitDisabled
		if t.Exec {
			attr.Bits |= unix.PerfBitEnableOnExec
		}
	}
	if t.PID > 0 {
		attr.Bits |= unix.PerfBitInherit
	}
	return attr
}

// openAt opens every event at one location; members of a group take the
// fd their leader got there.
func (s *Set) openAt(loc location, t Target, verbose io.Writer) error {
	leaderFD := map[int]int{}
	for i, sp := range s.specs {
		if s.unsupp[i] != nil {
			continue
		}
		group := -1
		if !sp.Leader(i) {
			fd, ok := leaderFD[sp.Group]
			if !ok {
				s.unsupp[i] = fmt.Errorf("its group leader %s is not counted", s.specs[sp.Group].Event.Name)
				continue
			}
			group = fd
		}
		attr := Attr(s.specs, i, t)
		if verbose != nil {
			attach.WriteAttr(verbose, attr, loc.pid, loc.cpu, group)
		}
		fd, err := unix.PerfEventOpen(attr, loc.pid, loc.cpu, group, unix.PERF_FLAG_FD_CLOEXEC)
		if verbose != nil {
			fmt.Fprintf(verbose, "  = fd %d, err %v\n", fd, err)
		}
		switch {
		case err == nil:
			s.fds[i] = append(s.fds[i], fd)
			if sp.Leader(i) {
				leaderFD[i] = fd
			}
		case errors.Is(err, unix.ESRCH) && t.PID > 0 && !t.Exec:
			return nil // the thread exited meanwhile: nothing to count there
		case notSupported(sp.Event, err):
			s.unsupp[i] = unsupportedReason(sp.Event, err)
			s.closeEvent(i)
		case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
			return privilege.Wrap("open perf event "+sp.Event.Name, err)
		default:
			return fmt.Errorf("open perf event %s (pid %d, cpu %d): %w", sp.Event.Name, loc.pid, loc.cpu, err)
		}
	}
	return nil
}

// notSupported reports an open error that means the event does not exist
// here, which perf stat prints as <not supported>.
func notSupported(ev attach.Event, err error) bool {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENXIO) {
		return true
	}
	return ev.IsHardware() && errors.Is(err, unix.EINVAL)
}

// unsupportedReason is the one line printed after <not supported>.
func unsupportedReason(ev attach.Event, err error) error {
	if ev.IsHardware() {
		return fmt.Errorf("no hardware PMU here (a virtual machine without PMU passthrough?): perf_event_open: %w", err)
	}
	return fmt.Errorf("perf_event_open %s: %w", ev.Name, err)
}

func (s *Set) closeEvent(i int) {
	for _, fd := range s.fds[i] {
		unix.Close(fd)
	}
	s.fds[i] = nil
}

// Enable starts every group leader (PERF_EVENT_IOC_ENABLE); for a Target
// without Exec, counting starts here.
func (s *Set) Enable() error { return s.ioctl(unix.PERF_EVENT_IOC_ENABLE) }

// Disable stops every group leader (PERF_EVENT_IOC_DISABLE).
func (s *Set) Disable() error { return s.ioctl(unix.PERF_EVENT_IOC_DISABLE) }

func (s *Set) ioctl(req uint) error {
	for i, fds := range s.fds {
		if !s.specs[i].Leader(i) {
			continue
		}
		for _, fd := range fds {
			if err := unix.IoctlSetInt(fd, req, 0); err != nil {
				return fmt.Errorf("ioctl perf event %s: %w", s.specs[i].Event.Name, err)
			}
		}
	}
	return nil
}

// Read returns the counts of every event, in the order of the specs,
// summed over its fds (and, through inherit, over the children that have
// exited).
func (s *Set) Read() ([]Count, error) {
	counts := make([]Count, len(s.specs))
	var buf [24]byte
	for i, fds := range s.fds {
		counts[i].Unsupported = s.unsupp[i]
		for _, fd := range fds {
			n, err := unix.Read(fd, buf[:])
			if err != nil || n != len(buf) {
				return nil, fmt.Errorf("read perf event %s: %d bytes, %v", s.specs[i].Event.Name, n, err)
			}
			counts[i].Value += binary.NativeEndian.Uint64(buf[0:])
			counts[i].Enabled += binary.NativeEndian.Uint64(buf[8:])
			counts[i].Running += binary.NativeEndian.Uint64(buf[16:])
		}
	}
	return counts, nil
}

// Close closes every fd. It is idempotent and safe after a failed Open.
func (s *Set) Close() error {
	for i := range s.fds {
		s.closeEvent(i)
	}
	return nil
}
