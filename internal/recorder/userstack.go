package recorder

import (
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/symbolize"
	"github.com/gprofile/gprofile/internal/symbolize/procmaps"
	"github.com/gprofile/gprofile/internal/unwind"
)

// TruncatedIP is the user "address" that ends a stack the unwinder cut
// short (window exhausted, no CFI for a pc, a read outside the window,
// depth limit): one below any mapping (the kernel's vm.mmap_min_addr is
// at least a page). The collector names its frame "[truncated]", as perf
// writes "[unknown]", so that a cut stack says so in every output.
const TruncatedIP = 1

// TruncatedFrame is the name of the root frame of a cut stack.
const TruncatedFrame = "[truncated]"

// userStacks unwinds the user stacks of samples taken with
// attach.CallGraphDWARF. The ring buffer reader unwinds a sample before
// it is queued, with the tables already built: the stack window (up to
// 64 KiB, pointing into the ring buffer) then needs no copy, and the
// queue carries user IPs as in frame-pointer mode. A sample that needs a
// table not built yet (a binary's first samples; building a large one
// such as node's is slow: BENCHMARKS.md, "Whole user stacks"), a
// binary the symbolizer has not read, or the symbolizer's lock while the
// worker holds it (symbolizing a new stack can take it for a while),
// goes to the worker with a copy of its window, and the worker unwinds
// it there: the reader does not wait, and no first sample of a new
// binary is lost. The copies in flight are bounded (maxDeferredBytes);
// past that the reader keeps the frames it found, cut where it stopped
// (counted as no-object), rather than stall and lose samples. One
// userStacks per goroutine; they share the Unwinder (safe for concurrent
// use) and the count of deferred bytes.
type userStacks struct {
	u        *unwind.Unwinder
	sym      *symbolize.Symbolizer
	deferred *atomic.Int64 // bytes of windows copied for the worker, not unwound yet
	worker   bool          // the worker's: reads binaries, builds tables
	procs    map[uint32]*codeProcess
	stops    [unwind.NumStops]uint64 // samples by the reason their unwind stopped
	defers   uint64                  // samples handed to the worker

	// The reader's, with attach.Config.StackTops: the stack tops it
	// learns from whole stacks and sets in the sampler (learnTop).
	tops    stackTops
	maxTops int                  // threads the sampler holds tops of (attach.Sampler.StackTopsCap); 0: maxStackTops
	top     map[uint32]threadTop // by tid
	tids    map[uint32][]uint32  // by pid: its tids in top, for forget
	topCuts uint64               // samples cut by a top (FlagWindowTop), each top then deleted
	// With attach.CallGraphDWARF, where the reader and the worker list
	// processes whose stacks switch (learnSwitch), and the reader's
	// record of those it listed.
	sw stackSwitches
	// The reader's verdicts by process: true listed, false a whole
	// stack of its ended outside Go code (not looked at again).
	switches map[uint32]bool
	// The reader's, for listExec: the procfs mount (<procRoot>/PID/exe),
	// and its verdicts on the programs exec'd so far, by file.
	procRoot string
	goExes   map[exeID]bool
}

// exeID names a program file as exec'd: its device, inode, size and
// modification time (ns).
type exeID struct {
	dev, ino    uint64
	size, mtime int64
}

// maxGoExes bounds the reader's verdicts on programs (goExes): past it,
// they start over.
const maxGoExes = 4096

// stackTops is where the reader puts the stack tops it learns
// (attach.Sampler).
type stackTops interface {
	SetStackTop(tid uint32, top uint64) error
	DeleteStackTop(tid uint32) error
}

// stackSwitches is where the reader and the worker list the processes
// whose samples need a second window (attach.Sampler).
type stackSwitches interface {
	SetStackSwitch(pid uint32, lo, hi uint64) error
	DeleteStackSwitch(pid uint32) error
}

// threadTop is what the reader knows of one thread's stack top.
type threadTop struct {
	top  uint64 // the address set in the sampler; 0: none
	cuts int    // samples a top of the thread cut
}

// Bounds of the stack-top learning: the threads with a top, at most (the
// sampler's LRU map holds as many, or fewer: userStacks.maxTops; past
// it the reader forgets its copies and starts over), and the samples one thread may lose to a wrong top
// before it is copied whole for good (a thread that switches stacks: Go
// threads run goroutines on stacks of their own).
const (
	maxStackTops     = 16384
	maxTopCutsPerTID = 2
)

// workerMemoBits sizes the worker's rule memo (unwind.Unwinder.Sibling):
// 2048 slots, 48 KiB, where the reader's has 16384. The worker unwinds
// only the samples the reader deferred, most of them at start-up, whose
// few thousand lookups would touch every page of a memo as large as the
// reader's (a page fault each) for little reuse.
const workerMemoBits = 11

// maxDeferredBytes bounds the stack windows copied for the worker and not
// unwound yet: 8 MiB, about 800 windows of 10 KiB.
const maxDeferredBytes = 8 << 20

// newUserStacks returns the reader's userStacks or (worker) the
// worker's, sharing u and deferred.
func newUserStacks(sym *symbolize.Symbolizer, u *unwind.Unwinder, deferred *atomic.Int64, worker bool) *userStacks {
	return &userStacks{u: u, sym: sym, deferred: deferred, worker: worker, procs: map[uint32]*codeProcess{}}
}

// unwindSample replaces smp.UserIPs with the unwound user stack of a
// sample with user registers (attach.FlagUserRegs), leaf first, ending
// with TruncatedIP when the unwind was cut, and reports true. The
// reader's reports false, leaving smp as it is, when the sample is to go
// to the worker (its window copied, counted in deferred). Other samples
// are left as they are (true).
func (us *userStacks) unwindSample(smp *attach.Sample) bool {
	if smp.Flags&attach.FlagUserRegs == 0 {
		return true
	}
	if us.worker {
		defer us.deferred.Add(-int64(len(smp.Stack)))
	}
	p := us.procs[smp.PID]
	if p == nil {
		p = &codeProcess{sym: us.sym, u: us.u, pid: smp.PID, how: symbolize.CodeTry}
		if us.worker {
			// The worker sees no exec records to drop a process's
			// objects at (forget): it keeps none across samples.
			p.how = symbolize.CodeRead
		} else {
			us.procs[smp.PID] = p
		}
	}
	regs := unwind.Regs(smp.Regs)
	// Into smp's own buffer (empty: no frame-pointer IPs with
	// registers): a sample in the worker's queue owns its slices.
	p.missing = false
	var sw unwind.StackSwitch // a Go function's vDSO call on the g0 stack
	if smp.Flags&attach.FlagStackSwitch != 0 {
		sw = unwind.StackSwitch{Off: int(smp.SwitchOff), SP: smp.SwitchSP}
	}
	var ips []uint64
	var stop unwind.Stop
	var top uint64
	if us.worker {
		// The worker sees no execs (forget): no stack memo.
		ips, stop, top = us.u.UnwindSwitch(smp.UserIPs[:0], p, &regs, smp.Stack, sw)
	} else {
		ips, stop, top = us.u.UnwindMemo(smp.PID, smp.UserIPs[:0], p, &regs, smp.Stack, sw)
	}
	if p.missing && us.deferred.Load()+int64(len(smp.Stack)) > maxDeferredBytes {
		// Too much waits for the worker already: keep the frames found
		// so far, cut (waiting here for the worker's lock or building a
		// table here would stall the ring buffer and lose samples).
		p.missing = false
	}
	if p.missing {
		us.defers++
		us.deferred.Add(int64(len(smp.Stack)))
		return false
	}
	us.stops[stop]++
	if us.tops != nil {
		us.learnTop(smp, stop, top)
	}
	if us.sw != nil && smp.Flags&attach.FlagStackSwitch == 0 {
		us.learnSwitch(smp.PID, p, ips, stop)
	}
	if stop.Truncated() {
		ips = append(ips, TruncatedIP)
	}
	smp.UserIPs = ips
	return true
}

// learnTop learns from one unwound sample the top of its thread's stack
// (the sampler then copies no more than sp up to there): a whole stack
// raises the thread's top to the CFA of its outermost frame (top,
// unwind.Unwinder.UnwindSwitch; of the goroutine's stack for a sample
// whose window switched stacks);
// a stack cut at the window after the copy stopped at the top
// (attach.FlagWindowTop: a new thread with a reused tid, or one that
// switched stacks) deletes it, so that the next samples are copied whole,
// and after maxTopCutsPerTID such cuts the thread gets no top again.
// Errors of the map updates leave the copy as it was (a whole window).
func (us *userStacks) learnTop(smp *attach.Sample, stop unwind.Stop, top uint64) {
	tid := smp.TID
	if tid == 0 {
		return
	}
	t, known := us.top[tid]
	switch {
	case stop == unwind.StopWindow && smp.Flags&attach.FlagWindowTop != 0:
		us.topCuts++
		if us.tops.DeleteStackTop(tid) != nil {
			return
		}
		t.top = 0
		t.cuts++
	case stop == unwind.StopComplete && top > 0:
		if t.cuts >= maxTopCutsPerTID || top <= t.top || us.tops.SetStackTop(tid, top) != nil {
			return
		}
		t.top = top
	default:
		return
	}
	if !known {
		if n := us.maxTops; len(us.top) >= maxStackTops || n > 0 && len(us.top) >= n {
			clear(us.top)
			clear(us.tids)
		}
		us.tids[smp.PID] = append(us.tids[smp.PID], tid)
	}
	us.top[tid] = t
}

// learnSwitch lists process pid in the sampler's switch_tgids (so that
// its samples whose frame pointer leads off the window get a second
// window from there, attach.Sampler.SetStackSwitch) when an unwind of
// its (ips, leaf first, ended by stop) ends in Go code: a Go program's
// stacks end at runtime.goexit or mstart, and one cut in
// runtime.asmcgocall, under C code called through cgo on the g0 stack,
// ends there. So a Go program found running, or Go code in a library,
// is listed at its first unwound sample, before its first cgo call as
// a rule (one exec'd while gprofile runs at its exec: listExec). The
// reader lists a process once
// (until forget), and remembers one whose whole stacks end outside Go
// code (a C program: not looked at again); the worker, which sees a
// process's first samples but no exits, lists at each sample it unwinds
// that ends in Go code.
func (us *userStacks) learnSwitch(pid uint32, p *codeProcess, ips []uint64, stop unwind.Stop) {
	if _, done := us.switches[pid]; done || len(ips) == 0 {
		return
	}
	pc := ips[len(ips)-1]
	if len(ips) > 1 {
		pc-- // a return address: the call
	}
	obj, ok := p.Object(pc)
	if !ok || obj.Kind != unwind.KindELF || !us.u.HasTable(obj) || us.u.Table(obj).Stats().GoFuncs == 0 {
		if stop == unwind.StopComplete {
			us.decideSwitch(pid, false)
		}
		return
	}
	lo, hi, ok := p.mapping(pc)
	if ok && us.sw.SetStackSwitch(pid, lo, hi) == nil {
		us.decideSwitch(pid, true)
	}
}

// listExec lists process pid, which has just exec'd, when its new
// program is Go (goProgram), so that its first samples already get the
// goroutine's stack. learnSwitch would list it at its first unwound
// sample, which the reader sees a ring buffer read later: a short Go
// program's first tens of milliseconds of samples in runtime.systemstack
// calls, cgo or the vDSO were cut (TestDwarfGoFirstSamples). The sampler
// wakes the reader at each exec (attach.Sampler.ExecsReported), before
// the Go runtime has started its threads. The reader's only.
func (us *userStacks) listExec(pid uint32) {
	if us.sw == nil || us.worker {
		return
	}
	ino, ok := us.goProgram(pid)
	if !ok {
		return
	}
	lo, hi, ok := execMapping(fmt.Sprintf("%s/%d/maps", us.procRoot, pid), ino)
	if ok && us.sw.SetStackSwitch(pid, lo, hi) == nil {
		us.decideSwitch(pid, true)
	}
}

// goProgram reports whether process pid runs a Go program
// (<procRoot>/PID/exe is an ELF file with Go's sections, unwind.IsGoELF),
// and the program file's inode. A file is read once (goExes): a program
// exec'd again (a build's compiler, a shell's commands) costs an open
// and an fstat. A process gone, or a file that is not ELF, is not Go.
func (us *userStacks) goProgram(pid uint32) (ino uint64, isGo bool) {
	f, err := os.Open(fmt.Sprintf("%s/%d/exe", us.procRoot, pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	id := exeID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano()}
	if v, ok := us.goExes[id]; ok {
		return st.Ino, v
	}
	var v bool
	if ef, err := elf.NewFile(f); err == nil {
		v = unwind.IsGoELF(ef)
	}
	if us.goExes == nil || len(us.goExes) >= maxGoExes {
		us.goExes = map[exeID]bool{}
	}
	us.goExes[id] = v
	return st.Ino, v
}

// execMapping returns the addresses [lo, hi) that the executable
// mappings of the file with inode ino span in the maps file path
// (/proc/PID/maps, procmaps.Parse; the lines it could parse); false when
// none is executable.
func execMapping(path string, ino uint64) (lo, hi uint64, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	entries, _ := procmaps.Parse(f)
	for _, e := range entries {
		if !e.Executable() || e.Inode != ino || e.Limit <= e.Start {
			continue
		}
		if !ok || e.Start < lo {
			lo = e.Start
		}
		if !ok || e.Limit > hi {
			hi = e.Limit
		}
		ok = true
	}
	return lo, hi, ok
}

// decideSwitch records the reader's verdict on process pid (listed, or
// not Go); the worker keeps none.
func (us *userStacks) decideSwitch(pid uint32, listed bool) {
	if us.worker {
		return
	}
	if us.switches == nil {
		us.switches = map[uint32]bool{}
	}
	us.switches[pid] = listed
}

// forget drops what is cached about process pid: it exec'd (its
// mappings changed) or exited. Its threads' stack tops go too (a new
// program's stack, or a reused tid, is elsewhere).
func (us *userStacks) forget(pid uint32) {
	delete(us.procs, pid)
	if us.u != nil {
		us.u.ForgetStacks(pid)
	}
	if us.switches[pid] {
		us.sw.DeleteStackSwitch(pid) // best effort: the LRU ages it out
	}
	delete(us.switches, pid)
	if us.tops == nil {
		return
	}
	for _, tid := range us.tids[pid] {
		if us.top[tid].top != 0 {
			us.tops.DeleteStackTop(tid) // best effort: the LRU ages it out
		}
		delete(us.top, tid)
	}
	delete(us.tids, pid)
}

// StopSummary describes stops (samples by unwind.Stop) in one line, such
// as "user stacks: 1980 complete, 20 cut (window 12, no-cfi 8)"; "" when
// no sample was unwound.
func StopSummary(stops [unwind.NumStops]uint64) string {
	var total, cut uint64
	var parts []string
	for s := unwind.Stop(1); s < unwind.NumStops; s++ {
		total += stops[s]
		if s != unwind.StopComplete && stops[s] > 0 {
			cut += stops[s]
			parts = append(parts, fmt.Sprintf("%s %d", s, stops[s]))
		}
	}
	if total == 0 {
		return ""
	}
	line := fmt.Sprintf("user stacks: %d complete, %d cut", stops[unwind.StopComplete], cut)
	if cut > 0 {
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	return line
}

// codeProcess is the unwinder's view of one process (unwind.Process): the
// executable mappings it has asked about, from the symbolizer's process
// table (symbolize.Symbolizer.CodeAt).
type codeProcess struct {
	sym     *symbolize.Symbolizer
	u       *unwind.Unwinder
	pid     uint32
	objs    []codeObject         // looked up so far, most recent last
	how     symbolize.CodeLookup // CodeTry (reader) or CodeRead (worker)
	missing bool                 // the walk stopped for a binary not read, a busy lock or a table not built
}

// codeObject is one mapping of a codeProcess: its bounds [start, limit)
// (process addresses, from the symbolizer's CodeObject) and the
// unwinder's description of it, with its table once built (Object.Table:
// the walk then skips the table cache's lookup, a hash of the key under a
// lock, on every frame).
type codeObject struct {
	start, limit uint64
	obj          unwind.Object
}

// mapping returns the addresses [start, limit) of the mapping that
// holds pc, among those Object has looked up; false when none does.
func (p *codeProcess) mapping(pc uint64) (start, limit uint64, ok bool) {
	for i := range p.objs {
		if o := &p.objs[i]; pc >= o.start && pc < o.limit {
			return o.start, o.limit, true
		}
	}
	return 0, 0, false
}

// maxCodeObjects bounds codeProcess.objs: a process's stacks touch a few
// objects; past this many the oldest go first.
const maxCodeObjects = 32

// Object returns the object that holds pc (unwind.Process). With
// CodeTry, an object the symbolizer cannot answer for now (binary not
// read, lock busy) or whose table is not built yet ends the walk (as no
// object) and sets missing; with CodeRead nothing does.
func (p *codeProcess) Object(pc uint64) (unwind.Object, bool) {
	var c *codeObject
	for i := len(p.objs) - 1; i >= 0; i-- {
		if o := &p.objs[i]; pc >= o.start && pc < o.limit {
			c = o
			break
		}
	}
	if c == nil {
		co, st := p.sym.CodeAt(p.pid, pc, p.how)
		if st == symbolize.CodeNotRead {
			p.missing = true
		}
		if st != symbolize.CodeFound {
			return unwind.Object{}, false
		}
		if len(p.objs) == maxCodeObjects {
			p.objs = append(p.objs[:0], p.objs[1:]...)
		}
		p.objs = append(p.objs, codeObject{start: co.Start, limit: co.Limit, obj: unwindObject(&co)})
		c = &p.objs[len(p.objs)-1]
	}
	if c.obj.Table == nil && c.obj.Kind != unwind.KindJIT {
		if p.how == symbolize.CodeTry && !p.u.HasTable(c.obj) {
			p.missing = true
			return unwind.Object{}, false
		}
		c.obj.Table = p.u.Table(c.obj) // built (CodeTry) or built now (CodeRead)
	}
	return c.obj, true
}

// unwindObject turns the symbolizer's description of a mapping into the
// unwinder's.
func unwindObject(c *symbolize.CodeObject) unwind.Object {
	o := unwind.Object{Key: c.Key, Bias: c.Bias, Path: c.Path}
	switch c.Kind {
	case symbolize.CodeJIT:
		o.Kind = unwind.KindJIT
	case symbolize.CodeVDSO:
		o.Kind = unwind.KindVDSO
	}
	return o
}

// addStops returns a + b, counts of samples by unwind.Stop.
func addStops(a, b [unwind.NumStops]uint64) [unwind.NumStops]uint64 {
	for i := range a {
		a[i] += b[i]
	}
	return a
}
