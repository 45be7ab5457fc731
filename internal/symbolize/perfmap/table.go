package perfmap

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
)

// Table is what one perf map says: its symbols, in the order of their
// lines, and the disjoint address ranges they cover, where later lines
// win over the code they overlap (a JIT reusing memory). The zero value
// is empty.
type Table struct {
	syms []Symbol
	segs []perfSeg // disjoint, sorted; later lines win where they overlap
}

// Lookup returns the symbol that covers addr, or nil.
func (t *Table) Lookup(addr uint64) *Symbol {
	i, found := slices.BinarySearchFunc(t.segs, addr, func(s perfSeg, a uint64) int {
		switch {
		case s.end <= a:
			return -1
		case s.start > a:
			return 1
		}
		return 0
	})
	if !found {
		return nil
	}
	return &t.syms[t.segs[i].sym]
}

// Add appends newly read symbols and recomputes the segments: where
// pieces of code overlap (a JIT reusing memory), the later line wins.
func (t *Table) Add(syms []Symbol) {
	if len(syms) == 0 {
		return
	}
	t.syms = append(t.syms, syms...)
	t.segs = paintSegments(t.syms)
}

// perfSeg is an address range [start, end) that a perf map names.
type perfSeg struct {
	start, end uint64
	sym        int32 // index in Table.syms
}

// paintSegments returns the disjoint ranges that syms cover, each
// labeled with the last symbol (in slice order) that covers it.
func paintSegments(syms []Symbol) []perfSeg {
	order := make([]int32, len(syms))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(syms[a].Start, syms[b].Start) })
	segs := make([]perfSeg, 0, len(syms))
	var active symHeap // by index, latest on top
	active.syms = syms
	next := 0
	pos := uint64(0)
	for next < len(order) || active.Len() > 0 {
		// Drop symbols that end at or before pos.
		for active.Len() > 0 && symEnd(syms, active.idx[0]) <= pos {
			heap.Pop(&active)
		}
		if active.Len() == 0 {
			if next == len(order) {
				break
			}
			pos = syms[order[next]].Start
		}
		for next < len(order) && syms[order[next]].Start <= pos {
			heap.Push(&active, order[next])
			next++
		}
		for active.Len() > 0 && symEnd(syms, active.idx[0]) <= pos {
			heap.Pop(&active)
		}
		if active.Len() == 0 {
			continue
		}
		top := active.idx[0]
		end := symEnd(syms, top)
		if next < len(order) {
			end = min(end, syms[order[next]].Start)
		}
		if n := len(segs); n > 0 && segs[n-1].sym == top && segs[n-1].end == pos {
			segs[n-1].end = end
		} else {
			segs = append(segs, perfSeg{start: pos, end: end, sym: top})
		}
		pos = end
	}
	return segs
}

// symEnd returns the end of syms[i], saturated.
func symEnd(syms []Symbol, i int32) uint64 {
	s := &syms[i]
	if s.Start+s.Size < s.Start {
		return math.MaxUint64
	}
	return s.Start + s.Size
}

// symHeap is a max-heap of symbol indexes: the latest line on top.
type symHeap struct {
	idx  []int32
	syms []Symbol
}

func (h *symHeap) Len() int           { return len(h.idx) }
func (h *symHeap) Less(i, j int) bool { return h.idx[i] > h.idx[j] }
func (h *symHeap) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *symHeap) Push(x any)         { h.idx = append(h.idx, x.(int32)) }
func (h *symHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}
