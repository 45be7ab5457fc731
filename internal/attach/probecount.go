package attach

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

// pmuType reads the perf event type of a dynamic PMU
// (/sys/bus/event_source/devices/NAME/type).
func pmuType(name string) (uint32, error) {
	b, err := os.ReadFile("/sys/bus/event_source/devices/" + name + "/type")
	if err != nil {
		return 0, err
	}
	t, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	return uint32(t), err
}

// ProbeCountEvent returns the perf event that counts the hits of probe p
// (ParseProbe) without sampling them, for gprofile stat, through the
// kernel's dynamic PMUs as perf stat does: the uprobe PMU for uprobes,
// uretprobes and USDT probes (perf_event_attr.config1 the binary's path,
// config2 the file offset, config bits 32-63 a USDT semaphore's offset,
// bit 0 a return probe), the kprobe PMU for kprobes and kretprobes
// (config1 the function, config2 the offset). A probe with several sites
// (a glob, a USDT probe placed more than once) is refused: each site
// would be a counter of its own. Errors: ErrNoKprobes without a kprobe
// PMU; ErrBadProbe for several sites or perf probe events.
func ProbeCountEvent(p Probe) (Event, error) {
	ev := Event{Name: p.Spec, Unit: "count", SampleType: p.Spec}
	var pmu, target string
	switch p.Kind {
	case Uprobe, Uretprobe, USDT:
		if len(p.Sites) != 1 {
			return ev, badProbe(p.Spec, "counts one place, and it matches %d: name one function (gprofile -l %s lists them)", len(p.Sites), p.Spec)
		}
		pmu, target = "uprobe", p.Path
		ev.Config2 = p.Sites[0].Offset
		ev.Config = p.Sites[0].RefCtrOffset << 32
	case Kprobe, Kretprobe:
		if strings.ContainsAny(p.Symbol, "*?[") {
			return ev, badProbe(p.Spec, "counts one function, not a glob")
		}
		pmu, target = "kprobe", p.Symbol
		ev.Config2 = p.Offset
	default:
		return ev, badProbe(p.Spec, "gprofile stat counts kprobe, kretprobe, uprobe, uretprobe and usdt probes; count a perf probe event by its tracepoint name")
	}
	t, err := pmuType(pmu)
	if errors.Is(err, os.ErrNotExist) && pmu == "kprobe" {
		return ev, fmt.Errorf("%s: %w", p.Spec, ErrNoKprobes)
	}
	if err != nil {
		return ev, fmt.Errorf("%s: the kernel's %s PMU: %w", p.Spec, pmu, err)
	}
	ev.Type = t
	if p.Kind == Uretprobe || p.Kind == Kretprobe {
		ev.Config |= 1 // format/retprobe: config:0
	}
	ev.config1 = &append([]byte(target), 0)[0]
	return ev, nil
}

// AttrExt returns what perf_event_attr's config1 and config2 (Ext1,
// Ext2) hold for e: for a probe counter (ProbeCountEvent), the address of
// its NUL-terminated path or function name, valid while e (or a copy of
// it) is reachable, and its offset; else 0, 0.
func (e *Event) AttrExt() (ext1, ext2 uint64) {
	if e.config1 == nil {
		return 0, e.Config2
	}
	return uint64(uintptr(unsafe.Pointer(e.config1))), e.Config2
}
