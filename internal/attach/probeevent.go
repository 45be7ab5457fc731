package attach

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// probeEventSeq numbers the tracefs events of ProbeTraceEvent within one
// process.
var probeEventSeq atomic.Uint32

// ProbeTraceEvent makes probe p (ParseProbe; one site) a dynamic event of
// tracefs, as perf probe does: a line "p:GROUP/EVENT PATH:0xOFF(0xSEM)"
// in uprobe_events (or "p:GROUP/EVENT SYM+OFF" in kprobe_events; "r:" for
// a return probe), GROUP gprofile_PID. The returned Event is its
// tracepoint (PERF_TYPE_TRACEPOINT, config the event's id): unlike a
// probe PMU counter (ProbeCountEvent) it may be inherited by a command's
// children, so gprofile stat counts one command's hits with it. remove
// deletes the event; it fails (EBUSY) while a counter on it is open, so
// call it after closing them. tracefs is mounted when it is not.
// Errors: ErrBadProbe for several sites, a perf probe event or a path
// tracefs cannot take; ErrNoKprobes for a kprobe on a kernel without
// kprobe_events; ErrNoTracefs; the kernel's refusal of the line.
func ProbeTraceEvent(p Probe) (ev Event, remove func() error, err error) {
	var file, target string
	switch p.Kind {
	case Uprobe, Uretprobe, USDT:
		if len(p.Sites) != 1 {
			return ev, nil, badProbe(p.Spec, "counts one place, and it matches %d: name one function (gprofile -l %s lists them)", len(p.Sites), p.Spec)
		}
		if strings.ContainsAny(p.Path, " \t\n:()") {
			return ev, nil, badProbe(p.Spec, "the path %q has a space, colon or parenthesis, which uprobe_events cannot take: count it with -a", p.Path)
		}
		file = "uprobe_events"
		target = fmt.Sprintf("%s:%#x", p.Path, p.Sites[0].Offset)
		if sem := p.Sites[0].RefCtrOffset; sem != 0 {
			target += fmt.Sprintf("(%#x)", sem)
		}
	case Kprobe, Kretprobe:
		if strings.ContainsAny(p.Symbol, "*?[") {
			return ev, nil, badProbe(p.Spec, "counts one function, not a glob")
		}
		file = "kprobe_events"
		target = fmt.Sprintf("%s+%d", p.Symbol, p.Offset)
	default:
		return ev, nil, badProbe(p.Spec, "is a tracefs event already: count it by its name")
	}
	events, err := TracefsEvents()
	if err != nil {
		return ev, nil, fmt.Errorf("%s: %w", p.Spec, err)
	}
	root := filepath.Dir(events)
	if _, err := os.Stat(filepath.Join(root, file)); errors.Is(err, fs.ErrNotExist) && file == "kprobe_events" {
		return ev, nil, fmt.Errorf("%s: %w", p.Spec, ErrNoKprobes)
	}
	group := "gprofile_" + strconv.Itoa(os.Getpid())
	name := fmt.Sprintf("p%d", probeEventSeq.Add(1))
	kind := "p"
	if p.Kind == Uretprobe || p.Kind == Kretprobe {
		kind = "r"
	}
	def := fmt.Sprintf("%s:%s/%s %s", kind, group, name, target)
	if err := appendLine(filepath.Join(root, file), def); err != nil {
		return ev, nil, fmt.Errorf("%s: make the tracefs event %q: %w", p.Spec, def, err)
	}
	remove = func() error {
		if err := appendLine(filepath.Join(root, file), "-:"+group+"/"+name); err != nil {
			return fmt.Errorf("remove the tracefs event %s/%s: %w", group, name, err)
		}
		return nil
	}
	b, err := os.ReadFile(filepath.Join(events, group, name, "id"))
	var id uint64
	if err == nil {
		id, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	if err != nil {
		remove()
		return ev, nil, fmt.Errorf("%s: the id of tracefs event %s/%s: %w", p.Spec, group, name, err)
	}
	ev = Event{Name: p.Spec, Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Unit: "count", SampleType: p.Spec}
	return ev, remove, nil
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
