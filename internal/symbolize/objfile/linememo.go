package objfile

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
	"sync"

	"github.com/gprofile/gprofile/internal/symbolize/dwarfline"
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
	sorted  []memoRange // by lo
	pending []memoRange // added since the last merge into sorted, at most maxPending
	added   int         // answers found since the file was read
}

// memoRange is the answer for the ELF addresses [lo, hi): nil lines when
// there is no line information.
type memoRange struct {
	lo, hi uint64
	lines  []srcline.Line
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
	i, _ := slices.BinarySearchFunc(lm.sorted, elfAddr, func(r memoRange, a uint64) int {
		if r.lo <= a {
			return -1
		}
		return 1
	})
	if i > 0 && elfAddr < lm.sorted[i-1].hi {
		return slices.Clone(lm.sorted[i-1].lines), true
	}
	for _, r := range lm.pending {
		if r.lo <= elfAddr && elfAddr < r.hi {
			return slices.Clone(r.lines), true
		}
	}
	return nil, false
}

// add remembers ls as the answer for the ELF addresses [lo, hi), up to
// maxMemoAddrs ranges.
func (lm *lineMemo) add(lo, hi uint64, ls []srcline.Line) {
	if len(ls) > maxMemoLines || lo >= hi {
		return
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if len(lm.sorted)+len(lm.pending) >= maxMemoAddrs {
		return
	}
	lm.pending = append(lm.pending, memoRange{lo, hi, slices.Clone(ls)})
	lm.added++
	if len(lm.pending) >= maxPending {
		lm.mergeLocked()
	}
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
	rs, err := decodeLineMemo(data)
	if err != nil {
		return
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	lm.sorted = rs
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
	data := encodeLineMemo(lm.sorted)
	lm.added = 0
	lm.mu.Unlock()
	lm.cache.Put(lm.id, lineMemoName, data)
}

// encodeLineMemo encodes rs (sorted by lo): lineMemoMagic, then
// uvarints: the number of strings and each string (length, bytes), the
// number of ranges, and for each range its lo's delta from the previous
// lo, its length, its number of lines and each line's function, system
// name and file (string indexes) and line number. The section cache adds
// a CRC-32C.
func encodeLineMemo(rs []memoRange) []byte {
	ids := map[string]uint64{}
	var strs []string
	id := func(s string) uint64 {
		i, ok := ids[s]
		if !ok {
			i = uint64(len(strs))
			ids[s] = i
			strs = append(strs, s)
		}
		return i
	}
	var body []byte
	body = binary.AppendUvarint(body, uint64(len(rs)))
	prev := uint64(0)
	for _, r := range rs {
		body = binary.AppendUvarint(body, r.lo-prev)
		body = binary.AppendUvarint(body, r.hi-r.lo)
		body = binary.AppendUvarint(body, uint64(len(r.lines)))
		for _, l := range r.lines {
			body = binary.AppendUvarint(body, id(l.Function))
			body = binary.AppendUvarint(body, id(l.SystemName))
			body = binary.AppendUvarint(body, id(l.File))
			body = binary.AppendUvarint(body, uint64(l.Line))
		}
		prev = r.lo
	}
	out := append([]byte(lineMemoMagic), binary.AppendUvarint(nil, uint64(len(strs)))...)
	for _, s := range strs {
		out = binary.AppendUvarint(out, uint64(len(s)))
		out = append(out, s...)
	}
	return append(out, body...)
}

// errBadLineMemo is every decoding error of a line memo.
var errBadLineMemo = errors.New("bad line memo")

// decodeLineMemo decodes what encodeLineMemo wrote, refusing anything
// past the memo's bounds, ranges out of order and empty or wrapping
// ranges; a bad input is an error, never a panic.
func decodeLineMemo(data []byte) ([]memoRange, error) {
	if len(data) < len(lineMemoMagic) || string(data[:len(lineMemoMagic)]) != lineMemoMagic {
		return nil, errBadLineMemo
	}
	d := data[len(lineMemoMagic):]
	bad := false
	next := func() uint64 {
		v, n := binary.Uvarint(d)
		if n <= 0 {
			bad = true
			d = nil
			return 0
		}
		d = d[n:]
		return v
	}
	nstr := next()
	if bad || nstr > uint64(len(d)) { // each string takes a byte at least
		return nil, errBadLineMemo
	}
	strs := make([]string, nstr)
	for i := range strs {
		n := next()
		if bad || n > uint64(len(d)) {
			return nil, errBadLineMemo
		}
		strs[i] = string(d[:n])
		d = d[n:]
	}
	str := func() string {
		i := next()
		if i >= uint64(len(strs)) {
			bad = true
			return ""
		}
		return strs[i]
	}
	n := next()
	if bad || n > maxMemoAddrs || n > uint64(len(d)) {
		return nil, errBadLineMemo
	}
	rs := make([]memoRange, 0, n)
	lo := uint64(0)
	for range n {
		delta, width, nl := next(), next(), next()
		if bad || nl > maxMemoLines || width == 0 || (delta == 0 && len(rs) > 0) || lo+delta < lo || lo+delta+width < lo+delta {
			return nil, errBadLineMemo
		}
		lo += delta
		r := memoRange{lo: lo, hi: lo + width}
		if nl > 0 {
			r.lines = make([]srcline.Line, nl)
		}
		for i := range r.lines {
			l := &r.lines[i]
			l.Function, l.SystemName, l.File = str(), str(), str()
			ln := next()
			if ln > 1<<31-1 {
				bad = true
			}
			l.Line = int(ln)
		}
		if bad {
			return nil, errBadLineMemo
		}
		rs = append(rs, r)
	}
	if len(d) != 0 {
		return nil, errBadLineMemo
	}
	return rs, nil
}
