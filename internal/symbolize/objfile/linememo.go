package objfile

import (
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/gprofile/gprofile/internal/symbolize/dwarfline"
	"github.com/gprofile/gprofile/internal/symbolize/internal/textscan"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// lineMemoName names a binary's line memo in the section cache (one
// file per build ID, beside its inflated sections). The number changes
// whenever what Lines answers for the same DWARF may change, so that no
// run reads answers an older reader gave.
const lineMemoName = "lines-1"

// lineMemoMagic starts an encoded line memo.
const lineMemoMagic = "gplines1"

// Bounds of a line memo: address ranges kept per binary (in memory and
// on disk), lines per range, and encoded bytes read back.
const (
	maxMemoAddrs = 1 << 15
	maxMemoLines = 256
	maxMemoBytes = 16 << 20
)

// lineMemo remembers the answers of a DWARF line table (Binary.Lines),
// each for the range of ELF addresses it holds for
// (dwarfline.Table.LinesRange), and keeps them on disk by build ID (the
// section cache, debuginfo.Options.CacheDir), so that a run reads the
// answers the runs before it gave instead of reading compilation units
// of DWARF again: the units of the interpreter loop of libpython, say,
// that every profile of a Python process samples (objfile's
// BenchmarkLineMemo). The answers of one build ID's DWARF never change;
// lineMemoName's version covers changes of the reader. Safe for
// concurrent use.
type lineMemo struct {
	cache   *dwarfline.SectionCache // nil: kept in memory only
	id      string                  // build ID, "" when none: kept in memory only
	once    sync.Once               // reads the file on first use
	mu      sync.Mutex
	file    memoFile       // the ranges read from the file, their lines decoded on lookup
	sorted  []memoRange    // found this run, by lo
	pending []memoRange    // added since the last merge into sorted, at most maxPending
	added   int            // answers found since the file was read
	misses  map[uint64]int // by function start: its addresses that missed this run
}

// memoRange is the answer for the ELF addresses [lo, hi): nil lines when
// there is no line information.
type memoRange struct {
	lo, hi uint64
	lines  []srcline.Line
}

// memoFile is a line memo as its file holds it (parseLineMemo): the
// ranges' bounds decoded for lookups, and each range's lines left
// encoded in body until one of its addresses is looked up, so that a
// memo read back costs about 20 bytes a range in the heap rather than
// its decoded lines (BenchmarkLineMemo/memo). The zero value holds no
// range.
type memoFile struct {
	strs []string // the string table
	los  []uint64 // range starts, ascending
	his  []uint64 // range ends, in the same order
	offs []uint32 // where each range's number of lines starts in body
	body []byte
}

// maxPending is how many new ranges wait, unsorted, before they are
// merged into the sorted ones.
const maxPending = 64

// lines returns the memoized answer for elfAddr, reading the memo's file
// on first use; ok is false when it has none.
func (lm *lineMemo) lines(elfAddr uint64) (ls []srcline.Line, ok bool) {
	lm.once.Do(lm.load)
	lm.mu.Lock()
	defer lm.mu.Unlock()
	switch r, fi := lm.findLocked(elfAddr); {
	case r != nil:
		return slices.Clone(r.lines), true
	case fi >= 0:
		return lm.file.rangeLines(fi), true
	}
	return nil, false
}

// covering returns the end of the memoized range that holds elfAddr;
// ok is false when none does.
func (lm *lineMemo) covering(elfAddr uint64) (hi uint64, ok bool) {
	lm.once.Do(lm.load)
	lm.mu.Lock()
	defer lm.mu.Unlock()
	switch r, fi := lm.findLocked(elfAddr); {
	case r != nil:
		return r.hi, true
	case fi >= 0:
		return lm.file.his[fi], true
	}
	return 0, false
}

// findLocked returns the range that holds elfAddr: one found this run
// (r), else the file's range fi (r nil), else r nil and fi -1. The
// caller holds lm.mu.
func (lm *lineMemo) findLocked(elfAddr uint64) (r *memoRange, fi int) {
	// The range that starts last at or before elfAddr, of the file's and
	// this run's (the later one where both start there, as when they
	// were one sorted list).
	f := &lm.file
	fi, _ = slices.BinarySearchFunc(f.los, elfAddr, func(lo, a uint64) int {
		if lo <= a {
			return -1
		}
		return 1
	})
	i, _ := slices.BinarySearchFunc(lm.sorted, elfAddr, func(r memoRange, a uint64) int {
		if r.lo <= a {
			return -1
		}
		return 1
	})
	switch {
	case i > 0 && (fi == 0 || lm.sorted[i-1].lo >= f.los[fi-1]):
		if elfAddr < lm.sorted[i-1].hi {
			return &lm.sorted[i-1], -1
		}
	case fi > 0:
		if elfAddr < f.his[fi-1] {
			return nil, fi - 1
		}
	}
	for k := range lm.pending {
		if r := &lm.pending[k]; r.lo <= elfAddr && elfAddr < r.hi {
			return r, -1
		}
	}
	return nil, -1
}

// add remembers ls as the answer for the ELF addresses [lo, hi), up to
// maxMemoAddrs ranges; it reports whether it did.
func (lm *lineMemo) add(lo, hi uint64, ls []srcline.Line) bool {
	if len(ls) > maxMemoLines || lo >= hi {
		return false
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if len(lm.file.los)+len(lm.sorted)+len(lm.pending) >= maxMemoAddrs {
		return false
	}
	lm.pending = append(lm.pending, memoRange{lo, hi, slices.Clone(ls)})
	lm.added++
	if len(lm.pending) >= maxPending {
		lm.mergeLocked()
	}
	return true
}

// sweepDue counts a miss of the memo (an answer read from DWARF) in the
// function [start, end) (ELF addresses) and reports whether the
// function is to be swept now: the miss is its sweepAfter'th this run,
// or its first while the memo's file holds answers for the function (a
// function missed by two runs).
func (lm *lineMemo) sweepDue(start, end uint64) bool {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if lm.misses == nil {
		lm.misses = make(map[uint64]int)
	}
	lm.misses[start]++
	n := lm.misses[start]
	if n == 1 {
		i, _ := slices.BinarySearch(lm.file.los, start)
		return i < len(lm.file.los) && lm.file.los[i] < end
	}
	return n == sweepAfter
}

// addSorted remembers the ranges rs, sorted by lo and none of them in
// the memo, as add would one by one, taking rs's lines; it merges them
// into the sorted ranges at once, so that the many ranges of one
// function cost one merge.
func (lm *lineMemo) addSorted(rs []memoRange) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	room := maxMemoAddrs - (len(lm.file.los) + len(lm.sorted) + len(lm.pending))
	rs = rs[:max(0, min(len(rs), room))]
	if len(rs) == 0 {
		return
	}
	lm.mergeLocked()
	lm.pending = rs
	lm.added += len(rs)
	lm.mergeLocked()
	lm.pending = nil
}

// mergeLocked moves the pending ranges into the sorted ones. The caller
// holds lm.mu.
func (lm *lineMemo) mergeLocked() {
	byLo := func(a, b memoRange) int { return cmp.Compare(a.lo, b.lo) }
	slices.SortFunc(lm.pending, byLo)
	merged := make([]memoRange, 0, len(lm.sorted)+len(lm.pending))
	a, b := lm.sorted, lm.pending
	for len(a) > 0 && len(b) > 0 {
		if a[0].lo <= b[0].lo {
			merged, a = append(merged, a[0]), a[1:]
		} else {
			merged, b = append(merged, b[0]), b[1:]
		}
	}
	lm.sorted = append(append(merged, a...), b...)
	lm.pending = lm.pending[:0]
}

// load reads the memo's file, if any; a missing or bad file leaves the
// memo empty.
func (lm *lineMemo) load() {
	data := lm.cache.Get(lm.id, lineMemoName, maxMemoBytes)
	if data == nil {
		return
	}
	f, err := parseLineMemo(data)
	if err != nil {
		return
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	lm.file = f
}

// save writes the memo's file when answers were added since it was read.
func (lm *lineMemo) save() {
	if lm.cache == nil || lm.id == "" {
		return
	}
	lm.mu.Lock()
	if lm.added == 0 {
		lm.mu.Unlock()
		return
	}
	lm.mergeLocked()
	data := encodeLineMemo(&lm.file, lm.sorted)
	lm.added = 0
	lm.mu.Unlock()
	lm.cache.Update(lm.id, lineMemoName, data)
}

// encodeLineMemo encodes the ranges of f and rs (sorted by lo), in the
// order of their starts (f's first where both start at one address):
// lineMemoMagic, then uvarints: the number of strings and each string
// (length, bytes), the number of ranges, and for each range its lo's
// delta from the previous lo, its length, its number of lines and each
// line's function, system name and file (string indexes) and line
// number. f's strings keep their indexes, so that its ranges' lines are
// copied as they are encoded. The section cache adds a CRC-32C.
func encodeLineMemo(f *memoFile, rs []memoRange) []byte {
	ids := make(map[string]uint64, len(f.strs))
	strs := slices.Clone(f.strs)
	for i, s := range strs {
		if _, ok := ids[s]; !ok {
			ids[s] = uint64(i)
		}
	}
	id := func(s string) uint64 {
		i, ok := ids[s]
		if !ok {
			i = uint64(len(strs))
			ids[s] = i
			strs = append(strs, s)
		}
		return i
	}
	body := make([]byte, 0, len(f.body)+32*len(rs))
	n, prev := 0, uint64(0)
	// head writes a range's bounds, unless it starts where the range
	// before it does (found twice, by two goroutines): a memo's starts
	// ascend strictly.
	head := func(lo, hi uint64) bool {
		if n > 0 && lo <= prev {
			return false
		}
		body = binary.AppendUvarint(body, lo-prev)
		body = binary.AppendUvarint(body, hi-lo)
		n, prev = n+1, lo
		return true
	}
	fi := 0
	for fi < len(f.los) || len(rs) > 0 {
		if fi < len(f.los) && (len(rs) == 0 || f.los[fi] <= rs[0].lo) {
			// The file's ranges up to the next new one, copied as one
			// run: only the first one's lo delta changes (BenchmarkLineMemoSave).
			end := len(f.los)
			if len(rs) > 0 {
				end = fi + sort.Search(len(f.los)-fi, func(k int) bool { return f.los[fi+k] > rs[0].lo })
			}
			if !head(f.los[fi], f.his[fi]) {
				fi++
				continue
			}
			body = append(body, f.encodedRun(fi, end)...)
			n, prev = n+end-fi-1, f.los[end-1]
			fi = end
			continue
		}
		r := rs[0]
		rs = rs[1:]
		if !head(r.lo, r.hi) {
			continue
		}
		body = binary.AppendUvarint(body, uint64(len(r.lines)))
		for _, l := range r.lines {
			body = binary.AppendUvarint(body, id(l.Function))
			body = binary.AppendUvarint(body, id(l.SystemName))
			body = binary.AppendUvarint(body, id(l.File))
			body = binary.AppendUvarint(body, uint64(l.Line))
		}
	}
	size := len(lineMemoMagic) + 2*binary.MaxVarintLen64 + len(body)
	for _, s := range strs {
		size += binary.MaxVarintLen64 + len(s)
	}
	out := append(make([]byte, 0, size), lineMemoMagic...)
	out = binary.AppendUvarint(out, uint64(len(strs)))
	for _, s := range strs {
		out = binary.AppendUvarint(out, uint64(len(s)))
		out = append(out, s...)
	}
	out = binary.AppendUvarint(out, uint64(n))
	return append(out, body...)
}

// errBadLineMemo is every decoding error of a line memo.
var errBadLineMemo = errors.New("bad line memo")

// parseLineMemo reads what encodeLineMemo wrote into a memoFile: the
// strings and the ranges' bounds, each range's lines checked (their
// string indexes and line numbers) but left encoded. It refuses anything
// past the memo's bounds, ranges out of order and empty or wrapping
// ranges; a bad input is an error, never a panic.
func parseLineMemo(data []byte) (memoFile, error) {
	var f memoFile
	if len(data) < len(lineMemoMagic) || string(data[:len(lineMemoMagic)]) != lineMemoMagic {
		return f, errBadLineMemo
	}
	r := textscan.Uvarints{Rest: data[len(lineMemoMagic):]}
	nstr := r.Next()
	if r.Bad || nstr > uint64(len(r.Rest)) { // each string takes a byte at least
		return f, errBadLineMemo
	}
	f.strs = make([]string, nstr)
	for i := range f.strs {
		f.strs[i] = string(r.Bytes(r.Next()))
		if r.Bad {
			return memoFile{}, errBadLineMemo
		}
	}
	n := r.Next()
	if r.Bad || n > maxMemoAddrs || n > uint64(len(r.Rest)) || len(r.Rest) > math.MaxUint32 {
		return memoFile{}, errBadLineMemo
	}
	f.body = r.Rest
	f.los, f.his, f.offs = make([]uint64, 0, n), make([]uint64, 0, n), make([]uint32, 0, n)
	lo := uint64(0)
	for range n {
		delta, width := r.Next(), r.Next()
		off := len(f.body) - len(r.Rest)
		nl := r.Next()
		if r.Bad || nl > maxMemoLines || width == 0 || (delta == 0 && len(f.los) > 0) || lo+delta < lo || lo+delta+width < lo+delta {
			return memoFile{}, errBadLineMemo
		}
		lo += delta
		for range nl {
			fn, sys, file, ln := r.Next(), r.Next(), r.Next(), r.Next()
			if r.Bad || fn >= nstr || sys >= nstr || file >= nstr || ln > 1<<31-1 {
				return memoFile{}, errBadLineMemo
			}
		}
		f.los, f.his, f.offs = append(f.los, lo), append(f.his, lo+width), append(f.offs, uint32(off))
	}
	if len(r.Rest) != 0 {
		return memoFile{}, errBadLineMemo
	}
	return f, nil
}

// encodedRun returns the encoding of ranges [i, j) of f but range i's
// bounds: range i's lines (their number, then each line's string indexes
// and line number, checked by parseLineMemo), then each later range's
// lo delta, length and lines, as encodeLineMemo wrote them.
func (f *memoFile) encodedRun(i, j int) []byte {
	end := len(f.body)
	if j < len(f.offs) {
		// Range j's lo delta and length precede its lines.
		end = int(f.offs[j])
		for range 2 {
			end = uvarintStart(f.body[:end])
		}
	}
	return f.body[f.offs[i]:end]
}

// uvarintStart returns where the uvarint that ends b starts.
func uvarintStart(b []byte) int {
	i := len(b) - 1 // its last byte has the high bit clear
	for i > 0 && b[i-1]&0x80 != 0 {
		i--
	}
	return i
}

// rangeLines decodes range i's lines (nil when it has none).
func (f *memoFile) rangeLines(i int) []srcline.Line {
	d := f.body[f.offs[i]:]
	next := func() uint64 {
		v, n := binary.Uvarint(d)
		d = d[n:]
		return v
	}
	nl := next()
	if nl == 0 {
		return nil
	}
	ls := make([]srcline.Line, nl)
	for j := range ls {
		ls[j] = srcline.Line{Function: f.strs[next()], SystemName: f.strs[next()], File: f.strs[next()], Line: int(next())}
	}
	return ls
}

// ranges decodes every range of f.
func (f *memoFile) ranges() []memoRange {
	rs := make([]memoRange, len(f.los))
	for i := range rs {
		rs[i] = memoRange{lo: f.los[i], hi: f.his[i], lines: f.rangeLines(i)}
	}
	return rs
}
