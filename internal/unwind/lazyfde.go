package unwind

import (
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// lazyFDEs answers rule lookups from a binary's .eh_frame one FDE at a
// time: it holds the section and the sorted table of .eh_frame_hdr (an
// FDE's initial location and offset), and runs an FDE's CFA program the
// first time a pc inside it is looked up, as libunwind and perf do,
// where a table of every FDE was built before a binary's first sample
// (a profile touches a few hundred of libc's 3700 FDEs; BenchmarkLoadTable
// compares both). Each FDE's rows form a Table of their own, read
// without a lock once built. Safe for concurrent use.
type lazyFDEs struct {
	sec    *frameSection
	mapped *elfio.Mapping // the mapping sec reads, kept while l lives; nil when sec is in the heap
	starts []uint64       // FDE initial locations (ELF addresses), ascending
	offs   []uint32       // the FDEs' .eh_frame offsets, in the same order
	built  []atomic.Pointer[Table]

	mu    sync.Mutex // builds one FDE at a time; guards what follows
	cies  map[uint64]*cie
	bad   map[uint64]bool
	b     *tableBuilder // reused from one FDE to the next
	nrows int
}

// lazyFDEsDecoded is what a lazyFDEs counts in the table cache's budget
// for the FDEs it builds, beyond its section and index (bytes).
const lazyFDEsDecoded = 64 << 10

// newLazyFDEs returns the FDEs of sec listed by .eh_frame_hdr (starts
// and offs, as ehFrameHdrTable gives them), or nil when the table is
// empty, out of order, or points outside the section: the caller then
// builds every FDE.
func newLazyFDEs(sec *frameSection, starts []uint64, offs []int) *lazyFDEs {
	if len(starts) == 0 || len(starts) != len(offs) || !slices.IsSorted(starts) {
		return nil
	}
	l := &lazyFDEs{sec: sec, starts: starts, offs: make([]uint32, len(offs)),
		built: make([]atomic.Pointer[Table], len(starts)), cies: map[uint64]*cie{}, bad: map[uint64]bool{}}
	for i, off := range offs {
		if off < 0 || off >= len(sec.data) {
			return nil
		}
		l.offs[i] = uint32(off)
	}
	return l
}

// table returns the rows of the FDE that starts last at or before pc,
// built on first use; nil when no FDE starts there.
func (l *lazyFDEs) table(pc uint64) *Table {
	i := sort.Search(len(l.starts), func(i int) bool { return l.starts[i] > pc }) - 1
	if i < 0 {
		return nil
	}
	if t := l.built[i].Load(); t != nil {
		return t
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.built[i].Load(); t != nil {
		return t
	}
	t := l.build(i)
	l.built[i].Store(t)
	return t
}

// build runs FDE i's CFA program into a Table of its rows; an FDE that
// does not parse gives an empty one, as does one whose bytes fault (a
// mapped .eh_frame whose file shrank). The rows keep nothing of the
// section (expressions are copied: cfaVM). Called with l.mu held.
func (l *lazyFDEs) build(i int) (t *Table) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if elfio.RecoverFault(recover()) {
			l.b, t = nil, &Table{} // the builder may be half-way through a row
		}
	}()
	b := l.b
	if b == nil {
		b = newTableBuilder()
		l.b = b
	} else {
		// The last FDE's table keeps its rules and complex rules.
		b.rules, b.complex = []rule{{cfaKind: cfaNone}}, nil
		clear(b.ruleIdx)
		b.rows, b.spans, b.stats = b.rows[:0], b.spans[:0], TableStats{}
	}
	var st frameStats
	w := &frameWalk{s: l.sec, st: &st, cies: l.cies, bad: l.bad, fn: func(f *fde) { b.addFDE(l.sec, f, 0) }}
	w.record(int(l.offs[i]), true)
	t, err := b.finish()
	if err != nil {
		return &Table{}
	}
	t.stats = TableStats{}
	l.nrows += len(t.pcs)
	return t
}

// rows is the number of rows built so far.
func (l *lazyFDEs) rows() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nrows
}

// bytes is what l counts in the table cache: its section, its index and
// lazyFDEsDecoded for the FDEs it builds.
func (l *lazyFDEs) bytes() int {
	return len(l.sec.data) + len(l.starts)*(8+4+int(unsafe.Sizeof(atomic.Pointer[Table]{}))) + lazyFDEsDecoded
}
