package recorder

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
	"github.com/gprofile/gprofile/internal/unwind"
)

// Config says what to record and where the samples go.
type Config struct {
	// Sampling configures the sampler that New opens and enables
	// (attach.Open); the caller checks it against the user's input first.
	// It is ignored when Source is set.
	Sampling attach.Config
	// Source, when not nil, gives the samples instead of a sampler that New
	// opens: for benchmarks and tests that make their own records. Result
	// then has no counters, event or CPUs.
	Source Source
	// Symbolize configures the symbolizer (symbolize.New).
	Symbolize symbolize.Options
	// Labels are the output.Label* names the aggregate keys samples by,
	// besides the pid and comm it always keys them by: LabelTID,
	// LabelCPU, LabelCgroup; others are ignored here.
	Labels []string
	// PerThread keys the aggregate by thread without the tid label (for
	// folded stacks per thread).
	PerThread bool
	// Stream, when not nil, gets every sample as it is symbolized, with
	// its frames (output.TextWriter, output.JSONWriter). Its first error
	// stops it (Result.StreamErr); recording goes on.
	Stream Sink
	// Interval, when positive, makes the run continuous: every Interval
	// the aggregate so far is handed to OnInterval, which must be set,
	// and a new one begins while sampling goes on; Result.Aggregate is
	// then nil (the last, partial interval goes to OnInterval too).
	Interval time.Duration
	// OnInterval gets each finished interval, in order, on a goroutine of
	// its own (not the sampling one); while it runs, one more interval may
	// finish and wait. Run returns after its call for the last interval.
	OnInterval func(Interval)
	// OffCPU gives the aggregate its off-CPU and wall columns with a
	// Source (Sampling.OffCPU does with a sampler): for tests and
	// benchmarks that make off-CPU records.
	OffCPU bool
	// AfterSampling, when not nil, is called once sampling has ended and
	// every sample is aggregated, before the symbolizer's caches go:
	// everything gathered is still in memory (gprofile's
	// GPROFILE_MEMPROFILE heap profile).
	AfterSampling func()
}

// Sink takes the samples of a run, one at a time, on the recorder's
// worker goroutine: output.Aggregator, output.TextWriter and
// output.JSONWriter are sinks. The Record is valid only during the call.
type Sink interface {
	// Add takes one sample; an error stops the stream (Result.StreamErr),
	// not the recording.
	Add(r *output.Record) error
}

// Source delivers samples: an *attach.Sampler, or for benchmarks any
// reader of records in its layout.
type Source interface {
	// RunIdle calls fn for every sample, in order, on the calling
	// goroutine, until ctx is done or the samples end, and calls idle
	// whenever it is about to wait for more (attach.Sampler.RunIdle). The
	// Sample is valid only during fn.
	RunIdle(ctx context.Context, fn func(*attach.Sample), idle func()) error
}

// Result is what a run gathered.
type Result struct {
	// Aggregate holds every sample, merged by key and stack; nil in a
	// continuous run (Config.Interval), which hands it over by intervals.
	Aggregate *output.Aggregator
	// Samples is the number of samples recorded (process exit and exec
	// records are not samples).
	Samples uint64
	// Start is when sampling began (the sampler was enabled); Elapsed is
	// how long it ran, wall clock.
	Start   time.Time
	Elapsed time.Duration
	// Counters are the sampler's counters at the end (samples lost, stacks
	// not taken); zero with Config.Source.
	Counters attach.Counters
	// Event is the event sampled, CPUs the CPUs sampled at the end,
	// MissedCPUs the CPUs online at the end that were not sampled (their
	// perf events would not open), Hotplug the CPUs that went offline or
	// came online during the run (attach.Sampler.Hotplug: the first ones,
	// HotplugMore counts the rest); zero with Config.Source.
	Event       attach.Event
	CPUs        []int
	MissedCPUs  []int
	Hotplug     []attach.CPUChange
	HotplugMore int
	// Symbols are the symbolizer's statistics, with Frames counting the
	// frames of the distinct stacks as kept (after the junk cut), each
	// stack once, by symbolize.Reason.
	Symbols symbolize.Stats
	// SymbolNotes are the symbolizer's end-of-run notes
	// (symbolize.Symbolizer.Notes: debuginfod downloads, unfinished ones
	// included).
	SymbolNotes []string
	// StreamErr is the first error of Config.Stream, or nil.
	StreamErr error
	// OffCPU are the off-CPU programs' counters (Sampling.OffCPU); zero
	// without.
	OffCPU attach.OffCPUCounters
	// UserStacks counts the samples whose user stack was unwound
	// (attach.CallGraphDWARF) by the reason the unwind stopped, indexed
	// by unwind.Stop (StopComplete: whole); StopSummary describes it.
	UserStacks [unwind.NumStops]uint64
	// StackTopCuts counts the samples (of UserStacks' window stops)
	// whose copy a learned stack top cut (Sampling.StackTops): the
	// thread's top is then forgotten.
	StackTopCuts uint64
}

// A Recorder samples, symbolizes and aggregates one run: New opens it,
// Run records until its context is done, Close releases it.
type Recorder struct {
	cfg     Config
	sym     *symbolize.Symbolizer
	sampler *attach.Sampler // nil with Config.Source
	src     Source
	c       *collector
	us      *userStacks // unwinds user stacks on the reader's goroutine
	start   time.Time
	samples atomic.Uint64 // samples read so far, for a status line
	swapDue atomic.Bool   // the reader is to start a new interval
	iv      *intervals    // nil unless Config.Interval is set
	// mu orders Counters and TargetsAlive against the end of Run: once
	// ran is set the sampler is being closed (closing), and they do not
	// touch it.
	mu      sync.Mutex
	ran     bool
	final   attach.Counters
	closing chan error // the sampler's Close, started by Run
	closed  bool
}

// New opens the symbolizer (which starts loading kernel symbols in the
// background) and, unless cfg.Source is set, opens and enables the
// sampler: samples start to gather in the ring buffer from here, and
// Result.Elapsed counts from here. Its errors are those of symbolize.New,
// attach.Open, attach.Sampler.Enable and attach.NewCgroupNames (with the
// cgroup label); on error, everything opened is closed.
func New(cfg Config) (_ *Recorder, err error) {
	r := &Recorder{cfg: cfg, src: cfg.Source}
	if cfg.Interval > 0 && cfg.OnInterval == nil {
		return nil, errors.New("recorder: Config.Interval without OnInterval")
	}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.sym, err = symbolize.New(cfg.Symbolize); err != nil {
		return nil, err
	}
	if r.src == nil {
		if r.sampler, err = attach.Open(cfg.Sampling); err != nil {
			return nil, err
		}
		if err = r.sampler.Enable(); err != nil {
			return nil, err
		}
		if r.sampler.ExecsReported() {
			r.sym.SetExecsReported(r.sampler.EventsDelivered)
		}
		r.src = r.sampler
	}
	r.start = time.Now()
	r.c = newCollector(r.sym, cfg.Labels, cfg.PerThread, cfg.Stream)
	if oc := cfg.Sampling.OffCPU; oc != nil && cfg.Source == nil || cfg.OffCPU {
		min := attach.DefaultOffCPUMin
		if oc != nil && oc.MinBlock != 0 {
			min = oc.MinBlock
		}
		if r.c.offCPU, err = newOffCPUCols(r.c.agg, min); err != nil {
			return nil, err
		}
	}
	if probes := cfg.Sampling.Probes; len(probes) > 1 && r.c.offCPU == nil {
		if r.c.probes, err = newProbeCols(r.c.agg, probes); err != nil {
			return nil, err
		}
	}
	u, deferred := unwind.New(unwind.Options{}), new(atomic.Int64)
	r.us = newUserStacks(r.sym, u, deferred, false)
	r.c.us = newUserStacks(r.sym, u.Sibling(workerMemoBits), deferred, true) // a rule memo of its own
	if r.sampler != nil && cfg.Sampling.CallGraph == attach.CallGraphDWARF {
		r.us.sw, r.c.us.sw = r.sampler, r.sampler
		r.us.procRoot = cmp.Or(cfg.Symbolize.ProcRoot, "/proc")
	}
	if r.sampler != nil && cfg.Sampling.StackTops && cfg.Sampling.CallGraph == attach.CallGraphDWARF {
		r.us.tops, r.us.top, r.us.tids = r.sampler, map[uint32]threadTop{}, map[uint32][]uint32{}
		r.us.maxTops = r.sampler.StackTopsCap()
	}
	if slices.Contains(cfg.Labels, output.LabelCgroup) {
		if r.c.cgroups, err = attach.NewCgroupNames(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Notes returns the lines worth telling the user before the run (why
// kernel symbols are read from /proc/kallsyms: symbolize.Symbolizer.Note).
// It waits for the kernel symbols to load.
func (r *Recorder) Notes() []string {
	if n := r.sym.Note(); n != "" {
		return []string{n}
	}
	return nil
}

// Start returns when sampling began.
func (r *Recorder) Start() time.Time { return r.start }

// Samples returns the number of samples read so far; safe to call from
// any goroutine while Run runs.
func (r *Recorder) Samples() uint64 { return r.samples.Load() }

// Counters returns the sampler's counters now (attach.Sampler.Counters);
// zero with Config.Source.
func (r *Recorder) Counters() (attach.Counters, error) {
	if r.sampler == nil {
		return attach.Counters{}, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ran {
		return r.final, nil
	}
	return r.sampler.Counters()
}

// Event returns the event sampled; zero with Config.Source.
func (r *Recorder) Event() attach.Event {
	if r.sampler == nil {
		return attach.Event{}
	}
	return r.sampler.Event()
}

// CPUs returns the CPUs sampled now (attach.Sampler.CPUs); nil with
// Config.Source. Safe from any goroutine.
func (r *Recorder) CPUs() []int {
	if r.sampler == nil {
		return nil
	}
	return r.sampler.CPUs()
}

// Hotplug returns the CPUs that went offline or came online so far
// (attach.Sampler.Hotplug); nil, 0 with Config.Source. Safe from any
// goroutine.
func (r *Recorder) Hotplug() ([]attach.CPUChange, int) {
	if r.sampler == nil {
		return nil, 0
	}
	return r.sampler.Hotplug()
}

// Run records until ctx is done (or the Source ends), then reads what is
// left in the ring buffer, and returns what it gathered; in a continuous
// run (Config.Interval) it hands the aggregate to Config.OnInterval every
// interval and once more at the end. Every sample is
// symbolized by then: Run closes the symbolizer, whose caches (DWARF
// sections, kallsyms) the caller's output then reuses instead of adding
// to the peak RSS; it starts closing the sampler, in the background
// (Close waits for it; Counters then gives the final counts). Its errors
// are those of reading the ring buffer and of
// the sampler's counters. Run is called once.
func (r *Recorder) Run(ctx context.Context) (Result, error) {
	err := r.collect(ctx)
	elapsed := time.Since(r.start)
	if r.cfg.AfterSampling != nil {
		r.cfg.AfterSampling()
	}
	if err != nil {
		return Result{}, err
	}
	if r.iv != nil {
		r.c.agg = nil // handed over by intervals (endIntervals in collect)
	}
	res := Result{Aggregate: r.c.agg, Samples: r.c.samples, Start: r.start, Elapsed: elapsed, StreamErr: r.c.err,
		UserStacks: addStops(r.us.stops, r.c.us.stops), StackTopCuts: r.us.topCuts}
	if r.sampler != nil {
		if res.Counters, err = r.sampler.Counters(); err != nil {
			return Result{}, err
		}
		res.Event, res.CPUs, res.MissedCPUs = r.sampler.Event(), r.sampler.CPUs(), r.sampler.MissedCPUs()
		res.Hotplug, res.HotplugMore = r.sampler.Hotplug()
		if res.OffCPU, err = r.sampler.OffCPUCounters(); err != nil {
			return Result{}, err
		}
		// Detaching waits for RCU grace periods in the kernel (a
		// classic tracepoint's perf event, the per-CPU events): let
		// that overlap the symbolizing and the output, and Close wait
		// for it.
		r.mu.Lock()
		r.ran, r.final = true, res.Counters
		r.mu.Unlock()
		r.closing = make(chan error, 1)
		go func(s *attach.Sampler) { r.closing <- s.Close() }(r.sampler)
	}
	res.Symbols = r.sym.Stats()
	res.Symbols.Frames = r.c.frames.Frames
	r.sym.Close()
	res.SymbolNotes = r.sym.Notes() // after Close: downloads cancelled count as unfinished
	return res, nil
}

// Close closes the sampler (waiting for the close Run started) and the
// symbolizer. It is idempotent and safe after a New that failed part
// way.
func (r *Recorder) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	var err error
	switch {
	case r.closing != nil:
		err = <-r.closing
	case r.sampler != nil:
		err = r.sampler.Close()
	}
	if r.sym != nil {
		r.sym.Close()
	}
	return err
}
