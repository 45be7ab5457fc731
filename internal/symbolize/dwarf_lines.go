package symbolize

import (
	"cmp"
	"slices"
	"sync"
)

// maxRangeWalk is how many compilation-unit or function ranges a lookup
// looks back past the nearest one for one that holds the address (ranges
// that overlap or nest).
const maxRangeWalk = 8

// dwarfLines answers line and inlining queries from DWARF. It parses
// nothing up front: the first query builds an index of compilation unit
// (CU) address ranges (from .debug_aranges, else each unit's root DIE),
// and each CU's line table and inline tree are read on its first query
// and kept. Corrupt DWARF gives no lines, never a panic.
type dwarfLines struct {
	mu      sync.Mutex
	d       *dwarfData
	indexed bool
	ranges  []pcRange // CU ranges, sorted by lo; idx is into units
	units   []*cuLines
	own     *unitLoader // resolves names for lines, under mu
	chain   []int       // scratch for expand
}

// unitLoader resolves function names; each goroutine that does has its
// own cache.
type unitLoader struct {
	d     *dwarfData
	names map[uint64]funcName // resolved function names, by DIE offset
	rows  []lineRow           // scratch for line programs
}

// newUnitLoader returns a unitLoader of d.
func newUnitLoader(d *dwarfData) *unitLoader {
	return &unitLoader{d: d, names: make(map[uint64]funcName)}
}

// pcRange is the address range [lo, hi) of the item at index idx.
type pcRange struct {
	lo, hi uint64
	idx    int32
}

// cuLines is what one CU says about addresses: its line table and its
// inline tree. It is filled on first use (loaded).
type cuLines struct {
	u     *unit
	once  sync.Once // loads files, rows and tree
	files []string  // file names, by DWARF file index
	rows  []lineRow // line table, sorted by address
	tree  inlineTree
}

// lineRow is a row of a line table: from addr on, the code is at
// files[file]:line, up to the next row. An end-of-sequence row has file
// endOfSequence: no line holds its address.
type lineRow struct {
	addr       uint64
	file, line uint32
}

// Special file indexes: the end of a sequence, and no (known) file.
const (
	endOfSequence = ^uint32(0)
	noFile        = endOfSequence - 1
)

// newDWARFLines returns a line source for d.
func newDWARFLines(d *dwarfData) *dwarfLines {
	return &dwarfLines{d: d, own: newUnitLoader(d)}
}

// lines returns the source lines of pc, innermost first; see
// Binary.Lines.
func (x *dwarfLines) lines(pc uint64) []SourceLine {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.indexed {
		x.indexed = true
		x.buildIndex()
	}
	cu := x.unitFor(pc)
	if cu == nil {
		return nil
	}
	cu.once.Do(func() { x.own.loadUnit(cu) })
	return x.expand(cu, pc)
}

// buildIndex reads the ranges of every unit with code into x.ranges:
// its .debug_aranges set when it has one, else its root DIE's
// DW_AT_low_pc/high_pc or DW_AT_ranges. Corrupt units are left out.
func (x *dwarfLines) buildIndex() {
	defer func() {
		if recover() != nil {
			x.ranges, x.units = nil, nil
		}
	}()
	sets, _ := x.d.arangeSets()
	var rs [][2]uint64
	for _, u := range x.d.units {
		if !u.hasCode() {
			continue
		}
		set, ok := sets[u.off]
		if ok {
			rs = set
		} else {
			root := x.d.rootOf(u)
			if !root.ok || (root.tag != tagCompileUnit && root.tag != tagSkeletonUnit) {
				continue
			}
			a := pcAttrs{low: root.low, high: root.high, ranges: root.rngs,
				hasLow: root.lowSet, hasHigh: root.highSet, hasRanges: root.rangesSet}
			rs = x.d.rangesOf(u, &a, rs[:0])
		}
		for _, rg := range rs {
			x.ranges = append(x.ranges, pcRange{lo: rg[0], hi: rg[1], idx: int32(len(x.units))})
		}
		x.units = append(x.units, &cuLines{u: u})
	}
	slices.SortFunc(x.ranges, func(a, b pcRange) int { return cmp.Compare(a.lo, b.lo) })
}

// unitFor returns the CU whose ranges hold pc, or nil.
func (x *dwarfLines) unitFor(pc uint64) *cuLines {
	if i, ok := findRange(x.ranges, pc); ok {
		return x.units[x.ranges[i].idx]
	}
	return nil
}

// findRange returns the index of the range holding pc in rs (sorted by
// lo): the last one starting at or below pc that holds it, looking back
// at most maxRangeWalk ranges.
func findRange(rs []pcRange, pc uint64) (int, bool) {
	i, _ := slices.BinarySearchFunc(rs, pc, func(r pcRange, pc uint64) int {
		if r.lo <= pc {
			return -1
		}
		return 1
	})
	for j := i - 1; j >= 0 && j >= i-maxRangeWalk; j-- {
		if pc < rs[j].hi {
			return j, true
		}
	}
	return 0, false
}

// loadUnit reads cu's line table and inline tree. Corrupt parts are left
// empty: a bad line table gives no lines, a bad tree no inlined frames.
func (u *unitLoader) loadUnit(cu *cuLines) {
	u.readLineTable(cu)
	u.readInlineTree(cu)
}

// preload loads the units holding pcs that are not loaded yet, with
// workers goroutines, each with its own unitLoader.
func (x *dwarfLines) preload(pcs []uint64, workers int) {
	x.mu.Lock()
	if !x.indexed {
		x.indexed = true
		x.buildIndex()
	}
	seen := make(map[*cuLines]bool)
	var todo []*cuLines
	for _, pc := range pcs {
		if cu := x.unitFor(pc); cu != nil && !seen[cu] {
			seen[cu] = true
			todo = append(todo, cu)
		}
	}
	x.mu.Unlock()
	work := make(chan *cuLines)
	var wg sync.WaitGroup
	for range min(workers, len(todo)) {
		wg.Go(func() {
			u := newUnitLoader(x.d)
			for cu := range work {
				cu.once.Do(func() { u.loadUnit(cu) })
			}
		})
	}
	for _, cu := range todo {
		work <- cu
	}
	close(work)
	wg.Wait()
}

// readLineTable reads cu's line table into cu.rows (sequences sorted by
// address) and cu.files.
func (u *unitLoader) readLineTable(cu *cuLines) {
	defer func() {
		if recover() != nil {
			cu.rows, cu.files = nil, nil
		}
	}()
	root := u.d.rootOf(cu.u)
	if !root.ok || !root.hasStmt {
		return
	}
	cu.rows, cu.files = u.d.readLineProgram(cu.u, root.stmtList, root.compDir, &u.rows)
}

// sortSequences returns a new slice of rows with its sequences (seqs,
// as row index ranges) ordered by start address, keeping the order
// within each.
func sortSequences(rows []lineRow, seqs []pcRange) []lineRow {
	sorted := slices.IsSortedFunc(seqs, func(a, b pcRange) int {
		return cmp.Compare(rows[a.lo].addr, rows[b.lo].addr)
	})
	if sorted {
		return slices.Clone(rows)
	}
	slices.SortStableFunc(seqs, func(a, b pcRange) int {
		return cmp.Compare(rows[a.lo].addr, rows[b.lo].addr)
	})
	out := make([]lineRow, 0, len(rows))
	for _, s := range seqs {
		out = append(out, rows[s.lo:s.hi]...)
	}
	return out
}

// lineAt returns the file and line of pc from cu's line table: the last
// row at or below pc, unless that ends a sequence.
func (cu *cuLines) lineAt(pc uint64) (file string, line int) {
	i, _ := slices.BinarySearchFunc(cu.rows, pc, func(r lineRow, pc uint64) int {
		if r.addr <= pc {
			return -1
		}
		return 1
	})
	if i == 0 || cu.rows[i-1].file == endOfSequence {
		return "", 0
	}
	r := cu.rows[i-1]
	return cu.file(r.file), int(r.line)
}

// file returns the name of DWARF file index i of cu, "" when unknown.
func (cu *cuLines) file(i uint32) string {
	if uint64(i) < uint64(len(cu.files)) {
		return cu.files[i]
	}
	return ""
}
