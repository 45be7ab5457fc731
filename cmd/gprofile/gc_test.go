package main

import "testing"

// TestGCTuner: GOGC stays while the live heap is at most gcLargeHeap,
// and is lowered to gcPercentLarge, once, past it.
func TestGCTuner(t *testing.T) {
	var live uint64
	var set []int
	g := gcTuner{live: func() uint64 { return live }, set: func(p int) { set = append(set, p) }}
	for _, live = range []uint64{0, 1 << 20, gcLargeHeap} {
		if g.check() {
			t.Errorf("live heap %d bytes: GOGC lowered", live)
		}
	}
	live = gcLargeHeap + 1
	if !g.check() || len(set) != 1 || set[0] != gcPercentLarge {
		t.Errorf("live heap past gcLargeHeap: check lowered %v, want [%d]", set, gcPercentLarge)
	}
}
