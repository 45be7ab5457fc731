package attach

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
)

// Config says what a Sampler samples.
type Config struct {
	// FrequencyHz is the sampling frequency per CPU, in Hz (perf's -F).
	FrequencyHz uint64
	// CPUs lists the CPUs to sample on; nil means every online CPU.
	CPUs []int
	// PIDs restricts sampling to these processes (tgids) and the processes
	// they fork while sampling runs; nil samples every process.
	PIDs []uint32
	// ReportExits asks for a Sample with FlagProcessExit when a process
	// (thread group) ends, so that caches about it can be dropped, and one
	// with FlagProcessExec (waking the reader at once) when a process has
	// exec'd, so that its new maps can be read while it lives.
	ReportExits bool
	// AtExec delays sampling of PIDs until each one's next exec completes
	// (as perf's enable_on_exec), for a command started by gprofile.
	AtExec bool
	// TIDs restricts sampling to these threads; nil samples every thread.
	TIDs []uint32
	// Cgroup restricts sampling to tasks in this cgroup v2 or below it;
	// nil samples every cgroup. See OpenCgroup.
	Cgroup *Cgroup
	// Event is the event to sample on; nil means hardware cycles, falling
	// back to cpu-clock when there is no PMU (see SoftwareEvent).
	Event *Event
	// Period, when not 0, samples every Period events (perf's -c) instead
	// of at FrequencyHz. Tracepoints and probes default to every hit
	// (Period 1); a probe counts its hits per CPU, in BPF.
	Period uint64
	// Probes, when not empty, are sampled instead of Event: a stack on
	// every hit (every Period-th) of each kprobe, uprobe, USDT probe or
	// trace event (see ParseProbe), at most MaxProbes. Sample.Probe is the
	// index of the probe hit. They are attached at Open but take samples
	// only from Enable (CountProbes counts hits before that).
	Probes []Probe
	// SoftwareEvent forces the cpu-clock event instead of trying cycles.
	SoftwareEvent bool
	// IncludeIdle keeps samples of the idle task (pid 0).
	IncludeIdle bool
	// SkipPID is a process never sampled (0: none): gprofile leaves itself
	// out, so that a whole-system profile does not show (and pay for
	// symbolizing) the profiler.
	SkipPID uint32
	// RingBytes is the ring buffer size in bytes, a power of two and a
	// multiple of the page size; 0 sizes it from FrequencyHz × CPUs.
	RingBytes int
	// CallGraph says how user stacks are taken: CallGraphFP (the zero
	// value) walks frame pointers in BPF; CallGraphDWARF records the user
	// registers and a copy of the user stack for an unwinder (Sample.Regs,
	// Sample.Stack).
	CallGraph CallGraph
	// StackWindow is the most bytes of user stack copied per sample with
	// CallGraphDWARF, at most MaxStackWindow; 0 means DefaultStackWindow.
	// The copy also ends at the first page that does not read.
	StackWindow int
	// StackBoundByVMA also ends the copy at the end of the VMA that holds
	// sp (bpf_find_vma). Off by default: it costs BPF time every sample
	// and copies no fewer bytes (bench/window/sweep.sh; BENCHMARKS.md,
	// "Whole user stacks"); kept to measure it again.
	StackBoundByVMA bool
	// StackTops ends the copy (CallGraphDWARF) at the top of the
	// thread's stack once the caller has set it with Sampler.SetStackTop:
	// a stack shorter than StackWindow then costs only its own bytes.
	StackTops bool
	// boundedCopy loads profile even where the kernel has bpf_loop
	// (tests: the program older kernels load).
	boundedCopy bool
	// OffCPU, when not nil, also records the targets' off-CPU time
	// (Samples with FlagOffCPU; bpf/offcpu.bpf.c). With OffCPU.Only no
	// sampling event is opened.
	OffCPU *OffCPUConfig
	// Log receives one-line notes (a missing fork tracepoint); nil
	// discards them. The fallback to cpu-clock goes to Verbose.
	Log io.Writer
	// Verbose receives every perf_event_attr opened and the BPF load
	// details; nil prints nothing.
	Verbose io.Writer
}

// CallGraph is how the BPF program takes user stacks (perf's
// --call-graph modes).
type CallGraph uint8

const (
	// CallGraphFP walks the user stack's frame pointers in BPF
	// (bpf_get_stack): Sample.UserIPs, at most MaxStackDepth frames.
	CallGraphFP CallGraph = iota
	// CallGraphDWARF records the user registers and the user stack from
	// sp upward (Sample.Regs, Sample.Stack) for a CFI unwinder.
	CallGraphDWARF
)

// String returns perf's name of the mode: "fp" or "dwarf".
func (c CallGraph) String() string {
	if c == CallGraphDWARF {
		return "dwarf"
	}
	return "fp"
}

// ParseCallGraph parses perf's --call-graph mode names, "fp" and "dwarf".
func ParseCallGraph(s string) (CallGraph, error) {
	switch s {
	case "fp":
		return CallGraphFP, nil
	case "dwarf":
		return CallGraphDWARF, nil
	}
	return 0, fmt.Errorf("call graph mode %q: want fp or dwarf", s)
}

// DefaultStackWindow is the bytes of user stack copied per sample at most
// by default (CallGraphDWARF): the window size sweep in BENCHMARKS.md.
const DefaultStackWindow = 32 << 10

// Sampler is a loaded BPF program attached to one perf event per CPU.
// Create it with Open, read samples with Run, release it with Close.
type Sampler struct {
	cfg       Config
	event     Event
	cpus      []int
	ringBytes int
	objs      bpfObjects
	program   string      // the sampling program loaded (loadObjects)
	switchAny atomic.Bool // switch_any is set (SetStackSwitch)
	links     []link.Link // tracepoint and probe links; not the sampling events'
	probes    probeLinks
	ring      *ringConsumer        // reads the ring in place; nil when it could not be mapped
	reader    *ringbuf.Reader      // reads it instead when ring is nil
	spec      *ebpf.CollectionSpec // the loaded object's spec, for programs loaded later
	malformed atomic.Uint64        // read by Counters from any goroutine
	off       *offCPUProgs         // Config.OffCPU's programs, or nil
	enabled   bool
	start     time.Time // when Enable enabled the events
	closed    bool
	// execsReported: the sched_process_exec program is attached and
	// sends exec records (ExecsReported).
	execsReported bool

	// mu guards the sampling events and the hotplug watcher's state,
	// which Run's watcher changes while other goroutines read them
	// (CPUs, MissedCPUs, Hotplug).
	mu          sync.Mutex
	events      map[int]*cpuEvent // by CPU: the sampling events
	live        bool              // events enabled: the watcher opens and enables
	changes     []CPUChange       // what the watcher saw, in order
	moreChanges int               // changes past maxChanges
	failed      map[int]bool      // online CPUs whose open failed (said once in -v)
	onlineErr   bool              // OnlineCPUsPath did not read at the last look (said once)
	online      onlineFile        // OnlineCPUsPath, kept open for checkCPUs (under mu)
}

// bpfObjects are what load keeps of the profile object: every map (the
// generated profileMaps) and the sampling program of the run's event
// (loadObjects: the other one is nil). The tracepoint
// programs are loaded apart (attachTracing), so that a kernel without
// them still samples.
type bpfObjects struct {
	profileMaps
	Profile   *ebpf.Program `ebpf:"profile"`
	ProfileTP *ebpf.Program `ebpf:"profile_tp"`
}

// close closes every object; Program.Close and Map.Close accept nil (a
// failed load).
func (o *bpfObjects) close() error {
	return errors.Join(o.profileMaps.Close(), o.Profile.Close(), o.ProfileTP.Close())
}

// Open loads the BPF program, opens a disabled perf event on every CPU and
// attaches the program to each. Sampling starts with Run. Any failure
// closes everything opened so far.
//
// Errors wrap ErrPermission (not root and lacking CAP_BPF/CAP_PERFMON),
// ErrNoRingbuf (kernel < 5.8), ErrFrequency or ErrNoPMU.
func Open(cfg Config) (_ *Sampler, err error) {
	if cfg.Period == 0 && len(cfg.Probes) == 0 && (cfg.Event == nil || !cfg.Event.IsTracepoint()) {
		if err := CheckFrequency(cfg.FrequencyHz); err != nil {
			return nil, err
		}
	}
	s := &Sampler{cfg: cfg, cpus: cfg.CPUs}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.cpus == nil {
		if s.cpus, err = OnlineCPUs(); err != nil {
			return nil, err
		}
	}
	if err := features.HaveMapType(ebpf.RingBuf); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, ErrNoRingbuf
		}
		return nil, permissionError("probe BPF ring buffer support", err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, permissionError("raise RLIMIT_MEMLOCK for BPF maps", err)
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	if cfg.OffCPU != nil {
		if err := s.loadOffCPU(); err != nil {
			return nil, err
		}
	}
	switch {
	case len(cfg.Probes) > 0:
		err = s.attachProbes(s.spec)
	case cfg.OffCPU != nil && cfg.OffCPU.Only:
		s.event = EventCPUClock // named in summaries; nothing is sampled
	default:
		err = s.openEvents()
	}
	if err != nil {
		return nil, err
	}
	// One mapping of the ring: a mapping of a BPF ring buffer is resident
	// whole from the start (the kernel maps every page at mmap), so a
	// second one would count the ring's bytes twice in RSS.
	if s.ring, err = newRingConsumer(s.objs.Events); err != nil {
		s.verbosef("gprofile: %v; reading through cilium/ebpf's ring buffer reader\n", err)
		if s.reader, err = ringbuf.NewReader(s.objs.Events); err != nil {
			return nil, fmt.Errorf("open ring buffer reader: %w", err)
		}
	}
	return s, nil
}

// ExecsReported reports whether Run delivers a FlagProcessExec record
// for every exec of a sampled process (Config.ReportExits, with the
// sched_process_exec raw tracepoint attached), as it delivers samples:
// a record the ring buffer had no room for is lost like a sample.
func (s *Sampler) ExecsReported() bool { return s.execsReported }

// CallGraph returns how user stacks are taken: Config.CallGraph, or
// CallGraphFP after a fallback (a kernel that refuses the stack copy).
func (s *Sampler) CallGraph() CallGraph { return s.cfg.CallGraph }

// Event returns the event sampled on (cycles, or cpu-clock after a
// fallback).
func (s *Sampler) Event() Event { return s.event }

// CPUs returns the CPUs sampled on now, ascending: those of Open, less
// the CPUs gone offline, plus those that came online since (Hotplug).
// Safe from any goroutine.
func (s *Sampler) CPUs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cpus)
}

// RingBytes returns the ring buffer size in bytes.
func (s *Sampler) RingBytes() int { return s.ringBytes }

// ringSize returns a ring buffer size for a quarter of a second of
// records of recordBytes at hz on ncpu CPUs, against the reader's poll
// (pollInterval): a power of two between 1 MiB and 256 MiB. The BPF program wakes
// the reader at half full (wakeup_bytes), which leaves it an eighth of a
// second to start draining. The kernel maps the data pages twice (for
// records that wrap), so the ring counts twice its size in gprofile's RSS.
func ringSize(hz uint64, ncpu int, recordBytes int) int {
	want := hz * uint64(ncpu) * uint64(recordBytes) / 4
	size := uint64(1) << 20
	if want > size {
		size = 1 << bits.Len64(want-1)
	}
	return int(min(size, 1<<28))
}

// rateUnknown reports whether the sampling rate follows the workload
// rather than FrequencyHz: a Period, probes or a tracepoint.
func (c *Config) rateUnknown() bool {
	return c.Period != 0 || len(c.Probes) > 0 || (c.Event != nil && c.Event.IsTracepoint())
}

// PlannedRate returns the most samples a second that c plans for:
// FrequencyHz on each CPU sampled (CPUs, or every online CPU from
// /sys/devices/system/cpu/online). It returns false when the rate is not
// planned: it follows the workload (a Period, probes, a tracepoint, or
// OffCPU's context switches), or the online CPUs do not read.
func (c *Config) PlannedRate() (uint64, bool) {
	if c.rateUnknown() || c.OffCPU != nil {
		return 0, false
	}
	n := len(c.CPUs)
	if c.CPUs == nil {
		cpus, err := OnlineCPUs()
		if err != nil {
			return 0, false
		}
		n = len(cpus)
	}
	return c.FrequencyHz * uint64(n), true
}

// wakeupBytes is how much data the ring of ringBytes holds when the BPF
// program wakes the reader (wakeup_bytes): half of it for a sampling
// event, whose rate ringSize planned for; an eighth when the rate is
// unknown (a probe, a tracepoint, a period), so that a burst is drained
// while it lasts. A burst of a new thread's first hits copies whole
// windows (its stack top is not learned yet): TestProbeCommand's 2,000
// uprobe hits in 0.1 s are 15 MB of records, twice the ring.
func wakeupBytes(ringBytes int, rateUnknown bool) int {
	if rateUnknown {
		return ringBytes / 8
	}
	return ringBytes / 2
}

// recordBytes is the record size ringSize plans for: the largest with
// frame pointers (two full stacks); with CallGraphDWARF, a header, a
// typical kernel stack and a window of typical use (dwarfRecordBytes, or
// dwarfTopsRecordBytes when copies stop at the threads' stack tops).
func (s *Sampler) recordBytes() int {
	switch {
	case s.cfg.CallGraph != CallGraphDWARF:
		return offData + maxIPsBytes
	case s.cfg.StackTops:
		return dwarfTopsRecordBytes
	}
	return dwarfRecordBytes
}

// dwarfRecordBytes is the record size ringSize plans for with
// CallGraphDWARF: 16 KiB, the header, a short kernel stack and a window
// above the mean measured on this project's machine (BENCHMARKS.md,
// window sweep: 7-11 KB for C, C++ and Rust main threads, up to the
// whole window for goroutine stacks, whose VMA is Go's heap): an 8 MiB
// ring at 999 Hz on 2 CPUs, a quarter of a second of Go-heavy samples.
const dwarfRecordBytes = 16 << 10

// dwarfTopsRecordBytes is dwarfRecordBytes with Config.StackTops: 2
// KiB, the header, a short kernel stack and the stack bytes a sample
// copies once the tops are learned, about the mean record of the bench's
// workload beside its neighbours (1.9 KB; a 300-deep recursion's is 5.9
// KB): a 1 MiB ring at 999 Hz on 2 CPUs. No sample was lost at 999 and
// 4999 Hz beside the bench's neighbours, in the 60 s run, nor under two
// 300-deep recursions (cmd/gprofile/testdata/dwarf/recurse.c) at 999 and
// 4999 Hz (BENCHMARKS.md, issue 16 session 13).
const dwarfTopsRecordBytes = 2 << 10

func (s *Sampler) load() error {
	spec, err := loadProfile()
	if err != nil {
		return err
	}
	s.ringBytes = s.cfg.RingBytes
	page := os.Getpagesize()
	if s.ringBytes != 0 && (s.ringBytes < page || s.ringBytes&(s.ringBytes-1) != 0) {
		return fmt.Errorf("ring buffer size %d bytes: want a power of two of at least %d (the page size)", s.ringBytes, page)
	}
	rateUnknown := s.cfg.rateUnknown()
	if s.ringBytes == 0 {
		hz := s.cfg.FrequencyHz
		if rateUnknown {
			hz = 4999 // room for a busy event
		}
		s.ringBytes = ringSize(hz, len(s.cpus), s.recordBytes())
	}
	wakeup := wakeupBytes(s.ringBytes, rateUnknown)
	s.spec = spec
	var specs profileSpecs
	if err := spec.Assign(&specs); err != nil {
		return fmt.Errorf("BPF object and its bindings differ (make generate): %w", err)
	}
	specs.Events.MaxEntries = uint32(s.ringBytes)
	window := s.cfg.StackWindow
	if window == 0 {
		window = DefaultStackWindow
	}
	if window < 0 || window > MaxStackWindow {
		return fmt.Errorf("stack window of %d bytes: want 1 to %d", window, MaxStackWindow)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("count possible CPUs: %w", err)
	}
	specs.Scratch.MaxEntries = uint32(ncpu)
	// A run that filters no pids or tids never fills their maps: one
	// entry each instead of 65536 preallocated (BenchmarkOpenSampler).
	// Programs loaded apart that share them take their sizes.
	if s.cfg.PIDs == nil {
		specs.Targets.MaxEntries = 1
	}
	if s.cfg.TIDs == nil {
		specs.TargetTids.MaxEntries = 1
	}
	if s.cfg.StackTops && s.cfg.CallGraph == CallGraphDWARF {
		specs.StackTops.MaxEntries = stackTopsEntries(runningThreads(), ncpu)
	} else {
		specs.StackTops.MaxEntries = 1 // never filled
	}
	v := &specs.profileVariableSpecs
	consts := []constValue{
		{v.FilterTgid, boolByte(s.cfg.PIDs != nil)},
		{v.FilterTid, boolByte(s.cfg.TIDs != nil)},
		{v.IncludeIdle, boolByte(s.cfg.IncludeIdle)},
		{v.FollowForks, boolByte(s.cfg.PIDs != nil)},
		{v.WakeupBytes, uint64(wakeup)},
		{v.TpPeriod, max(s.cfg.Period, 1)},
		{v.ReportExits, boolByte(s.cfg.ReportExits)},
		{v.SkipTgid, s.cfg.SkipPID},
		// The program reads cs from x86-64 pt_regs (the layout it was
		// built with) to skip the kernel walk of user-mode samples.
		{v.UserModeCheck, boolByte(runtime.GOARCH == "amd64")},
		// The program reads x86-64 pt_regs for the user registers.
		{v.CallGraphDwarf, boolByte(s.cfg.CallGraph == CallGraphDWARF && runtime.GOARCH == "amd64")},
		{v.MaxWindow, uint32(window)},
		{v.BoundByVma, boolByte(s.cfg.StackBoundByVMA)},
		{v.UseStackTops, boolByte(s.cfg.StackTops && s.cfg.CallGraph == CallGraphDWARF)},
	}
	if cg := s.cfg.Cgroup; cg != nil {
		consts = append(consts, constValue{v.FilterCgroup, uint8(1)}, constValue{v.CgroupId, cg.ID},
			constValue{v.CgroupLevel, uint32(cg.Level)})
	}
	for _, c := range consts {
		if err := c.spec.Set(c.value); err != nil {
			return fmt.Errorf("set %s: %w", c.spec.Name, err)
		}
	}
	err = s.loadObjects(spec)
	var ve *ebpf.VerifierError
	if err != nil && s.cfg.CallGraph == CallGraphDWARF && errors.As(err, &ve) {
		// A kernel without bpf_task_pt_regs (5.15) or BTF refuses the
		// stack copy: frame pointers still give stacks.
		s.logf("gprofile: this kernel refuses the user stack copy of --call-graph dwarf (it needs Linux 5.15 with BTF): walking frame pointers instead\n")
		s.verbosef("BPF verifier log:\n%+v\n", ve)
		s.cfg.CallGraph = CallGraphFP
		if err = spec.Variables["call_graph_dwarf"].Set(uint8(0)); err == nil {
			err = s.loadObjects(spec)
		}
	}
	if err != nil {
		return s.loadError(err)
	}
	s.verbosef("BPF: loaded program %s, call graph %s, stack window %d bytes, ring buffer %d bytes, wakeup at %d bytes\n",
		s.program, s.cfg.CallGraph, window, s.ringBytes, wakeup)
	for _, tid := range s.cfg.TIDs {
		if err := s.objs.TargetTids.Put(tid, uint8(1)); err != nil {
			return fmt.Errorf("add tid %d to the target map: %w", tid, err)
		}
	}
	if s.cfg.PIDs == nil {
		return s.attachTracing(spec)
	}
	state := uint8(targetOn)
	if s.cfg.AtExec {
		state = targetAtExec
	}
	for _, pid := range s.cfg.PIDs {
		if err := s.objs.Targets.Put(pid, state); err != nil {
			return fmt.Errorf("add pid %d to the target map: %w", pid, err)
		}
	}
	return s.attachTracing(spec)
}

// loadObjects loads the maps and the one sampling program the run's
// event attaches (attachProgram): profile_tp for a tracepoint event,
// profile for the others, or with CallGraphDWARF profile_loop, which
// takes the same records and which the verifier checks in about a third
// of the time (its stack copy and frame-pointer walks are bpf_loop
// callbacks, checked once, instead of loops checked step by step), and
// profile where the kernel refuses it (no bpf_loop before Linux 5.17).
// The verifier checks only the program loaded, and a run's start-up pays
// for its verification (BenchmarkOpenSampler).
func (s *Sampler) loadObjects(spec *ebpf.CollectionSpec) error {
	if s.cfg.Event != nil && s.cfg.Event.IsTracepoint() {
		var o struct {
			profileMaps
			ProfileTP *ebpf.Program `ebpf:"profile_tp"`
		}
		err := spec.LoadAndAssign(&o, nil)
		s.objs = bpfObjects{profileMaps: o.profileMaps, ProfileTP: o.ProfileTP}
		s.program = "profile_tp"
		return err
	}
	if s.cfg.CallGraph == CallGraphDWARF && !s.cfg.boundedCopy {
		var o struct {
			profileMaps
			Profile *ebpf.Program `ebpf:"profile_loop"`
		}
		err := spec.LoadAndAssign(&o, nil)
		if err == nil {
			s.objs = bpfObjects{profileMaps: o.profileMaps, Profile: o.Profile}
			s.program = "profile_loop"
			return nil
		}
		// The same records, copied page by page: a kernel without
		// bpf_loop (before 5.17) refuses profile_loop at its first
		// call. Tried rather than probed for (features.HaveProgramHelper
		// loads a program of its own: half a millisecond of every run).
		s.verbosef("BPF: program profile_loop refused, loading profile: %v\n", err)
	}
	var o struct {
		profileMaps
		Profile *ebpf.Program `ebpf:"profile"`
	}
	err := spec.LoadAndAssign(&o, nil)
	s.objs = bpfObjects{profileMaps: o.profileMaps, Profile: o.Profile}
	s.program = "profile"
	return err
}

// constValue is a load-time constant of the profile object (a generated
// VariableSpec, so that a misspelt name fails to compile) and its value.
type constValue struct {
	spec  *ebpf.VariableSpec
	value any
}

// Values of the targets map (TARGET_* in bpf/profile.bpf.c).
const (
	targetOn     = 1
	targetAtExec = 2
)

func (s *Sampler) loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) && s.cfg.Verbose != nil {
		fmt.Fprintf(s.cfg.Verbose, "BPF verifier log:\n%+v\n", ve)
	}
	return permissionError("load BPF program", err)
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (s *Sampler) logf(format string, args ...any) {
	if s.cfg.Log != nil {
		fmt.Fprintf(s.cfg.Log, format, args...)
	}
}

func (s *Sampler) verbosef(format string, args ...any) {
	if s.cfg.Verbose != nil {
		fmt.Fprintf(s.cfg.Verbose, format, args...)
	}
}

// Close detaches the program, closes every perf event, the ring buffer
// reader and the BPF objects. It is idempotent and safe after a failed
// Open.
func (s *Sampler) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	s.mu.Lock()
	for _, e := range s.events {
		errs = append(errs, e.close())
	}
	s.events, s.live = nil, false
	s.online.close()
	s.mu.Unlock()
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	if s.ring != nil {
		errs = append(errs, s.ring.close())
		s.ring = nil
	}
	errs = append(errs, s.probes.close(), s.off.close(), s.objs.close())
	s.links = nil
	return errors.Join(errs...)
}
