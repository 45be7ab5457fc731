package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestGCTuner: GOGC stays while the live heap is at most gcLargeHeap
// and gcWarmup has not passed, and is lowered to gcPercentLarge, once,
// past either.
func TestGCTuner(t *testing.T) {
	for _, c := range []struct {
		live uint64
		age  time.Duration
		want bool
	}{
		{0, 0, false},
		{1 << 20, gcWarmup / 2, false},
		{gcLargeHeap, gcWarmup - time.Millisecond, false},
		{gcLargeHeap + 1, 0, true},
		{1 << 20, gcWarmup, true},
	} {
		var set []int
		g := gcTuner{live: func() uint64 { return c.live }, since: func() time.Duration { return c.age },
			set: func(p int) { set = append(set, p) }}
		got := g.check()
		if got != c.want || (got && (len(set) != 1 || set[0] != gcPercentLarge)) || (!got && len(set) != 0) {
			t.Errorf("live heap %d bytes after %v: check = %v, set %v; want %v (GOGC %d when lowered)", c.live, c.age, got, set, c.want, gcPercentLarge)
		}
	}
}

// TestSettleGCStands: once a continuous run settled GOGC at
// gcPercentContinuous, a late start-up tuner leaves it there.
func TestSettleGCStands(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer gcSettled.Store(false)
	settleGC()
	tunerSet(gcPercentLarge)
	if got := debug.SetGCPercent(100); got != gcPercentContinuous {
		t.Errorf("GOGC after settleGC and a late tuner = %d, want %d", got, gcPercentContinuous)
	}
}

// TestRelaxGCForOutput: the end of a run turns the collector off under a
// soft memory limit outputHeadroom above the memory in use, and a late
// start-up tuner leaves that alone; with GOGC or GOMEMLIMIT set nothing
// changes.
func TestRelaxGCForOutput(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	defer gcSettled.Store(false)
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Setenv("GOGC", "")
		t.Setenv("GOMEMLIMIT", "")
		t.Setenv(env, "200")
		relaxGCForOutput()
		if p, l := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64); p != 100 || l != math.MaxInt64 {
			t.Errorf("with %s set: GOGC %d, memory limit %d; want 100 and none", env, p, l)
		}
	}
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	relaxGCForOutput()
	tunerSet(gcPercentLarge)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p, l := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	if p != -1 || l < outputHeadroom || l > int64(ms.Sys)+2*outputHeadroom {
		t.Errorf("after relaxGCForOutput and a late tuner: GOGC %d, memory limit %d; want off, and %d bytes above the %d in use", p, l, outputHeadroom, ms.Sys)
	}
}
