package recorder

import (
	"fmt"
	"strings"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/symbolize"
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
// attach.CallGraphDWARF, on the ring buffer reader's goroutine, before
// a sample is queued: the stack window (up to 64 KiB, pointing into the
// ring buffer) then never needs a copy, and the queue carries user IPs
// as in frame-pointer mode. The Process adapter keeps, per process, the
// objects it has looked up, so that the steady state takes no lock of
// the symbolizer's.
type userStacks struct {
	u     *unwind.Unwinder
	sym   *symbolize.Symbolizer
	procs map[uint32]*codeProcess
	buf   []uint64
	stops [unwind.NumStops]uint64 // samples by the reason their unwind stopped
}

func newUserStacks(sym *symbolize.Symbolizer) *userStacks {
	return &userStacks{u: unwind.New(unwind.Options{}), sym: sym, procs: map[uint32]*codeProcess{}}
}

// unwindSample replaces smp.UserIPs with the unwound user stack of a
// sample with user registers (attach.FlagUserRegs), leaf first, ending
// with TruncatedIP when the unwind was cut. Other samples are left as
// they are.
func (us *userStacks) unwindSample(smp *attach.Sample) {
	if smp.Flags&attach.FlagUserRegs == 0 {
		return
	}
	p := us.procs[smp.PID]
	if p == nil {
		p = &codeProcess{sym: us.sym, pid: smp.PID}
		us.procs[smp.PID] = p
	}
	regs := unwind.Regs(smp.Regs)
	ips, stop := us.u.Unwind(us.buf[:0], p, &regs, smp.Stack)
	us.stops[stop]++
	if stop.Truncated() {
		ips = append(ips, TruncatedIP)
	}
	us.buf = ips
	smp.UserIPs = ips
}

// forget drops what is cached about process pid: it exec'd (its
// mappings changed) or exited.
func (us *userStacks) forget(pid uint32) { delete(us.procs, pid) }

// Stops returns the samples unwound, by the reason their unwind stopped
// (index unwind.Stop; 0 unused).
func (us *userStacks) Stops() [unwind.NumStops]uint64 { return us.stops }

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
	sym  *symbolize.Symbolizer
	pid  uint32
	objs []symbolize.CodeObject // looked up so far, most recent last
}

// maxCodeObjects bounds codeProcess.objs: a process's stacks touch a few
// objects; past this many the oldest go first.
const maxCodeObjects = 32

// Object returns the object that holds pc (unwind.Process).
func (p *codeProcess) Object(pc uint64) (unwind.Object, bool) {
	for i := len(p.objs) - 1; i >= 0; i-- {
		if c := &p.objs[i]; pc >= c.Start && pc < c.Limit {
			return unwindObject(c), true
		}
	}
	c, ok := p.sym.CodeAt(p.pid, pc)
	if !ok {
		return unwind.Object{}, false
	}
	if len(p.objs) == maxCodeObjects {
		p.objs = append(p.objs[:0], p.objs[1:]...)
	}
	p.objs = append(p.objs, c)
	return unwindObject(&c), true
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
