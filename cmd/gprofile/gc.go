package main

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// GOGC during start-up, and after it. Start-up allocates in bursts
// (binaries, unwind tables, DWARF, maps, every stack new) from a small
// heap, where Go's default 100 collects every few MB, several times
// before the first samples are in, stopping both CPUs each time. 300
// lets the heap grow to four times what is live meanwhile. What follows
// allocates slowly (new stacks, new units of line tables), so a lower
// GOGC costs a collection every few seconds and keeps the heap, and
// RSS, nearer what is live. Start-up ends after gcWarmup, or earlier
// once the live heap passes gcLargeHeap (a whole-system run that
// caches many processes and binaries). With the symbol tables and
// lines kept across runs, 300 in start-up saved CPU for a little more
// peak RSS (BENCHMARKS.md, issue 16 session 15; in session 13, when
// start-up allocated more, 200 raised peak RSS for no CPU saved), and
// 25 after it cost more CPU than it saved RSS (session 13). After
// start-up 100 rather than 50: on a machine that charges little for a
// page fault the collections cost more than the heap's growth, for
// about a MB more peak RSS (sessions 24 and 25). A continuous run,
// which runs for days, keeps its heap nearer what is live:
// gcPercentContinuous. bench/run.sh measures CPU µs/sample and peak
// RSS, bench/soak.sh long runs (bench/SOAK.md).
const (
	gcPercentSmall      = 300
	gcPercentLarge      = 100
	gcPercentContinuous = 50
	gcLargeHeap         = 24 << 20 // bytes of live heap
	gcWarmup            = 500 * time.Millisecond
	gcCheckEvery        = 500 * time.Millisecond
)

// gcTuner lowers GOGC from gcPercentSmall to gcPercentLarge once
// gcWarmup has passed or the live heap (runtime/metrics
// /gc/heap/live:bytes, as of the last GC) passes gcLargeHeap.
type gcTuner struct {
	live  func() uint64        // bytes of live heap
	since func() time.Duration // time since gprofile started
	set   func(percent int)    // debug.SetGCPercent
}

// check applies the rule once and reports whether GOGC was lowered.
func (g gcTuner) check() bool {
	if g.live() <= gcLargeHeap && g.since() < gcWarmup {
		return false
	}
	g.set(gcPercentLarge)
	return true
}

// startGCTuning sets GOGC to gcPercentSmall and checks every
// gcCheckEvery, on a goroutine of its own, whether to lower it; once
// lowered, it stops checking. With GOGC set in the environment it does
// nothing: the user decides.
func startGCTuning() {
	if os.Getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(gcPercentSmall)
	start := time.Now()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	g := gcTuner{
		live: func() uint64 {
			metrics.Read(sample)
			if sample[0].Value.Kind() != metrics.KindUint64 {
				return 0
			}
			return sample[0].Value.Uint64()
		},
		since: func() time.Duration { return time.Since(start) },
		set:   tunerSet,
	}
	go func() {
		t := time.NewTicker(gcCheckEvery)
		defer t.Stop()
		for range t.C {
			if g.check() {
				return
			}
		}
	}()
}

// gcSettled is set once settleGC has run: the start-up tuner, should it
// check after that, leaves GOGC alone (tunerSet).
var gcSettled atomic.Bool

// tunerSet is the start-up tuner's debug.SetGCPercent, which does
// nothing once settleGC has run.
func tunerSet(percent int) {
	if !gcSettled.Load() {
		debug.SetGCPercent(percent)
	}
}

// settleGC ends a continuous run's start-up, at the end of its first
// interval: start-up (reading every running binary) is paid, and what
// follows runs for days, so GOGC goes to gcPercentContinuous whatever the
// live heap, and the memory start-up freed goes back to the system at
// once (debug.FreeOSMemory: one forced collection) instead of at the
// scavenger's pace. With GOGC set in the environment, GOGC stays.
func settleGC() {
	gcSettled.Store(true)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercentContinuous)
	}
	debug.FreeOSMemory()
}
