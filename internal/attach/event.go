package attach

import (
	"errors"
	"fmt"
	"io"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Event is a perf event to sample on: the type and config of a
// perf_event_attr, with the name perf list uses for it and how a profile
// should call what it measures.
type Event struct {
	Name   string // as in `perf list`, e.g. "cpu-clock" or "sched:sched_switch"
	Type   uint32 // PERF_TYPE_*
	Config uint64 // PERF_COUNT_* or, for a tracepoint, its id from tracefs
	// Unit is what Sample.Period counts for this event: "nanoseconds" for
	// cpu-clock and task-clock, "count" for everything else (cycles,
	// instructions, page faults, tracepoint hits).
	Unit string
	// SampleType names the pprof sample type weighted by Period: "cpu"
	// (cpu-clock, task-clock), the event name for other hardware and
	// software events ("cycles", "page-faults"), "events" for tracepoints.
	SampleType string
	// Probe marks the event of a Sampler of Config.Probes: Name lists
	// them, comma-separated; every hit is sampled unless Config.Period.
	Probe bool
	// Config2 is perf_event_attr.config2 (Ext2): a probe counter's offset
	// (ProbeCountEvent); config1 is the name it points to (AttrExt).
	Config2 uint64
	config1 *byte // the first byte of a NUL-terminated name (a pointer keeps Event comparable)
}

// EveryHit reports an event sampled on every hit by default (period 1):
// a tracepoint or probes.
func (e Event) EveryHit() bool { return e.IsTracepoint() || e.Probe }

// IsTracepoint reports a tracepoint event (PERF_TYPE_TRACEPOINT). Those
// need the tracepoint BPF program and sample every hit by default.
func (e Event) IsTracepoint() bool { return e.Type == unix.PERF_TYPE_TRACEPOINT }

// IsHardware reports an event that needs a hardware PMU.
func (e Event) IsHardware() bool {
	return e.Type == unix.PERF_TYPE_HARDWARE || e.Type == unix.PERF_TYPE_HW_CACHE
}

// The events Open chooses from by default.
var (
	// EventCycles is the hardware CPU cycles counter; needs a PMU, which
	// most virtual machines lack.
	EventCycles = Event{Name: "cycles", Type: unix.PERF_TYPE_HARDWARE, Config: unix.PERF_COUNT_HW_CPU_CYCLES, Unit: "count", SampleType: "cycles"}
	// EventCPUClock is the software cpu-clock event (an hrtimer); works
	// everywhere.
	EventCPUClock = Event{Name: "cpu-clock", Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Unit: "nanoseconds", SampleType: "cpu"}
)

// perfAttr returns the perf_event_attr gprofile opens: frequency mode at
// freqHz, created disabled, no sample_type (the BPF program reads what it
// needs itself, so the kernel writes no perf ring buffer records).
func perfAttr(ev Event, freqHz uint64) *unix.PerfEventAttr {
	return &unix.PerfEventAttr{
		Type:   ev.Type,
		Config: ev.Config,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: freqHz,
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
}

// openPerfEvent opens attr on one CPU for every task (pid -1).
func openPerfEvent(attr *unix.PerfEventAttr, cpu int) (int, error) {
	fd, err := unix.PerfEventOpen(attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// noPMU reports a perf_event_open error that means "this event does not
// exist here" (what perf treats as a reason to fall back to cpu-clock).
func noPMU(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENXIO)
}

// WriteAttr prints attr field by field, the way `perf record -vv` does,
// leaving out zero fields, then the perf_event_open call it is opened
// with: pid (-1: every task), cpu (-1: every CPU) and groupFD (-1: its
// own group leader). gprofile's -v and `gprofile stat -v` print it.
func WriteAttr(w io.Writer, attr *unix.PerfEventAttr, pid, cpu, groupFD int) {
	switch {
	case pid == -1:
		fmt.Fprintf(w, "perf_event_attr (cpu %d):\n", cpu)
	case cpu == -1:
		fmt.Fprintf(w, "perf_event_attr (pid %d):\n", pid)
	default:
		fmt.Fprintf(w, "perf_event_attr (pid %d, cpu %d):\n", pid, cpu)
	}
	row := func(name string, v uint64) {
		if v != 0 {
			fmt.Fprintf(w, "  %-32s %d\n", name, v)
		}
	}
	row("type", uint64(attr.Type))
	row("size", uint64(attr.Size))
	fmt.Fprintf(w, "  %-32s %#x\n", "config", attr.Config)
	row("{ sample_period, sample_freq }", attr.Sample)
	row("sample_type", attr.Sample_type)
	row("read_format", attr.Read_format)
	for _, b := range attrBits {
		if attr.Bits&b.bit != 0 {
			row(b.name, 1)
		}
	}
	row("wakeup_events", uint64(attr.Wakeup))
	row("sample_max_stack", uint64(attr.Sample_max_stack))
	fmt.Fprintf(w, "  perf_event_open(pid %d, cpu %d, group_fd %d, flags FD_CLOEXEC)\n", pid, cpu, groupFD)
}

var attrBits = []struct {
	name string
	bit  uint64
}{
	{"disabled", unix.PerfBitDisabled},
	{"inherit", unix.PerfBitInherit},
	{"exclude_user", unix.PerfBitExcludeUser},
	{"exclude_kernel", unix.PerfBitExcludeKernel},
	{"exclude_hv", unix.PerfBitExcludeHv},
	{"exclude_idle", unix.PerfBitExcludeIdle},
	{"freq", unix.PerfBitFreq},
	{"enable_on_exec", unix.PerfBitEnableOnExec},
	{"exclude_guest", unix.PerfBitExcludeGuest},
}
