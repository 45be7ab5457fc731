package attach

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// OffCPUConfig turns on off-CPU recording (bpf/offcpu.bpf.c): for the
// Sampler's targets, every interval a thread spends blocked comes as a
// Sample with FlagOffCPU, in the same ring buffer as the CPU samples.
type OffCPUConfig struct {
	// MinBlock is the shortest block sent with its stacks (perf has no
	// such knob; bcc's offcputime -m): shorter ones are summed per thread
	// and state and sent without stacks (FlagOffCPUShort). 0 means
	// DefaultOffCPUMin.
	MinBlock time.Duration
	// Runnable also counts the time a thread waits for a CPU after being
	// preempted (state 'R'), not only sleeps ('S') and uninterruptible
	// waits ('D').
	Runnable bool
	// Only records off-CPU time and opens no sampling event: no CPU
	// samples.
	Only bool
}

// DefaultOffCPUMin is OffCPUConfig.MinBlock's default: 1 ms.
const DefaultOffCPUMin = time.Millisecond

// offCPUFlushNs is how much short off-CPU time a thread sums, per
// state, before the BPF program sends it.
const offCPUFlushNs = 10 * uint64(time.Millisecond)

// Off-CPU record flags (FLAG_OFFCPU* in bpf/offcpu.bpf.c).
const (
	// FlagOffCPU marks an off-CPU record: Period is the time the thread
	// was off the CPU, in ns; OffCPUState says how (S, D, R); the stacks
	// are the thread's when it ran again, the kernel one being the path
	// it blocked in.
	FlagOffCPU = 1 << 8
	// FlagOffCPUShort marks, with FlagOffCPU, the sum of OffCPUBlocks
	// blocks each shorter than OffCPUConfig.MinBlock, of one thread and
	// state: Period is their total ns; no stacks.
	FlagOffCPUShort = 1 << 9
	// FlagOffCPUOngoing marks, with FlagOffCPU, a thread still blocked
	// when recording stopped: Period is its time blocked so far (from its
	// switch-out, or from the start of recording); its stacks are read
	// from the saved registers of the sleeping thread.
	FlagOffCPUOngoing = 1 << 10
)

// offCPUProgs is the loaded off-CPU object of a Sampler and its links.
type offCPUProgs struct {
	maps  offcpuMaps
	progs struct {
		Switch *ebpf.Program `ebpf:"offcpu_switch"`
		Exit   *ebpf.Program `ebpf:"offcpu_exit"`
		Start  *ebpf.Program `ebpf:"offcpu_start"`
		Stop   *ebpf.Program `ebpf:"offcpu_stop"`
		User   *ebpf.Program `ebpf:"offcpu_user"`
	}

	switchL, userL, exitL link.Link
}

// OffCPUCounters are the off-CPU programs' counts, summed over CPUs.
type OffCPUCounters struct {
	// Blocks counts the blocks of target threads that ended (switch-ins
	// after a recorded switch-out); Long those sent with stacks, Short
	// the records of summed short blocks.
	Blocks, Long, Short uint64
	// Lost counts off-CPU records the ring buffer had no room for.
	Lost uint64
	// NoStorage counts switch-outs whose task storage could not be made.
	NoStorage uint64
}

// loadOffCPU loads bpf/offcpu.bpf.c with the sampler's ring buffer and
// target maps, and attaches its switch programs (recording starts; the
// start pass then marks the threads already blocked).
func (s *Sampler) loadOffCPU() error {
	oc := s.cfg.OffCPU
	if runtime.GOARCH != "amd64" {
		return errors.New("off-CPU recording: only on x86-64 for now")
	}
	spec, err := loadOffcpu()
	if err != nil {
		return err
	}
	var specs offcpuSpecs
	if err := spec.Assign(&specs); err != nil {
		return fmt.Errorf("off-CPU BPF object and its bindings differ (make generate): %w", err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("count possible CPUs: %w", err)
	}
	specs.OffcpuScratch.MaxEntries = uint32(ncpu + 1)
	specs.Events.MaxEntries = s.objs.Events.MaxEntries() // replaced by the sampler's
	min := oc.MinBlock
	if min == 0 {
		min = DefaultOffCPUMin
	}
	window := s.cfg.StackWindow
	if window == 0 {
		window = DefaultStackWindow
	}
	v := &specs.offcpuVariableSpecs
	consts := []constValue{
		{v.FilterTgid, boolByte(s.cfg.PIDs != nil)},
		{v.FilterTid, boolByte(s.cfg.TIDs != nil)},
		{v.SkipTgid, s.cfg.SkipPID},
		{v.MinNs, uint64(min)},
		{v.FlushNs, offCPUFlushNs},
		{v.OffcpuRunnable, boolByte(oc.Runnable)},
		{v.CallGraphDwarf, boolByte(s.cfg.CallGraph == CallGraphDWARF)},
		{v.MaxWindow, uint32(window)},
		{v.IterSlot, uint32(ncpu)},
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
	o := &offCPUProgs{}
	s.off = o
	repl := map[string]*ebpf.Map{"events": s.objs.Events, "targets": s.objs.Targets, "target_tids": s.objs.TargetTids}
	for name, m := range repl { // the sizes the sampler gave them
		spec.Maps[name].MaxEntries = m.MaxEntries()
	}
	if err := spec.LoadAndAssign(&o.maps, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return permissionError("create off-CPU BPF maps", err)
	}
	repl = map[string]*ebpf.Map{"events": s.objs.Events, "targets": s.objs.Targets, "target_tids": s.objs.TargetTids,
		"offcpu_tasks": o.maps.OffcpuTasks, "offcpu_counters": o.maps.OffcpuCounters, "offcpu_scratch": o.maps.OffcpuScratch}
	opts := &ebpf.CollectionOptions{MapReplacements: repl}
	if err := spec.LoadAndAssign(&o.progs, opts); err != nil {
		return s.offCPULoadError(err)
	}
	s.verbosef("BPF: loaded off-CPU programs, stacks for blocks of %v or more, runnable %v\n", min, oc.Runnable)
	return nil
}

// offCPULoadError wraps an off-CPU program load error, with the
// verifier's log for -v.
func (s *Sampler) offCPULoadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) && s.cfg.Verbose != nil {
		fmt.Fprintf(s.cfg.Verbose, "BPF verifier log (off-CPU):\n%+v\n", ve)
	}
	return permissionError("load off-CPU BPF programs (they need Linux 5.18 with BTF)", err)
}

// startOffCPU attaches the off-CPU programs and runs the start pass.
func (s *Sampler) startOffCPU() error {
	o := s.off
	var err error
	if o.userL, err = link.AttachTracing(link.TracingOptions{Program: o.progs.User}); err != nil {
		return permissionError("attach off-CPU program to sys_exit", err)
	}
	if o.switchL, err = link.AttachTracing(link.TracingOptions{Program: o.progs.Switch}); err != nil {
		return permissionError("attach off-CPU program to sched_switch", err)
	}
	if o.exitL, err = link.AttachTracing(link.TracingOptions{Program: o.progs.Exit}); err != nil {
		s.logf("gprofile: short off-CPU times of threads that exit are lost (attach sched_process_exit: %v)\n", err)
	}
	if err := runIter(o.progs.Start); err != nil {
		s.logf("gprofile: threads blocked when recording starts count from their next block (%v)\n", err)
	}
	return nil
}

// stopOffCPU detaches the switch-out program, sends the threads still
// blocked as ongoing and every short sum (the stop pass), then detaches
// the rest. Idempotent.
func (s *Sampler) stopOffCPU() error {
	o := s.off
	if o == nil || o.switchL == nil {
		return nil
	}
	errs := []error{o.switchL.Close()}
	o.switchL = nil
	if err := runIter(o.progs.Stop); err != nil {
		errs = append(errs, fmt.Errorf("off-CPU stop pass: %w", err))
	}
	if o.userL != nil {
		errs = append(errs, o.userL.Close())
		o.userL = nil
	}
	if o.exitL != nil {
		errs = append(errs, o.exitL.Close())
		o.exitL = nil
	}
	return errors.Join(errs...)
}

// runIter runs a task iterator program once over every task.
func runIter(p *ebpf.Program) error {
	l, err := link.AttachIter(link.IterOptions{Program: p})
	if err != nil {
		return fmt.Errorf("attach task iterator: %w", err)
	}
	defer l.Close()
	it, err := l.Open()
	if err != nil {
		return fmt.Errorf("open task iterator: %w", err)
	}
	defer it.Close()
	if _, err := io.Copy(io.Discard, it); err != nil {
		return fmt.Errorf("run task iterator: %w", err)
	}
	return nil
}

// close closes the off-CPU links and objects.
func (o *offCPUProgs) close() error {
	if o == nil {
		return nil
	}
	var errs []error
	for _, l := range []link.Link{o.switchL, o.userL, o.exitL} {
		if l != nil {
			errs = append(errs, l.Close())
		}
	}
	o.switchL, o.userL, o.exitL = nil, nil, nil
	errs = append(errs, o.maps.Close(), o.progs.Switch.Close(), o.progs.Exit.Close(),
		o.progs.Start.Close(), o.progs.Stop.Close(), o.progs.User.Close())
	return errors.Join(errs...)
}

// OffCPUCounters reads the off-CPU programs' counters; zero without
// Config.OffCPU.
func (s *Sampler) OffCPUCounters() (OffCPUCounters, error) {
	if s.off == nil {
		return OffCPUCounters{}, nil
	}
	var sums [5]uint64
	for slot := range uint32(len(sums)) {
		var perCPU []uint64
		if err := s.off.maps.OffcpuCounters.Lookup(slot, &perCPU); err != nil {
			return OffCPUCounters{}, fmt.Errorf("read off-CPU counter %d: %w", slot, err)
		}
		for _, v := range perCPU {
			sums[slot] += v
		}
	}
	return OffCPUCounters{Blocks: sums[0], Long: sums[1], Short: sums[2], Lost: sums[3], NoStorage: sums[4]}, nil
}
