package recorder

import (
	"time"

	"github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/output"
)

// Interval is one interval of a continuous run (Config.Interval): the
// samples taken in it, aggregated.
type Interval struct {
	// Aggregate holds the interval's samples and nothing else; it belongs
	// to the callee from here on.
	Aggregate *output.Aggregator
	// Samples is the number of samples in Aggregate.
	Samples uint64
	// Start is when the interval began (the previous interval's end, or
	// when sampling began); Duration is how long it lasted, wall clock.
	Start    time.Time
	Duration time.Duration
	// Counters are the sampler's counters at the interval's end, counted
	// from the start of the run (subtract the previous interval's for
	// this one's); zero with Config.Source.
	Counters attach.Counters
	// Last says this is the final interval, cut short when the run ended.
	Last bool
}

// intervals is the interval side of a Recorder: a ticker that asks the
// ring buffer reader for a swap, and the goroutine that hands finished
// intervals to Config.OnInterval, one at a time, in order.
type intervals struct {
	start   time.Time     // of the interval being filled
	samples uint64        // collector.samples at its start
	out     chan Interval // to the handoff goroutine
	done    chan struct{} // closed when the handoff goroutine has returned
	stop    chan struct{} // stops the ticker goroutine
}

// startIntervals starts the ticker and the handoff goroutines of a
// continuous run: every Config.Interval the reader is asked to swap the
// aggregate (swapDue), and each finished interval goes to OnInterval.
// One finished interval may wait while OnInterval runs; the worker waits
// for the next one after that (and the ring buffer fills up, its
// overflow counted as lost samples).
func (r *Recorder) startIntervals() {
	iv := &intervals{start: r.start.Round(0), out: make(chan Interval, 1), done: make(chan struct{}), stop: make(chan struct{})}
	r.iv = iv
	go func() {
		defer close(iv.done)
		for v := range iv.out {
			r.cfg.OnInterval(v)
		}
	}()
	go func() {
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.swapDue.Store(true)
			case <-iv.stop:
				return
			}
		}
	}()
}

// swap hands the aggregate filled so far to OnInterval and starts a new
// one, on the worker goroutine, between two samples: every sample is in
// exactly one interval. The memo's stack ids and the interned comms
// belong to the old aggregate, so they go with it; the symbolizer's and
// unwinder's caches (their own size caps and eviction) stay. last says
// the run has ended.
func (r *Recorder) swap(last bool) {
	c, iv := r.c, r.iv
	now := time.Now().Round(0) // wall clock: each interval starts where the last ended, to the ns
	v := Interval{Aggregate: c.agg, Samples: c.samples - iv.samples, Start: iv.start, Duration: now.Sub(iv.start), Last: last}
	if r.sampler != nil {
		v.Counters, _ = r.sampler.Counters() // best effort: zero on error
	}
	iv.start, iv.samples = now, c.samples
	c.agg = c.agg.Empty()
	c.forgetAll()
	clear(c.comms)
	iv.out <- v
}

// endIntervals hands over the last interval and waits until OnInterval
// has returned for it.
func (r *Recorder) endIntervals() {
	close(r.iv.stop)
	r.swap(true)
	close(r.iv.out)
	<-r.iv.done
}
