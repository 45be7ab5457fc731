package unwind

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"testing"
)

// The whole-table reader of .gopclntab that NewTable used before goFuncs:
// every function's rows at once. The tests keep it as goFuncs's oracle.

// goPclntab is the part of .gopclntab the unwinder reads.
type goPclntab struct {
	data      []byte
	nfunc     int
	textStart uint64
	pctab     []byte
	names     []byte // funcnametab: NUL-terminated names
	functab   []byte // nfunc+1 (entryOff, funcOff) pairs, then the _func records
	go118     bool   // Go 1.18's layout: no startLine in _func
}

func parseGoPclntab(data []byte, textStart uint64) (*goPclntab, error) {
	if len(data) < 8+8*8 {
		return nil, errNotGo118
	}
	le := binary.LittleEndian
	magic := le.Uint32(data)
	if (magic != goMagic118 && magic != goMagic120) || data[6] != 1 || data[7] != 8 {
		return nil, errNotGo118
	}
	word := func(i int) uint64 { return le.Uint64(data[8+8*i:]) }
	nfunc := word(0)
	if hdrText := word(2); hdrText != 0 {
		textStart = hdrText
	}
	namesOff, pctabOff, pclnOff := word(3), word(6), word(7)
	if nfunc > maxGoFuncs || namesOff > uint64(len(data)) || pctabOff > uint64(len(data)) || pclnOff > uint64(len(data)) ||
		uint64(len(data))-pclnOff < (nfunc+1)*8 {
		return nil, fmt.Errorf(".gopclntab header out of bounds (%d functions)", nfunc)
	}
	return &goPclntab{data: data, nfunc: int(nfunc), textStart: textStart, go118: magic == goMagic118,
		pctab: data[pctabOff:], names: data[namesOff:], functab: data[pclnOff:]}, nil
}

// funcName returns function i's name, or "" when it cannot be read.
func (g *goPclntab) funcName(i int) string {
	le := binary.LittleEndian
	funcOff := uint64(le.Uint32(g.functab[8*i+4:]))
	if funcOff+8 > uint64(len(g.functab)) {
		return ""
	}
	off := uint64(le.Uint32(g.functab[funcOff+4:]))
	if off >= uint64(len(g.names)) {
		return ""
	}
	r := &buf{b: g.names, off: int(off)}
	return r.cstring()
}

// funcSP returns function i's start and end addresses and its pcsp table.
func (g *goPclntab) funcSP(i int) (start, end uint64, pcsp []byte, ok bool) {
	le := binary.LittleEndian
	entry := le.Uint32(g.functab[8*i:])
	next := le.Uint32(g.functab[8*(i+1):])
	funcOff := uint64(le.Uint32(g.functab[8*i+4:]))
	// _func: entryOff, nameOff, args, deferreturn, pcsp, ...
	if funcOff+20 > uint64(len(g.functab)) || next <= entry {
		return 0, 0, nil, false
	}
	sp := uint64(le.Uint32(g.functab[funcOff+16:]))
	if sp == 0 || sp >= uint64(len(g.pctab)) {
		return 0, 0, nil, false
	}
	return g.textStart + uint64(entry), g.textStart + uint64(next), g.pctab[sp:], true
}

// funcFlag returns function i's flag byte (abi.FuncFlag), 0 when its
// _func record is cut short.
func (g *goPclntab) funcFlag(i int) byte {
	funcOff := uint64(binary.LittleEndian.Uint32(g.functab[8*i+4:]))
	at := funcOff + 41 // entryOff … cuOffset, startLine, funcID
	if g.go118 {
		at = funcOff + 37
	}
	if at >= uint64(len(g.functab)) {
		return 0
	}
	return g.functab[at]
}

// addGoPclntab adds rows for every function of a Go binary from its pcsp
// tables: CFA = rsp + delta + 8, return address at CFA-8, and the caller's
// rbp at CFA-16 once the function has pushed it (the Go compiler's frame
// layout; delta ≥ 8). The TopFrame flag marks a top function as its name
// does; a function flagged SPWrite whose first push is 8 bytes (PUSHQ BP)
// gets CFA = rbp + 16 from 3 bytes past that push (MOVQ SP, BP) on, up
// to where its delta is 0 again (past POPQ BP), and one of goFPNames gets
// it at every pc.
func (b *tableBuilder) addGoPclntab(g *goPclntab, rank int) {
	for i := range g.nfunc {
		start, end, pcsp, ok := g.funcSP(i)
		if !ok {
			b.stats.BadFDEs++
			continue
		}
		b.stats.FDEs++
		if len(b.rows) >= maxRows {
			b.noteBad(errTooBig)
			return
		}
		// Go's top functions by their .gopclntab names: stripped binaries have no .symtab.
		flag := g.funcFlag(i)
		b.fdeLo, b.inTop = len(b.rows), b.topFuncs[start] || goTopNames[g.funcName(i)] || goEntryNames[g.funcName(i)] || flag&goFlagTopFrame != 0
		lo := len(b.rows)
		r := &buf{b: pcsp}
		pc, val := start, int64(-1)
		fpAt, fpDone := uint64(0), flag&goFlagSPWrite == 0 || b.inTop // where the rbp rule starts
		fp := cfaState{cfa: cfaRule{reg: RegRBP, off: 16}}
		fp.regs[RegRIP] = regRule{kind: rOffset, off: -8}
		fp.regs[RegRBP] = regRule{kind: rOffset, off: -16}
		if !b.inTop && goFPNames[g.funcName(i)] { // the rbp rule at every pc
			b.addRow(start, &fp, false)
			b.spans = append(b.spans, fdeSpan{start: start, end: end, rank: rank, lo: lo, hi: len(b.rows)})
			continue
		}
		for pc < end && r.left() > 0 {
			d := r.uleb()
			if d == 0 && pc != start { // the end of the table
				break
			}
			val += int64(d>>1) ^ -int64(d&1) // zig-zag
			n := r.uleb()
			if r.err != nil {
				break
			}
			if val < -8 || val > 1<<31-16 {
				// A delta no frame has (the runtime marks stack
				// switches so): no rule up to the next pc-value.
				if n := len(b.rows); n == lo || b.rows[n-1].id != 0 {
					b.rows = append(b.rows, rawRow{pc: pc})
				}
				if n >= end-pc {
					break
				}
				pc += n
				continue
			}
			st := cfaState{cfa: cfaRule{reg: RegRSP, off: val + 8}}
			st.regs[RegRIP] = regRule{kind: rOffset, off: -8}
			if val >= 8 {
				st.regs[RegRBP] = regRule{kind: rOffset, off: -16}
			}
			if !fpDone && val != 0 && fpAt == 0 {
				fpAt, fpDone = pc+3, val != 8
			}
			switch {
			case fpDone || fpAt == 0 || pc+n <= fpAt || val == 0:
				b.addRow(pc, &st, false)
			case pc >= fpAt:
				b.addRow(pc, &fp, false)
			default:
				b.addRow(pc, &st, false)
				b.addRow(fpAt, &fp, false)
			}
			if n >= end-pc { // the row runs to the function's end (or a corrupt advance past it)
				break
			}
			pc += n
		}
		if len(b.rows) == lo {
			b.stats.BadFDEs++
			continue
		}
		b.spans = append(b.spans, fdeSpan{start: start, end: end, rank: rank, lo: lo, hi: len(b.rows)})
	}
}

// readGoPclntab reads and parses the .gopclntab of f with the whole-table
// reader, failing tb when it cannot.
func readGoPclntab(tb testing.TB, f *elf.File) *goPclntab {
	tb.Helper()
	pcln, err := sectionData(f.Section(".gopclntab"))
	if err != nil {
		tb.Fatal(err)
	}
	g, err := parseGoPclntab(pcln, goTextAddr(f, sectionData))
	if err != nil {
		tb.Fatal(err)
	}
	return g
}
