package main

import (
	"encoding/binary"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
)

// collector turns samples into aggregated, symbolized stacks. Each unique
// raw stack of a process is symbolized once, when first seen (so a process
// that exits later keeps its names); after that a sample costs one map
// lookup keyed by its raw bytes.
type collector struct {
	sym      *symbolize.Symbolizer
	agg      *output.Aggregator
	stacks   map[string]*symbolize.Stack // pid + raw IPs -> symbolized stack
	comms    map[string]string           // interned comm strings
	key      []byte                      // reused key buffer
	nanosFix int64                       // ns per sample when periods are not ns; 0: use Period
	samples  uint64
}

func newCollector(sym *symbolize.Symbolizer, ev attach.Event, freqHz uint64) *collector {
	c := &collector{
		sym:    sym,
		agg:    output.NewAggregator(),
		stacks: map[string]*symbolize.Stack{},
		comms:  map[string]string{},
	}
	if ev.Unit != "nanoseconds" {
		c.nanosFix = int64(1e9 / freqHz)
	}
	return c
}

// add is the per-sample hot path.
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
	nanos := c.nanosFix
	if nanos == 0 {
		nanos = int64(s.Period)
	}
	c.agg.Add(s.PID, comm, st, nanos)
}
