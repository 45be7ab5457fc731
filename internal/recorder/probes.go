package recorder

import (
	"fmt"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
)

// probeCols are the columns of a run on several probes: one per probe,
// its hits ("kprobe:vfs_read"/"count"), after the total in ColumnCount.
type probeCols struct {
	first output.Column // the first probe's column; probe i is first+i
	n     int
}

// newProbeCols adds a column per probe to agg (empty), in probes' order
// (attach.Sample.Probe indexes it). Two probes written alike are refused
// (their columns would have one name).
func newProbeCols(agg *output.Aggregator, probes []attach.Probe) (*probeCols, error) {
	p := &probeCols{n: len(probes)}
	for i, pr := range probes {
		c, err := agg.AddColumn(output.ValueType{Type: pr.Spec, Unit: "count"})
		if err != nil {
			return nil, fmt.Errorf("probe %s: %w", pr.Spec, err)
		}
		if i == 0 {
			p.first = c
		}
	}
	return p, nil
}

// values appends the values of s in every column to vals: 1 sample, its
// period as weight, and 1 hit in its probe's column.
func (p *probeCols) values(vals []int64, s *attach.Sample) []int64 {
	for range int(p.first) + p.n {
		vals = append(vals, 0)
	}
	vals[output.ColumnCount] = 1
	vals[output.ColumnWeight] = int64(s.Period)
	if int(s.Probe) < p.n {
		vals[int(p.first)+int(s.Probe)] = 1
	}
	return vals
}
