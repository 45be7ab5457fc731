package attach

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// ErrNoKprobes: the kernel has no kprobes (built without CONFIG_KPROBES:
// no kprobe PMU, no kprobe_events in tracefs).
var ErrNoKprobes = errors.New("this kernel has no kprobes (CONFIG_KPROBES is off)")

// MaxProbes is the most probes one Sampler attaches (MAX_PROBES in
// bpf/profile.bpf.c: a probe's index is its attach cookie).
const MaxProbes = 64

// maxSingleAttach is the most kernel functions a glob attaches one link
// each (no kprobe.multi): each is a perf event or, with fentry, a program.
const maxSingleAttach = 512

// Values of the probe_mode map (PROBE_* in bpf/profile.bpf.c).
const (
	probeOff    = 0
	probeCount  = 1
	probeSample = 2
)

// probeLinks are what attachProbes opened.
type probeLinks struct {
	progs []*ebpf.Program // loaded probe programs (fentry: one per function)
	fds   []int           // perf events and BPF links of trace events
	// Attached counts kernel functions or sites attached per probe;
	// Skipped those a glob matched that the kernel refused.
	attached, skipped []int
	how               []string // per probe: kprobe, kprobe.multi, fentry, uprobe, ...
}

// attachProbes loads the probe programs and attaches one to every probe
// of Config.Probes, its index as the attach cookie. The probes stay off
// (probe_mode) until Enable or CountProbes.
func (s *Sampler) attachProbes(spec *ebpf.CollectionSpec) error {
	if len(s.cfg.Probes) > MaxProbes {
		return fmt.Errorf("%d probes: at most %d", len(s.cfg.Probes), MaxProbes)
	}
	names := make([]string, len(s.cfg.Probes))
	for i, p := range s.cfg.Probes {
		names[i] = p.Spec
	}
	s.event = Event{Name: strings.Join(names, ","), Unit: "count", SampleType: "probe", Probe: true}
	s.probes.attached = make([]int, len(s.cfg.Probes))
	s.probes.skipped = make([]int, len(s.cfg.Probes))
	s.probes.how = make([]string, len(s.cfg.Probes))
	for i, p := range s.cfg.Probes {
		var err error
		switch p.Kind {
		case Kprobe, Kretprobe:
			err = s.attachKernel(spec, i, p)
		case Uprobe, Uretprobe, USDT:
			err = s.attachUser(spec, i, p)
		case TraceEvent:
			err = s.attachTraceEvent(spec, i, p)
		default:
			err = fmt.Errorf("probe %s: unknown kind %d", p.Spec, p.Kind)
		}
		if err != nil {
			return err
		}
		s.verbosef("BPF: probe %d %s: %d attached (%s), %d refused\n", i, p.Spec, s.probes.attached[i], s.probes.how[i], s.probes.skipped[i])
	}
	return nil
}

// loadProbeProgram loads the program name of the profile object sharing
// the sampler's maps; attachTo is the kernel function of fentry/fexit.
func (s *Sampler) loadProbeProgram(spec *ebpf.CollectionSpec, name, attachTo string) (*ebpf.Program, error) {
	ps := spec.Programs[name]
	if attachTo != "" {
		ps.AttachTo = attachTo
	}
	opts := &ebpf.CollectionOptions{MapReplacements: s.sharedMaps()}
	c, err := newProgram(spec, name, opts)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			s.verbosef("BPF verifier log (%s):\n%+v\n", name, ve)
		}
		return nil, err
	}
	s.probes.progs = append(s.probes.progs, c)
	return c, nil
}

// newProgram loads one program of spec, and the maps it uses that opts
// does not replace.
func newProgram(spec *ebpf.CollectionSpec, name string, opts *ebpf.CollectionOptions) (*ebpf.Program, error) {
	one := &ebpf.CollectionSpec{Maps: spec.Maps, Programs: map[string]*ebpf.ProgramSpec{name: spec.Programs[name]},
		Variables: spec.Variables, Types: spec.Types, ByteOrder: spec.ByteOrder}
	coll, err := ebpf.NewCollectionWithOptions(one, *opts)
	if err != nil {
		return nil, err
	}
	p := coll.DetachProgram(name)
	coll.Close()
	return p, nil
}

// sharedMaps are the sampler's maps, by name, for programs loaded apart.
func (s *Sampler) sharedMaps() map[string]*ebpf.Map {
	m := s.objs.profileMaps
	return map[string]*ebpf.Map{
		"targets": m.Targets, "counters": m.Counters, "events": m.Events, "scratch": m.Scratch,
		"target_tids": m.TargetTids, "tp_hits": m.TpHits, "probe_hits": m.ProbeHits,
		"probe_mode": m.ProbeMode, "probe_depth": m.ProbeDepth, "switch_tgids": m.SwitchTgids,
		"switch_any": m.SwitchAny,
	}
}

// KprobesAvailable reports whether the kernel has kprobes (the kprobe
// PMU, or tracefs's kprobe_events): a kernel built without
// CONFIG_KPROBES has neither, and kernel probes are fentry and fexit
// programs there (no offsets).
func KprobesAvailable() bool {
	if _, err := os.Stat("/sys/bus/event_source/devices/kprobe/type"); err == nil {
		return true
	}
	events, err := hostEvents.eventsDir()
	if err != nil {
		return false
	}
	_, err = os.Stat(strings.TrimSuffix(events, "events") + "kprobe_events")
	return err == nil
}

// attachKernel attaches probe i to kernel functions: with kprobes, one
// kprobe.multi link for a glob where the kernel has it, else a kprobe per
// function; without kprobes, an fentry (fexit) program per function.
func (s *Sampler) attachKernel(spec *ebpf.CollectionSpec, i int, p Probe) error {
	funcs, err := KernelFuncs(p.Symbol)
	if err != nil {
		return err
	}
	if len(funcs) == 0 {
		return badProbe(p.Spec, "no traceable kernel function matches")
	}
	ret := p.Kind == Kretprobe
	if !KprobesAvailable() {
		if p.Offset != 0 {
			return fmt.Errorf("%s: %w, and fentry, which gprofile uses instead, cannot take an offset", p.Spec, ErrNoKprobes)
		}
		return s.attachFentry(spec, i, p, funcs, ret)
	}
	if len(funcs) > 1 {
		if err := s.attachKprobeMulti(spec, i, funcs, ret); err == nil {
			return nil
		} else {
			s.verbosef("BPF: kprobe.multi for %s: %v; attaching one kprobe per function\n", p.Spec, err)
		}
	}
	if len(funcs) > maxSingleAttach {
		return badProbe(p.Spec, "matches %d functions, and this kernel has no kprobe.multi: at most %d one by one (narrow the glob)", len(funcs), maxSingleAttach)
	}
	prog, err := s.loadProbeProgram(spec, "profile_kprobe", "")
	if err != nil {
		return s.loadError(err)
	}
	s.probes.how[i] = "kprobe"
	var first error
	for _, fn := range funcs {
		opts := &link.KprobeOptions{Offset: p.Offset, Cookie: uint64(i)}
		var l link.Link
		if ret {
			l, err = link.Kretprobe(fn, prog, opts)
		} else {
			l, err = link.Kprobe(fn, prog, opts)
		}
		if err != nil {
			s.probes.skipped[i]++
			first = cmpOr(first, err)
			continue
		}
		s.links = append(s.links, l)
		s.probes.attached[i]++
	}
	return s.attachedAny(i, p, first)
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// attachedAny fails probe i when nothing of it attached.
func (s *Sampler) attachedAny(i int, p Probe, first error) error {
	if s.probes.attached[i] > 0 {
		if s.probes.skipped[i] > 0 {
			s.logf("gprofile: %s: %d functions attached, %d refused by the kernel (%v)\n", p.Spec, s.probes.attached[i], s.probes.skipped[i], first)
		}
		return nil
	}
	return permissionError("attach "+p.Spec, first)
}

func (s *Sampler) attachKprobeMulti(spec *ebpf.CollectionSpec, i int, funcs []string, ret bool) error {
	prog, err := s.loadProbeProgram(spec, "profile_kprobe_multi", "")
	if err != nil {
		return err
	}
	cookies := make([]uint64, len(funcs))
	for j := range cookies {
		cookies[j] = uint64(i)
	}
	opts := link.KprobeMultiOptions{Symbols: funcs, Cookies: cookies}
	var l link.Link
	if ret {
		l, err = link.KretprobeMulti(prog, opts)
	} else {
		l, err = link.KprobeMulti(prog, opts)
	}
	if err != nil {
		return err
	}
	s.links = append(s.links, l)
	s.probes.attached[i] = len(funcs)
	s.probes.how[i] = "kprobe.multi"
	return nil
}

// attachFentry loads an fentry (fexit) program per function: a tracing
// program is verified against its function's BTF.
func (s *Sampler) attachFentry(spec *ebpf.CollectionSpec, i int, p Probe, funcs []string, ret bool) error {
	if len(funcs) > maxSingleAttach {
		return badProbe(p.Spec, "matches %d functions; without kprobes each is an fentry program: at most %d (narrow the glob)", len(funcs), maxSingleAttach)
	}
	name, at := "profile_fentry", ebpf.AttachTraceFEntry
	s.probes.how[i] = "fentry"
	if ret {
		name, at = "profile_fexit", ebpf.AttachTraceFExit
		s.probes.how[i] = "fexit"
	}
	var first error
	for j, fn := range funcs {
		prog, err := s.loadProbeProgram(spec, name, fn)
		if j == 0 && errors.Is(err, unix.EPERM) {
			// Root, and yet: a kernel that refuses every tracing program
			// (lockdown, or built without trampolines).
			return fmt.Errorf("%s: %w, and it refuses fentry programs (%v): kernel functions cannot be probed here; a tracepoint may do (gprofile -l)", p.Spec, ErrNoKprobes, err)
		}
		if err == nil {
			var l link.Link
			l, err = link.AttachTracing(link.TracingOptions{Program: prog, AttachType: at, Cookie: uint64(i)})
			if err == nil {
				s.links = append(s.links, l)
				s.probes.attached[i]++
				continue
			}
		}
		s.probes.skipped[i]++
		first = cmpOr(first, fmt.Errorf("%s: %w", fn, err))
	}
	return s.attachedAny(i, p, first)
}

// attachUser puts a uprobe (uretprobe) on every site of probe i, with the
// semaphore of USDT sites as ref_ctr_offset. With one target process
// (not a command waiting for its exec), the kernel puts the breakpoints
// in that process only.
func (s *Sampler) attachUser(spec *ebpf.CollectionSpec, i int, p Probe) error {
	ex, err := link.OpenExecutable(p.Path)
	if err != nil {
		return badProbe(p.Spec, "%v", err)
	}
	prog, err := s.loadProbeProgram(spec, "profile_kprobe", "")
	if err != nil {
		return s.loadError(err)
	}
	pid := 0
	if len(s.cfg.PIDs) == 1 && !s.cfg.AtExec {
		pid = int(s.cfg.PIDs[0])
	}
	s.probes.how[i] = "uprobe"
	if p.Kind == Uretprobe {
		s.probes.how[i] = "uretprobe"
	}
	var first error
	for _, site := range p.Sites {
		opts := &link.UprobeOptions{Address: site.Offset, RefCtrOffset: site.RefCtrOffset, PID: pid, Cookie: uint64(i)}
		var l link.Link
		if p.Kind == Uretprobe {
			l, err = ex.Uretprobe("", prog, opts)
		} else {
			l, err = ex.Uprobe("", prog, opts)
		}
		if err != nil {
			s.probes.skipped[i]++
			first = cmpOr(first, fmt.Errorf("%s at %#x: %w", site.Name, site.Offset, err))
			continue
		}
		s.links = append(s.links, l)
		s.probes.attached[i]++
	}
	return s.attachedAny(i, p, first)
}

// attachTraceEvent opens the tracefs kprobe or uprobe event of probe i
// (perf probe's) as a perf event and links the probe program to it with
// the probe's index as cookie: one event (pid -1, cpu 0) runs the program
// on every CPU, as for a tracepoint.
func (s *Sampler) attachTraceEvent(spec *ebpf.CollectionSpec, i int, p Probe) error {
	prog, err := s.loadProbeProgram(spec, "profile_kprobe", "")
	if err != nil {
		return s.loadError(err)
	}
	attr := &unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: p.TraceEventID, Sample: 1,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
	fd, err := unix.PerfEventOpen(attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if s.cfg.Verbose != nil {
		WriteAttr(s.cfg.Verbose, attr, -1, 0, -1)
		fmt.Fprintf(s.cfg.Verbose, "  = fd %d, err %v\n", fd, err)
	}
	if err != nil {
		return permissionError("open perf event "+p.Spec, err)
	}
	s.probes.fds = append(s.probes.fds, fd)
	lfd, err := linkPerfEvent(prog.FD(), fd, uint64(i))
	if err != nil {
		return permissionError("attach BPF program to "+p.Spec, err)
	}
	s.probes.fds = append(s.probes.fds, lfd)
	s.probes.attached[i] = 1
	s.probes.how[i] = "perf event"
	return nil
}

// linkPerfEvent creates a BPF link (BPF_LINK_CREATE, attach type
// BPF_PERF_EVENT) from the program progFD to the perf event perfFD with
// an attach cookie (Linux 5.15); cilium/ebpf's RawLinkOptions has no
// cookie.
func linkPerfEvent(progFD, perfFD int, cookie uint64) (int, error) {
	const bpfLinkCreate, bpfPerfEvent = 28, 41
	attr := struct {
		progFD, targetFD, attachType, flags uint32
		cookie                              uint64
		_                                   [32]byte
	}{uint32(progFD), uint32(perfFD), bpfPerfEvent, 0, cookie, [32]byte{}}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return -1, errno
	}
	unix.CloseOnExec(int(fd))
	return int(fd), nil
}

// setProbeMode sets what the probe programs do on a hit (probe*).
func (s *Sampler) setProbeMode(mode uint32) error {
	if s.objs.ProbeMode == nil {
		return nil
	}
	return s.objs.ProbeMode.Put(uint32(0), mode)
}

// ProbeHits returns the hits of each probe of Config.Probes since Open
// (or since the last CountProbes), summed over CPUs, before any filter.
func (s *Sampler) ProbeHits() ([]uint64, error) {
	out := make([]uint64, len(s.cfg.Probes))
	for i := range out {
		var perCPU []uint64
		if err := s.objs.ProbeHits.Lookup(uint32(i), &perCPU); err != nil {
			return nil, fmt.Errorf("read probe hits: %w", err)
		}
		for _, v := range perCPU {
			out[i] += v
		}
	}
	return out, nil
}

// CountProbes counts the hits of each probe for d, taking no samples,
// and returns them (summed over CPUs, before the pid and cgroup filters:
// every hit costs its trap). Call it between Open and Run to know what
// sampling would cost; the counts start again from 0 after it. The
// probes are off again when it returns.
func (s *Sampler) CountProbes(d time.Duration) ([]uint64, error) {
	if len(s.cfg.Probes) == 0 {
		return nil, errors.New("count probe hits: no probes")
	}
	if err := s.setProbeMode(probeCount); err != nil {
		return nil, fmt.Errorf("turn probes on: %w", err)
	}
	time.Sleep(d)
	err := s.setProbeMode(probeOff)
	hits, herr := s.ProbeHits()
	if err = errors.Join(err, herr, s.resetProbeHits()); err != nil {
		return nil, err
	}
	return hits, nil
}

func (s *Sampler) resetProbeHits() error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	zero := make([]uint64, ncpu)
	for i := range s.cfg.Probes {
		if err := s.objs.ProbeHits.Put(uint32(i), zero); err != nil {
			return fmt.Errorf("reset probe hits: %w", err)
		}
	}
	return nil
}

// ProbeAttachment says how probe i of Config.Probes was attached: the
// mechanism ("kprobe", "kprobe.multi", "fentry", "fexit", "uprobe",
// "uretprobe", "perf event"), and how many functions or sites took it
// and were refused.
func (s *Sampler) ProbeAttachment(i int) (how string, attached, refused int) {
	if i < 0 || i >= len(s.probes.how) {
		return "", 0, 0
	}
	return s.probes.how[i], s.probes.attached[i], s.probes.skipped[i]
}

// closeProbes closes what attachProbes opened (the links are s.links).
func (p *probeLinks) close() error {
	var errs []error
	for _, fd := range p.fds {
		errs = append(errs, unix.Close(fd))
	}
	for _, prog := range p.progs {
		errs = append(errs, prog.Close())
	}
	p.fds, p.progs = nil, nil
	return errors.Join(errs...)
}

// ProbeCost is what one hit of a probe costs in CPU time: Hit, the trap
// and the BPF program counting it (paid by the traced thread on every
// hit), and Sample, the extra of taking a sample in BPF (the registers
// and stack window or frame-pointer walk, and the ring buffer record).
type ProbeCost struct {
	Hit, Sample time.Duration
}

// Cost returns the per-hit cost of a probe of this kind as measured on
// this project's machine (BenchmarkProbeHit, BENCHMARKS.md "Probes"):
// uprobes trap into the kernel on every hit; kernel probes run in the
// kernel already.
func (k ProbeKind) Cost() ProbeCost {
	switch k {
	case Uprobe, Uretprobe, USDT:
		return ProbeCost{Hit: uprobeHitCost, Sample: probeSampleCost}
	case TraceEvent:
		return ProbeCost{Hit: uprobeHitCost, Sample: probeSampleCost}
	}
	return ProbeCost{Hit: kprobeHitCost, Sample: probeSampleCost}
}

// Per-hit costs (ProbeCost) from BenchmarkProbeHit on this project's
// machine (BENCHMARKS.md "Probes"): a uprobe's trap and count, and the
// extra of a sample (registers, stack window or frame-pointer walk, ring
// buffer record). A kprobe's own cost is not measured there (its kernel
// has no kprobes): kernel probes are charged the sample cost alone.
const (
	uprobeHitCost   = 20 * time.Microsecond
	kprobeHitCost   = 0
	probeSampleCost = 10 * time.Microsecond
)
