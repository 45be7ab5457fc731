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
// that exits later keeps its names); after that a sample costs two map
// lookups, the second keyed by the raw IPs. When a process exits, what is
// cached about it (its stack memo here, its maps and address caches in the
// symbolizer) is dropped evictDelay later, once its last samples are in.
type collector struct {
	sym     *symbolize.Symbolizer
	agg     *output.Aggregator
	stream  streamer                         // per-sample writer, or nil
	stacks  map[uint32]map[string]stackEntry // pid -> raw IPs -> stacks
	canon   map[contentHash]*symbolize.Stack // content -> shared stack (canon.go)
	seeds   [2]maphash.Seed
	ckey    []byte              // reused content key buffer
	exited  []exited            // processes to evict, oldest first
	comms   map[string]string   // interned comm strings
	key     []byte              // reused key buffer
	tid     bool                // aggregate by thread (tid label)
	cpu     bool                // aggregate by CPU (cpu label)
	cgroups *attach.CgroupNames // names cgroups (cgroup label), or nil
	wall0   time.Time           // wall time at CLOCK_MONOTONIC 0
	samples uint64
	err     error // first error of the stream writer
}

func newCollector(sym *symbolize.Symbolizer, labels []string, stream streamer) *collector {
	return &collector{
		sym:    sym,
		agg:    output.NewAggregator(),
		stream: stream,
		stacks: map[uint32]map[string]stackEntry{},
		canon:  map[contentHash]*symbolize.Stack{},
		seeds:  [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
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
	c.samples++
	k := binary.NativeEndian.AppendUint16(c.key[:0], uint16(len(s.KernelIPs)))
	for _, ip := range s.KernelIPs {
		k = binary.NativeEndian.AppendUint64(k, ip)
	}
	for _, ip := range s.UserIPs {
		k = binary.NativeEndian.AppendUint64(k, ip)
	}
	c.key = k
	memo := c.stacks[s.PID]
	if memo == nil {
		memo = map[string]stackEntry{}
		c.stacks[s.PID] = memo
	}
	e, ok := memo[string(k)]
	if !ok {
		e.st = trimJunk(c.sym.Stack(s.PID, s.KernelIPs, s.UserIPs))
		e.canon = c.canonical(s.PID, e.st)
		memo[string(k)] = e
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
	c.agg.AddSample(key, e.canon, int64(s.Period))
	if c.stream != nil && c.err == nil {
		m := output.SampleMeta{Time: c.wall0.Add(time.Duration(s.TimeNs)), PID: s.PID, TID: s.TID, CPU: s.CPU, Comm: comm}
		c.err = c.stream.WriteSample(m, e.st)
	}
}

// evict drops the caches of processes that exited evictDelay before now
// (CLOCK_MONOTONIC ns). The aggregated samples keep their stacks.
func (c *collector) evict(now uint64) {
	n := 0
	for n < len(c.exited) && now > c.exited[n].timeNs+uint64(evictDelay) {
		pid := c.exited[n].pid
		delete(c.stacks, pid)
		c.sym.Forget(pid)
		n++
	}
	c.exited = append(c.exited[:0], c.exited[n:]...)
}
