package main

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
	stream  streamer                          // per-sample writer, or nil
	stacks  map[uint32]map[rawHash]stackEntry // pid -> hash of raw IPs -> stack
	gen     uint64                            // sym.Generation() the memo was made at
	seed    maphash.Seed                      // of rawHash
	mult    uint64                            // of rawHash: random, odd
	exited  []exited                          // processes to evict, oldest first
	comms   map[string]string                 // interned comm strings
	key     []byte                            // reused raw IPs buffer
	tid     bool                              // aggregate by thread (tid label)
	cpu     bool                              // aggregate by CPU (cpu label)
	cgroups *attach.CgroupNames               // names cgroups (cgroup label), or nil
	wall0   time.Time                         // wall time at CLOCK_MONOTONIC 0
	samples uint64
	frames  symbolize.Stats // Frames: the frames of the stacks kept, junk cut, by Reason
	err     error           // first error of the stream writer
}

// rawHash is a 128-bit hash of a raw stack (kernel and user IPs): a memo
// key of 16 bytes, where the IPs take up to 1 KiB.
type rawHash [2]uint64

// maxMemo caps the raw stacks memoized per process; a process that has
// more (a long-lived one with ever new stacks) starts a new memo, and
// its stacks are symbolized again (through the symbolizer's address
// cache) as they come back.
const maxMemo = 1 << 14

func newCollector(sym *symbolize.Symbolizer, labels []string, stream streamer) *collector {
	return &collector{
		sym:    sym,
		agg:    output.NewAggregator(),
		stream: stream,
		stacks: map[uint32]map[rawHash]stackEntry{},
		seed:   maphash.MakeSeed(),
		mult:   maphash.Comparable(maphash.MakeSeed(), 0) | 1,
		comms:  map[string]string{},
		tid:    slices.Contains(labels, output.LabelTID),
		cpu:    slices.Contains(labels, output.LabelCPU),
		wall0:  monotonicEpoch(),
	}
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

// add is the per-sample hot path. Every sample weighs its period: ns for
// cpu-clock, events for the others.
func (c *collector) add(s *attach.Sample) {
	if s.Flags&attach.FlagProcessExit != 0 {
		c.exited = append(c.exited, exited{s.PID, s.TimeNs})
		return
	}
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
	h := c.rawHash(s)
	memo := c.stacks[s.PID]
	if memo == nil || len(memo) >= maxMemo {
		memo = map[rawHash]stackEntry{}
		c.stacks[s.PID] = memo
	}
	e, ok := memo[h]
	if !ok {
		e = c.symbolize(s)
		if !e.retry {
			memo[h] = e
		}
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
	c.agg.AddStack(key, e.id, int64(s.Period))
	if c.stream != nil && c.err == nil {
		m := output.SampleMeta{Time: c.wall0.Add(time.Duration(s.TimeNs)), PID: s.PID, TID: s.TID, CPU: s.CPU, Comm: comm}
		c.err = c.stream.WriteSample(m, e.st)
	}
}

// rawHash hashes the raw stack of s: maphash of its bytes, and a
// polynomial over its IPs with a random odd multiplier, so that a clash
// needs both 64-bit halves to clash.
func (c *collector) rawHash(s *attach.Sample) rawHash {
	ne := binary.NativeEndian
	h2 := uint64(len(s.KernelIPs))
	k := ne.AppendUint16(c.key[:0], uint16(len(s.KernelIPs)))
	for _, ip := range s.KernelIPs {
		k = ne.AppendUint64(k, ip)
		h2 = (h2 ^ ip) * c.mult
	}
	for _, ip := range s.UserIPs {
		k = ne.AppendUint64(k, ip)
		h2 = (h2 ^ ip) * c.mult
	}
	c.key = k
	return rawHash{maphash.Bytes(c.seed, k), h2}
}

// symbolize makes the memo entry of the raw stack of s, seen for the
// first time in its process: symbolized, cut after its junk frames,
// interned in the aggregate.
func (c *collector) symbolize(s *attach.Sample) stackEntry {
	pid := s.PID
	st := c.sym.Stack(pid, s.KernelIPs, s.UserIPs)
	st = trimJunk(st, func(addr uint64) bool { return c.sym.BadReturnAddress(pid, addr) })
	for i := range st.Frames {
		c.frames.Frames[st.Frames[i].Reason]++
	}
	e := stackEntry{id: c.canonical(pid, st), retry: hasNoMapping(st)}
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
