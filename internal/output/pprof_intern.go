package output

import (
	"encoding/binary"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// builder interns the mappings, locations and functions of one profile.
type builder struct {
	p *profile.Profile

	segments  map[segmentKey]*profile.Mapping          // binary segment -> its mapping
	mappings  map[*symbolize.Mapping]rebase            // process mapping -> its segment
	locations map[locationKey]*profile.Location        // interned locations
	functions map[functionKey]*profile.Function        // interned functions
	stacks    map[*symbolize.Stack][]*profile.Location // converted stacks
	scratch   []byte                                   // location key bytes
	labels    labelSet                                 // labels of every sample
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

// locationKey identifies a location: its mapping, its rebased address and
// its lines (function IDs and line numbers, varint encoded), so that one
// address symbolized differently in two processes (one of them gone, say)
// gives two locations rather than borrowing the other's names.
type locationKey struct {
	mappingID uint64
	address   uint64
	lines     string
}

type functionKey struct {
	name, systemName, filename string
}

func newBuilder() *builder {
	return &builder{
		p:         &profile.Profile{},
		segments:  make(map[segmentKey]*profile.Mapping),
		mappings:  make(map[*symbolize.Mapping]rebase),
		locations: make(map[locationKey]*profile.Location),
		functions: make(map[functionKey]*profile.Function),
		stacks:    make(map[*symbolize.Stack][]*profile.Location),
	}
}

// location returns the interned location of frames, which share one
// address: inlined frames innermost first, then the physical frame.
func (b *builder) location(frames []symbolize.Frame) *profile.Location {
	f := &frames[0]
	addr := f.Address
	var m *profile.Mapping
	if f.Mapping != nil {
		r := b.mapping(f.Mapping)
		m, addr = r.m, addr+r.delta
	}
	var lines []profile.Line
	for i := range frames {
		if frames[i].Function != "" {
			lines = append(lines, profile.Line{Function: b.function(&frames[i]), Line: int64(frames[i].Line)})
		}
	}

	b.scratch = b.scratch[:0]
	for _, ln := range lines {
		b.scratch = binary.AppendUvarint(b.scratch, ln.Function.ID)
		b.scratch = binary.AppendVarint(b.scratch, ln.Line)
	}
	k := locationKey{address: addr, lines: string(b.scratch)}
	if m != nil {
		k.mappingID = m.ID
	}
	if l, ok := b.locations[k]; ok {
		return l
	}
	l := &profile.Location{
		ID:      uint64(len(b.p.Location) + 1),
		Mapping: m,
		Address: addr,
		Line:    lines,
	}
	b.p.Location = append(b.p.Location, l)
	b.locations[k] = l
	return l
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

// function returns the interned function of the named frame f.
func (b *builder) function(f *symbolize.Frame) *profile.Function {
	sys := f.SystemName
	if sys == "" {
		sys = f.Function
	}
	k := functionKey{name: f.Function, systemName: sys, filename: f.File}
	if fn, ok := b.functions[k]; ok {
		if fn.StartLine == 0 { // an inlined copy came first
			fn.StartLine = int64(f.StartLine)
		}
		return fn
	}
	fn := &profile.Function{
		ID:         uint64(len(b.p.Function) + 1),
		Name:       f.Function,
		SystemName: sys,
		Filename:   f.File,
		StartLine:  int64(f.StartLine),
	}
	b.p.Function = append(b.p.Function, fn)
	b.functions[k] = fn
	return fn
}
