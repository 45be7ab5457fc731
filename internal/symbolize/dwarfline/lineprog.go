package dwarfline

import (
	"path"
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

// readLineProgram decodes the line program at .debug_line offset off of
// unit u (whose comp_dir is compDir) into rows (sequences sorted by
// address, each ended by an endOfSequence row) and its file names, by
// file index, joined to their directories as debug/dwarf's LineReader
// does. A corrupt header gives nothing; a corrupt program keeps the
// sequences read before the damage.
// scratch is reused for the rows (its contents are copied out).
func (d *Data) readLineProgram(u *unit, off uint64, compDir string, scratch *[]lineRow) (rows []lineRow, files []string) {
	p := &lineProgram{compDir: compDir, addrSize: u.addrSize}
	if off >= uint64(len(d.line)) || !p.readHeader(d, off) {
		return nil, nil
	}
	rows, seqs := p.run((*scratch)[:0])
	*scratch = rows[:0]
	return sortSequences(rows, seqs), p.files
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
				s = cstrAt(d.str, b.offset(p.dwarf64))
			case formLineStrp:
				s = cstrAt(d.lineStr, b.offset(p.dwarf64))
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

// run executes the line number program and returns its rows and the
// row index ranges of its complete sequences; rows after the last
// DW_LNE_end_sequence (a damaged or unterminated sequence) are dropped.
func (p *lineProgram) run(rows []lineRow) ([]lineRow, []pcRange) {
	var seqs []pcRange
	b := &p.b
	b.off = p.programOff
	var addr, opIndex uint64
	line, file := 1, uint64(1)
	reset := func() { addr, opIndex, line, file = 0, 0, 1, 1 }
	advance := func(ops uint64) {
		opIndex += ops
		addr += p.minInst * (opIndex / p.maxOps)
		opIndex %= p.maxOps
	}
	emit := func() {
		f := noFile
		if file < uint64(len(p.files)) {
			f = uint32(file)
		}
		rows = append(rows, lineRow{addr: addr, file: f, line: uint32(max(line, 0))})
	}
	start := 0
	for b.left() > 0 && !b.bad {
		op := int(b.u8())
		switch {
		case op >= p.opcodeBase:
			adj := uint64(op - p.opcodeBase)
			advance(adj / p.lineRange)
			line += p.lineBase + int(adj%p.lineRange)
			emit()
		case op == 0:
			n := b.uleb()
			at := b.off
			switch b.u8() {
			case lneEndSequence:
				rows = append(rows, lineRow{addr: addr, file: endOfSequence})
				seqs = append(seqs, pcRange{lo: uint64(start), hi: uint64(len(rows))})
				start = len(rows)
				reset()
			case lneSetAddress:
				addr = b.addr(p.addrSize)
				opIndex = 0
			case lneDefineFile:
				if !p.readFileEntry() {
					b.fail()
				}
			}
			if n > uint64(b.left()+b.off-at) || uint64(at)+n < uint64(b.off) {
				b.fail()
			} else {
				b.off = at + int(n)
			}
		case op == lnsCopy:
			emit()
		case op == lnsAdvancePC:
			advance(b.uleb())
		case op == lnsAdvanceLine:
			line += int(b.sleb())
		case op == lnsSetFile:
			file = b.uleb()
		case op == lnsConstAddPC:
			advance(uint64(255-p.opcodeBase) / p.lineRange)
		case op == lnsFixedAdvancePC:
			addr += uint64(b.u16())
			opIndex = 0
		default:
			for range p.opLengths[op] {
				b.uleb()
			}
		}
	}
	return rows[:start], seqs
}
