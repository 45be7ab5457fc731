package output

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// aggregateInterned adds the fixture's samples as a collector does:
// each stack interned by content, then counted by id.
func (fx *fixture) aggregateInterned() *Aggregator {
	a := NewAggregator()
	for _, c := range fixtureCounts {
		id := a.InternStack(c.pid, fx.stacks[c.stack])
		for range c.n {
			a.AddStack(SampleKey{PID: c.pid, Comm: c.comm}, id, fixturePeriod)
		}
	}
	return a
}

// TestInternedSamplesMatch: stacks interned once and counted by id give
// the samples, frames and outputs that interning every sample gives.
func TestInternedSamplesMatch(t *testing.T) {
	fx := newFixture()
	want, got := fx.aggregate().Samples(), fx.aggregateInterned().Samples()
	if len(got) != len(want) {
		t.Fatalf("%d samples, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if gf, wf := fileFrames(g.Stack), fileFrames(w.Stack); !reflect.DeepEqual(gf, wf) {
			t.Errorf("sample %d: frames\n%+v\nwant\n%+v", i, gf, wf)
		}
		g.Stack, w.Stack = nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Errorf("sample %d: %+v, want %+v", i, g, w)
		}
	}
	for name, write := range map[string]func(*bytes.Buffer, *Aggregator) error{
		"pprof":  func(b *bytes.Buffer, a *Aggregator) error { return WritePprof(b, a, Meta{Period: fixturePeriod}) },
		"folded": func(b *bytes.Buffer, a *Aggregator) error { return WriteFolded(b, a) },
		"top":    func(b *bytes.Buffer, a *Aggregator) error { return WriteTop(b, a, 10) },
	} {
		var wb, gb bytes.Buffer
		if err := write(&wb, fx.aggregate()); err != nil {
			t.Fatal(err)
		}
		if err := write(&gb, fx.aggregateInterned()); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wb.Bytes(), gb.Bytes()) {
			t.Errorf("%s output differs between stacks interned once and per sample", name)
		}
	}
}

// fileFrames returns the frames of st with the addresses of user frames
// in files as file offsets, and their mappings as the files' identity:
// what InternStack keeps of a frame of another process.
func fileFrames(st *symbolize.Stack) []symbolize.Frame {
	fs := slices.Clone(stackFrames(st))
	for i := range fs {
		f := &fs[i]
		if m := f.Mapping; m != nil && !m.Kernel && m.Inode != 0 {
			f.Address = f.Address - m.Start + m.Offset
			f.SymbolStart = f.SymbolStart - m.Start + m.Offset
			f.Mapping = &symbolize.Mapping{Path: m.Path, BuildID: m.BuildID, Device: m.Device, Inode: m.Inode}
		}
	}
	return fs
}

// TestInternStackShares: the same code of the same binary in two
// processes (other load addresses) is one stack; JIT code and addresses
// in no mapping are not; the names and lines count.
func TestInternStackShares(t *testing.T) {
	var a Aggregator
	lib := func(start uint64) *symbolize.Mapping {
		return &symbolize.Mapping{Start: start, Limit: start + 0x1000, Offset: 0x2000, Path: "/lib/x.so", Device: 1, Inode: 2}
	}
	stack := func(m *symbolize.Mapping, off uint64, fn string) *symbolize.Stack {
		return &symbolize.Stack{Frames: []symbolize.Frame{{Address: m.Start + off, Function: fn, Mapping: m}}}
	}
	x := a.InternStack(1, stack(lib(0x10000), 0x10, "f"))
	if a.InternStack(2, stack(lib(0x70000), 0x10, "f")) != x {
		t.Error("same binary, same offset, two pids: two stacks")
	}
	if a.InternStack(2, stack(lib(0x70000), 0x20, "f")) == x {
		t.Error("another offset shares the stack")
	}
	if a.InternStack(2, stack(lib(0x70000), 0x10, "g")) == x {
		t.Error("another name shares the stack")
	}
	anon := func(pid uint32) StackID {
		return a.InternStack(pid, stack(&symbolize.Mapping{Start: 0x5000, Limit: 0x6000, Path: "[anon]"}, 0x10, "jit"))
	}
	if anon(1) == anon(2) || anon(1) != anon(1) {
		t.Error("JIT code of two processes shares a stack, or one process's does not")
	}
	none := func(pid uint32) StackID {
		return a.InternStack(pid, &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x99, Reason: symbolize.ReasonNoMapping}}})
	}
	if none(1) == none(2) {
		t.Error("addresses in no mapping of two processes share a stack")
	}
	if a.InternStack(1, nil) != a.InternStack(2, &symbolize.Stack{}) {
		t.Error("two empty stacks differ")
	}
	// The first stack seen lends its frames.
	a.AddStack(SampleKey{PID: 2}, a.InternStack(2, stack(lib(0x70000), 0x10, "f")), 1)
	if got := a.Samples()[0].Stack.Frames[0].Address; got != 0x10010 {
		t.Errorf("address %#x, want the first process's 0x10010", got)
	}
}

// TestAggregatorRetire: a retired process's entries leave the index but
// stay in Samples; when the pid comes back, its new entries merge.
func TestAggregatorRetire(t *testing.T) {
	var a Aggregator
	st := a.InternStack(1, &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x10, Function: "f"}}})
	for pid := uint32(1); pid <= 2*retireBatch; pid++ {
		a.AddStack(SampleKey{PID: pid, Comm: "sh"}, st, 10)
		a.Retire(pid)
	}
	if len(a.live) != 0 || a.recs.len() != 2*retireBatch {
		t.Errorf("after retiring all: %d live entries, %d records; want 0, %d", len(a.live), a.recs.len(), 2*retireBatch)
	}
	a.AddStack(SampleKey{PID: 7, Comm: "sh"}, st, 5) // pid 7 again
	a.AddStack(SampleKey{PID: 7, Comm: "sh"}, st, 5)
	got := a.Samples()
	if len(got) != 2*retireBatch || got[6].PID != 7 || got[6].Count != 3 || got[6].Nanos != 20 {
		t.Errorf("%d samples, pid 7: %+v; want %d, 3 samples, 20 ns", len(got), got[6], 2*retireBatch)
	}
	if n, ns := a.Total(); n != 2*retireBatch+2 || ns != 10*2*retireBatch+10 {
		t.Errorf("Total() = %d, %d", n, ns)
	}
}

func TestAddStackNoAlloc(t *testing.T) {
	var a Aggregator
	st := a.InternStack(1, &symbolize.Stack{Frames: []symbolize.Frame{{Address: 0x10, Function: "f"}}})
	k := SampleKey{PID: 1, TID: 2, CPU: 3, Comm: string([]byte("worker")), Cgroup: string([]byte("/a.slice"))}
	a.AddStack(k, st, 1)
	if n := testing.AllocsPerRun(1000, func() { a.AddStack(k, st, 1) }); n != 0 {
		t.Errorf("AddStack of a known sample allocates %v times, want 0", n)
	}
}

// TestAggregatorChunks: stacks, locations and entries past one chunk
// (1<<chunkBits) come back whole.
func TestAggregatorChunks(t *testing.T) {
	var a Aggregator
	const n = 1<<chunkBits + 100
	for i := range uint64(n) {
		st := &symbolize.Stack{Frames: []symbolize.Frame{
			{Address: 0x1000 + i, Function: "leaf"},
			{Address: 0x2000 + i%7, Function: "mid", Inlined: true},
			{Address: 0x2000 + i%7, Function: "caller"},
		}}
		a.AddStack(SampleKey{PID: uint32(i)}, a.InternStack(1, st), int64(i))
	}
	got := a.Samples()
	if len(got) != n {
		t.Fatalf("%d samples, want %d", len(got), n)
	}
	for i, s := range got {
		f := s.Stack.Frames
		if s.PID != uint32(i) || s.Nanos != int64(i) || len(f) != 3 || f[0].Address != 0x1000+uint64(i) ||
			f[2].Address != 0x2000+uint64(i%7) || f[1].Function != "mid" || !f[1].Inlined || f[2].Function != "caller" {
			t.Fatalf("sample %d: %+v, frames %+v", i, s, f)
		}
	}
}
