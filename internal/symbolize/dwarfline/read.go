package dwarfline

import (
	"cmp"
	"math"
	"slices"
	"sync"
)

// DWARF tags, attributes and unit types the reader looks at (DWARF 5
// sections 7.5.1 and 7.5.4).
const (
	tagCompileUnit       = 0x11
	tagInlinedSubroutine = 0x1d
	tagSubprogram        = 0x2e
	tagPartialUnit       = 0x3c
	tagTypeUnit          = 0x41
	tagSkeletonUnit      = 0x4a
	attrSibling          = 0x01
	attrName             = 0x03
	attrStmtList         = 0x10
	attrLowpc            = 0x11
	attrHighpc           = 0x12
	attrCompDir          = 0x1b
	attrAbstractOrigin   = 0x31
	attrSpecification    = 0x47
	attrEntrypc          = 0x52
	attrRanges           = 0x55
	attrCallFile         = 0x58
	attrCallLine         = 0x59
	attrLinkageName      = 0x6e
	attrStrOffsetsBase   = 0x72
	attrAddrBase         = 0x73
	attrRnglistsBase     = 0x74
	attrMIPSLinkageName  = 0x2007
	unitTypeCompile      = 0x01
	unitTypeType         = 0x02
	unitTypePartial      = 0x03
	unitTypeSkeleton     = 0x04
	unitTypeSplitCompile = 0x05
	unitTypeSplitType    = 0x06
	maxAbbrevAttrs       = 1 << 10 // attributes in one abbreviation
	maxDenseAbbrevCode   = 1 << 16 // codes kept in a slice, not a map
	unitHeaderMinLength  = 7       // a DWARF 2 header after its length
	unitVersionMin       = 2
	unitVersionMax       = 5
)

// Data is the DWARF of one binary: its sections (decompressed, by
// name without ".debug_"), read only, and the unit headers of
// .debug_info (a few dozen bytes each, no DIEs). Large .debug_info,
// .debug_abbrev and .debug_line sections are read on demand
// (lazySection): a page at a time from the file when uncompressed or
// from the section cache, else inflated front to back. A unit header is
// read when a lookup needs its unit (or, walking front to back, one
// after it), and its DIEs when the lookup reads them.
// Abbreviation tables are parsed on first use, one per unit read, and
// shared by the units that use the same one. Safe for concurrent use.
type Data struct {
	info, abbrev, str, lineStr, line  []byte
	ranges, rnglists, addr, strOffset []byte
	aranges                           []byte
	big                               bool // big-endian

	// The sections read on demand; nil when complete from the start.
	InfoZ, AbbrevZ, LineZ *lazySection
	strZ, lineStrZ        *lazySection // read by cstrIn
	rangesZ, rnglistsZ    *lazySection // read by listIn

	unitsMu  sync.Mutex
	units    []*unit // the unit headers read so far, by offset
	nextUnit uint64  // every header before this .debug_info offset is in units
	allUnits bool    // every header is read (or the next is corrupt)

	mu      sync.Mutex
	abbrevs map[abbrevKey]*abbrevTable
}

// unit is a unit header of .debug_info, and what its root DIE says,
// read once (root).
type unit struct {
	off, dieOff, end uint64 // header, first DIE, end; .debug_info offsets
	abbrevOff        uint64
	version          uint8
	utype            uint8 // DW_UT_*; DW_UT_compile for DWARF 2-4
	addrSize         uint8
	dwarf64          bool

	once sync.Once
	root unitRoot

	src spanSource // DIE readers' source when .debug_info is read on demand
}

// unitRoot is what a unit's root DIE says that the rest of it needs.
type unitRoot struct {
	ok                bool   // the root DIE was read
	tag               uint16 // DW_TAG_compile_unit, ...
	children          bool
	abbrevs           *abbrevTable
	base              uint64 // base address of range lists
	addrBase          uint64 // DW_AT_addr_base
	strOffsetsBase    uint64 // DW_AT_str_offsets_base
	rnglistsBase      uint64 // DW_AT_rnglists_base
	stmtList          uint64 // DW_AT_stmt_list
	hasStmt           bool
	compDir           string
	low, high, rngs   attrVal // DW_AT_low_pc, high_pc, ranges
	firstChild        uint64  // offset of the first child DIE
	lowSet, highSet   bool
	rangesSet, baseOK bool
}

// offSize returns the size of a section offset in u (bytes).
func (u *unit) offSize() int {
	if u.dwarf64 {
		return 8
	}
	return 4
}

// hasCode reports whether u may describe code: a compile, partial or
// skeleton unit, not a type unit.
func (u *unit) hasCode() bool {
	return u.utype == unitTypeCompile || u.utype == unitTypePartial || u.utype == unitTypeSkeleton
}

// readUnitsThrough reads unit headers front to back, from nextUnit,
// until one ends past .debug_info offset off or there are no more: the
// end of the section or a corrupt header. Headers read before (by
// unitStartingAt) are not read again. Called with d.unitsMu held.
func (d *Data) readUnitsThrough(off uint64) {
	for !d.allUnits && d.nextUnit <= off {
		u := d.headerAt(d.nextUnit)
		if u == nil {
			d.allUnits = true
			return
		}
		d.nextUnit = u.end
	}
}

// walkFrom reads unit headers from .debug_info offset start, the end of
// a unit, until one ends past off or a header is corrupt. Called with
// d.unitsMu held.
func (d *Data) walkFrom(start, off uint64) {
	for o := start; o <= off; {
		u := d.headerAt(o)
		if u == nil {
			return
		}
		o = u.end
	}
}

// headerAt returns the unit whose header is at .debug_info offset off:
// one read before, else read now and added to d.units; nil when the
// header is corrupt or off is past the section. Called with d.unitsMu
// held.
func (d *Data) headerAt(off uint64) *unit {
	if u := d.knownAt(off); u != nil {
		return u
	}
	u := d.readUnitHeader(off)
	if u != nil {
		d.insert(u)
	}
	return u
}

// knownAt returns the unit read so far whose header is at off, or nil.
// Called with d.unitsMu held.
func (d *Data) knownAt(off uint64) *unit {
	i, found := slices.BinarySearchFunc(d.units, off, func(u *unit, off uint64) int {
		return cmp.Compare(u.off, off)
	})
	if !found {
		return nil
	}
	return d.units[i]
}

// lastAtOrBelow returns the unit read so far with the highest header
// offset at or below off, or nil. Called with d.unitsMu held.
func (d *Data) lastAtOrBelow(off uint64) *unit {
	i, _ := slices.BinarySearchFunc(d.units, off, func(u *unit, off uint64) int {
		if u.off <= off {
			return -1
		}
		return 1
	})
	if i == 0 {
		return nil
	}
	return d.units[i-1]
}

// insert adds u to d.units, in order. Called with d.unitsMu held.
func (d *Data) insert(u *unit) {
	i, found := slices.BinarySearchFunc(d.units, u.off, func(v *unit, off uint64) int {
		return cmp.Compare(v.off, off)
	})
	if !found {
		d.units = slices.Insert(d.units, i, u)
	}
}

// unitHeaderMaxLength is the longest unit header (bytes): a DWARF 5
// type unit in the 64-bit format.
const unitHeaderMaxLength = 12 + 2 + 2 + 8 + 8 + 8

// readUnitHeader reads the unit header at .debug_info offset off (not
// the unit's DIEs: readRoot and DIE readers read those); nil at the end of
// the section or when the header is corrupt.
func (d *Data) readUnitHeader(off uint64) *unit {
	if off >= uint64(len(d.info)) {
		return nil
	}
	avail := validSpan(d.InfoZ, d.info, off, off+unitHeaderMaxLength)
	b := dbuf{data: d.info[:avail], off: int(off), big: d.big}
	u := &unit{off: off}
	n, dwarf64 := b.unitLength()
	if b.bad || n < unitHeaderMinLength || n > uint64(len(d.info)-b.off) {
		return nil
	}
	u.end = uint64(b.off) + n
	u.dwarf64 = dwarf64
	u.version = uint8(b.u16())
	if u.version < unitVersionMin || u.version > unitVersionMax {
		return nil
	}
	u.utype = unitTypeCompile
	if u.version >= 5 {
		u.utype = b.u8()
		u.addrSize = b.u8()
		u.abbrevOff = b.offset(dwarf64)
		switch u.utype {
		case unitTypeSkeleton, unitTypeSplitCompile:
			b.skip(8) // dwo_id
		case unitTypeType, unitTypeSplitType:
			b.skip(8) // type signature
			b.offset(dwarf64)
		}
	} else {
		u.abbrevOff = b.offset(dwarf64)
		u.addrSize = b.u8()
	}
	u.dieOff = uint64(b.off)
	if b.bad || u.dieOff > u.end || (u.addrSize != 2 && u.addrSize != 4 && u.addrSize != 8) {
		return nil
	}
	u.src = spanSource{z: d.InfoZ, full: d.info, limit: int(u.end)}
	return u
}

// unitAt returns the unit whose DIEs hold .debug_info offset off, or
// nil. Past the units read front to back, it reads headers from the end
// of the nearest unit read before off (by unitStartingAt), else front
// to back.
func (d *Data) unitAt(off uint64) *unit {
	d.unitsMu.Lock()
	defer d.unitsMu.Unlock()
	if off >= d.nextUnit {
		if u := d.lastAtOrBelow(off); u != nil && u.off >= d.nextUnit && off >= u.end {
			d.walkFrom(u.end, off)
		} else if u == nil || off >= u.end {
			d.readUnitsThrough(off)
		}
	}
	u := d.lastAtOrBelow(off)
	if u == nil || off < u.dieOff || off >= u.end {
		return nil
	}
	return u
}

// unitStartingAt returns the unit whose header is at .debug_info offset
// off, or nil. A header past the units read front to back is read where
// it is (off comes from .debug_aranges or an index built before), so
// that on-demand sections read its unit's pages, not every header
// before it.
func (d *Data) unitStartingAt(off uint64) *unit {
	d.unitsMu.Lock()
	defer d.unitsMu.Unlock()
	if u := d.knownAt(off); u != nil || off < d.nextUnit || d.allUnits {
		return u
	}
	return d.headerAt(off)
}

// everyUnit returns every unit header, reading (and inflating) all of
// .debug_info first.
func (d *Data) everyUnit() []*unit {
	d.unitsMu.Lock()
	defer d.unitsMu.Unlock()
	d.readUnitsThrough(math.MaxUint64)
	return d.units
}

// rootOf reads u's root DIE once and returns what it says; ok is false
// when it is corrupt.
func (d *Data) rootOf(u *unit) *unitRoot {
	u.once.Do(func() { d.readRoot(u) })
	return &u.root
}

// readRoot fills u.root from u's first DIE.
func (d *Data) readRoot(u *unit) {
	t := d.abbrevTable(u)
	if t == nil {
		return
	}
	// The root DIE is near the unit's start: an index of a binary whose
	// .debug_info is read on demand reads each unit's first bytes, not
	// the unit, unless the root DIE is longer.
	for _, end := range []uint64{min(u.end, u.dieOff+rootSpan), u.end} {
		if validSpan(d.InfoZ, d.info, u.off, end) < int(end) {
			return // unreadable: a read failed, or the stream is corrupt
		}
		u.root = unitRoot{}
		if d.parseRoot(u, t, end) || end == u.end {
			return
		}
	}
}

// rootSpan is how many bytes after a unit's header readRoot first makes
// valid for the root DIE.
const rootSpan = 1 << 10

// parseRoot fills u.root from u's first DIE, read from .debug_info up to
// end, with abbreviations t; false when it is corrupt or runs past end.
func (d *Data) parseRoot(u *unit, t *abbrevTable, end uint64) bool {
	r := &u.root
	r.abbrevs = t
	dr := dieReader{d: d, u: u, abbrevs: t, b: dbuf{data: d.info[:end], off: int(u.dieOff), big: d.big}}
	ab := dr.next()
	if ab == nil {
		return false
	}
	r.tag, r.children = ab.tag, ab.children
	var entry, name attrVal
	entrySet := false
	specs := dr.specs(ab)
	for i := range specs {
		a := &specs[i]
		switch a.attr {
		case attrLowpc:
			r.low, r.lowSet = dr.value(a), true
		case attrHighpc:
			r.high, r.highSet = dr.value(a), true
		case attrRanges:
			r.rngs, r.rangesSet = dr.value(a), true
		case attrEntrypc:
			entry, entrySet = dr.value(a), true
		case attrStmtList:
			v := dr.value(a)
			r.stmtList, r.hasStmt = v.u, v.isOffset()
		case attrCompDir:
			name = dr.value(a)
		case attrAddrBase:
			r.addrBase = dr.value(a).u
		case attrStrOffsetsBase:
			r.strOffsetsBase = dr.value(a).u
		case attrRnglistsBase:
			r.rnglistsBase = dr.value(a).u
		default:
			skipForm(&dr.b, a.form, u)
		}
	}
	if dr.b.bad {
		return false
	}
	r.firstChild = uint64(dr.b.off)
	r.ok = true
	r.compDir = d.strOf(u, name)
	// As debug/dwarf: DW_AT_entry_pc (some GCC versions), else low_pc.
	if a, ok := d.addrOf(u, entry); entrySet && ok {
		r.base, r.baseOK = a, true
	} else if a, ok := d.addrOf(u, r.low); r.lowSet && ok {
		r.base, r.baseOK = a, true
	}
	return true
}

// abbrevKey identifies a parsed abbreviation table: its offset and the
// unit format its fixed attribute sizes assume.
type abbrevKey struct {
	off     uint64
	addr    uint8
	dwarf64 bool
	v2      bool
}

// abbrevTable is a parsed abbreviation table, by code: 16 bytes an
// abbreviation and 8 an attribute.
type abbrevTable struct {
	dense     []abbrev // codes 1..len(dense)
	sparse    map[uint64]*abbrev
	specs     []attrSpec // the abbreviations' attributes
	implicits []int64    // DW_FORM_implicit_const values, by attrSpec.imp
}

// abbrev is one abbreviation: a DIE's tag, whether it has children and
// its attributes' forms (specs[lo:hi] of its table).
type abbrev struct {
	tag      uint16
	children bool
	sibling  bool  // has DW_AT_sibling
	fixed    int32 // size of all attribute values when fixed, else -1
	lo, hi   uint32
}

// attrSpec is an attribute of an abbreviation: name, form and, for
// DW_FORM_implicit_const, the index of the value in implicits.
type attrSpec struct {
	attr, form uint16
	imp        uint32
}

// lookup returns the abbreviation of code, or nil.
func (t *abbrevTable) lookup(code uint64) *abbrev {
	if code-1 < uint64(len(t.dense)) {
		return &t.dense[code-1]
	}
	return t.sparse[code]
}

// abbrevTable returns u's abbreviation table, parsed on first use and
// cached by offset; nil when it is corrupt.
func (d *Data) abbrevTable(u *unit) *abbrevTable {
	key := abbrevKey{off: u.abbrevOff, addr: u.addrSize, dwarf64: u.dwarf64, v2: u.version <= 2}
	d.mu.Lock()
	t, ok := d.abbrevs[key]
	d.mu.Unlock()
	if ok {
		return t
	}
	t = d.readAbbrevs(u)
	d.mu.Lock()
	if d.abbrevs == nil {
		d.abbrevs = make(map[abbrevKey]*abbrevTable)
	}
	d.abbrevs[key] = t
	d.mu.Unlock()
	return t
}

// abbrevFirstRead is how much of .debug_abbrev readAbbrevs first makes
// valid for a table (bytes): a table is a few KiB.
const abbrevFirstRead = 8 << 10

// readAbbrevs parses u's abbreviation table. A table's end is known
// only by parsing it, so when .debug_abbrev is read on demand it makes
// abbrevFirstRead bytes from the table's start valid and parses them,
// and when they end inside the table, asks for twice as much and parses
// again (once is the rule).
func (d *Data) readAbbrevs(u *unit) *abbrevTable {
	want := u.abbrevOff + abbrevFirstRead
	for {
		avail := validSpan(d.AbbrevZ, d.abbrev, u.abbrevOff, want)
		t := parseAbbrevs(d.abbrev[:avail], u, d.big)
		if t != nil || avail == len(d.abbrev) || uint64(avail) < min(want, uint64(len(d.abbrev))) {
			return t
		}
		want += want - u.abbrevOff
	}
}

// parseAbbrevs parses the abbreviation table at u.abbrevOff in sec.
func parseAbbrevs(sec []byte, u *unit, big bool) *abbrevTable {
	if u.abbrevOff >= uint64(len(sec)) {
		return nil
	}
	b := dbuf{data: sec, off: int(u.abbrevOff), big: big}
	t := &abbrevTable{}
	var codes []uint64
	for !b.bad {
		code := b.uleb()
		if code == 0 || b.bad {
			break
		}
		ab := abbrev{tag: uint16(min(b.uleb(), 0xffff)), lo: uint32(len(t.specs))}
		ab.children = b.u8() != 0
		fixed := int32(0)
		for !b.bad {
			attr, form := b.uleb(), b.uleb()
			if attr == 0 && form == 0 {
				break
			}
			s := attrSpec{attr: uint16(min(attr, 0xffff)), form: uint16(min(form, 0xffff))}
			if form == formImplicitConst {
				s.imp = uint32(len(t.implicits))
				t.implicits = append(t.implicits, b.sleb())
			}
			ab.sibling = ab.sibling || s.attr == attrSibling
			if n := formSize(s.form, u); n < 0 || fixed < 0 {
				fixed = -1
			} else {
				fixed += int32(n)
			}
			t.specs = append(t.specs, s)
			if len(t.specs)-int(ab.lo) > maxAbbrevAttrs {
				b.fail()
			}
		}
		ab.fixed, ab.hi = fixed, uint32(len(t.specs))
		codes = append(codes, code)
		t.dense = append(t.dense, ab)
	}
	if b.bad {
		return nil
	}
	t.specs = slices.Clone(t.specs)
	t.dense = slices.Clone(t.dense)
	for i, c := range codes {
		if c != uint64(i+1) || len(codes) > maxDenseAbbrevCode {
			t.sparse = make(map[uint64]*abbrev, len(codes))
			for i, c := range codes {
				t.sparse[c] = &t.dense[i]
			}
			t.dense = nil
			break
		}
	}
	return t
}
