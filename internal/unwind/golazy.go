package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
	"sync"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// goFuncs answers rule lookups for a Go binary's functions from its
// .gopclntab, one function at a time: it holds the function table (8
// bytes a function) and reads a function's _func record, pcsp table and
// name through src only when a pc inside it is first looked up, where a
// table of every function (addGoPclntab in the tests) was built before a
// binary's first sample: a profile touches a few hundred of a Go
// toolchain binary's tens of thousands (BenchmarkGoTable compares both).
type goFuncs struct {
	src       io.ReaderAt    // the .gopclntab section
	mapped    *elfio.Mapping // the mapping src reads, kept while g lives; nil when src reads a file or the heap
	size      int64          // its bytes
	textStart uint64
	namesOff  int64 // funcnametab
	pctabOff  int64 // pctab
	pclnOff   int64 // functab: (entryOff, funcOff) pairs, then the _func records
	flagOff   int   // of the flag byte in a _func record (Go 1.20 added startLine)
	entries   []uint32
	funcOffs  []uint32

	mu    sync.Mutex
	funcs map[int32][]goRow // decoded functions, by index
}

// Bits of a _func record's flag (internal/abi.FuncFlag).
const (
	goFlagTopFrame = 1 << 0 // the function starts a stack (goexit, mstart, rt0_go)
	goFlagSPWrite  = 1 << 1 // it writes SP other than by adding a constant
)

// goRow is one pc-value row of a decoded function: from off (bytes past
// the function's entry) on, rule applies (cfaKind cfaNone: no rule).
type goRow struct {
	off uint32
	r   rule
}

// maxGoDecoded bounds the functions a goFuncs keeps decoded; past it the
// cache starts over (a function's rows are a few hundred bytes).
const maxGoDecoded = 1 << 14

// goFuncsBytes is what a goFuncs counts for its decoded functions and
// open file in the table cache's budget, beyond its function table.
const goFuncsBytes = 256 << 10

// newGoFuncs reads the header and function table of the .gopclntab in
// src (size bytes; Go 1.18 or later, else errNotGo118). textStart is
// runtime.text's address, used when the header leaves it 0.
func newGoFuncs(src io.ReaderAt, size int64, textStart uint64) (g *goFuncs, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if elfio.RecoverFault(recover()) {
			g, err = nil, errors.New("read .gopclntab: memory fault (the file shrank)")
		}
	}()
	var hdr [8 + 8*8]byte
	if size < int64(len(hdr)) {
		return nil, errNotGo118
	}
	if _, err := src.ReadAt(hdr[:], 0); err != nil {
		return nil, fmt.Errorf("read .gopclntab header: %w", err)
	}
	le := binary.LittleEndian
	magic := le.Uint32(hdr[:])
	if (magic != goMagic118 && magic != goMagic120) || hdr[6] != 1 || hdr[7] != 8 {
		return nil, errNotGo118
	}
	word := func(i int) uint64 { return le.Uint64(hdr[8+8*i:]) }
	nfunc := word(0)
	if t := word(2); t != 0 {
		textStart = t
	}
	namesOff, pctabOff, pclnOff := word(3), word(6), word(7)
	if nfunc > maxGoFuncs || namesOff > uint64(size) || pctabOff > uint64(size) || pclnOff > uint64(size) ||
		uint64(size)-pclnOff < (nfunc+1)*8 {
		return nil, fmt.Errorf(".gopclntab header out of bounds (%d functions)", nfunc)
	}
	pairs := make([]byte, (nfunc+1)*8)
	if _, err := src.ReadAt(pairs, int64(pclnOff)); err != nil {
		return nil, fmt.Errorf("read .gopclntab function table: %w", err)
	}
	flagOff := 41
	if magic == goMagic118 {
		flagOff = 37
	}
	g = &goFuncs{src: src, size: size, textStart: textStart, namesOff: int64(namesOff), flagOff: flagOff,
		pctabOff: int64(pctabOff), pclnOff: int64(pclnOff),
		entries: make([]uint32, nfunc+1), funcOffs: make([]uint32, nfunc+1), funcs: map[int32][]goRow{}}
	for i := range g.entries {
		g.entries[i] = le.Uint32(pairs[8*i:])
		g.funcOffs[i] = le.Uint32(pairs[8*i+4:])
	}
	return g, nil
}

// count is the number of functions.
func (g *goFuncs) count() int { return len(g.entries) - 1 }

// bytes is what g counts in the table cache.
func (g *goFuncs) bytes() int { return 8*len(g.entries) + goFuncsBytes }

// lookup returns the rule in force at pc, decoding its function on first use.
func (g *goFuncs) lookup(pc uint64) (rule, bool) {
	// Offsets from textStart wrap as the function table's addresses do
	// (textStart + entry, in a corrupt header near the top of memory).
	if pc-g.textStart > 0xffffffff {
		return rule{}, false
	}
	off := uint32(pc - g.textStart)
	n := g.count()
	// The last function whose entry is at or before off.
	i := sort.Search(n, func(i int) bool { return g.entries[i] > off }) - 1
	if i < 0 || off < g.entries[i] || off >= g.entries[i+1] { // the middle test fails only in a table out of order
		return rule{}, false
	}
	g.mu.Lock()
	rows, ok := g.funcs[int32(i)]
	if !ok {
		rows = g.decode(i)
		if len(g.funcs) >= maxGoDecoded {
			clear(g.funcs)
		}
		g.funcs[int32(i)] = rows
	}
	g.mu.Unlock()
	rel := off - g.entries[i]
	j := sort.Search(len(rows), func(j int) bool { return rows[j].off > rel }) - 1
	if j < 0 {
		return rule{}, false
	}
	r := rows[j].r
	return r, r.cfaKind != cfaNone
}

// decode reads function i's pcsp table into rows: CFA = rsp + delta + 8,
// the return address at CFA-8 (undefined in Go's top functions, which
// start a stack: flagged TopFrame, or named in goTopNames), and the
// caller's rbp at CFA-16 once the function has pushed it (the Go
// compiler's frame layout; delta ≥ 8). A function flagged SPWrite gets
// CFA = rbp + 16 past its prologue instead (see below). A function it
// cannot read gets no rows: its pcs have no rule.
func (g *goFuncs) decode(i int) (rows []goRow) {
	// A mapped .gopclntab whose file shrank faults where it was cut: the
	// function gets no rows instead of the process a SIGBUS.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if elfio.RecoverFault(recover()) {
			rows = nil
		}
	}()
	le := binary.LittleEndian
	// _func: entryOff, nameOff, args, deferreturn, pcsp, ...
	// ..., pcfile, pcln, npcdata, cuOffset, [startLine (Go 1.20+)],
	// funcID, flag.
	var fn [44]byte
	got, _ := g.src.ReadAt(fn[:], g.pclnOff+int64(g.funcOffs[i]))
	if got < 20 {
		return nil
	}
	sp := int64(le.Uint32(fn[16:]))
	if sp == 0 || g.pctabOff+sp >= g.size {
		return nil
	}
	var flag byte // none in a record cut short by the section's end
	if got > g.flagOff {
		flag = fn[g.flagOff]
	}
	nameOff := int64(le.Uint32(fn[4:]))
	top := flag&goFlagTopFrame != 0 || g.nameIn(nameOff, goTopNames) || g.nameIn(nameOff, goEntryNames)
	if !top && g.nameIn(nameOff, goFPNames) {
		// Its caller's frame is found from rbp at every pc (see
		// goFPNames).
		return []goRow{{off: 0, r: goRule(0, false, true)}}
	}
	// A function that writes SP (switches to the g0 stack, as
	// nanotime1 does around its vDSO call and systemstack around its
	// call) has SP deltas that stop holding at the switch, so past its
	// prologue (PUSHQ BP; MOVQ SP, BP: the Go assembler's, 1 and 3
	// bytes) and up to its POPQ BP (a delta of 0 again) its frame is
	// found from rbp instead, which it leaves pointing at its frame on
	// the goroutine's stack: CFA = rbp + 16. The runtime's own traceback
	// stops at such a function; this goes on into the goroutine's
	// stack, which the sampler copies too when it finds such a switch
	// (StackSwitch).
	spWrite := flag&goFlagSPWrite != 0 && !top
	fpFrom := uint64(0) // offset from which the rbp rule holds; 0: not yet known
	length := uint64(g.entries[i+1] - g.entries[i])
	add := func(off uint64, r rule) {
		if n := len(rows); n > 0 && rows[n-1].r == r {
			return
		}
		rows = append(rows, goRow{off: uint32(off), r: r})
	}
	r := &goReader{src: g.src, off: g.pctabOff + sp, end: g.size}
	off, val := uint64(0), int64(-1)
	for off < length {
		d, ok := r.uleb()
		if !ok || (d == 0 && off != 0) { // the end of the table
			break
		}
		val += int64(d>>1) ^ -int64(d&1) // zig-zag
		n, ok := r.uleb()
		if !ok {
			break
		}
		if val < -8 || val > 1<<31-16 {
			// A delta no frame has (the runtime marks stack switches
			// so): no rule up to the next pc-value.
			add(off, rule{cfaKind: cfaNone})
		} else {
			if spWrite && val > 0 && fpFrom == 0 {
				// The first push is PUSHQ BP (1 byte, at off-1); MOVQ SP, BP
				// (3 bytes) follows it. A first push of another size is
				// no such prologue (NOFRAME): the SP deltas stay.
				fpFrom, spWrite = off+3, val == 8
			}
			if spWrite && fpFrom != 0 && off+n > fpFrom && val > 0 {
				if off < fpFrom {
					add(off, goRule(val, top, false))
				}
				add(max(off, fpFrom), goRule(val, top, true))
			} else {
				add(off, goRule(val, top, false))
			}
		}
		if n >= length-off { // the row runs to the function's end (or a corrupt advance past it)
			break
		}
		off += n
	}
	return rows
}

// goRule is the rule at a pc where the function has pushed val bytes
// (its SP delta), or, with fp, the frame-pointer rule of its frame
// (CFA = rbp + 16, the caller's rbp at CFA-16); with top the return
// address is undefined.
func goRule(val int64, top, fp bool) rule {
	st := cfaState{cfa: cfaRule{reg: RegRSP, off: val + 8}}
	if fp {
		st.cfa = cfaRule{reg: RegRBP, off: 16}
	}
	st.regs[RegRIP] = regRule{kind: rOffset, off: -8}
	if val >= 8 || fp {
		st.regs[RegRBP] = regRule{kind: rOffset, off: -16}
	}
	if top {
		st.regs[RegRIP] = regRule{kind: rUndefined}
	}
	c, ok := compact(&st, RegRIP, false)
	if !ok {
		return rule{cfaKind: cfaNone}
	}
	return c
}

// nameIn reports whether the function named at nameOff in funcnametab is
// one of names (goTopNames, goFPNames: each under 32 bytes).
func (g *goFuncs) nameIn(nameOff int64, names map[string]bool) bool {
	var name [32]byte
	n, _ := g.src.ReadAt(name[:], g.namesOff+nameOff)
	s := name[:n]
	for k, c := range s {
		if c == 0 {
			return names[string(s[:k])]
		}
	}
	return false
}

// goReader reads ULEB128 values through an io.ReaderAt, a chunk at a time.
type goReader struct {
	src      io.ReaderAt
	off, end int64 // next byte to read from src; src's size
	chunk    [128]byte
	b        []byte
}

func (r *goReader) byte() (byte, bool) {
	if len(r.b) == 0 {
		n := int64(len(r.chunk))
		if r.end-r.off < n {
			n = r.end - r.off
		}
		if n <= 0 {
			return 0, false
		}
		m, _ := r.src.ReadAt(r.chunk[:n], r.off) // a short read ends the table; so does any error
		if m == 0 {
			return 0, false
		}
		r.off += int64(m)
		r.b = r.chunk[:m]
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, true
}

func (r *goReader) uleb() (uint64, bool) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, ok := r.byte()
		if !ok {
			return 0, false
		}
		if shift < 64 { // bits past the 64th are dropped, as buf.uleb and the Go runtime's readvarint do
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v, true
		}
	}
}
