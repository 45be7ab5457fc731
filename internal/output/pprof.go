package output

import (
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// Sample types, labels and file name of the profiles BuildPprof makes.
const (
	// LabelComm is the string label that holds a sample's thread name.
	LabelComm = "comm"
	// LabelPID is the numeric label that holds a sample's process ID. It
	// has no unit, so pprof prints it as a plain number and
	// -tagfocus=pid=1234 selects one process.
	LabelPID = "pid"
	// LabelTID is the numeric label that holds a sample's thread ID
	// (Sample.TID), written when Meta.Labels asks for it.
	LabelTID = "tid"
	// LabelCPU is the numeric label that holds the CPU a sample was taken
	// on (Sample.CPU), written when Meta.Labels asks for it.
	LabelCPU = "cpu"
	// LabelCgroup is the string label that holds the cgroup v2 path of a
	// sample's task (Sample.Cgroup), written when Meta.Labels asks for it.
	LabelCgroup = "cgroup"
	// KernelFile is the File of the kernel's mapping, as perf names it.
	KernelFile = "[kernel.kallsyms]"
)

// Meta describes the run a profile comes from.
type Meta struct {
	// Start is when sampling began; the zero Time leaves it out.
	Start time.Time
	// Duration is how long sampling ran (wall clock).
	Duration time.Duration
	// ValueType and ValueUnit name the second sample value (Sample.Nanos),
	// the event's weight, and the period type: "cpu"/"nanoseconds" when
	// empty (cpu-clock), else e.g. "cycles"/"count", "page-faults"/"count",
	// "events"/"count" for tracepoints. ValueType is the default type.
	ValueType, ValueUnit string
	// Period is the nominal sampling period in ValueUnit: 1e9 divided by the
	// frequency in Hz for cpu-clock, the -c count in period mode; 0 when
	// unknown.
	Period int64
	// Comments are free-form lines shown by pprof -comments, such as the
	// command line of the run.
	Comments []string
	// Labels names the labels every sample gets, among LabelPID,
	// LabelTID, LabelComm, LabelCPU and LabelCgroup; nil means pid and comm, an empty
	// slice none. The tid and cpu labels hold Sample.TID and Sample.CPU,
	// so the samples must have been aggregated by thread and CPU
	// (SampleKey.TID and CPU set) for them to mean anything.
	Labels []string
}

// labelSet says which labels the samples of a profile get.
type labelSet struct{ pid, tid, comm, cpu, cgroup bool }

// parseLabels returns the labels names asks for (pid and comm for nil).
func parseLabels(names []string) (labelSet, error) {
	if names == nil {
		return labelSet{pid: true, comm: true}, nil
	}
	var ls labelSet
	for _, n := range names {
		switch n {
		case LabelPID:
			ls.pid = true
		case LabelTID:
			ls.tid = true
		case LabelComm:
			ls.comm = true
		case LabelCPU:
			ls.cpu = true
		case LabelCgroup:
			ls.cgroup = true
		default:
			return ls, fmt.Errorf("unknown label %q (want %s, %s, %s, %s or %s)", n, LabelPID, LabelTID, LabelComm, LabelCPU, LabelCgroup)
		}
	}
	return ls, nil
}

// BuildPprof returns samples as a pprof profile.
//
// Every sample has two values, "samples"/"count" (Sample.Count) and
// Meta.ValueType/ValueUnit (Sample.Nanos, the default; "cpu"/"nanoseconds"
// unless Meta says otherwise) and the labels
// Meta.Labels chooses: by default a string label "comm" (left out when the
// comm is "") and a numeric label "pid"; "tid" and "cpu" are numeric
// labels too. Numeric labels have no unit. Its locations
// are in stack order, leaf first: kernel leaf to kernel root, then user
// leaf to user root. The address of every location but the two leaves is
// the frame's return address minus one (see callSite), inside the call
// instruction. Frames that share an address are one location whose
// Line holds them innermost first, as pprof expects; a location whose
// frames have no function name has no Line, so that pprof -symbolize can
// name it later from the binary.
//
// There is one pprof mapping per binary segment, identified by build ID
// (or, without one, by path, device and inode) and file offset; all kernel
// frames share the mapping "[kernel.kallsyms]". The same segment mapped at
// different addresses in different processes (ASLR) keeps the range of the
// first process seen, and the addresses of the others are moved into it
// (addr - Start + first Start), so that equal code has equal addresses and
// one Location. (Locations are keyed by mapping, address and lines: one
// address named in one process and unnamed in another, whose binary could
// not be read, gives two locations rather than lending or losing names.)
// A mapping with no file identity (anonymous memory such as
// JIT code, or a pseudo-path without a build ID) is kept per process.
// Frames with no mapping become locations with an address only. Mappings
// are in order of first use, except that the first executable file that is
// not a shared library comes first: pprof takes the first mapping for the
// main binary and shows its name in the report header.
//
// The Has* flags of a mapping are true only when every location in it has
// them: HasFunctions when all have a function name, HasFilenames and
// HasLineNumbers when all their lines also have a file and line,
// HasInlineFrames when they are named and at least one location holds
// inlined frames. pprof re-symbolizes only mappings whose flags are all
// false.
//
// BuildPprof fails when meta holds a negative duration or period or an
// unknown label, or when the result does not pass profile.CheckValid (a
// bug).
func BuildPprof(samples []Sample, meta Meta) (*profile.Profile, error) {
	if meta.Duration < 0 || meta.Period < 0 {
		return nil, fmt.Errorf("build pprof profile: negative duration %v or period %d", meta.Duration, meta.Period)
	}
	vt, vu := meta.ValueType, meta.ValueUnit
	if vt == "" {
		vt, vu = "cpu", "nanoseconds"
	}
	labels, err := parseLabels(meta.Labels)
	if err != nil {
		return nil, fmt.Errorf("build pprof profile: %w", err)
	}
	b := newBuilder()
	b.labels = labels
	p := b.p
	p.SampleType = []*profile.ValueType{
		{Type: "samples", Unit: "count"},
		{Type: vt, Unit: vu},
	}
	p.DefaultSampleType = vt
	p.PeriodType = &profile.ValueType{Type: vt, Unit: vu}
	p.Period = meta.Period
	p.DurationNanos = meta.Duration.Nanoseconds()
	if !meta.Start.IsZero() {
		p.TimeNanos = meta.Start.UnixNano()
	}
	p.Comments = slices.Clone(meta.Comments)

	p.Sample = make([]*profile.Sample, 0, len(samples))
	for i := range samples {
		p.Sample = append(p.Sample, b.sample(&samples[i]))
	}
	b.setMappingFlags()
	mainFirst(p.Mapping)
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("build pprof profile: %w", err)
	}
	return p, nil
}

// WritePprof writes samples to w as a gzipped pprof profile made by
// BuildPprof. The error is BuildPprof's or the first one w returned.
func WritePprof(w io.Writer, samples []Sample, meta Meta) error {
	p, err := BuildPprof(samples, meta)
	if err != nil {
		return err
	}
	if err := p.Write(w); err != nil {
		return fmt.Errorf("write pprof profile: %w", err)
	}
	return nil
}

// sample converts one Sample.
func (b *builder) sample(s *Sample) *profile.Sample {
	ps := &profile.Sample{
		Location: b.stackLocations(s.Stack),
		Value:    []int64{s.Count, s.Nanos},
	}
	ls := b.labels
	if ls.pid || ls.tid || ls.cpu {
		ps.NumLabel = make(map[string][]int64, 3)
	}
	if ls.pid {
		ps.NumLabel[LabelPID] = []int64{int64(s.PID)}
	}
	if ls.tid {
		ps.NumLabel[LabelTID] = []int64{int64(s.TID)}
	}
	if ls.cpu {
		ps.NumLabel[LabelCPU] = []int64{int64(s.CPU)}
	}
	if ls.comm && s.Comm != "" {
		ps.Label = map[string][]string{LabelComm: {s.Comm}}
	}
	if ls.cgroup && s.Cgroup != "" {
		if ps.Label == nil {
			ps.Label = map[string][]string{}
		}
		ps.Label[LabelCgroup] = []string{s.Cgroup}
	}
	return ps
}

// stackLocations returns the locations of st, leaf first, in a new slice.
func (b *builder) stackLocations(st *symbolize.Stack) []*profile.Location {
	if st == nil {
		return nil
	}
	locs, ok := b.stacks[st]
	if !ok {
		frames := st.Frames
		for i := 0; i < len(frames); {
			j := locationEnd(frames, i)
			locs = append(locs, b.location(callSite(frames, i, j)))
			i = j
		}
		b.stacks[st] = locs
	}
	// pprof's filters edit Sample.Location in place; give each its own.
	return slices.Clone(locs)
}

// callSite returns frames[i:j], the frames of one location. When they are
// not the leaf of their part (kernel or user) their address is a return
// address; callSite then returns a copy at the address before it, inside
// the call instruction, which is where the symbolizer looked them up and
// where pprof's own symbolizer (go tool pprof -symbolize) must look too:
// at the return address it would find the next line, or the next function
// after a call that ends one. profile.proto allows a non-leaf address in
// the middle of the call instruction; runtime/pprof writes the same.
func callSite(frames []symbolize.Frame, i, j int) []symbolize.Frame {
	if i == 0 || isKernel(&frames[i]) != isKernel(&frames[i-1]) || frames[i].Address == 0 {
		return frames[i:j]
	}
	c := slices.Clone(frames[i:j])
	for k := range c {
		c[k].Address--
	}
	return c
}

// locationEnd returns the end of the location that starts at frames[i]:
// the frames after the inlined ones that precede the physical frame.
// Consecutive physical frames at one address (direct recursion) stay
// separate locations.
func locationEnd(frames []symbolize.Frame, i int) int {
	f := &frames[i]
	j := i
	for j+1 < len(frames) && frames[j].Inlined {
		n := &frames[j+1]
		if n.Address != f.Address || n.Mapping != f.Mapping || isKernel(n) != isKernel(f) {
			break
		}
		j++
	}
	return j + 1
}

// setMappingFlags sets the Has* flags of every mapping from its locations.
func (b *builder) setMappingFlags() {
	type stat struct{ unnamed, noFile, noLine, inline bool }
	stats := make(map[*profile.Mapping]*stat, len(b.p.Mapping))
	for _, m := range b.p.Mapping {
		stats[m] = new(stat)
	}
	for _, l := range b.p.Location {
		if l.Mapping == nil {
			continue
		}
		s := stats[l.Mapping]
		s.unnamed = s.unnamed || len(l.Line) == 0
		s.inline = s.inline || len(l.Line) > 1
		for _, ln := range l.Line {
			s.noFile = s.noFile || ln.Function.Filename == ""
			s.noLine = s.noLine || ln.Line == 0
		}
	}
	for _, m := range b.p.Mapping {
		s := stats[m]
		m.HasFunctions = !s.unnamed
		m.HasFilenames = m.HasFunctions && !s.noFile
		m.HasLineNumbers = m.HasFunctions && !s.noLine
		m.HasInlineFrames = m.HasFunctions && s.inline
	}
}

// sharedLibRx matches the base names of shared libraries: libc.so.6,
// libfoo.so, libbar.so_1.
var sharedLibRx = regexp.MustCompile(`\.so($|[._][0-9])`)

// mainFirst moves the first mapping of an executable that is not a shared
// library or a pseudo-file ("[vdso]", "[kernel.kallsyms]") to the front,
// keeps the order of the others, and numbers them from 1.
func mainFirst(mappings []*profile.Mapping) {
	i := slices.IndexFunc(mappings, func(m *profile.Mapping) bool {
		base := filepath.Base(strings.TrimSuffix(m.File, " (deleted)"))
		return m.File != "" && !strings.HasPrefix(base, "[") && !sharedLibRx.MatchString(base)
	})
	if i > 0 {
		main := mappings[i]
		copy(mappings[1:i+1], mappings[:i])
		mappings[0] = main
	}
	for i, m := range mappings {
		m.ID = uint64(i + 1)
	}
}
