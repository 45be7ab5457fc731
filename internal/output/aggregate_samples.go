package output

import (
	"cmp"
	"slices"
	"strings"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// Samples returns a new slice with one Sample per distinct key and stack,
// sorted by pid, then tid, then comm (byte order), then cpu, then cgroup,
// then stack (frame by frame from the leaf: address, then function name),
// so that the order does not depend on the order the
// samples arrived in. The Stacks are shared between the Samples of one
// stack, and with the Aggregator: each is made once from its locations,
// on the first call, and kept. The caller must not change them.
func (a *Aggregator) Samples() []Sample {
	a.build()
	recs := a.recs.flat()
	slices.SortFunc(recs, a.compareRecords)
	out := make([]Sample, 0, len(recs))
	for i := range recs {
		r := &recs[i]
		if i > 0 && recs[i-1].recKey == r.recKey { // a retired process came back
			s := &out[len(out)-1]
			s.Count += r.count
			s.Nanos += r.nanos
			continue
		}
		out = append(out, Sample{
			PID: r.pid, TID: r.tid, CPU: r.cpu,
			Comm: a.strs.str(r.comm), Cgroup: a.strs.str(r.cgroup),
			Stack: a.built[r.stack], Count: r.count, Nanos: r.nanos,
		})
	}
	return out
}

// build makes the *symbolize.Stack of every stack that has none yet:
// the frames of its locations, in one allocation for all of them.
func (a *Aggregator) build() {
	t := &a.stacks
	n := t.off.len() - 1
	if n <= len(a.built) {
		return
	}
	total := 0
	for id := len(a.built); id < n; id++ {
		for j := *t.off.at(id); j < *t.off.at(id + 1); j++ {
			from, to := a.locs.span(*t.locs.at(int(j)))
			total += to - from
		}
	}
	arena := make([]symbolize.Frame, 0, total)
	for id := len(a.built); id < n; id++ {
		start := len(arena)
		for j := *t.off.at(id); j < *t.off.at(id + 1); j++ {
			from, to := a.locs.span(*t.locs.at(int(j)))
			for i := from; i < to; i++ {
				arena = append(arena, a.frame(a.locs.frames.at(i)))
			}
		}
		a.built = append(a.built, &symbolize.Stack{Frames: arena[start:len(arena):len(arena)]})
	}
}

// span returns the range of location loc's frames in t.frames.
func (t *locTable) span(loc uint32) (from, to int) {
	return int(*t.off.at(int(loc))), int(*t.off.at(int(loc) + 1))
}

// compareRecords orders records as Samples promises: by key, then by
// the frames of their stacks, then by stack id.
func (a *Aggregator) compareRecords(x, y record) int {
	if c := cmp.Compare(x.pid, y.pid); c != 0 {
		return c
	}
	if c := cmp.Compare(x.tid, y.tid); c != 0 {
		return c
	}
	if x.comm != y.comm {
		if c := strings.Compare(a.strs.str(x.comm), a.strs.str(y.comm)); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(x.cpu, y.cpu); c != 0 {
		return c
	}
	if x.cgroup != y.cgroup {
		if c := strings.Compare(a.strs.str(x.cgroup), a.strs.str(y.cgroup)); c != 0 {
			return c
		}
	}
	if x.stack == y.stack {
		return 0
	}
	if c := slices.CompareFunc(stackFrames(a.built[x.stack]), stackFrames(a.built[y.stack]), compareFrames); c != 0 {
		return c
	}
	return cmp.Compare(x.stack, y.stack)
}

func compareFrames(a, b symbolize.Frame) int {
	if c := cmp.Compare(a.Address, b.Address); c != 0 {
		return c
	}
	if c := strings.Compare(a.Function, b.Function); c != 0 {
		return c
	}
	// An inlined frame sorts before a physical one at the same address.
	switch {
	case a.Inlined == b.Inlined:
		return 0
	case a.Inlined:
		return -1
	default:
		return 1
	}
}

// stackFrames returns the frames of st, nil for a nil stack.
func stackFrames(st *symbolize.Stack) []symbolize.Frame {
	if st == nil {
		return nil
	}
	return st.Frames
}
