package attach

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// probeEventSeq numbers the tracefs events of OpenProbeEvent within one
// process.
var probeEventSeq atomic.Uint32

// ProbeEvent is a dynamic tracefs event made for one run of gprofile
// stat, as perf probe makes one: a line "p:GROUP/EVENT PATH:0xOFF(0xSEM)"
// in uprobe_events (or "p:GROUP/EVENT SYM+OFF" in kprobe_events; "r:" for
// a return probe), GROUP gprofile_PID. Its Event is the event's
// tracepoint (PERF_TYPE_TRACEPOINT, config the event's id): unlike a
// probe PMU counter (ProbeCountEvent), a task's counter on it may be
// inherited by the task's children, so gprofile stat counts one
// command's hits with it.
//
// While open, a ProbeEvent also holds a disabled system-wide counter on
// the event (pid -1, cpu 0), which never counts. It makes the kernel put
// the breakpoint in every process that maps the binary and keep it
// there, instead of choosing processes by the memory map of each
// task-bound counter (trace_uprobe.c's perf filter): with that filter
// the kernel lost every hit of a command in about one run of twenty
// (perf stat on a perf probe event too), the breakpoint missing from
// the probed process or removed at its first hit. The hits of other
// processes then trap too, as with stat -a, and are not counted.
type ProbeEvent struct {
	// Event is the tracepoint to count.
	Event Event

	control, group, name string // tracefs control file, group and event
	pin                  int    // the system-wide counter, -1 when closed
}

// OpenProbeEvent makes probe p (ParseProbe; one site) a tracefs event
// and opens its system-wide pin (see ProbeEvent), printing the pin's
// perf_event_attr and result to verbose when it is not nil. tracefs is
// mounted when it is not. Close removes the event; call it after closing the counters
// on it (the kernel refuses, EBUSY, while one is open). Errors:
// ErrBadProbe for several sites, a perf probe event or a path tracefs
// cannot take; ErrNoKprobes for a kprobe on a kernel without
// kprobe_events; ErrNoTracefs; the kernel's refusal of the line or of
// the counter.
func OpenProbeEvent(p Probe, verbose io.Writer) (*ProbeEvent, error) {
	file, target, err := probeEventTarget(p)
	if err != nil {
		return nil, err
	}
	events, err := TracefsEvents()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Spec, err)
	}
	root := filepath.Dir(events)
	if _, err := os.Stat(filepath.Join(root, file)); errors.Is(err, fs.ErrNotExist) && file == "kprobe_events" {
		return nil, fmt.Errorf("%s: %w", p.Spec, ErrNoKprobes)
	}
	removeStaleProbeEvents(filepath.Join(root, file), verbose)
	e := &ProbeEvent{control: filepath.Join(root, file), group: "gprofile_" + strconv.Itoa(os.Getpid()),
		name: fmt.Sprintf("p%d", probeEventSeq.Add(1)), pin: -1}
	kind := "p"
	if p.Kind == Uretprobe || p.Kind == Kretprobe {
		kind = "r"
	}
	def := fmt.Sprintf("%s:%s/%s %s", kind, e.group, e.name, target)
	if err := appendLine(e.control, def); err != nil {
		return nil, fmt.Errorf("%s: make the tracefs event %q: %w", p.Spec, def, err)
	}
	b, err := os.ReadFile(filepath.Join(events, e.group, e.name, "id"))
	var id uint64
	if err == nil {
		id, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("%s: the id of tracefs event %s/%s: %w", p.Spec, e.group, e.name, err)
	}
	e.Event = Event{Name: p.Spec, Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Unit: "count", SampleType: p.Spec}
	attr := &unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Bits: unix.PerfBitDisabled,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
	e.pin, err = unix.PerfEventOpen(attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if verbose != nil {
		WriteAttr(verbose, attr, -1, 0, -1)
		fmt.Fprintf(verbose, "  = fd %d, err %v (keeps %s's breakpoint in every process; never enabled)\n", e.pin, err, p.Spec)
	}
	if err != nil {
		e.pin = -1
		e.Close()
		return nil, permissionError("open a system-wide counter on "+p.Spec, err)
	}
	return e, nil
}

// removeStaleProbeEvents removes from control (uprobe_events or
// kprobe_events) the events of every group gprofile_PID whose process no
// longer exists: a gprofile stat killed with SIGKILL could not remove
// its own, and they would stay until reboot. Events of a live process,
// and those the kernel will not remove (EBUSY: a counter is open on
// them), stay. Best effort: what it removes is said on verbose.
func removeStaleProbeEvents(control string, verbose io.Writer) {
	b, err := os.ReadFile(control)
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		// "p:GROUP/EVENT TARGET" (r: for return probes)
		def, _, _ := strings.Cut(line, " ")
		_, event, ok := strings.Cut(def, ":")
		group, name, ok2 := strings.Cut(event, "/")
		pid, isOurs := strings.CutPrefix(group, "gprofile_")
		if !ok || !ok2 || !isOurs {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil || n <= 0 || unix.Kill(n, 0) != unix.ESRCH {
			continue
		}
		err = appendLine(control, "-:"+group+"/"+name)
		if verbose != nil {
			fmt.Fprintf(verbose, "tracefs: removed %s/%s, left by gprofile process %d, which is gone (err %v)\n", group, name, n, err)
		}
	}
}

// probeEventTarget returns the tracefs control file and the place of
// probe p in its syntax.
func probeEventTarget(p Probe) (file, target string, err error) {
	switch p.Kind {
	case Uprobe, Uretprobe, USDT:
		if len(p.Sites) != 1 {
			return "", "", badProbe(p.Spec, "counts one place, and it matches %d: name one function (gprofile -l %s lists them)", len(p.Sites), p.Spec)
		}
		if strings.ContainsAny(p.Path, " \t\n:()") {
			return "", "", badProbe(p.Spec, "the path %q has a space, colon or parenthesis, which uprobe_events cannot take: count it with -a", p.Path)
		}
		target = fmt.Sprintf("%s:%#x", p.Path, p.Sites[0].Offset)
		if sem := p.Sites[0].RefCtrOffset; sem != 0 {
			target += fmt.Sprintf("(%#x)", sem)
		}
		return "uprobe_events", target, nil
	case Kprobe, Kretprobe:
		if strings.ContainsAny(p.Symbol, "*?[") {
			return "", "", badProbe(p.Spec, "counts one function, not a glob")
		}
		return "kprobe_events", fmt.Sprintf("%s+%d", p.Symbol, p.Offset), nil
	}
	return "", "", badProbe(p.Spec, "is a tracefs event already: count it by its name")
}

// Close closes the system-wide counter and removes the tracefs event. It
// may be called more than once; it fails (EBUSY) while another counter
// on the event is open.
func (e *ProbeEvent) Close() error {
	if e == nil || e.control == "" {
		return nil
	}
	if e.pin >= 0 {
		unix.Close(e.pin)
		e.pin = -1
	}
	if err := appendLine(e.control, "-:"+e.group+"/"+e.name); err != nil {
		return fmt.Errorf("remove the tracefs event %s/%s: %w", e.group, e.name, err)
	}
	e.control = ""
	return nil
}

// appendLine appends one line to a tracefs control file (O_APPEND: a
// plain write would clear the other events first).
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
