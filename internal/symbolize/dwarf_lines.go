package symbolize

import (
	"cmp"
	"debug/dwarf"
	"errors"
	"io"
	"slices"
	"sync"
)

// maxRangeWalk is how many compilation-unit or function ranges a lookup
// looks back past the nearest one for one that holds the address (ranges
// that overlap or nest).
const maxRangeWalk = 8

// maxNullEntries is how many null DIEs in a row buildIndex reads between
// units before it gives up: debug/dwarf returns null entries without
// moving on when a LEB128 runs off the end of corrupt data.
const maxNullEntries = 4096

// dwarfLines answers line and inlining queries from DWARF. It parses
// nothing up front: the first query builds an index of compilation unit
// (CU) address ranges, and each CU's line table and inline tree are read
// on its first query and kept. Every debug/dwarf call is guarded: corrupt
// DWARF gives no lines, never a panic.
type dwarfLines struct {
	mu      sync.Mutex
	d       *dwarf.Data
	indexed bool
	ranges  []pcRange // CU ranges, sorted by lo; idx is into units
	units   []*cuLines
	own     *unitLoader // loads units for lines, under mu
	chain   []int       // scratch for expand
}

// unitLoader reads compilation units; each goroutine that reads them has
// its own (a dwarf.Reader is not safe for concurrent use).
type unitLoader struct {
	d      *dwarf.Data
	names  map[dwarf.Offset]funcName // resolved function names, by DIE
	reader *dwarf.Reader             // for following references
}

// newUnitLoader returns a unitLoader of d.
func newUnitLoader(d *dwarf.Data) *unitLoader {
	return &unitLoader{d: d, names: make(map[dwarf.Offset]funcName)}
}

// pcRange is the address range [lo, hi) of the item at index idx.
type pcRange struct {
	lo, hi uint64
	idx    int32
}

// cuLines is what one CU says about addresses: its line table and its
// inline tree. It is filled on first use (loaded).
type cuLines struct {
	entry *dwarf.Entry // the CU's DIE
	once  sync.Once    // loads files, rows and tree
	files []string     // file names, by DWARF file index
	rows  []lineRow    // line table, sorted by address
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
func newDWARFLines(d *dwarf.Data) *dwarfLines {
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

// buildIndex reads the range of every CU (DW_AT_low_pc/high_pc or
// DW_AT_ranges) into x.ranges. On corrupt DWARF it keeps what it read
// before the damage.
func (x *dwarfLines) buildIndex() {
	defer func() {
		if recover() != nil {
			x.ranges, x.units = nil, nil
		}
	}()
	r := x.d.Reader()
	for nulls := 0; nulls < maxNullEntries; {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == 0 {
			nulls++ // padding, or a reader stuck on an unterminated LEB128
			continue
		}
		nulls = 0
		if e.Tag == dwarf.TagCompileUnit {
			rs, _ := x.d.Ranges(e)
			for _, rg := range rs {
				if rg[0] < rg[1] {
					x.ranges = append(x.ranges, pcRange{lo: rg[0], hi: rg[1], idx: int32(len(x.units))})
				}
			}
			x.units = append(x.units, &cuLines{entry: e})
		}
		r.SkipChildren()
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
	lr, err := u.d.LineReader(cu.entry)
	if err != nil || lr == nil {
		return
	}
	index := make(map[*dwarf.LineFile]uint32)
	var rows []lineRow
	var seqs []pcRange // [lo, hi) of rows in each sequence
	start := 0
	var le dwarf.LineEntry
	for {
		if err := lr.Next(&le); err != nil {
			if !errors.Is(err, io.EOF) {
				rows = rows[:start] // drop the damaged sequence
			}
			break
		}
		if le.EndSequence {
			rows = append(rows, lineRow{addr: le.Address, file: endOfSequence})
			seqs = append(seqs, pcRange{lo: uint64(start), hi: uint64(len(rows))})
			start = len(rows)
			continue
		}
		rows = append(rows, lineRow{addr: le.Address, file: fileIndex(lr, index, le.File), line: uint32(max(le.Line, 0))})
	}
	cu.rows = sortSequences(rows[:start], seqs)
	for _, lf := range lr.Files() {
		name := ""
		if lf != nil {
			name = lf.Name
		}
		cu.files = append(cu.files, name)
	}
}

// fileIndex returns the index of lf in lr's file table (noFile when it
// is not there), caching the table in index.
func fileIndex(lr *dwarf.LineReader, index map[*dwarf.LineFile]uint32, lf *dwarf.LineFile) uint32 {
	if lf == nil {
		return noFile
	}
	if i, ok := index[lf]; ok {
		return i
	}
	for i, f := range lr.Files() { // the table grew (DW_LNE_define_file)
		index[f] = uint32(i)
	}
	if i, ok := index[lf]; ok {
		return i
	}
	return noFile
}

// sortSequences returns rows with its sequences (seqs, as row index
// ranges) ordered by start address, keeping the order within each.
func sortSequences(rows []lineRow, seqs []pcRange) []lineRow {
	sorted := slices.IsSortedFunc(seqs, func(a, b pcRange) int {
		return cmp.Compare(rows[a.lo].addr, rows[b.lo].addr)
	})
	if sorted {
		return slices.Clip(rows)
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
