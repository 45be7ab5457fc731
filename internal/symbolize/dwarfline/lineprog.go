package dwarfline

import (
	"cmp"
	"path"
	"slices"
	"strings"
)

// Line number program opcodes (DWARF 5 section 6.2.5) and content type
// codes of DWARF 5 directory and file entries (section 6.2.4.1).
const (
	lnsCopy             = 1
	lnsAdvancePC        = 2
	lnsAdvanceLine      = 3
	lnsSetFile          = 4
	lnsConstAddPC       = 8
	lnsFixedAdvancePC   = 9
	lneEndSequence      = 1
	lneSetAddress       = 2
	lneDefineFile       = 3
	lnctPath            = 1
	lnctDirectoryIndex  = 2
	maxLineTableEntries = 1 << 20 // directories, files or formats in a header
)

// knownOpcodeLengths are the operand counts of the standard opcodes a
// header must agree with, as debug/dwarf checks (opcode 9 excepted).
var knownOpcodeLengths = [...]int8{1: 0, 2: 1, 3: 1, 4: 1, 5: 1, 6: 0, 7: 0, 8: 0, 10: 0, 11: 0, 12: 1}

// lineProgram is a line number program header being read.
type lineProgram struct {
	b                  dbuf
	version            uint16
	addrSize           uint8
	minInst, maxOps    uint64
	defaultIsStmt      bool
	lineBase           int
	lineRange          uint64
	opcodeBase         int
	opLengths          [256]uint8
	dirs, files        []string
	compDir            string
	dwarf64            bool
	programOff, endOff int
}

// readLineProgram reads the header of the line program at .debug_line
// offset off of unit u (whose comp_dir is compDir), runs the program once
// to index its rows (see lineIndex) and returns the index and the file
// names, by file index, joined to their directories as debug/dwarf's
// LineReader does. A corrupt header gives nothing; a corrupt program
// keeps the sequences read before the damage.
func (d *Data) readLineProgram(u *unit, off uint64, compDir string) (lines lineIndex, files []string) {
	p := &lineProgram{compDir: compDir, addrSize: u.addrSize}
	if off >= uint64(len(d.line)) || !p.readHeader(d, off) {
		return lineIndex{}, nil
	}
	p.dirs = nil
	return p.index(), p.files
}

// readHeader reads the header at off; false when it is corrupt.
func (p *lineProgram) readHeader(d *Data, off uint64) bool {
	b := &p.b
	*b = dbuf{data: d.line[:validSpan(d.LineZ, d.line, off, off+12)], off: int(off), big: d.big}
	n, dwarf64 := b.unitLength()
	if b.bad || n > uint64(len(d.line)-b.off) {
		return false
	}
	p.dwarf64 = dwarf64
	p.endOff = b.off + int(n)
	if validSpan(d.LineZ, d.line, off, uint64(p.endOff)) < p.endOff {
		return false // the stream is corrupt inside the program
	}
	b.data = d.line[:p.endOff]
	p.version = b.u16()
	if p.version < 2 || p.version > 5 {
		return false
	}
	if p.version >= 5 {
		p.addrSize = b.u8()
		b.u8() // segment selector size
	}
	hdrLen := b.offset(dwarf64)
	if hdrLen > uint64(b.left()) {
		return false
	}
	p.programOff = b.off + int(hdrLen)
	p.minInst = uint64(b.u8())
	p.maxOps = 1
	if p.version >= 4 {
		p.maxOps = uint64(b.u8())
	}
	p.defaultIsStmt = b.u8() != 0
	p.lineBase = int(int8(b.u8()))
	p.lineRange = uint64(b.u8())
	p.opcodeBase = int(b.u8())
	if b.bad || p.maxOps == 0 || p.lineRange == 0 {
		return false
	}
	for i := 1; i < p.opcodeBase; i++ {
		p.opLengths[i] = b.u8()
		if i < len(knownOpcodeLengths) && i != lnsFixedAdvancePC && int8(p.opLengths[i]) != knownOpcodeLengths[i] {
			return false
		}
	}
	if p.version < 5 {
		p.readV4Tables()
	} else {
		p.dirs = p.readV5Entries(d, nil)
		p.files = p.readV5Entries(d, p.dirs)
	}
	return !b.bad && p.programOff <= p.endOff
}

// readV4Tables reads the include_directories and file_names of DWARF 2-4:
// directory 0 is the compilation directory, file 0 is none.
func (p *lineProgram) readV4Tables() {
	b := &p.b
	p.dirs = []string{p.compDir}
	for n := 0; n < maxLineTableEntries && !b.bad; n++ {
		dir := b.cstr()
		if len(dir) == 0 {
			break
		}
		s := string(dir)
		if !pathIsAbs(s) {
			s = pathJoin(p.compDir, s)
		}
		p.dirs = append(p.dirs, s)
	}
	p.files = []string{""}
	for n := 0; n < maxLineTableEntries && !b.bad; n++ {
		if !p.readFileEntry() {
			break
		}
	}
}

// readFileEntry reads a DWARF 2-4 file entry (of the header or of
// DW_LNE_define_file) into p.files; false at the table's end or on
// corrupt data.
func (p *lineProgram) readFileEntry() bool {
	b := &p.b
	name := string(b.cstr())
	if name == "" || b.bad {
		return false
	}
	dir := b.uleb()
	if !pathIsAbs(name) {
		if dir >= uint64(len(p.dirs)) {
			b.fail()
			return false
		}
		name = pathJoin(p.dirs[dir], name)
	}
	b.uleb() // modification time
	b.uleb() // length
	p.files = append(p.files, name)
	return !b.bad
}

// readV5Entries reads a DWARF 5 directory (dirs nil) or file name table.
func (p *lineProgram) readV5Entries(d *Data, dirs []string) []string {
	b := &p.b
	var formats [][2]uint64 // content type, form
	for n := b.u8(); n > 0 && !b.bad; n-- {
		formats = append(formats, [2]uint64{b.uleb(), b.uleb()})
	}
	count := b.uleb()
	if count > maxLineTableEntries || count > uint64(b.left()) {
		b.fail()
		return nil
	}
	out := make([]string, 0, count)
	fu := unit{dwarf64: p.dwarf64, addrSize: p.addrSize, version: 5}
	for range count {
		var name, dir string
		for _, f := range formats {
			form := uint16(min(f[1], 0xffff))
			var s string
			var v uint64
			switch form {
			case formString:
				s = string(b.cstr())
			case formStrp:
				s = cstrIn(d.strZ, d.str, b.offset(p.dwarf64))
			case formLineStrp:
				s = cstrIn(d.lineStrZ, d.lineStr, b.offset(p.dwarf64))
			case formData1, formData2, formData4, formData8, formUdata:
				v = readConst(b, form)
			default:
				if !skipForm(b, form, &fu) {
					return nil
				}
			}
			switch f[0] {
			case lnctPath:
				name = s
			case lnctDirectoryIndex:
				if v >= uint64(len(dirs)) {
					b.fail()
					return nil
				}
				dir = dirs[v]
			}
		}
		if b.bad {
			return nil
		}
		if dir != "" && name != "" {
			name = pathJoin(dir, name)
		}
		out = append(out, name)
	}
	return out
}

// readConst reads a constant of form (data1-8, udata) from b.
func readConst(b *dbuf, form uint16) uint64 {
	switch form {
	case formData1:
		return uint64(b.u8())
	case formData2:
		return uint64(b.u16())
	case formData4:
		return uint64(b.u32())
	case formData8:
		return b.u64()
	}
	return b.uleb()
}

// pathIsAbs reports whether a DWARF path is absolute (Unix or DOS
// style), as debug/dwarf decides.
func pathIsAbs(p string) bool {
	if len(p) >= 2 && p[1] == ':' {
		p = p[2:]
	}
	return len(p) > 0 && (p[0] == '/' || p[0] == '\\')
}

// pathJoin joins a DWARF directory and a relative file name, as
// debug/dwarf does for Unix-style paths; DOS-style directories get a
// backslash.
func pathJoin(dir, file string) string {
	if dir == "" {
		return file
	}
	if len(dir) >= 2 && dir[1] == ':' || strings.HasPrefix(dir, `\\`) {
		if !strings.HasSuffix(dir, `\`) && !strings.HasSuffix(dir, "/") {
			dir += `\`
		}
		return dir + file
	}
	return path.Join(dir, file)
}

// lineState is the line number state machine's registers that rows
// depend on (DWARF 5 section 6.2.2).
type lineState struct {
	addr, opIndex uint64
	line          int64
	file          uint64
}

// reset sets st to the state at the start of a sequence.
func (st *lineState) reset() { *st = lineState{line: 1, file: 1} }

// next executes p's opcodes from b.off until one emits a row, and
// returns it: a row of the table, or an endOfSequence row (after which
// st is reset). ok is false at the program's end or on corrupt data.
// In a replay (the program run again from a lineMark), DW_LNE_define_file
// is skipped: its file is in p.files already.
func (p *lineProgram) next(b *dbuf, st *lineState, replay bool) (row lineRow, ok bool) {
	advance := func(ops uint64) {
		if p.maxOps == 1 { // all but VLIW targets: no division
			st.addr += p.minInst * ops
			return
		}
		st.opIndex += ops
		st.addr += p.minInst * (st.opIndex / p.maxOps)
		st.opIndex %= p.maxOps
	}
	for b.left() > 0 && !b.bad {
		op := int(b.u8())
		switch {
		case op >= p.opcodeBase:
			adj := uint64(op - p.opcodeBase)
			q := adj / p.lineRange
			advance(q)
			st.line += int64(p.lineBase) + int64(adj-q*p.lineRange)
			return p.row(st), true
		case op == 0:
			n := b.uleb()
			at := b.off
			end := false
			switch b.u8() {
			case lneEndSequence:
				row, end = lineRow{addr: st.addr, file: endOfSequence}, true
				st.reset()
			case lneSetAddress:
				st.addr = b.addr(p.addrSize)
				st.opIndex = 0
			case lneDefineFile:
				if !replay && !p.readFileEntry() {
					b.fail()
				}
			}
			if n > uint64(b.left()+b.off-at) || uint64(at)+n < uint64(b.off) {
				b.fail()
				return lineRow{}, false
			}
			b.off = at + int(n)
			if end {
				return row, true
			}
		case op == lnsCopy:
			return p.row(st), true
		case op == lnsAdvancePC:
			advance(b.uleb())
		case op == lnsAdvanceLine:
			st.line += b.sleb()
		case op == lnsSetFile:
			st.file = b.uleb()
		case op == lnsConstAddPC:
			advance(uint64(255-p.opcodeBase) / p.lineRange)
		case op == lnsFixedAdvancePC:
			st.addr += uint64(b.u16())
			st.opIndex = 0
		default:
			for range p.opLengths[op] {
				b.uleb()
			}
		}
	}
	return lineRow{}, false
}

// row returns the row st emits.
func (p *lineProgram) row(st *lineState) lineRow {
	f := noFile
	if st.file < uint64(len(p.files)) {
		f = uint32(st.file)
	}
	return lineRow{addr: st.addr, file: f, line: uint32(max(st.line, 0))}
}

// index runs the program once and returns its sequences, sorted by
// start address, with a lineMark every lineMarkEvery rows; rows after the
// last DW_LNE_end_sequence (a damaged or unterminated sequence) are
// dropped.
func (p *lineProgram) index() lineIndex {
	x := lineIndex{prog: p}
	b := p.b
	b.off = p.programOff
	var st lineState
	st.reset()
	start, lo, n := 0, uint64(0), 0
	for {
		row, ok := p.next(&b, &st, false)
		if !ok {
			break
		}
		if row.file == endOfSequence {
			if n == 0 {
				lo = row.addr
			}
			x.seqs = append(x.seqs, lineSeq{lo: lo, hi: row.addr, mark: uint32(start), end: uint32(len(x.marks))})
			start, n = len(x.marks), 0
			continue
		}
		if n%lineMarkEvery == 0 {
			if n == 0 {
				lo = row.addr
			}
			x.marks = append(x.marks, lineMark{addr: row.addr, line: st.line, off: uint32(b.off),
				file: uint32(min(st.file, uint64(noFile))), opIndex: uint32(st.opIndex)})
		}
		n++
	}
	x.marks = x.marks[:start:start]
	slices.SortStableFunc(x.seqs, func(a, b lineSeq) int { return cmp.Compare(a.lo, b.lo) })
	return x
}
