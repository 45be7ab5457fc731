package output

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize"
)

func TestAggregatorMerge(t *testing.T) {
	st1 := &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x20, Function: "b"}}}
	st2 := &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x10, Function: "a"}}}
	st1copy := &symbolize.Stack{Frames: st1.Frames} // equal frames, other pointer

	var a Aggregator // the zero value works
	a.Add(7, "w", st1, 100)
	a.Add(7, "w", st1, 150)
	a.Add(7, "w", st2, 10)
	a.Add(7, "x", st1, 1)
	a.Add(8, "w", st1, 2)
	a.Add(7, "w", st1copy, 3)
	a.Add(7, "w", nil, 4)

	want := []Sample{
		{PID: 7, Comm: "w", Stack: nil, Count: 1, Nanos: 4},
		{PID: 7, Comm: "w", Stack: st2, Count: 1, Nanos: 10},
		{PID: 7, Comm: "w", Stack: st1, Count: 2, Nanos: 250},
		{PID: 7, Comm: "w", Stack: st1copy, Count: 1, Nanos: 3},
		{PID: 7, Comm: "x", Stack: st1, Count: 1, Nanos: 1},
		{PID: 8, Comm: "w", Stack: st1, Count: 1, Nanos: 2},
	}
	got := a.Samples()
	if len(got) != len(want) {
		t.Fatalf("got %d samples, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
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

	type add struct {
		pid  uint32
		comm string
		st   *symbolize.Stack
	}
	var adds []add
	for _, c := range fixtureCounts {
		for range c.n {
			adds = append(adds, add{c.pid, c.comm, fx.stacks[c.stack]})
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 5 {
		r.Shuffle(len(adds), func(i, j int) { adds[i], adds[j] = adds[j], adds[i] })
		a := NewAggregator()
		for _, x := range adds {
			a.Add(x.pid, x.comm, x.st, fixturePeriod)
		}
		if got := a.Samples(); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: order depends on arrival:\ngot  %+v\nwant %+v", round, got, want)
		}
	}
}

func TestAggregatorAddNoAlloc(t *testing.T) {
	a := NewAggregator()
	st := &symbolize.Stack{}
	comm := string([]byte("worker")) // not a constant, as from a record
	a.Add(1, comm, st, 1)
	if n := testing.AllocsPerRun(1000, func() { a.Add(1, comm, st, 1) }); n != 0 {
		t.Errorf("Add of a known sample allocates %v times, want 0", n)
	}
}

// BenchmarkAggregatorAdd adds samples that are all already known: the
// steady state of a long run.
func BenchmarkAggregatorAdd(b *testing.B) {
	const n = 4096
	a := NewAggregator()
	stacks := make([]*symbolize.Stack, n)
	comms := make([]string, n)
	for i := range stacks {
		stacks[i] = &symbolize.Stack{}
		comms[i] = fmt.Sprintf("thread-%d", i%64)
		a.Add(uint32(i%100), comms[i], stacks[i], 1)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		j := i % n
		a.Add(uint32(j%100), comms[j], stacks[j], 10101010)
	}
}
