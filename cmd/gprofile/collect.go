package main

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
	"golang.org/x/sys/unix"
)

// collector turns samples into aggregated, symbolized stacks. Each unique
// raw stack of a process is symbolized once, when first seen (so a process
// that exits later keeps its names); after that a sample costs one map
// lookup keyed by its raw bytes.
type collector struct {
	sym     *symbolize.Symbolizer
	agg     *output.Aggregator
	stream  streamer                    // per-sample writer, or nil
	stacks  map[string]*symbolize.Stack // pid + raw IPs -> symbolized stack
	comms   map[string]string           // interned comm strings
	key     []byte                      // reused key buffer
	tid     bool                        // aggregate by thread (tid label)
	cpu     bool                        // aggregate by CPU (cpu label)
	wall0   time.Time                   // wall time at CLOCK_MONOTONIC 0
	samples uint64
	err     error // first error of the stream writer
}

func newCollector(sym *symbolize.Symbolizer, labels []string, stream streamer) *collector {
	return &collector{
		sym:    sym,
		agg:    output.NewAggregator(),
		stream: stream,
		stacks: map[string]*symbolize.Stack{},
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

// add is the per-sample hot path. Every sample weighs its period: ns for
// cpu-clock, events for the others.
func (c *collector) add(s *attach.Sample) {
	c.samples++
	k := binary.NativeEndian.AppendUint32(c.key[:0], s.PID)
	k = binary.NativeEndian.AppendUint16(k, uint16(len(s.KernelIPs)))
	for _, ip := range s.KernelIPs {
		k = binary.NativeEndian.AppendUint64(k, ip)
	}
	for _, ip := range s.UserIPs {
		k = binary.NativeEndian.AppendUint64(k, ip)
	}
	c.key = k
	st, ok := c.stacks[string(k)]
	if !ok {
		st = c.sym.Stack(s.PID, s.KernelIPs, s.UserIPs)
		c.stacks[string(k)] = st
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
	c.agg.AddSample(key, st, int64(s.Period))
	if c.stream != nil && c.err == nil {
		m := output.SampleMeta{Time: c.wall0.Add(time.Duration(s.TimeNs)), PID: s.PID, TID: s.TID, CPU: s.CPU, Comm: comm}
		c.err = c.stream.WriteSample(m, st)
	}
}
