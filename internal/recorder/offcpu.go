package recorder

import (
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
)

// offCPUCols is what the collector needs for off-CPU records
// (attach.FlagOffCPU): the aggregate's off-CPU and wall columns, and the
// marker frames of their stacks.
type offCPUCols struct {
	off, wall output.Column
	short     string // the threshold under which blocks are summed, as the marker says it
}

// newOffCPUCols adds the off-CPU and wall columns to agg (empty) and
// chooses wall as the column folded, flame and top show. min is the
// shortest block recorded with its stacks.
func newOffCPUCols(agg *output.Aggregator, min time.Duration) (*offCPUCols, error) {
	o := &offCPUCols{short: min.String()}
	var err error
	if o.off, err = agg.AddColumn(output.OffCPUType); err != nil {
		return nil, err
	}
	if o.wall, err = agg.AddColumn(output.WallType); err != nil {
		return nil, err
	}
	return o, agg.SetDisplayColumn(o.wall)
}

// kind returns what, besides its IPs, makes the raw stack of s an entry
// of its own in the stack memo: 0 for a CPU sample, its state and
// whether it is a short sum for an off-CPU one (with o nil, 0).
func (o *offCPUCols) kind(s *attach.Sample) uint64 {
	if o == nil || s.Flags&attach.FlagOffCPU == 0 {
		return 0
	}
	k := uint64(s.OffCPUState) | 1<<8
	if s.Flags&attach.FlagOffCPUShort != 0 {
		k |= 1 << 9
	}
	return k
}

// marker returns the marker frame of the off-CPU record s.
func (o *offCPUCols) marker(s *attach.Sample) symbolize.Frame {
	short := ""
	if s.Flags&attach.FlagOffCPUShort != 0 && o != nil {
		short = o.short
	}
	return output.OffCPUFrame(s.OffCPUState, short)
}

// values appends the values of s in every column to vals: a CPU sample
// counts 1 with its period as cpu and wall time; an off-CPU record its
// blocks, with their time as off-CPU and wall time.
func (o *offCPUCols) values(vals []int64, s *attach.Sample) []int64 {
	n := int(o.wall) + 1
	for range n {
		vals = append(vals, 0)
	}
	ns := int64(s.Period)
	if s.Flags&attach.FlagOffCPU != 0 {
		vals[output.ColumnCount] = int64(max(s.OffCPUBlocks, 1))
		vals[o.off] = ns
	} else {
		vals[output.ColumnCount] = 1
		vals[output.ColumnWeight] = ns
	}
	vals[o.wall] = ns
	return vals
}
