package gopclntab

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// The .gopclntab decoder with inlined frames. debug/gosym reads the
// function table and the pc→file/line tables but not the inline tree
// (FUNCDATA_InlTree, PCDATA_InlTreeIndex) that the Go runtime expands in
// tracebacks (runtime/symtabinl.go); this reads all three, so that Go
// binaries need not inflate and index their DWARF.

// Layout of runtime._func (runtime/runtime2.go, Go 1.20+): byte offsets
// of the fields read, and its fixed size, after which come npcdata
// uint32 pctab offsets and nfuncdata uint32 gofunc offsets.
const (
	funcEntryOff  = 0
	funcNameOff   = 4
	funcPcfile    = 20
	funcPcln      = 24
	funcNpcdata   = 28
	funcCuOffset  = 32
	funcNfuncdata = 43
	funcSize      = 44
)

const (
	// pcdataInlTreeIndex is the pcdata table giving the inline tree
	// index at a pc, -1 outside inlined code (abi.PCDATA_InlTreeIndex).
	pcdataInlTreeIndex = 2
	// funcdataInlTree is the funcdata holding the inline tree
	// (abi.FUNCDATA_InlTree).
	funcdataInlTree = 3
	// inlinedCallSize is the size of runtime.inlinedCall (Go 1.20+):
	// funcID uint8, 3 bytes of padding, then nameOff, parentPc and
	// startLine, each int32.
	inlinedCallSize = 16
	// maxInlineDepth caps the inlined frames of one pc, so that a cyclic
	// inline tree in a corrupt table cannot loop.
	maxInlineDepth = 100
	// maxGoNameBytes caps a function or file name read from .gopclntab.
	maxGoNameBytes = 1 << 16
)

// InlineLines is the line source of a Go 1.20+ binary that reads
// .gopclntab directly, inlined frames included. Its slices alias the
// bytes of .gopclntab (and of the section holding go:func.*), mapped
// from the file where it can (elfio.MapSection); it is
// immutable after NewInlineLines but for its cache of names (one
// string per function and file name looked up, under mu), so lookups may
// run concurrently.
type InlineLines struct {
	order   binary.ByteOrder
	ptr     int    // pointer size, bytes
	quantum uint64 // instruction size unit of pc deltas, bytes
	nfunc   int    // functions in the function table
	text    uint64 // ELF address of runtime.text, the base of entryOff

	funcnames []byte // funcnametab: NUL-terminated names
	cutab     []byte // uint32 filetab offsets, per compilation unit
	filetab   []byte // NUL-terminated file names
	pctab     []byte // varint pc-value tables
	pclntable []byte // functab (nfunc+1 entryOff, funcOff pairs), then the _funcs
	gofunc    []byte // from go:func.* on: funcdata, such as inline trees

	funcnameOff uint64 // offset of funcnametab in .gopclntab
	pclnOff     uint64 // offset of pclntable in .gopclntab

	mu    sync.Mutex
	names map[uint64]string // function (off<<1) and file (off<<1|1) names read

	// keep are the mappings the slices above alias (elfio.Mapping),
	// kept mapped as long as the decoder is reachable.
	keep []*elfio.Mapping
}

// goFunc is one runtime._func: its bytes (header, pcdata, funcdata) and
// the ELF address of its entry.
type goFunc struct {
	b     []byte
	entry uint64
}

// Lines returns the source lines of elfAddr, innermost inlined call
// first and the physical function last, as Binary.Lines documents: each
// inlined callee's name from its runtime.inlinedCall, its line the pc's
// (innermost) or that of the parentPc of the call inside it; nil when no
// function holds elfAddr, when its line table does not cover elfAddr
// (the padding between functions), or the table is corrupt there.
func (g *InlineLines) Lines(elfAddr uint64) (out []srcline.Line) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // a mapped section whose file shrank
	defer func() {
		if recover() != nil {
			out = nil
		}
		runtime.KeepAlive(g)
	}()
	return g.linesAt(elfAddr)
}

// linesAt is lines without the recover, for FuzzGoInline: it must not
// panic on any table that parsePclnHeader accepts.
func (g *InlineLines) linesAt(elfAddr uint64) (out []srcline.Line) {
	fn, ok := g.funcAt(elfAddr)
	if !ok {
		return nil
	}
	pc := elfAddr
	line := g.pcvalue(fn, g.order.Uint32(fn.b[funcPcln:]), pc)
	if line < 0 {
		return nil // alignment padding after the function's code
	}
	tree := g.funcdata(fn, funcdataInlTree)
	idx := int32(-1)
	if tree != nil {
		idx = g.pcdata(fn, pcdataInlTreeIndex, pc)
	}
	for depth := 0; idx >= 0; depth++ {
		off := int(idx) * inlinedCallSize
		if depth == maxInlineDepth || off+inlinedCallSize > len(tree) || off < 0 {
			return nil
		}
		call := tree[off : off+inlinedCallSize]
		name := g.name(false, int64(int32(g.order.Uint32(call[4:]))))
		out = append(out, g.frame(fn, name, pc, line))
		pc = fn.entry + uint64(int64(int32(g.order.Uint32(call[8:]))))
		line = g.pcvalue(fn, g.order.Uint32(fn.b[funcPcln:]), pc)
		idx = g.pcdata(fn, pcdataInlTreeIndex, pc)
	}
	name := g.name(false, int64(int32(g.order.Uint32(fn.b[funcNameOff:]))))
	return append(out, g.frame(fn, name, pc, line))
}

// frame returns the srcline.Line of function name at pc in fn, whose pcln
// table gives line there (0 when it gives none), with the file from fn's
// pcfile table ("" when it has none).
func (g *InlineLines) frame(fn goFunc, name string, pc uint64, line int32) srcline.Line {
	l := srcline.Line{Function: name, SystemName: name, Line: max(0, int(line))}
	if fileno := g.pcvalue(fn, g.order.Uint32(fn.b[funcPcfile:]), pc); fileno >= 0 {
		i := uint64(g.order.Uint32(fn.b[funcCuOffset:])) + uint64(fileno)
		if i < uint64(len(g.cutab)/4) {
			if off := g.order.Uint32(g.cutab[4*i:]); off != ^uint32(0) {
				l.File = g.name(true, int64(off))
			}
		}
	}
	return l
}

// funcAt returns the function whose code holds the ELF address pc, by a
// binary search of the function table; false when pc lies before the
// first or after the last, or the table is corrupt there.
func (g *InlineLines) funcAt(pc uint64) (goFunc, bool) {
	if pc < g.text || pc-g.text > 1<<32-1 {
		return goFunc{}, false
	}
	off := uint32(pc - g.text)
	entryOff := func(i int) uint32 { return g.order.Uint32(g.pclntable[8*i:]) }
	// The first i with entryOff(i+1) > off; entry nfunc is the end.
	i := sort.Search(g.nfunc, func(i int) bool { return entryOff(i+1) > off })
	if i == g.nfunc || entryOff(i) > off {
		return goFunc{}, false
	}
	funcOff := uint64(g.order.Uint32(g.pclntable[8*i+4:]))
	if funcOff+funcSize > uint64(len(g.pclntable)) {
		return goFunc{}, false
	}
	b := g.pclntable[funcOff:]
	n := funcSize + 4*uint64(g.order.Uint32(b[funcNpcdata:])) + 4*uint64(b[funcNfuncdata])
	if n > uint64(len(b)) || g.order.Uint32(b[funcEntryOff:]) != entryOff(i) {
		return goFunc{}, false
	}
	return goFunc{b: b[:n], entry: g.text + uint64(entryOff(i))}, true
}

// funcdata returns the bytes from funcdata i of fn to the end of
// go:func.*'s section; nil when fn has none.
func (g *InlineLines) funcdata(fn goFunc, i int) []byte {
	npcdata := int(g.order.Uint32(fn.b[funcNpcdata:]))
	if i >= int(fn.b[funcNfuncdata]) {
		return nil
	}
	off := g.order.Uint32(fn.b[funcSize+4*npcdata+4*i:])
	if off == ^uint32(0) || uint64(off) >= uint64(len(g.gofunc)) {
		return nil
	}
	return g.gofunc[off:]
}

// pcdata returns the value of pcdata table i of fn at pc; -1 when fn has
// no such table or it has no value at pc.
func (g *InlineLines) pcdata(fn goFunc, i int, pc uint64) int32 {
	if i >= int(g.order.Uint32(fn.b[funcNpcdata:])) {
		return -1
	}
	return g.pcvalue(fn, g.order.Uint32(fn.b[funcSize+4*i:]), pc)
}

// pcvalue returns the value at pc of the pc-value table at offset off of
// pctab, for fn: pairs of a zigzag varint value delta and a varint pc
// delta (in units of the quantum), starting at fn's entry with value -1
// and ending at a zero value delta; -1 when off is 0 (no table), pc lies
// past the table's end, or the table is corrupt. Its loop is bounded by
// the table's bytes.
func (g *InlineLines) pcvalue(fn goFunc, off uint32, pc uint64) int32 {
	if off == 0 || uint64(off) >= uint64(len(g.pctab)) {
		return -1
	}
	p := g.pctab[off:]
	at, val := fn.entry, int32(-1)
	for first := true; len(p) > 0; first = false {
		if p[0] == 0 && !first {
			return -1
		}
		uv, n := binary.Uvarint(p)
		if n <= 0 || uv > 1<<32-1 {
			return -1
		}
		p = p[n:]
		val += int32(-(uint32(uv) & 1) ^ (uint32(uv) >> 1))
		pcd, n := binary.Uvarint(p)
		if n <= 0 || pcd > 1<<32-1 {
			return -1
		}
		p = p[n:]
		at += pcd * g.quantum
		if pc < at {
			return val
		}
	}
	return -1
}

// name returns the NUL-terminated string at off in funcnametab, or in
// filetab when file is true, from the cache of names after the first
// time; "" when off lies outside the table or the string is
// unterminated within maxGoNameBytes.
func (g *InlineLines) name(file bool, off int64) string {
	tab := g.funcnames
	if file {
		tab = g.filetab
	}
	if off < 0 || off >= int64(len(tab)) {
		return ""
	}
	key := uint64(off) << 1
	if file {
		key |= 1
	}
	g.mu.Lock()
	s, ok := g.names[key]
	g.mu.Unlock()
	if ok {
		return s
	}
	b := tab[off:min(int64(len(tab)), off+maxGoNameBytes)]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		s = string(b[:i])
	}
	g.mu.Lock()
	if g.names == nil {
		g.names = make(map[uint64]string)
	}
	g.names[key] = s
	g.mu.Unlock()
	return s
}

// Mapped reports whether g reads .gopclntab from a mapping of the file
// (elfio.MapSection) rather than from a copy in the heap.
func Mapped(g *InlineLines) bool { return len(g.keep) > 0 }
