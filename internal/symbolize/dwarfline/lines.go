package dwarfline

import (
	"cmp"
	"maps"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// maxRangeWalk is how many compilation-unit or function ranges a lookup
// looks back past the nearest one for one that holds the address (ranges
// that overlap or nest).
const maxRangeWalk = 8

// Table answers line and inlining queries from DWARF. It parses
// nothing up front: the first query builds an index of compilation unit
// (CU) address ranges (from .debug_aranges, else each unit's root DIE),
// and each CU's line table and inline tree are read on its first query
// and kept. When .debug_info is inflated on demand and has
// .debug_aranges, the index first holds only the units .debug_aranges
// lists, so that no unit is inflated before a query needs it; the first
// address it misses completes the index, as if built whole. Corrupt
// DWARF gives no lines, never a panic.
type Table struct {
	mu      sync.Mutex
	D       *Data // the binary's DWARF sections, as NewTable was given them
	indexed bool
	partial bool      // the index holds only the units of .debug_aranges
	ranges  []pcRange // CU ranges, sorted by lo; idx is into units
	units   []*cuLines
	own     *unitLoader // resolves names for lines, under mu
	// nodeNames are the names of the inline tree nodes named so far,
	// by DIE offset, under mu.
	nodeNames map[uint64]funcName
	chain     []int // scratch for expand
	// faulted: a read of a mapped section faulted (its file was
	// truncated): the table answers nothing from then on.
	faulted atomic.Bool
}

// unitLoader resolves function names; each goroutine that does has its
// own cache.
type unitLoader struct {
	d     *Data
	names map[uint64]funcName // resolved function names, by DIE offset
	// release: once a unit's line table and inline tree are read, its
	// .debug_info pages read on demand are given back (lazySection.release):
	// the names looked up later read their DIEs' pages again. Only for a
	// loader no other goroutine reads .debug_info beside (Table.own, under
	// Table.mu).
	release bool
}

// newUnitLoader returns a unitLoader of d.
func newUnitLoader(d *Data) *unitLoader {
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
	off   uint64    // .debug_info offset of the unit's header
	once  sync.Once // finds u, loads files, rows and tree
	u     *unit     // nil until loaded, and when off holds no unit
	files []string  // file names, by DWARF file index
	lines lineIndex // line table
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

// NewTable returns a line source for d.
func NewTable(d *Data) *Table {
	own := newUnitLoader(d)
	own.release = true
	return &Table{D: d, own: own, nodeNames: make(map[uint64]funcName)}
}

// Lines returns the source lines of pc, innermost first; see
// Binary.Lines.
func (x *Table) Lines(pc uint64) []srcline.Line {
	ls, _, _ := x.LinesRange(pc)
	return ls
}

// LinesRange is Lines, with the addresses [lo, hi) around pc that get
// the same answer: those of pc's line table row, of the unit, subprogram
// and inlined calls that hold pc, and of no other inlined call on the
// way (at least [pc, pc+1)). Callers that memoize answers (objfile's
// line memo) keep one per range instead of one per address: the leaves
// of a hot loop fall on many addresses but few rows.
func (x *Table) LinesRange(pc uint64) (ls []srcline.Line, lo, hi uint64) {
	defer runtime.KeepAlive(x.D) // its sections' buffers, while lines are read from them
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.faulted.Load() {
		return nil, pc, pc + 1
	}
	// Mapped sections (newMappedSection) fault when their file shrinks.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if elfio.RecoverFault(recover()) {
			x.faulted.Store(true)
			ls, lo, hi = nil, pc, pc+1
		}
	}()
	if !x.indexed {
		x.indexed = true
		x.buildIndex()
	}
	unitBounds := func(r *pcRange) (uint64, uint64) { return r.lo, r.hi }
	sp := span{0, ^uint64(0)}
	i, ok := narrowFind(&sp, x.ranges, pc, unitBounds, nil)
	if !ok && x.partial {
		x.completeIndex()
		sp = span{0, ^uint64(0)}
		i, ok = narrowFind(&sp, x.ranges, pc, unitBounds, nil)
	}
	if !ok {
		// No unit holds pc, nor any address of sp (narrowFind): one
		// answer for the gap between units, as a binary's PLT is, so
		// that a memo of answers does not read every unit header again
		// for the next address there (completeIndex).
		if sp.lo <= pc && pc < sp.hi {
			return nil, sp.lo, sp.hi
		}
		return nil, pc, pc + 1
	}
	cu := x.units[x.ranges[i].idx]
	cu.once.Do(func() { x.own.loadUnit(cu) })
	ls = x.expand(cu, pc, &sp)
	if sp.lo > pc || sp.hi <= pc {
		return ls, pc, pc + 1
	}
	return ls, sp.lo, sp.hi
}

// span is the addresses [lo, hi) that a lookup's answer holds for, as
// the lookup narrows it.
type span struct{ lo, hi uint64 }

// cut narrows s to [lo, hi).
func (s *span) cut(lo, hi uint64) {
	s.lo, s.hi = max(s.lo, lo), min(s.hi, hi)
}

// exclude narrows s, which holds pc, to leave out [lo, hi), which does
// not hold pc.
func (s *span) exclude(lo, hi, pc uint64) {
	switch {
	case hi <= pc:
		s.lo = max(s.lo, hi)
	case lo > pc:
		s.hi = min(s.hi, lo)
	}
}

// narrowFind is findRange over rs (sorted by lo; bounds gives an entry's
// [lo, hi)), passing over the entries skip reports (nil: none) whatever
// the address, as lineAt passes over empty sequences: it returns the
// index of the last entry starting at or below pc that holds it, at most
// maxRangeWalk back, and whether there is one. It also narrows s to the
// addresses for which that search ends as it does for pc: at the same
// entry, or at none.
func narrowFind[T any](s *span, rs []T, pc uint64, bounds func(*T) (uint64, uint64), skip func(*T) bool) (int, bool) {
	i, _ := slices.BinarySearchFunc(rs, pc, func(r T, pc uint64) int {
		if lo, _ := bounds(&r); lo <= pc {
			return -1
		}
		return 1
	})
	if i < len(rs) {
		lo, _ := bounds(&rs[i])
		s.cut(0, lo)
	}
	for j := i - 1; j >= 0 && j >= i-maxRangeWalk; j-- {
		if skip != nil && skip(&rs[j]) {
			continue
		}
		lo, hi := bounds(&rs[j])
		if pc < hi {
			s.cut(lo, hi) // the entry found
			return j, true
		}
		s.cut(hi, ^uint64(0))
	}
	return 0, false
}

// buildIndex reads the ranges of every unit with code into x.ranges:
// its .debug_aranges set when it has one, else its root DIE's
// DW_AT_low_pc/high_pc or DW_AT_ranges. Corrupt units are left out.
// When .debug_info is inflated on demand and .debug_aranges is valid, it
// reads only the .debug_aranges sets and marks the index partial.
func (x *Table) buildIndex() {
	defer func() {
		if recover() != nil {
			x.ranges, x.units, x.partial = nil, nil, false
		}
	}()
	sets, ok := x.D.arangeSets()
	if !ok || x.D.InfoZ.complete() {
		x.indexUnits(sets, nil)
		return
	}
	offs := slices.Sorted(maps.Keys(sets))
	for _, off := range offs {
		x.addRanges(sets[off], &cuLines{off: off})
	}
	slices.SortFunc(x.ranges, func(a, b pcRange) int { return cmp.Compare(a.lo, b.lo) })
	x.partial = true
}

// completeIndex turns a partial index into the whole one, keeping the
// units already loaded.
func (x *Table) completeIndex() {
	defer func() {
		if recover() != nil {
			x.ranges, x.units = nil, nil
		}
	}()
	x.partial = false
	known := make(map[uint64]*cuLines, len(x.units))
	for _, cu := range x.units {
		known[cu.off] = cu
	}
	sets, _ := x.D.arangeSets()
	x.ranges, x.units = x.ranges[:0], x.units[:0]
	x.indexUnits(sets, known)
}

// indexUnits reads every unit header and adds the ranges of each unit
// with code (from sets, else its root DIE) to the index, reusing the
// cuLines of known, by offset.
func (x *Table) indexUnits(sets map[uint64][][2]uint64, known map[uint64]*cuLines) {
	var rs [][2]uint64
	for _, u := range x.D.everyUnit() {
		if !u.hasCode() {
			continue
		}
		set, ok := sets[u.off]
		if ok {
			rs = set
		} else {
			root := x.D.rootOf(u)
			if !root.ok || (root.tag != tagCompileUnit && root.tag != tagSkeletonUnit) {
				continue
			}
			a := pcAttrs{low: root.low, high: root.high, ranges: root.rngs,
				hasLow: root.lowSet, hasHigh: root.highSet, hasRanges: root.rangesSet}
			rs = x.D.rangesOf(u, &a, rs[:0])
		}
		cu := known[u.off]
		if cu == nil {
			cu = &cuLines{off: u.off}
		}
		x.addRanges(rs, cu)
	}
	slices.SortFunc(x.ranges, func(a, b pcRange) int { return cmp.Compare(a.lo, b.lo) })
}

// addRanges adds cu, and its address ranges rs, to the index (unsorted).
func (x *Table) addRanges(rs [][2]uint64, cu *cuLines) {
	for _, rg := range rs {
		x.ranges = append(x.ranges, pcRange{lo: rg[0], hi: rg[1], idx: int32(len(x.units))})
	}
	x.units = append(x.units, cu)
}

// unitFor returns the CU whose ranges hold pc, or nil.
func (x *Table) unitFor(pc uint64) *cuLines {
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

// loadUnit finds cu's unit (reading, and inflating, .debug_info up to
// its end) and reads its line table and inline tree. Corrupt parts are
// left empty: a bad line table gives no lines, a bad tree no inlined
// frames.
func (u *unitLoader) loadUnit(cu *cuLines) {
	if cu.u = u.d.unitStartingAt(cu.off); cu.u == nil || !cu.u.hasCode() {
		cu.u = nil
		return
	}
	u.readLineTable(cu)
	u.readInlineTree(cu)
	if u.release {
		u.d.InfoZ.release(int(cu.u.off), int(cu.u.end))
	}
}

// Preload loads the units holding pcs that are not loaded yet, with
// workers goroutines, each with its own unitLoader; Lines waits for it.
func (x *Table) Preload(pcs []uint64, workers int) {
	x.mu.Lock()
	if !x.indexed {
		x.indexed = true
		x.buildIndex()
	}
	seen := make(map[*cuLines]bool)
	var todo []*cuLines
	for _, pc := range pcs {
		cu := x.unitFor(pc)
		if cu == nil && x.partial {
			x.completeIndex()
			cu = x.unitFor(pc)
		}
		if cu != nil && !seen[cu] {
			seen[cu] = true
			todo = append(todo, cu)
		}
	}
	// x.mu stays held: Lines releases a unit's pages (unitLoader.release),
	// which the workers' loaders, which do not, may be reading.
	defer x.mu.Unlock()
	work := make(chan *cuLines)
	var wg sync.WaitGroup
	for range min(workers, len(todo)) {
		wg.Go(func() {
			defer runtime.KeepAlive(x.D)
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			u := newUnitLoader(x.D)
			for cu := range work {
				func() {
					defer func() {
						if elfio.RecoverFault(recover()) {
							x.faulted.Store(true)
						}
					}()
					cu.once.Do(func() { u.loadUnit(cu) })
				}()
			}
		})
	}
	for _, cu := range todo {
		work <- cu
	}
	close(work)
	wg.Wait()
}

// readLineTable reads cu's line table into cu.lines and cu.files.
func (u *unitLoader) readLineTable(cu *cuLines) {
	defer func() {
		if recover() != nil {
			cu.lines, cu.files = lineIndex{}, nil
		}
	}()
	root := u.d.rootOf(cu.u)
	if !root.ok || !root.hasStmt {
		return
	}
	cu.lines, cu.files = u.d.readLineProgram(cu.u, root.stmtList, root.compDir)
}

// lineMarkEvery is how many rows of a sequence one lineMark stands for:
// a lookup decodes at most that many rows (BenchmarkLookupLinesWarm).
const lineMarkEvery = 16

// lineIndex is a CU's line table without its rows: the rows stay encoded
// in the line program (.debug_line, which the Data keeps), and a lookup
// runs the program from the nearest lineMark at or below the address.
// A mark is 32 bytes: 2 bytes a row, where a table of rows costs 16.
type lineIndex struct {
	prog  *lineProgram // the program's header, for replays
	seqs  []lineSeq    // sorted by lo
	marks []lineMark   // by sequence, in program order within each
}

// lineSeq is a sequence of the line program: the addresses [lo, hi) and
// its marks, marks[mark:end] (none when it has no row but its end).
type lineSeq struct {
	lo, hi    uint64
	mark, end uint32
}

// lineMark is the state machine after it emitted a row: the row's
// address, its registers, and the program offset that follows.
type lineMark struct {
	addr    uint64
	line    int64
	off     uint32 // .debug_line offset of the next opcode
	file    uint32 // file register, noFile when past the file table
	opIndex uint32
}

// lineAt returns the file and line of pc from cu's line table: the last
// row at or below pc of the sequence holding pc, "" and 0 when none
// does. It narrows sp to the addresses that get the same row.
func (cu *cuLines) lineAt(pc uint64, sp *span) (file string, line int) {
	x := &cu.lines
	empty := func(s *lineSeq) bool { return s.mark >= s.end }
	j, ok := narrowFind(sp, x.seqs, pc, func(s *lineSeq) (uint64, uint64) { return s.lo, s.hi }, empty)
	if !ok {
		return "", 0
	}
	r, next := x.rowAt(&x.seqs[j], pc)
	if r.addr <= pc {
		sp.cut(r.addr, next)
	} else {
		sp.cut(pc, pc+1)
	}
	return cu.file(r.file), int(r.line)
}

// rowAt returns the last row of sequence s at or below pc (pc is in s),
// and the address of the row after it (pc+1 when the program ends
// before one): from the last mark at or below pc, the program is run
// until a row passes pc.
func (x *lineIndex) rowAt(s *lineSeq, pc uint64) (lineRow, uint64) {
	marks := x.marks[s.mark:s.end]
	k, _ := slices.BinarySearchFunc(marks, pc, func(m lineMark, pc uint64) int {
		if m.addr <= pc {
			return -1
		}
		return 1
	})
	p := x.prog
	best, st, b := x.resume(&marks[max(k-1, 0)])
	for {
		r, ok := p.next(&b, &st, true)
		switch {
		case !ok:
			return best, pc + 1
		case r.addr > pc:
			return best, r.addr
		case r.file == endOfSequence:
			return best, pc + 1
		}
		best = r
	}
}

// resume returns the row of mark m, and the state machine and program
// reader that run on from it (lineProgram.next with replay).
func (x *lineIndex) resume(m *lineMark) (lineRow, lineState, dbuf) {
	st := lineState{addr: m.addr, opIndex: uint64(m.opIndex), line: m.line, file: uint64(m.file)}
	b := x.prog.b
	b.off = int(m.off)
	return x.prog.row(&st), st, b
}

// file returns the name of DWARF file index i of cu, "" when unknown.
func (cu *cuLines) file(i uint32) string {
	if uint64(i) < uint64(len(cu.files)) {
		return cu.files[i]
	}
	return ""
}
