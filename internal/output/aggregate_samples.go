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
// so that the order does not depend on the order the samples arrived in.
// The Stacks are shared between the Samples of one stack, and with the
// Aggregator: each is made once from its locations, on the first call,
// and kept. The caller must not change them. The writers of this package
// do not call it: they walk the Aggregator's stacks and locations.
func (a *Aggregator) Samples() []Sample {
	a.build()
	recs, more := a.sorted()
	m := len(a.extra)
	out := make([]Sample, 0, len(recs))
	for i := range recs {
		r := &recs[i]
		s := Sample{
			PID: r.pid, TID: r.tid, CPU: r.cpu,
			Comm: a.strs.str(r.comm), Cgroup: a.strs.str(r.cgroup),
			Stack: a.built[r.stack], Count: r.count, Nanos: r.nanos,
		}
		if m > 0 {
			s.More = more[m*i : m*i+m : m*i+m]
		}
		out = append(out, s)
	}
	return out
}

// sorted returns the records in the order of Samples, those of a retired
// process that came back merged into one, and their extra values
// (len(a.extra) per record). It sorts once, and again only after
// samples were added; the caller must not change the slices.
func (a *Aggregator) sorted() ([]record, []int64) {
	if a.sortedRecs != nil && a.sortedAdds == a.adds {
		return a.sortedRecs, a.sortedMore
	}
	m := len(a.extra)
	recs := a.recs.flat()
	var order []int // record index -> its position before sorting
	if m > 0 {
		order = make([]int, len(recs))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(x, y int) int { return a.compareRecords(recs[x], recs[y]) })
		sortedRecs := make([]record, len(recs))
		for i, j := range order {
			sortedRecs[i] = recs[j]
		}
		recs = sortedRecs
	} else {
		slices.SortFunc(recs, a.compareRecords)
	}
	out := recs[:0]
	var more []int64
	for i := range recs {
		n := len(out)
		if n > 0 && out[n-1].recKey == recs[i].recKey { // a retired process came back
			out[n-1].count += recs[i].count
			out[n-1].nanos += recs[i].nanos
			for j := range m {
				more[(n-1)*m+j] += a.extraOf(order[i], j)
			}
			continue
		}
		out = append(out, recs[i])
		for j := range m {
			more = append(more, a.extraOf(order[i], j))
		}
	}
	a.sortedRecs, a.sortedMore, a.sortedAdds = out, more, a.adds
	return out, more
}

// extraOf returns extra column j (column 2+j) of the i-th record added.
func (a *Aggregator) extraOf(i, j int) int64 {
	m := len(a.extra)
	if (i+1)*m > a.more.len() {
		return 0
	}
	return *a.more.at(i*m + j)
}

// eachRecord calls fn for every record and its index, in the order they
// were added (a retired process that came back has two).
func (a *Aggregator) eachRecord(fn func(r *record, i int)) {
	i := 0
	for _, c := range a.recs.c {
		for k := range c {
			fn(&c[k], i)
			i++
		}
	}
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
		for it := a.frames(StackID(id)); ; {
			c := it.next()
			if c == nil {
				break
			}
			arena = append(arena, a.frame(c))
		}
		a.built = append(a.built, &symbolize.Stack{Frames: arena[start:len(arena):len(arena)]})
	}
}

// span returns the range of location loc's frames in t.frames.
func (t *locTable) span(loc uint32) (from, to int) {
	return int(*t.off.at(int(loc))), int(*t.off.at(int(loc) + 1))
}

// span returns the range of stack id's location ids in t.locs.
func (t *stackTable) span(id StackID) (from, to int) {
	return int(*t.off.at(int(id))), int(*t.off.at(int(id) + 1))
}

// frameIter walks the frames of one stack, leaf first, location by
// location.
type frameIter struct {
	a            *Aggregator
	loc, locEnd  int // the next location, in a.stacks.locs
	frame, fsEnd int // the next frame of the current location, in a.locs.frames
}

// frames returns an iterator over the frames of stack id.
func (a *Aggregator) frames(id StackID) frameIter {
	from, to := a.stacks.span(id)
	return frameIter{a: a, loc: from, locEnd: to}
}

// next returns the next frame, or nil after the last.
func (it *frameIter) next() *cframe {
	c, _ := it.nextAt()
	return c
}

// nextAt returns the next frame and its index in the location table's
// frames, or nil after the last.
func (it *frameIter) nextAt() (*cframe, int) {
	for it.frame == it.fsEnd {
		if it.loc == it.locEnd {
			return nil, 0
		}
		it.frame, it.fsEnd = it.a.locs.span(*it.a.stacks.locs.at(it.loc))
		it.loc++
	}
	at := it.frame
	it.frame++
	return it.a.locs.frames.at(at), at
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
	if c := a.compareStacks(x.stack, y.stack); c != 0 {
		return c
	}
	return cmp.Compare(x.stack, y.stack)
}

// compareStacks compares the frames of two stacks from the leaf, as
// slices.CompareFunc with compareFrames would.
func (a *Aggregator) compareStacks(x, y StackID) int {
	xi, yi := a.frames(x), a.frames(y)
	for {
		fx, fy := xi.next(), yi.next()
		switch {
		case fx == nil && fy == nil:
			return 0
		case fx == nil:
			return -1
		case fy == nil:
			return 1
		}
		if c := a.compareFrames(fx, fy); c != 0 {
			return c
		}
	}
}

// compareFrames orders frames by address, then function name; an inlined
// frame sorts before a physical one at the same address.
func (a *Aggregator) compareFrames(x, y *cframe) int {
	if c := cmp.Compare(x.addr, y.addr); c != 0 {
		return c
	}
	if x.fn != y.fn {
		if c := strings.Compare(a.strs.str(x.fn), a.strs.str(y.fn)); c != 0 {
			return c
		}
	}
	switch {
	case x.inlined == y.inlined:
		return 0
	case x.inlined:
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
