package main

import (
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
