package output

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// add interns st, a stack of process pid, and counts one sample of it
// with thread name comm.
func add(a *Aggregator, pid uint32, comm string, st *symbolize.Stack, nanos int64) {
	addSample(a, SampleKey{PID: pid, Comm: comm}, st, nanos)
}

// addSample interns st, a stack of process key.PID, and counts one sample
// of it with key.
func addSample(a *Aggregator, key SampleKey, st *symbolize.Stack, nanos int64) {
	a.AddStack(key, a.InternStack(key.PID, st), nanos)
}

// aggregateOf adds samples to a new Aggregator: each one Count times,
// its Nanos spread over them, its stack interned as its pid's.
func aggregateOf(samples ...Sample) *Aggregator {
	a := NewAggregator()
	for _, s := range samples {
		id := a.InternStack(s.PID, s.Stack)
		key := SampleKey{PID: s.PID, TID: s.TID, CPU: s.CPU, Comm: s.Comm, Cgroup: s.Cgroup}
		for k := range s.Count {
			nanos := s.Nanos / s.Count
			if k == 0 {
				nanos += s.Nanos % s.Count
			}
			a.AddStack(key, id, nanos)
		}
	}
	return a
}

// sameSample reports whether x and y have the same key, counts and
// frames.
func sameSample(x, y Sample) bool {
	fx, fy := stackFrames(x.Stack), stackFrames(y.Stack)
	x.Stack, y.Stack = nil, nil
	return reflect.DeepEqual(x, y) && slices.Equal(fx, fy)
}

// sameContent is sameSample with frames compared by their mapping's file
// and file offset rather than by address (and function start).
func sameContent(x, y Sample) bool {
	fx, fy := stackFrames(x.Stack), stackFrames(y.Stack)
	x.Stack, y.Stack = nil, nil
	return reflect.DeepEqual(x, y) && slices.EqualFunc(fx, fy, func(a, b symbolize.Frame) bool {
		if a.Mapping != nil && b.Mapping != nil {
			a.Address += a.Mapping.Offset - a.Mapping.Start
			b.Address += b.Mapping.Offset - b.Mapping.Start
			a.SymbolStart += a.Mapping.Offset - a.Mapping.Start
			b.SymbolStart += b.Mapping.Offset - b.Mapping.Start
			if a.Mapping.Path != b.Mapping.Path {
				return false
			}
			a.Mapping, b.Mapping = nil, nil
		}
		return a == b
	})
}

func TestAggregatorMerge(t *testing.T) {
	st1 := &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x20, Function: "b"}}}
	st2 := &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x10, Function: "a"}}}
	st1copy := &symbolize.Stack{Frames: slices.Clone(st1.Frames)} // equal frames, other pointer

	var a Aggregator // the zero value works
	add(&a, 7, "w", st1, 100)
	add(&a, 7, "w", st1, 150)
	add(&a, 7, "w", st2, 10)
	add(&a, 7, "x", st1, 1)
	add(&a, 8, "w", st1, 2)
	add(&a, 7, "w", st1copy, 3)
	add(&a, 7, "w", nil, 4)

	want := []Sample{
		{PID: 7, Comm: "w", Stack: nil, Count: 1, Nanos: 4},
		{PID: 7, Comm: "w", Stack: st2, Count: 1, Nanos: 10},
		{PID: 7, Comm: "w", Stack: st1, Count: 3, Nanos: 253}, // st1copy too: same content
		{PID: 7, Comm: "x", Stack: st1, Count: 1, Nanos: 1},
		{PID: 8, Comm: "w", Stack: st1, Count: 1, Nanos: 2},
	}
	got := a.Samples()
	if len(got) != len(want) {
		t.Fatalf("got %d samples, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !sameSample(got[i], want[i]) {
			t.Errorf("sample %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if a.Len() != len(want) {
		t.Errorf("Len() = %d, want %d", a.Len(), len(want))
	}
	if count, nanos := a.Total(); count != 7 || nanos != 270 {
		t.Errorf("Total() = %d, %d; want 7, 270", count, nanos)
	}
	// Samples returns a copy: changing it leaves the Aggregator alone.
	got[0].Count = 99
	if a.Samples()[0].Count != 1 {
		t.Error("Samples shares its slice with the Aggregator")
	}
}

// TestAggregatorOrder checks that Samples does not depend on the order in
// which samples arrive.
func TestAggregatorOrder(t *testing.T) {
	fx := newFixture()
	want := fx.aggregate().Samples()

	type sample struct {
		pid  uint32
		comm string
		st   *symbolize.Stack
	}
	var adds []sample
	for _, c := range fixtureCounts {
		for range c.n {
			adds = append(adds, sample{c.pid, c.comm, fx.stacks[c.stack]})
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 5 {
		r.Shuffle(len(adds), func(i, j int) { adds[i], adds[j] = adds[j], adds[i] })
		a := NewAggregator()
		for _, x := range adds {
			add(a, x.pid, x.comm, x.st, fixturePeriod)
		}
		// The first stack of a content to arrive lends its addresses
		// (InternStack): compare frames by file offset.
		if got := a.Samples(); !slices.EqualFunc(got, want, sameContent) {
			t.Fatalf("round %d: order depends on arrival:\ngot  %+v\nwant %+v", round, got, want)
		}
	}
}

func TestAggregatorAddNoAlloc(t *testing.T) {
	a := NewAggregator()
	st := &symbolize.Stack{}
	comm := string([]byte("worker")) // not a constant, as from a record
	id := a.InternStack(1, st)
	a.AddStack(SampleKey{PID: 1, Comm: comm}, id, 1)
	if n := testing.AllocsPerRun(1000, func() { a.AddStack(SampleKey{PID: 1, Comm: comm}, id, 1) }); n != 0 {
		t.Errorf("AddStack of a known sample allocates %v times, want 0", n)
	}
}

// BenchmarkAggregatorAdd adds samples that are all already known: the
// steady state of a long run.
func BenchmarkAggregatorAdd(b *testing.B) {
	const n = 4096
	a := NewAggregator()
	stacks := make([]StackID, n)
	comms := make([]string, n)
	for i := range stacks {
		stacks[i] = a.InternStack(uint32(i%100), &symbolize.Stack{Frames: []symbolize.Frame{{Address: uint64(i)}}})
		comms[i] = fmt.Sprintf("thread-%d", i%64)
		a.AddStack(SampleKey{PID: uint32(i % 100), Comm: comms[i]}, stacks[i], 1)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		j := i % n
		a.AddStack(SampleKey{PID: uint32(j % 100), Comm: comms[j]}, stacks[j], 10101010)
	}
}

// TestInternLocations: a stack's locations, one per address (inlined
// frames share theirs), make the same stack again through
// InternLocations; InternLocation gives a leaf's location as InternStack
// did; CountLocation counts a location's frames by Reason.
func TestInternLocations(t *testing.T) {
	m := &symbolize.Mapping{Start: 0x400000, Limit: 0x500000, Path: "/bin/w", Inode: 9}
	st := &symbolize.Stack{Frames: []symbolize.Frame{
		{Address: 0x400100, Function: "inner", Inlined: true, Mapping: m},
		{Address: 0x400100, Function: "leaf", Mapping: m},
		{Address: 0x400200, Reason: symbolize.ReasonNoSymbol, Mapping: m},
		{Address: 0x400300, Function: "main", Mapping: m},
	}}
	a := NewAggregator()
	id := a.InternStack(7, st)
	locs := a.StackLocations(nil, id)
	if len(locs) != 3 {
		t.Fatalf("locations %v, want 3 (one per address)", locs)
	}
	if got := a.InternLocations(locs); got != id {
		t.Errorf("InternLocations(%v) = %d, want %d", locs, got, id)
	}
	if got := a.InternLocation(7, st.Frames[:2]); got != locs[0] {
		t.Errorf("InternLocation(leaf frames) = %d, want %d", got, locs[0])
	}
	other := a.InternLocations([]uint32{locs[1], locs[2]})
	if other == id || !slices.Equal(a.StackLocations(nil, other), []uint32{locs[1], locs[2]}) {
		t.Errorf("stack of the callers: id %d (the whole stack is %d), locations %v", other, id, a.StackLocations(nil, other))
	}
	var stats symbolize.Stats
	for _, l := range locs {
		a.CountLocation(&stats, l)
	}
	if stats.Frames[symbolize.ReasonNone] != 3 || stats.Frames[symbolize.ReasonNoSymbol] != 1 {
		t.Errorf("frames counted %v, want 3 named and 1 without symbol", stats.Frames)
	}
}
