package unwind

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"
)

// Table is the unwind table of one binary: for every pc covered by its CFI,
// the rule to step from a frame at that pc to its caller. Rows are sorted
// by pc: pcs[i] (offset from base, in bytes of ELF virtual address) starts
// row i, which runs up to pcs[i+1]; ids[i] indexes rules (0 is a gap with
// no CFI). A Table is immutable once built and safe for concurrent use.
type Table struct {
	base    uint64
	pcs     []uint32
	ids     []uint16
	ids32   []uint32 // instead of ids when a binary has more than 65535 distinct rules
	rules   []rule
	complex []complexRule
	// noCFI: the binary has no CFI section at all; its frames are walked
	// with frame pointers.
	noCFI bool
	// gofn, for a Go binary, gives the rules of its Go functions where
	// the rows above have none.
	gofn *goFuncs
	// fdes, when not nil, holds the binary's .eh_frame, whose FDEs are
	// built one at a time on first lookup: the rows above are empty.
	fdes  *lazyFDEs
	stats TableStats
	id    atomic.Uint32 // memoID, 0 until the rule memo first needs it
	// entry is the binary's entry point (ELF e_entry; 0: none), whose
	// stub starts the process's stack (inEntryStub).
	entry uint64
}

// entryStubBytes bounds the code at a binary's entry point that starts
// the process's stack with no CFI: the dynamic loader's _start and
// _dl_start_user (glibc's RTLD_START: 61 bytes on x86-64), which call
// _dl_start and _dl_init from the initial sp.
const entryStubBytes = 64

// inEntryStub reports whether pc (an ELF address) lies in the first
// entryStubBytes of the binary's entry point.
func (t *Table) inEntryStub(pc uint64) bool {
	return t.entry != 0 && pc >= t.entry && pc-t.entry < entryStubBytes
}

// TableStats describes how a Table was built, for tests and diagnostics.
type TableStats struct {
	// FDEs is the number of FDEs read; BadFDEs and BadCIEs those
	// skipped as malformed (with unknown augmentations, bad pointers,
	// unknown CFA ops); Overlaps the FDEs dropped because an earlier
	// one (.eh_frame before .debug_frame) covered their start.
	FDEs, BadFDEs, BadCIEs, Overlaps int
	// Recovered counts the FDEs found through .eh_frame_hdr past a
	// record whose bad length ended the walk of .eh_frame.
	Recovered int
	// GoFuncs is the number of functions of a Go binary's .gopclntab,
	// whose rules are decoded as each one is first looked up.
	GoFuncs int
	// Err is the first parse error met, nil when all was well.
	Err error
}

// Rows is the number of rows (pc ranges, including gaps between FDEs);
// for a table whose FDEs are built on demand, of those built so far.
func (t *Table) Rows() int {
	if t.fdes != nil {
		return t.fdes.rows()
	}
	return len(t.pcs)
}

// Rules is the number of distinct rules the rows share.
func (t *Table) Rules() int { return len(t.rules) + len(t.complex) }

// Bytes is the memory the table holds, in bytes, as the cache counts it.
func (t *Table) Bytes() int {
	n := int(unsafe.Sizeof(*t)) + 4*len(t.pcs) + 2*len(t.ids) + 4*len(t.ids32) +
		int(unsafe.Sizeof(rule{}))*len(t.rules) + int(unsafe.Sizeof(complexRule{}))*len(t.complex)
	for i := range t.complex {
		n += len(t.complex[i].cfa.expr)
		for _, r := range t.complex[i].regs {
			n += len(r.expr)
		}
	}
	if t.gofn != nil {
		n += t.gofn.bytes()
	}
	if t.fdes != nil {
		n += t.fdes.bytes()
	}
	return n
}

// Stats says how the table was built.
func (t *Table) Stats() TableStats { return t.stats }

// HasCFI reports whether the binary had a CFI section (.eh_frame or
// .debug_frame); without one its frames are walked with frame pointers.
func (t *Table) HasCFI() bool { return !t.noCFI }

// lookup returns the rule in force at pc (an ELF virtual address), and
// the table that holds its complex part: t, or for a table whose FDEs
// are built on demand, the one of pc's FDE.
func (t *Table) lookup(pc uint64) (rule, *Table, bool) {
	if t.fdes != nil {
		if sub := t.fdes.table(pc); sub != nil {
			r, ok := sub.lookupRows(pc)
			return r, sub, ok
		}
		return rule{}, t, false
	}
	if r, ok := t.lookupRows(pc); ok || t.gofn == nil {
		return r, t, ok
	}
	r, ok := t.gofn.lookup(pc)
	return r, t, ok
}

// lookupRows returns the rule of the rows built from .eh_frame and .debug_frame.
func (t *Table) lookupRows(pc uint64) (rule, bool) {
	if len(t.pcs) == 0 || pc < t.base || pc-t.base > 0xffffffff {
		return rule{}, false
	}
	x := uint32(pc - t.base)
	// Binary search for the last row starting at or before x.
	lo, hi := 0, len(t.pcs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.pcs[m] <= x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return rule{}, false
	}
	var id uint32
	if t.ids32 != nil {
		id = t.ids32[lo-1]
	} else {
		id = uint32(t.ids[lo-1])
	}
	r := t.rules[id]
	return r, r.cfaKind != cfaNone
}

// tableBuilder collects the rows of every FDE, then stitches them into a Table.
type tableBuilder struct {
	rules   []rule
	ruleIdx map[rule]uint32
	complex []complexRule
	spans   []fdeSpan
	rows    []rawRow
	fdeLo   int // rows[fdeLo:] belong to the FDE being run
	// topFuncs are the start addresses of functions that begin a stack
	// (Go's runtime.goexit, mstart, rt0_go): their return address is made
	// undefined, so a walk ends there as complete.
	topFuncs map[uint64]bool
	inTop    bool
	signal   bool // the FDE being run is a signal frame's
	vm       cfaVM
	emit     func(loc uint64, st *cfaState) // b.emitRow, bound once
	stats    TableStats
}

type fdeSpan struct {
	start, end uint64
	rank       int // 0 for .eh_frame, 1 for .debug_frame: the first wins an overlap
	lo, hi     int // rows[lo:hi]
}

type rawRow struct {
	pc uint64
	id uint32
}

func newTableBuilder() *tableBuilder {
	b := &tableBuilder{rules: []rule{{cfaKind: cfaNone}}, ruleIdx: map[rule]uint32{}}
	b.emit = b.emitRow
	return b
}

func (b *tableBuilder) emitRow(loc uint64, st *cfaState) { b.addRow(loc, st, b.signal) }

var (
	errRAColumn = errors.New("return address column is not rip (16)")
	errTooBig   = fmt.Errorf("more than %d rows: the rest of the binary has no CFI", maxRows)
)

// maxRows bounds the rows of one table (16 Mi rows: about 100 MB while it
// is built, far above any real binary's; Debian's libc has 24k).
const maxRows = 1 << 24

// addSection parses one CFI section and adds the rows of its FDEs. When
// the walk stops early at a bad record length and hdrFDEs (from
// .eh_frame_hdr) lists FDEs beyond that point, those are parsed too.
func (b *tableBuilder) addSection(s *frameSection, rank int, hdrFDEs func() []int) {
	var fs frameStats
	if want := len(b.rows) + len(s.data)/6; cap(b.rows) < want {
		b.rows = append(make([]rawRow, 0, want), b.rows...) // about 6 bytes of CFI a row
	}
	w, stopped := s.parseFrames(&fs, func(f *fde) { b.addFDE(s, f, rank) })
	if stopped >= 0 && hdrFDEs != nil {
		var rest []int
		for _, off := range hdrFDEs() {
			if off > stopped {
				rest = append(rest, off)
			}
		}
		w.parseFDEsAt(rest)
		b.stats.Recovered = len(rest)
	}
	b.stats.FDEs += fs.fdes
	b.stats.BadFDEs += fs.badFDEs
	b.stats.BadCIEs += fs.badCIEs
	if b.stats.Err == nil && fs.err != nil {
		b.stats.Err = fs.err
	}
}

// addFDE runs the CFA program of f, an FDE of s, and adds its rows.
func (b *tableBuilder) addFDE(s *frameSection, f *fde, rank int) {
	if f.start == 0 || f.end == f.start {
		return // discarded by the linker, or empty
	}
	lo := len(b.rows)
	if lo >= maxRows {
		b.noteBad(errTooBig)
		return
	}
	b.fdeLo, b.inTop = lo, b.topFuncs[f.start]
	err := errRAColumn
	if f.cie.raReg == RegRIP {
		b.signal = f.cie.signal
		err = runFDE(&b.vm, s, f, b.emit)
	}
	if err != nil {
		b.rows = b.rows[:lo]
		b.noteBad(fmt.Errorf("FDE for %#x: %w", f.start, err))
		return
	}
	b.spans = append(b.spans, fdeSpan{start: f.start, end: f.end, rank: rank, lo: lo, hi: len(b.rows)})
}

// noteBad counts an FDE left out and keeps the first error.
func (b *tableBuilder) noteBad(err error) {
	b.stats.BadFDEs++
	if b.stats.Err == nil {
		b.stats.Err = err
	}
}

func (b *tableBuilder) addRow(loc uint64, st *cfaState, signal bool) {
	if b.inTop {
		c := *st
		c.regs[RegRIP] = regRule{kind: rUndefined}
		st = &c
	}
	var id uint32
	if r, ok := compact(st, RegRIP, signal); ok {
		var seen bool
		if id, seen = b.ruleIdx[r]; !seen {
			id = uint32(len(b.rules))
			b.rules = append(b.rules, r)
			b.ruleIdx[r] = id
		}
	} else {
		id = uint32(len(b.rules))
		b.rules = append(b.rules, rule{cfaKind: cfaComplex, cfaOff: int32(len(b.complex))})
		b.complex = append(b.complex, complexOf(st, signal))
	}
	if n := len(b.rows); n > b.fdeLo && b.rows[n-1].id == id {
		return
	}
	b.rows = append(b.rows, rawRow{pc: loc, id: id})
}

// finish sorts the FDEs, drops overlaps, fills gaps and packs the rows.
func (b *tableBuilder) finish() (*Table, error) {
	slices.SortFunc(b.spans, func(x, y fdeSpan) int {
		if x.start != y.start {
			if x.start < y.start {
				return -1
			}
			return 1
		}
		return x.rank - y.rank
	})
	out := make([]rawRow, 0, len(b.rows)+len(b.spans)+1) // rows, a gap per FDE at most, the end
	var end uint64
	for _, s := range b.spans {
		if len(out) > 0 && s.start < end {
			b.stats.Overlaps++
			continue
		}
		if len(out) > 0 && s.start > end {
			out = append(out, rawRow{pc: end})
		}
		for _, r := range b.rows[s.lo:s.hi] {
			if r.pc >= s.end {
				break
			}
			if n := len(out); n > 0 && out[n-1].id == r.id {
				continue
			}
			out = append(out, r)
		}
		end = s.end
	}
	t := &Table{rules: b.rules, complex: b.complex, stats: b.stats}
	if len(out) == 0 {
		return t, nil
	}
	out = append(out, rawRow{pc: end})
	t.base = out[0].pc
	if end-t.base > 0xffffffff {
		return nil, fmt.Errorf("CFI spans %#x bytes of code, more than 4 GiB", end-t.base)
	}
	t.pcs = make([]uint32, len(out))
	wide := len(b.rules) > 1<<16
	if wide {
		t.ids32 = make([]uint32, len(out))
	} else {
		t.ids = make([]uint16, len(out))
	}
	for i, r := range out {
		t.pcs[i] = uint32(r.pc - t.base)
		if wide {
			t.ids32[i] = r.id
		} else {
			t.ids[i] = uint16(r.id)
		}
	}
	return t, nil
}
