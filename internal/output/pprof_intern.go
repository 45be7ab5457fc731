package output

import (
	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// builder makes the profile of one Aggregator: its locations one for
// one, the mappings and functions they use.
type builder struct {
	a *Aggregator
	p *profile.Profile

	segments  map[segmentKey]*profile.Mapping   // binary segment -> its mapping
	mappings  map[*symbolize.Mapping]rebase     // process mapping -> its segment
	functions map[functionKey]*profile.Function // interned functions
	labels    labelSet                          // labels of every sample
	state     bool                              // a LabelState per sample (off-CPU columns)
	// labelMaps holds the label maps made so far, by the values they
	// hold: samples with the same labels share them (setLabels).
	labelMaps map[labelKey]sampleLabels
}

// labelKey is what a sample's labels are made of: the fields of its key
// that the labels ask for (zero for the others) and its off-CPU state
// ("" without one).
type labelKey struct {
	pid, tid, cpu uint32
	comm, cgroup  strID
	state         string
}

// sampleLabels are the two label maps of a profile.Sample.
type sampleLabels struct {
	str map[string][]string
	num map[string][]int64
}

// segmentKey identifies a binary segment across processes. Exactly one of
// kernel, buildID, inode (with path and device) or anon is set.
type segmentKey struct {
	kernel        bool
	buildID, path string
	device, inode uint64
	offset        uint64
	anon          *symbolize.Mapping // no file identity: one per process mapping
}

// rebase moves an address of a process mapping into its segment's
// canonical range: canonical = addr + delta (mod 2^64).
type rebase struct {
	m     *profile.Mapping
	delta uint64
}

// functionKey is a function's name, system name (the name when it has
// none) and file, interned in the Aggregator's string table.
type functionKey struct {
	name, systemName, filename strID
}

func newBuilder(a *Aggregator) *builder {
	return &builder{
		a:         a,
		p:         &profile.Profile{},
		segments:  make(map[segmentKey]*profile.Mapping),
		mappings:  make(map[*symbolize.Mapping]rebase),
		functions: make(map[functionKey]*profile.Function),
		labelMaps: make(map[labelKey]sampleLabels),
	}
}

// locations makes the profile's locations, one per location of the
// Aggregator, in its order: inlined frames innermost first, then the
// physical frame; the address of a call site moved into its call.
func (b *builder) locations() {
	t := &b.a.locs
	n := max(t.off.len()-1, 0)
	nlines := 0
	for i := range n {
		from, to := t.span(uint32(i))
		for k := from; k < to; k++ {
			if t.frames.at(k).fn != 0 {
				nlines++
			}
		}
	}
	b.p.Location = make([]*profile.Location, n)
	locs := make([]profile.Location, n) // one allocation for all
	lines := make([]profile.Line, 0, nlines)
	for i := range n {
		from, to := t.span(uint32(i))
		f := t.frames.at(from)
		addr := f.addr
		if f.call {
			addr--
		}
		var m *profile.Mapping
		if f.mapping != nil {
			r := b.mapping(f.mapping)
			m, addr = r.m, addr+r.delta
		}
		start := len(lines)
		for k := from; k < to; k++ {
			if c := t.frames.at(k); c.fn != 0 {
				lines = append(lines, profile.Line{Function: b.function(c), Line: int64(c.line)})
			}
		}
		l := &locs[i]
		*l = profile.Location{ID: uint64(i + 1), Mapping: m, Address: addr}
		if len(lines) > start {
			l.Line = lines[start:len(lines):len(lines)]
		}
		b.p.Location[i] = l
	}
}

// samples makes the profile's samples, in the order of Samples: their
// locations are the Aggregator's stacks, each sample with its own slice
// (pprof's filters edit Sample.Location in place), all in one array.
func (b *builder) samples() {
	a := b.a
	recs, more := a.sorted()
	m := len(a.extra)
	nv := numFixed + m
	nlocs := 0
	for i := range recs {
		from, to := a.stacks.span(recs[i].stack)
		nlocs += to - from
	}
	b.p.Sample = make([]*profile.Sample, len(recs))
	samples := make([]profile.Sample, len(recs))
	values := make([]int64, nv*len(recs))
	locs := make([]*profile.Location, 0, nlocs)
	for i := range recs {
		r := &recs[i]
		from, to := a.stacks.span(r.stack)
		start := len(locs)
		for j := from; j < to; j++ {
			locs = append(locs, b.p.Location[*a.stacks.locs.at(j)])
		}
		ps := &samples[i]
		if len(locs) > start {
			ps.Location = locs[start:len(locs):len(locs)]
		}
		ps.Value = values[nv*i : nv*i+nv : nv*i+nv]
		ps.Value[ColumnCount], ps.Value[ColumnWeight] = r.count, r.nanos
		copy(ps.Value[numFixed:], more[m*i:m*i+m])
		b.setLabels(ps, r)
		b.p.Sample[i] = ps
	}
}

// mapping returns the pprof mapping of the binary segment sm maps, and how
// to move sm's addresses into it. The first process mapping of a segment
// sets its range; a later, longer one extends its Limit. Kernel mappings
// share one address space: their range is the union of all, and their
// addresses stay as they are.
func (b *builder) mapping(sm *symbolize.Mapping) rebase {
	if r, ok := b.mappings[sm]; ok {
		return r
	}
	key := segmentOf(sm)
	m := b.segments[key]
	if m == nil {
		m = &profile.Mapping{
			ID:      uint64(len(b.p.Mapping) + 1),
			Start:   sm.Start,
			Limit:   sm.Limit,
			Offset:  sm.Offset,
			File:    sm.Path,
			BuildID: sm.BuildID,
		}
		if key.kernel {
			m.File = KernelFile
		}
		b.p.Mapping = append(b.p.Mapping, m)
		b.segments[key] = m
	}
	r := rebase{m: m}
	if key.kernel {
		m.Start = min(m.Start, sm.Start)
		m.Limit = max(m.Limit, sm.Limit)
	} else {
		r.delta = m.Start - sm.Start
		m.Limit = max(m.Limit, m.Start+(sm.Limit-sm.Start))
	}
	b.mappings[sm] = r
	return r
}

// segmentOf returns the identity of the binary segment sm maps.
func segmentOf(sm *symbolize.Mapping) segmentKey {
	switch {
	case sm.Kernel:
		return segmentKey{kernel: true}
	case sm.BuildID != "":
		return segmentKey{buildID: sm.BuildID, offset: sm.Offset}
	case sm.Inode != 0:
		return segmentKey{path: sm.Path, device: sm.Device, inode: sm.Inode, offset: sm.Offset}
	default:
		return segmentKey{anon: sm}
	}
}

// function returns the interned function of the named frame c.
func (b *builder) function(c *cframe) *profile.Function {
	sys := c.sys
	if sys == 0 {
		sys = c.fn
	}
	k := functionKey{name: c.fn, systemName: sys, filename: c.file}
	if fn, ok := b.functions[k]; ok {
		if fn.StartLine == 0 { // an inlined copy came first
			fn.StartLine = int64(c.startLine)
		}
		return fn
	}
	strs := &b.a.strs
	fn := &profile.Function{
		ID:         uint64(len(b.p.Function) + 1),
		Name:       strs.str(c.fn),
		SystemName: strs.str(sys),
		Filename:   strs.str(c.file),
		StartLine:  int64(c.startLine),
	}
	b.p.Function = append(b.p.Function, fn)
	b.functions[k] = fn
	return fn
}
