package main

import (
	"testing"
	"time"
)

// TestSingleProc: one P only for a planned rate of at most
// singleProcRate samples a second, and never over the user's GOMAXPROCS.
func TestSingleProc(t *testing.T) {
	for _, c := range []struct {
		rate             uint64
		planned, userSet bool
		want             bool
	}{
		{1998, true, false, true},
		{singleProcRate, true, false, true},
		{singleProcRate + 1, true, false, false},
		{64 * 999, true, false, false},
		{1998, false, false, false}, // probes, a period, a tracepoint, off-CPU
		{1998, true, true, false},
	} {
		if got := singleProc(c.rate, c.planned, c.userSet); got != c.want {
			t.Errorf("singleProc(%d, planned %v, GOMAXPROCS set %v) = %v, want %v", c.rate, c.planned, c.userSet, got, c.want)
		}
	}
}

// TestSingleProcAfter: one P at once up to startProcsRate samples a
// second (999 Hz on 2 CPUs), after startProcsFor above it (4999 Hz).
func TestSingleProcAfter(t *testing.T) {
	for _, c := range []struct {
		rate uint64
		want time.Duration
	}{
		{2 * 999, 0},
		{startProcsRate, 0},
		{startProcsRate + 1, startProcsFor},
		{2 * 4999, startProcsFor},
	} {
		if got := singleProcAfter(c.rate); got != c.want {
			t.Errorf("singleProcAfter(%d) = %v, want %v", c.rate, got, c.want)
		}
	}
}
