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
	stream  Sink                               // the per-sample writer, or nil
	stacks  map[uint32]map[rawHash]*stackEntry // pid -> hash of raw IPs -> stack
	addrs   map[uint32]map[uint64]uint32       // pid -> addrKey -> location in agg
	kaddrs  map[uint64]uint32                  // addrKey of a kernel address -> location in agg
	locIDs  []uint32                           // reused: a raw stack's locations
	missing []int                              // reused: fromLocations' new addresses
	byAddr  uint64                             // new raw stacks made by fromLocations
	gen     uint64                             // sym.Generation() the memo was made at
	seed    maphash.Seed                       // of rawHash
	mult    uint64                             // of rawHash: random, odd
	exited  []exited                           // processes to evict, oldest first
	comms   map[string]string                  // interned comm strings
	entries []stackEntry                       // room for the next new memo entries (newEntry)
	key     []byte                             // reused raw IPs buffer
	scratch symbolize.Stack                    // reused: a new raw stack's frames, without stream
	rec     output.Record                      // reused: the sample handed to stream
	tid     bool                               // aggregate by thread (tid label)
	cpu     bool                               // aggregate by CPU (cpu label)
	cgroups *attach.CgroupNames                // names cgroups (cgroup label), or nil
	us      *userStacks                        // unwinds the samples the reader deferred
	wall0   time.Time                          // wall time at CLOCK_MONOTONIC 0
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
	// entry, when not 0, is 1 + the aggregate's entry that the last
	// sample of this stack went to, under key: a sample with the same key
	// goes there directly (Aggregator.AddToEntry).
	entry uint32
	key   output.SampleKey
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
		stacks: map[uint32]map[rawHash]*stackEntry{},
		addrs:  map[uint32]map[uint64]uint32{},
		kaddrs: map[uint64]uint32{},
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
// and path, a marker frame and their own columns), process exits and
// execs (whose memos it drops); fork records stay with the reader
// (pipeline). Other kinds of samples (probe hits) get their case here,
// and their own weight and aggregate.
func (c *collector) add(s *attach.Sample) {
	switch {
	case s.Flags&attach.FlagProcessExit != 0:
		c.exited = append(c.exited, exited{s.PID, s.TimeNs})
	case s.Flags&attach.FlagProcessExec != 0:
		// Its addresses name other code from now on.
		delete(c.stacks, s.PID)
		delete(c.addrs, s.PID)
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
		c.forgetAll()
	}
	c.samples++
	user := c.userIPs(s)
	h := c.rawHash(s.KernelIPs, user, c.offCPU.kind(s))
	memo := c.stacks[s.PID]
	if memo == nil || len(memo) >= maxMemo {
		memo = map[rawHash]*stackEntry{}
		c.stacks[s.PID] = memo
	}
	e, ok := memo[h]
	switch {
	case !ok:
		e = c.newEntry()
		*e = c.symbolize(s, user)
		if !e.retry {
			memo[h] = e
		}
	case e.jitAt != 0 && s.TimeNs >= e.jitAt:
		tries := e.tries + 1
		e = c.newEntry()
		*e = c.symbolize(s, user)
		if e.tries = tries; tries >= jitTries {
			e.jitAt = 0
		}
		if e.retry {
			delete(memo, h)
		} else {
			memo[h] = e
		}
	}
	c.emit(s, e)
}

// newEntry returns a zero stack memo entry, taken from a slab of 256
// rather than allocated alone: a new raw stack is the common case in an
// interpreter (BenchmarkNewLeaf's allocs).
func (c *collector) newEntry() *stackEntry {
	if len(c.entries) == cap(c.entries) {
		c.entries = make([]stackEntry, 0, 256)
	}
	c.entries = c.entries[:len(c.entries)+1]
	return &c.entries[len(c.entries)-1]
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
	plain := c.offCPU == nil && c.probes == nil && c.cgroups == nil && c.stream == nil
	if plain && e.entry != 0 && e.key.PID == s.PID && e.key.Comm == string(s.Comm) &&
		(!c.tid || e.key.TID == s.TID) && (!c.cpu || e.key.CPU == s.CPU) {
		c.agg.AddToEntry(output.EntryID(e.entry-1), int64(s.Period))
		return
	}
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
	case plain:
		e.entry, e.key = uint32(c.agg.AddStackEntry(key, e.id, int64(s.Period)))+1, key
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
// frame added as its leaf, interned in the aggregate: from the location
// memo when it can (fromLocations), else by symbolizeStack.
func (c *collector) symbolize(s *attach.Sample, user []uint64) stackEntry {
	byAddr := c.stream == nil && s.Flags&attach.FlagOffCPU == 0 && (s.Flags&attach.FlagUserRegs != 0 || len(user) == 0)
	if byAddr {
		if e, ok := c.fromLocations(s, user); ok {
			return e
		}
	}
	e, st := c.symbolizeStack(s, user)
	if byAddr {
		c.rememberLocations(s.PID, s.KernelIPs, user, e.id, st)
	}
	return e
}

// symbolizeStack is symbolize through the symbolizer, frame by frame;
// it returns the stack it interned too.
func (c *collector) symbolizeStack(s *attach.Sample, user []uint64) (stackEntry, *symbolize.Stack) {
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
	e := stackEntry{id: c.agg.InternStack(pid, st), retry: hasNoMapping(st.Frames)}
	if hasUnnamedJIT(st.Frames) {
		e.jitAt = s.TimeNs + uint64(jitRetry)
	}
	if c.stream != nil {
		e.st = st
	}
	return e, st
}

// Memo of locations by address. A new raw stack mostly differs from the
// ones seen before in its leaf address alone: the collector remembers the
// aggregate's location of every address of the stacks it symbolizes,
// per process (kernel addresses for all), so that a stack whose
// addresses are all known but the user leaf is interned from their
// locations (Aggregator.InternLocations), the symbolizer naming the leaf
// alone: BenchmarkNewLeaf.
// This holds for stacks whose frames stand one per address as given: not
// for a frame-pointer walk's (trimJunk may cut them), off-CPU stacks (a
// marker frame leads), or when every sample streams (the stream wants
// the frames). An address with a frame that a later read may name (in no
// mapping, or unnamed JIT code) is not remembered. The memo goes with
// the stack memo: at exec, exit, an interval's end and a new symbolizer
// Generation.

// maxAddrs caps the addresses remembered per process, and the kernel's;
// a memo that has as many starts anew (the stack memo's bound, maxMemo).
const maxAddrs = maxMemo

// addrKey is the memo key of the address at index i of its part (kernel
// or user) of a raw stack: the address, shifted, and whether it is a
// return address (Aggregator.InternStack's call site: not the part's
// leaf, not 0), which its lookup and location depend on.
func addrKey(i int, addr uint64) uint64 {
	k := addr << 1
	if i > 0 && addr != 0 {
		k |= 1
	}
	return k
}

// fromLocations makes the memo entry of the raw stack of sample s (its
// user IPs user) from the location memo, when it holds all but at most
// maxNewAddrs of the stack's addresses, and at least one of them unless
// the stack has one address: each new one, most often the user leaf
// alone, is symbolized by itself (newLocation) rather than the whole
// stack again (BenchmarkNewLeaf, BenchmarkNewCaller). It reports false
// when the stack needs symbolizeStack.
func (c *collector) fromLocations(s *attach.Sample, user []uint64) (stackEntry, bool) {
	ids := c.locIDs[:0]
	missing := c.missing[:0] // indexes in ids of the addresses not in the memo
	for i, addr := range s.KernelIPs {
		id, ok := c.kaddrs[addrKey(i, addr)]
		if !ok {
			if len(missing) == maxNewAddrs {
				return stackEntry{}, false
			}
			missing = append(missing, len(ids))
		}
		ids = append(ids, id)
	}
	if len(user) > 0 {
		m := c.addrs[s.PID]
		for i, addr := range user {
			id, ok := m[addrKey(i, addr)]
			if !ok {
				if addr == TruncatedIP || len(missing) == maxNewAddrs {
					return stackEntry{}, false
				}
				missing = append(missing, len(ids))
			}
			ids = append(ids, id)
		}
	}
	c.locIDs, c.missing = ids, missing
	if len(missing) == len(ids) && len(ids) > 1 {
		return stackEntry{}, false // nothing known: one StackInto for all
	}
	var e stackEntry
	nk := len(s.KernelIPs)
	for _, j := range missing {
		kernel, ips, i := true, s.KernelIPs, j
		if j >= nk {
			kernel, ips, i = false, user, j-nk
		}
		loc, f, ok := c.newLocation(s.PID, kernel, ips, i)
		if !ok {
			return stackEntry{}, false
		}
		ids[j] = loc
		switch {
		case settledFrames(f):
			if kernel {
				c.kaddrMemo()[addrKey(i, ips[i])] = loc
			} else {
				c.addrMemo(s.PID)[addrKey(i, ips[i])] = loc
			}
		case hasNoMapping(f):
			e.retry = true
		case hasUnnamedJIT(f):
			e.jitAt = s.TimeNs + uint64(jitRetry)
		}
	}
	for _, id := range ids {
		c.agg.CountLocation(&c.frames, id)
	}
	c.byAddr++
	e.id = c.agg.InternLocations(ids)
	return e, true
}

// maxNewAddrs is how many addresses not in the location memo a raw
// stack may hold for fromLocations to symbolize them one by one; a stack
// with more (the first of a process, or of a new code path) is
// symbolized whole, in one StackInto.
const maxNewAddrs = 4

// newLocation symbolizes address i of ips, the kernel or the user part
// of a raw stack of process pid, alone, and interns its location: the one
// InternStack gives it in that stack. A return address (i > 0) is
// symbolized after the address before it, so that the symbolizer looks
// it up as one (the call instruction before it), and the frames of that
// one are dropped. ok is false when the frames do not stand for one
// address each.
func (c *collector) newLocation(pid uint32, kernel bool, ips []uint64, i int) (loc uint32, frames []symbolize.Frame, ok bool) {
	from := max(i-1, 0)
	var st *symbolize.Stack
	if kernel {
		st = c.sym.StackInto(&c.scratch, pid, ips[from:i+1], nil)
	} else {
		st = c.sym.StackInto(&c.scratch, pid, nil, ips[from:i+1])
	}
	f, rest, ok := nextAddress(st.Frames)
	if ok && i > 0 {
		f, rest, ok = nextAddress(rest)
	}
	if !ok || len(rest) > 0 {
		return 0, nil, false
	}
	if i > 0 && ips[i] != 0 {
		return c.agg.InternCallLocation(pid, f), f, true
	}
	return c.agg.InternLocation(pid, f), f, true
}

// rememberLocations puts the locations of the raw stack kernel, user of
// process pid, interned as stack id from the frames st, in the memo. It
// remembers nothing when the frames do not stand one address each (a
// frame cut or added).
func (c *collector) rememberLocations(pid uint32, kernel, user []uint64, id output.StackID, st *symbolize.Stack) {
	ids := c.agg.StackLocations(c.locIDs[:0], id)
	c.locIDs = ids
	if len(ids) != len(kernel)+len(user) {
		return
	}
	var m map[uint64]uint32
	if len(user) > 0 {
		m = c.addrMemo(pid)
	}
	f := st.Frames
	for j, loc := range ids {
		group, rest, ok := nextAddress(f) // the frames of address j
		if !ok {
			return // fewer frames than addresses
		}
		f = rest
		if !settledFrames(group) {
			continue
		}
		if j < len(kernel) {
			c.kaddrMemo()[addrKey(j, kernel[j])] = loc
		} else {
			i := j - len(kernel)
			m[addrKey(i, user[i])] = loc
		}
	}
}

// settledFrames reports whether the frames of one address will be named
// the same on the next lookup: none lies in no mapping or in unnamed JIT
// code.
func settledFrames(frames []symbolize.Frame) bool {
	return !hasNoMapping(frames) && !hasUnnamedJIT(frames)
}

// nextAddress splits frames, the frames of a stack's addresses, into
// those of its first address (its inlined frames, then its own) and the
// rest; false when no frame of frames is an address's own.
func nextAddress(frames []symbolize.Frame) (first, rest []symbolize.Frame, ok bool) {
	for n := range frames {
		if !frames[n].Inlined {
			return frames[:n+1], frames[n+1:], true
		}
	}
	return nil, nil, false
}

// addrMemo returns the location memo of process pid, made (or made anew,
// once it holds maxAddrs) when needed.
func (c *collector) addrMemo(pid uint32) map[uint64]uint32 {
	m := c.addrs[pid]
	if m == nil || len(m) >= maxAddrs {
		m = map[uint64]uint32{}
		c.addrs[pid] = m
	}
	return m
}

// kaddrMemo returns the location memo of kernel addresses, emptied
// first when it holds maxAddrs, as addrMemo bounds a process's.
func (c *collector) kaddrMemo() map[uint64]uint32 {
	if len(c.kaddrs) >= maxAddrs {
		clear(c.kaddrs)
	}
	return c.kaddrs
}

// forgetAll empties the stack and location memos.
func (c *collector) forgetAll() {
	clear(c.stacks)
	clear(c.addrs)
	clear(c.kaddrs)
}

// hasNoMapping reports whether one of frames lies in no mapping that the
// symbolizer knew of: its maps may not have been read again yet (that is
// rate-limited), so the next sample of the same raw stack may name it.
func hasNoMapping(frames []symbolize.Frame) bool {
	for i := range frames {
		if frames[i].Reason == symbolize.ReasonNoMapping {
			return true
		}
	}
	return false
}

// hasUnnamedJIT reports whether one of frames lies, unnamed, in memory a
// JIT compiler fills (symbolize.Mapping.JIT), which the process's perf
// map may name later.
func hasUnnamedJIT(frames []symbolize.Frame) bool {
	for i := range frames {
		if f := &frames[i]; f.Reason == symbolize.ReasonNoSymbol && f.Mapping.JIT() {
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
		delete(c.addrs, pid)
		c.sym.Forget(pid)
		c.agg.Retire(pid)
		n++
	}
	c.exited = append(c.exited[:0], c.exited[n:]...)
}
