package output

import (
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"
	"github.com/klauspost/compress/gzip"

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
	// DefaultType is the pprof default sample type, the Type of one of
	// the Aggregator's columns (AddColumn); "" means ValueType.
	DefaultType string
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

// BuildPprof returns the samples of a as a pprof profile.
//
// Every sample has a value per column of a: "samples"/"count"
// (Sample.Count), Meta.ValueType/ValueUnit (Sample.Nanos, the default;
// "cpu"/"nanoseconds" unless Meta says otherwise), then the columns
// AddColumn added (Sample.More), Meta.DefaultType choosing the default
// among them; and the labels
// Meta.Labels chooses: by default a string label "comm" (left out when the
// comm is "") and a numeric label "pid"; "tid" and "cpu" are numeric
// labels too. Numeric labels have no unit. With an OffCPUType column
// every sample also gets the string label LabelState (OffCPUFrame).
// Samples with the same labels share their Label and NumLabel maps:
// copy a sample's map before changing it.
// Samples are in the order of
// Samples. Their locations are in stack order, leaf first: kernel leaf to
// kernel root, then user leaf to user root.
//
// The locations are the Aggregator's: pprof location i+1 is its location
// i (InternStack), made once, whatever the number of stacks that share
// it. The address of every location but the two leaves of a stack is the
// frame's return address minus one, inside the call instruction, which is
// where the symbolizer looked it up and where pprof's own symbolizer (go
// tool pprof -symbolize) must look too (profile.proto allows it;
// runtime/pprof writes the same). Frames that share an address are one
// location whose Line holds them innermost first, as pprof expects; a
// location whose frames have no function name has no Line, so that pprof
// -symbolize can name it later from the binary.
//
// There is one pprof mapping per binary segment, identified by build ID
// (or, without one, by path, device and inode) and file offset; all kernel
// frames share the mapping "[kernel.kallsyms]". The same segment mapped at
// different addresses in different processes (ASLR) keeps the range of the
// first process whose location uses it, and the addresses of the others
// are moved into it (addr - Start + first Start), so that equal code has
// equal addresses. A mapping with no file identity (anonymous memory such
// as JIT code, or a pseudo-path without a build ID) is kept per process.
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
// BuildPprof fails when meta holds a negative duration or period, an
// unknown label or a DefaultType that is no column's, or when the result does not pass profile.CheckValid (a
// bug).
func BuildPprof(a *Aggregator, meta Meta) (*profile.Profile, error) {
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
	b := newBuilder(a)
	b.labels = labels
	b.state = a.hasOffCPU()
	p := b.p
	p.SampleType = []*profile.ValueType{
		{Type: "samples", Unit: "count"},
		{Type: vt, Unit: vu},
	}
	for _, c := range a.extra {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: c.Type, Unit: c.Unit})
	}
	p.DefaultSampleType = vt
	if meta.DefaultType != "" {
		if !slices.ContainsFunc(p.SampleType, func(t *profile.ValueType) bool { return t.Type == meta.DefaultType }) {
			return nil, fmt.Errorf("build pprof profile: default sample type %q is not a column", meta.DefaultType)
		}
		p.DefaultSampleType = meta.DefaultType
	}
	p.PeriodType = &profile.ValueType{Type: vt, Unit: vu}
	p.Period = meta.Period
	p.DurationNanos = meta.Duration.Nanoseconds()
	if !meta.Start.IsZero() {
		p.TimeNanos = meta.Start.UnixNano()
	}
	p.Comments = slices.Clone(meta.Comments)

	b.locations()
	b.samples()
	b.setMappingFlags()
	mainFirst(p.Mapping)
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("build pprof profile: %w", err)
	}
	return p, nil
}

// WritePprof writes the samples of a to w as a gzipped pprof profile made
// by BuildPprof. The error is BuildPprof's or the first one w returned.
func WritePprof(w io.Writer, a *Aggregator, meta Meta) error {
	p, err := BuildPprof(a, meta)
	if err != nil {
		return err
	}
	// BestSpeed, as runtime/pprof writes its profiles (Profile.Write's
	// default level costs much more CPU for a file only a little
	// smaller), of klauspost/compress, which compresses faster than
	// compress/gzip for a file a few per cent larger (BenchmarkWritePprof
	// reports the file's size). Its stateless level is faster still, but
	// it compresses each of EncodePprof's writes on its own: half as
	// large again.
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err := EncodePprof(zw, p); err != nil {
		return fmt.Errorf("write pprof profile: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write pprof profile: %w", err)
	}
	return nil
}

// setLabels gives ps the labels b.labels asks for, of the key of r. The
// maps are shared by every sample with the same labels: a whole-system
// profile has thousands of samples and tens of processes, and a pair of
// maps per sample cost BuildPprof much of its time (BenchmarkWritePprof).
func (b *builder) setLabels(ps *profile.Sample, r *record) {
	ls := b.labels
	var k labelKey
	if ls.comm {
		k.comm = r.comm
	}
	if ls.cgroup {
		k.cgroup = r.cgroup
	}
	if ls.pid {
		k.pid = r.pid
	}
	if ls.tid {
		k.tid = r.tid
	}
	if ls.cpu {
		k.cpu = r.cpu
	}
	if b.state {
		k.state = b.a.stateOf(r.stack)
	}
	m, ok := b.labelMaps[k]
	if !ok {
		m = b.makeLabels(k)
		b.labelMaps[k] = m
	}
	ps.Label, ps.NumLabel = m.str, m.num
}

// makeLabels makes the label maps of the samples whose labels are k.
func (b *builder) makeLabels(k labelKey) sampleLabels {
	ls := b.labels
	var m sampleLabels
	if ls.pid || ls.tid || ls.cpu {
		m.num = make(map[string][]int64, 3)
	}
	if ls.pid {
		m.num[LabelPID] = []int64{int64(k.pid)}
	}
	if ls.tid {
		m.num[LabelTID] = []int64{int64(k.tid)}
	}
	if ls.cpu {
		m.num[LabelCPU] = []int64{int64(k.cpu)}
	}
	if comm := b.a.strs.str(k.comm); comm != "" {
		m.str = map[string][]string{LabelComm: {comm}}
	}
	if cg := b.a.strs.str(k.cgroup); cg != "" {
		if m.str == nil {
			m.str = map[string][]string{}
		}
		m.str[LabelCgroup] = []string{cg}
	}
	if b.state {
		if m.str == nil {
			m.str = map[string][]string{}
		}
		m.str[LabelState] = []string{k.state}
	}
	return m
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
// It is compiled on first use, not at every start of gprofile.
var sharedLibRx = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\.so($|[._][0-9])`) })

// mainIndex returns the index of the first mapping of an executable that
// is not a shared library or a pseudo-file, or -1.
func mainIndex(mappings []*profile.Mapping) int {
	return slices.IndexFunc(mappings, func(m *profile.Mapping) bool {
		base := filepath.Base(strings.TrimSuffix(m.File, " (deleted)"))
		return m.File != "" && !strings.HasPrefix(base, "[") && !sharedLibRx().MatchString(base)
	})
}

// mainFirst moves the first mapping of an executable that is not a shared
// library or a pseudo-file ("[vdso]", "[kernel.kallsyms]") to the front,
// keeps the order of the others, and numbers them from 1.
func mainFirst(mappings []*profile.Mapping) {
	if i := mainIndex(mappings); i > 0 {
		main := mappings[i]
		copy(mappings[1:i+1], mappings[:i])
		mappings[0] = main
	}
	for i, m := range mappings {
		m.ID = uint64(i + 1)
	}
}
