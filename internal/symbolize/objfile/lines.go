package objfile

import (
	"debug/elf"
	"runtime"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/dwarfline"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/gopclntab"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// Lines returns the source lines of the ELF virtual address elfAddr,
// innermost first, in the order of pprof's Location.Line: one entry for
// each function inlined at elfAddr, the innermost with the line being
// executed and each outer one with the line of its call to the previous
// (DW_AT_call_file, DW_AT_call_line), then the physical function last.
// Without inlining there is one entry. Lines of Go 1.20+ binaries are
// read from .gopclntab, inlining included (see readLines); others from
// DWARF (in the binary or its separate debug file), one compilation unit
// at a time, and cached, else from .gopclntab without inlining. DWARF
// answers are memoized by address range and kept in the section cache by
// build ID for the next run (lineMemo). The
// result is nil when the binary has no line information for elfAddr,
// including when it is corrupt; the slice is new and owned by the caller.
func (b *Binary) Lines(elfAddr uint64) []srcline.Line {
	if b.lines == nil {
		return nil
	}
	if b.memo == nil {
		return b.lines.Lines(elfAddr)
	}
	if ls, ok := b.memo.lines(elfAddr); ok {
		return ls
	}
	x := b.lines.(*dwarfline.Table)
	ls, lo, hi := x.LinesRange(elfAddr)
	if b.memo.add(lo, hi, ls) {
		if start, end, ok := b.sizedSymbol(elfAddr); ok && b.memo.sweepDue(start, end) {
			b.sweepFunction(x, start, end)
		}
	}
	return ls
}

// Functions whose every address the line memo takes at once
// (sweepFunction, lineMemo.sweepDue): those with sweepAfter addresses
// that missed the memo in one run, or one that missed it after an
// earlier run's answers for the function were saved, of at most
// maxSweepBytes of code (larger than the interpreter loop of libpython,
// _PyEval_EvalFrameDefault: 43 KB, about 6,400 ranges).
// A sweep also stops after maxSweepRanges ranges, and at an address
// whose answer is no lines for that address alone (no unit holds it).
const (
	sweepAfter     = 4
	maxSweepBytes  = 64 << 10
	maxSweepRanges = 1 << 13
)

// sweepFunction adds to the line memo the answers for every address of
// the function [start, end) (ELF addresses; none of more than
// maxSweepBytes),
// one LinesRange a range, from the compilation unit that its lookups
// have just read. The sampled addresses of a hot function keep changing
// from run to run (an interpreter's leaves land on a different few of
// its thousands of instructions each time), and each run would read its
// unit again for them: swept once, the function is answered from the
// memo file by every later run (BenchmarkLineSweep). Functions that
// miss less often are left to the memo's ranges, which keeps the memo
// file, read whole by every run, small.
func (b *Binary) sweepFunction(x *dwarfline.Table, start, end uint64) {
	if end-start > maxSweepBytes {
		return
	}
	var found []memoRange
	for pc := start; pc < end; {
		if hi, ok := b.memo.covering(pc); ok {
			pc = hi
			continue
		}
		ls, lo, hi := x.LinesRange(pc)
		if ls == nil && hi <= pc+1 || len(found) == maxSweepRanges {
			break // no unit holds pc, or too many ranges
		}
		if len(ls) <= maxMemoLines && lo < hi {
			found = append(found, memoRange{lo, hi, ls})
		}
		pc = max(hi, pc+1)
	}
	b.memo.addSorted(found)
}

// Preload reads, in parallel (GOMAXPROCS goroutines), the DWARF line
// tables and inline trees of the compilation units that hold the ELF
// addresses elfAddrs, so that Lines on them is fast. Lines reads a unit
// on its first lookup anyway; Preload only makes a batch of cold lookups
// (a new stack, addr2line-like use) use more than one CPU. It does
// nothing for binaries without DWARF.
func (b *Binary) Preload(elfAddrs []uint64) {
	if x, ok := b.lines.(*dwarfline.Table); ok {
		x.Preload(elfAddrs, runtime.GOMAXPROCS(0))
	}
}

// SaveCache writes what was inflated on demand of the binary's
// compressed DWARF sections (.debug_info, .debug_abbrev, .debug_line, the
// string sections and the range lists) to the section cache of
// debuginfo.Options.CacheDir, where it has grown since loaded, and the
// answers Lines found in DWARF since the memo was read (lineMemo); it
// does nothing without a cache. Failures are ignored (the cache is an
// optimization). Safe for concurrent use.
func (b *Binary) SaveCache() {
	if x, ok := b.lines.(*dwarfline.Table); ok && x.D != nil {
		x.D.Save()
	}
	if b.memo != nil {
		b.memo.save()
	}
}

// readLines sets b.lines. A Go binary whose .gopclntab the inline
// decoder reads (gopclntab.NewInlineLines: Go 1.20+ table, moduledata found)
// gets its lines, inlined frames included, from .gopclntab: that is as
// complete as Go's DWARF and far cheaper than inflating and indexing it
// for the first lookup ([gopclntab] BenchmarkGoLines, pclntab/cold
// against dwarf/cold). Other binaries get them from the DWARF of f, else from
// that of the separate debug file dbg (then setting b.debugFile), else
// from f's .gopclntab (gt) without inlining.
func (b *Binary) readLines(f *elf.File, lr *elfio.ReaderAt, dbg *debuginfo.File, gt *gopclntab.Table, cache *dwarfline.SectionCache) {
	if f.Section(".gopclntab") != nil {
		if g := gopclntab.NewInlineLines(f, lr, gt); g != nil {
			b.lines = g
			return
		}
	}
	if debuginfo.HasDWARF(f) {
		if d := dwarfline.Load(f, lr, cache); d != nil {
			b.lines = dwarfline.NewTable(d)
			b.memo = &lineMemo{cache: cache, id: b.buildID}
			return
		}
	}
	if dbg != nil && debuginfo.HasDWARF(dbg.ELF) {
		if d := dwarfline.Load(dbg.ELF, dbg.Reader, cache); d != nil {
			b.lines = dwarfline.NewTable(d)
			b.memo = &lineMemo{cache: cache, id: b.buildID}
			b.debugFile = dbg.Path
			return
		}
	}
	if tab := gt.Get(); tab != nil {
		b.lines = gopclntab.GosymLines{Tab: tab, Keep: gt.Mapped}
	}
}
