package recorder

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
	"golang.org/x/sys/unix"
)

// collector turns samples into aggregated, symbolized stacks. Each unique
// raw stack of a process is symbolized once, when first seen (so a process
// that exits later keeps its names), cut after its junk frames
// (trimJunk) and interned in the aggregate by content; after that a
// sample costs a hash of its raw IPs and a few map lookups. When a process
// exits, what is cached about it (its stack memo here, its maps and
// address caches in the symbolizer, its entries in the aggregate's index)
// is dropped evictDelay later, once its last samples are in.
type collector struct {
	sym     *symbolize.Symbolizer
	agg     *output.Aggregator
	stream  Sink                              // the per-sample writer, or nil
	stacks  map[uint32]map[rawHash]stackEntry // pid -> hash of raw IPs -> stack
	gen     uint64                            // sym.Generation() the memo was made at
	seed    maphash.Seed                      // of rawHash
	mult    uint64                            // of rawHash: random, odd
	exited  []exited                          // processes to evict, oldest first
	comms   map[string]string                 // interned comm strings
	key     []byte                            // reused raw IPs buffer
	scratch symbolize.Stack                   // reused: a new raw stack's frames, without stream
	rec     output.Record                     // reused: the sample handed to stream
	tid     bool                              // aggregate by thread (tid label)
	cpu     bool                              // aggregate by CPU (cpu label)
	cgroups *attach.CgroupNames               // names cgroups (cgroup label), or nil
	us      *userStacks                       // unwinds the samples the reader deferred
	wall0   time.Time                         // wall time at CLOCK_MONOTONIC 0
	samples uint64
	offCPU  *offCPUCols     // the off-CPU columns and markers, or nil
	probes  *probeCols      // a column per probe with several probes, or nil
	vals    []int64         // reused: the values of one sample, by column
	frames  symbolize.Stats // Frames: the frames of the stacks kept, junk cut, by Reason
	err     error           // first error of the stream sink
}

// stackEntry is what the collector keeps per raw stack of a process.
type stackEntry struct {
	// id is the stack in the aggregate, shared by every process whose
	// stack has the same frames at the same file offsets of the same
	// binaries (output.Aggregator.InternStack).
	id output.StackID
	// st holds this process's frames, addresses as sampled, for the
	// per-sample text and JSON output; nil when nothing streams.
	st *symbolize.Stack
	// retry says not to memoize the entry: a frame lay in no known
	// mapping, which a later read of the process's maps may fix.
	retry bool
	// jitAt, when not 0, is the sample time (CLOCK_MONOTONIC ns) from
	// which the entry is made again: a frame lay in JIT code that the
	// process's perf map did not name yet (its line may land after the
	// code first runs), and tries counts the makings so far.
	jitAt uint64
	tries uint8
}

// jitRetry is how long a memoized stack with unnamed JIT frames is used
// before it is symbolized again (the symbolizer's own wait between two
// reads of a perf map that missed), and jitTries how many times it is:
// about 0.8 s of chances, after which code that no perf map names costs
// no more than other code.
const (
	jitRetry = 100 * time.Millisecond
	jitTries = 8
)

// rawHash is a 128-bit hash of a raw stack (kernel and user IPs): a memo
// key of 16 bytes, where the IPs take up to 1 KiB.
type rawHash [2]uint64

// maxMemo caps the raw stacks memoized per process; a process that has
// more (a long-lived one with ever new stacks) starts a new memo, and
// its stacks are symbolized again (through the symbolizer's address
// cache) as they come back.
const maxMemo = 1 << 14

// newCollector returns a collector that symbolizes with sym, aggregates
// by the labels (output.Label*; perThread adds the thread) and hands
// every sample to stream too when it is not nil.
func newCollector(sym *symbolize.Symbolizer, labels []string, perThread bool, stream Sink) *collector {
	c := &collector{
		sym:    sym,
		agg:    output.NewAggregator(),
		stacks: map[uint32]map[rawHash]stackEntry{},
		seed:   maphash.MakeSeed(),
		mult:   maphash.Comparable(maphash.MakeSeed(), 0) | 1,
		comms:  map[string]string{},
		tid:    perThread || slices.Contains(labels, output.LabelTID),
		cpu:    slices.Contains(labels, output.LabelCPU),
		wall0:  monotonicEpoch(),
	}
	c.stream = stream
	return c
}

// monotonicEpoch returns the wall-clock time at which CLOCK_MONOTONIC
// (bpf_ktime_get_ns) was 0, to turn sample times into wall time.
func monotonicEpoch() time.Time {
	var ts unix.Timespec
	now := time.Now()
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return now
	}
	return now.Add(-time.Duration(ts.Nano()))
}

// evictDelay is how long after its exit a process's caches stay, for
// samples of its other threads still in flight on other CPUs.
const evictDelay = 2 * time.Second

// exited is a process that ended at a CLOCK_MONOTONIC time (ns).
type exited struct {
	pid    uint32
	timeNs uint64
}

// add takes one record of the worker's queue: each kind of record has
// its own path. The sampler sends CPU samples (the stacks of the
// sampling event), off-CPU blocks (attach.FlagOffCPU: the same stacks
// and path, a marker frame and their own columns) and process exits;
// exec and fork records stay with the reader (pipeline). Other kinds of samples
// (probe hits) get their case here, and their own weight and aggregate.
func (c *collector) add(s *attach.Sample) {
	switch {
	case s.Flags&attach.FlagProcessExit != 0:
		c.exited = append(c.exited, exited{s.PID, s.TimeNs})
	default:
		c.addStack(s)
	}
}

// addStack is the per-sample hot path. Every sample weighs its period:
// ns for cpu-clock, events for the others.
func (c *collector) addStack(s *attach.Sample) {
	if len(c.exited) > 0 && s.TimeNs > c.exited[0].timeNs+uint64(evictDelay) {
		c.evict(s.TimeNs)
	}
	if g := c.sym.Generation(); g != c.gen {
		// Debug info arrived in the background (debuginfod): memoized
		// stacks may lack file:line; symbolize them again from now on.
		c.gen = g
		clear(c.stacks)
	}
	c.samples++
	user := c.userIPs(s)
	h := c.rawHash(s.KernelIPs, user, c.offCPU.kind(s))
	memo := c.stacks[s.PID]
	if memo == nil || len(memo) >= maxMemo {
		memo = map[rawHash]stackEntry{}
		c.stacks[s.PID] = memo
	}
	e, ok := memo[h]
	switch {
	case !ok:
		e = c.symbolize(s, user)
		if !e.retry {
			memo[h] = e
		}
	case e.jitAt != 0 && s.TimeNs >= e.jitAt:
		tries := e.tries + 1
		e = c.symbolize(s, user)
		if e.tries = tries; tries >= jitTries {
			e.jitAt = 0
		}
		if e.retry {
			delete(memo, h)
		} else {
			memo[h] = e
		}
	}
	c.emit(s, &e)
}

// userIPs returns the user stack of s, leaf first: the IPs the BPF
// program's frame-pointer walk gave, or that the reader unwound
// (CallGraphDWARF); a sample the reader deferred, because its unwind
// needed a table not built yet, carries its stack window and is unwound
// here, building the table. This is the one place a sample becomes user
// IPs, before the memo, which is keyed by them.
func (c *collector) userIPs(s *attach.Sample) []uint64 {
	if s.Stack != nil {
		c.us.unwindSample(s)
		s.Stack = nil // a copy for this sample only: let it go
	}
	return s.UserIPs
}

// emit hands the sample s of memo entry e to the aggregate, and to the
// per-sample writer while it has not failed. The aggregate is a Sink
// too, but called directly: BenchmarkHotPath pays for an interface call
// and a Record per sample otherwise.
func (c *collector) emit(s *attach.Sample, e *stackEntry) {
	comm, ok := c.comms[string(s.Comm)]
	if !ok {
		comm = string(s.Comm)
		c.comms[comm] = comm
	}
	key := output.SampleKey{PID: s.PID, Comm: comm}
	if c.tid {
		key.TID = s.TID
	}
	if c.cpu {
		key.CPU = s.CPU
	}
	if c.cgroups != nil {
		key.Cgroup = c.cgroups.Name(s.CgroupID)
	}
	var vals []int64
	switch {
	case c.offCPU != nil:
		vals = c.offCPU.values(c.vals[:0], s)
		c.vals = vals
		c.agg.AddValues(key, e.id, vals)
	case c.probes != nil:
		vals = c.probes.values(c.vals[:0], s)
		c.vals = vals
		c.agg.AddValues(key, e.id, vals)
	default:
		c.agg.AddStack(key, e.id, int64(s.Period))
	}
	if c.stream != nil && c.err == nil {
		c.rec = output.Record{
			Meta: output.SampleMeta{Time: c.wall0.Add(time.Duration(s.TimeNs)), PID: s.PID, TID: s.TID, CPU: s.CPU, Comm: comm},
			Key:  key, Stack: e.id, Frames: e.st, Weight: int64(s.Period), Values: vals,
		}
		c.err = c.stream.Add(&c.rec)
	}
}

// rawHash hashes a raw stack: maphash of its bytes, and a polynomial
// over its IPs with a random odd multiplier, so that a clash needs both
// 64-bit halves to clash.
func (c *collector) rawHash(kernel, user []uint64, kind uint64) rawHash {
	ne := binary.NativeEndian
	h2 := uint64(len(kernel)) ^ kind<<32
	k := ne.AppendUint16(c.key[:0], uint16(len(kernel)))
	if kind != 0 { // an off-CPU stack: its marker is part of it
		k = ne.AppendUint64(k, kind)
	}
	for _, ip := range kernel {
		k = ne.AppendUint64(k, ip)
		h2 = (h2 ^ ip) * c.mult
	}
	for _, ip := range user {
		k = ne.AppendUint64(k, ip)
		h2 = (h2 ^ ip) * c.mult
	}
	c.key = k
	return rawHash{maphash.Bytes(c.seed, k), h2}
}

// symbolize makes the memo entry of the raw stack of sample s (its user
// IPs user), seen for the first time in its process: symbolized, cut
// after its junk frames (a frame-pointer walk's; an unwound stack has
// none, and the interrupted pc of a signal frame there follows no call),
// its TruncatedIP root named TruncatedFrame, an off-CPU one's marker
// frame added as its leaf, interned in the aggregate.
func (c *collector) symbolize(s *attach.Sample, user []uint64) stackEntry {
	pid, kernel, unwound := s.PID, s.KernelIPs, s.Flags&attach.FlagUserRegs != 0
	var st *symbolize.Stack
	if c.stream == nil { // st is read here only: reuse its frames
		st = c.sym.StackInto(&c.scratch, pid, kernel, user)
	} else {
		st = c.sym.Stack(pid, kernel, user)
	}
	if !unwound {
		st = trimJunk(st, func(addr uint64) bool { return c.sym.BadReturnAddress(pid, addr) })
	} else if n := len(st.Frames); n > 0 && len(user) > 0 && user[len(user)-1] == TruncatedIP {
		st.Frames[n-1] = symbolize.Frame{Address: TruncatedIP, Function: TruncatedFrame, SystemName: TruncatedFrame}
	}
	for i := range st.Frames {
		c.frames.Frames[st.Frames[i].Reason]++
	}
	if s.Flags&attach.FlagOffCPU != 0 {
		st.Frames = append([]symbolize.Frame{c.offCPU.marker(s)}, st.Frames...)
	}
	e := stackEntry{id: c.agg.InternStack(pid, st), retry: hasNoMapping(st)}
	if hasUnnamedJIT(st) {
		e.jitAt = s.TimeNs + uint64(jitRetry)
	}
	if c.stream != nil {
		e.st = st
	}
	return e
}

// hasNoMapping reports whether a frame of st lies in no mapping that the
// symbolizer knew of: its maps may not have been read again yet (that is
// rate-limited), so the next sample of the same raw stack may name it.
func hasNoMapping(st *symbolize.Stack) bool {
	for i := range st.Frames {
		if st.Frames[i].Reason == symbolize.ReasonNoMapping {
			return true
		}
	}
	return false
}

// hasUnnamedJIT reports whether a frame of st lies, unnamed, in memory a
// JIT compiler fills (symbolize.Mapping.JIT), which the process's perf
// map may name later.
func hasUnnamedJIT(st *symbolize.Stack) bool {
	for i := range st.Frames {
		if f := &st.Frames[i]; f.Reason == symbolize.ReasonNoSymbol && f.Mapping.JIT() {
			return true
		}
	}
	return false
}

// evict drops the caches of processes that exited evictDelay before now
// (CLOCK_MONOTONIC ns). The aggregated samples stay.
func (c *collector) evict(now uint64) {
	n := 0
	for n < len(c.exited) && now > c.exited[n].timeNs+uint64(evictDelay) {
		pid := c.exited[n].pid
		delete(c.stacks, pid)
		c.sym.Forget(pid)
		c.agg.Retire(pid)
		n++
	}
	c.exited = append(c.exited[:0], c.exited[n:]...)
}
