package dwarfline

// DW_RLE_* range list entry kinds of .debug_rnglists (DWARF 5 section
// 7.25).
const (
	rleEndOfList    = 0x00
	rleBaseAddressx = 0x01
	rleStartxEndx   = 0x02
	rleStartxLength = 0x03
	rleOffsetPair   = 0x04
	rleBaseAddress  = 0x05
	rleStartEnd     = 0x06
	rleStartLength  = 0x07
)

// maxRangeEntries bounds the entries one range list may have.
const maxRangeEntries = 1 << 20

// pcAttrs are the address attributes of a DIE as read.
type pcAttrs struct {
	low, high, ranges          attrVal
	hasLow, hasHigh, hasRanges bool
}

// rangesOf appends to out the address ranges [lo, hi) of a DIE of unit u
// with attributes a, as debug/dwarf's Data.Ranges finds them: low_pc and
// high_pc (an address, or an offset from low_pc), then DW_AT_ranges
// (.debug_ranges before DWARF 5, .debug_rnglists from it) against u's
// base address. Empty ranges are dropped. Corrupt lists give what was
// read before the damage.
func (d *Data) rangesOf(u *unit, a *pcAttrs, out [][2]uint64) [][2]uint64 {
	if a.hasLow && a.hasHigh {
		if lo, ok := d.addrOf(u, a.low); ok {
			hi, hiOK := uint64(0), false
			if a.high.isConst() {
				hi, hiOK = lo+a.high.u, true
			} else {
				hi, hiOK = d.addrOf(u, a.high)
			}
			if hiOK && lo < hi {
				out = append(out, [2]uint64{lo, hi})
			}
		}
	}
	if !a.hasRanges {
		return out
	}
	root := &u.root
	if u.version >= 5 {
		if len(d.rnglists) == 0 {
			return out
		}
		switch {
		case a.ranges.form == formRnglistx:
			off, ok := d.rnglistOffset(u, a.ranges.u)
			if !ok {
				return out
			}
			return d.rnglist(u, off, root.base, out)
		case a.ranges.isOffset():
			return d.rnglist(u, a.ranges.u, root.base, out)
		}
		return out
	}
	if a.ranges.isOffset() {
		return d.debugRanges(u, a.ranges.u, root.base, out)
	}
	return out
}

// rnglistOffset returns the .debug_rnglists offset of list idx of u
// (DW_FORM_rnglistx): the offset at idx in the table at
// DW_AT_rnglists_base, relative to that base.
func (d *Data) rnglistOffset(u *unit, idx uint64) (uint64, bool) {
	base := u.root.rnglistsBase
	size := uint64(u.offSize())
	off := base + idx*size
	if idx > uint64(len(d.rnglists)) || off < base || off+size > uint64(len(d.rnglists)) ||
		uint64(validSpan(d.rnglistsZ, d.rnglists, off, off+size)) < off+size {
		return 0, false
	}
	b := dbuf{data: d.rnglists, off: int(off), big: d.big}
	return base + b.offset(u.dwarf64), !b.bad
}

// debugRanges appends the ranges of the .debug_ranges list at off.
func (d *Data) debugRanges(u *unit, off, base uint64, out [][2]uint64) [][2]uint64 {
	return listIn(d.rangesZ, d.ranges, off, out, func(data []byte, out [][2]uint64) ([][2]uint64, bool) {
		return d.debugRangesIn(data, u, off, base, out)
	})
}

// listIn appends to out the ranges parse reads from the list at off in
// sec, a section read on demand by z (nil when complete): parse gets a
// prefix of sec valid from off and reports whether the list ran past it
// (see inSpan); the ranges of a try that ran out are dropped.
func listIn(z *lazySection, sec []byte, off uint64, out [][2]uint64, parse func(data []byte, out [][2]uint64) ([][2]uint64, bool)) [][2]uint64 {
	if off >= uint64(len(sec)) {
		return out
	}
	n0 := len(out)
	inSpan(z, sec, off, func(data []byte) (ranOut bool) {
		out, ranOut = parse(data, out[:n0])
		return ranOut
	})
	return out
}

// debugRangesIn is debugRanges over data, a prefix of .debug_ranges;
// ranOut reports that the list did not end inside it.
func (d *Data) debugRangesIn(data []byte, u *unit, off, base uint64, out [][2]uint64) (_ [][2]uint64, ranOut bool) {
	b := dbuf{data: data, off: int(off), big: d.big}
	maxAddr := ^uint64(0) >> (64 - 8*uint(u.addrSize))
	for n := 0; n < maxRangeEntries && b.left() > 0; n++ {
		lo, hi := b.addr(u.addrSize), b.addr(u.addrSize)
		switch {
		case b.bad:
			return out, true
		case lo == 0 && hi == 0:
			return out, false
		case lo == maxAddr:
			base = hi
		case lo < hi:
			out = append(out, [2]uint64{base + lo, base + hi})
		}
	}
	return out, b.left() == 0
}

// rnglist appends the ranges of the .debug_rnglists list at off.
func (d *Data) rnglist(u *unit, off, base uint64, out [][2]uint64) [][2]uint64 {
	return listIn(d.rnglistsZ, d.rnglists, off, out, func(data []byte, out [][2]uint64) ([][2]uint64, bool) {
		return d.rnglistIn(data, u, off, base, out)
	})
}

// rnglistIn is rnglist over data, a prefix of .debug_rnglists; ranOut
// reports that the list did not end inside it.
func (d *Data) rnglistIn(data []byte, u *unit, off, base uint64, out [][2]uint64) (_ [][2]uint64, ranOut bool) {
	b := dbuf{data: data, off: int(off), big: d.big}
	add := func(lo, hi uint64, ok bool) {
		if ok && lo < hi {
			out = append(out, [2]uint64{lo, hi})
		}
	}
	for n := 0; n < maxRangeEntries && !b.bad; n++ {
		switch b.u8() {
		case rleEndOfList:
			return out, b.bad
		case rleBaseAddressx:
			if a, ok := d.debugAddr(u, b.uleb()); ok {
				base = a
			}
		case rleStartxEndx:
			lo, ok1 := d.debugAddr(u, b.uleb())
			hi, ok2 := d.debugAddr(u, b.uleb())
			add(lo, hi, ok1 && ok2 && !b.bad)
		case rleStartxLength:
			lo, ok := d.debugAddr(u, b.uleb())
			n := b.uleb()
			add(lo, lo+n, ok && !b.bad)
		case rleOffsetPair:
			lo, hi := b.uleb(), b.uleb()
			add(base+lo, base+hi, !b.bad)
		case rleBaseAddress:
			base = b.addr(u.addrSize)
		case rleStartEnd:
			lo, hi := b.addr(u.addrSize), b.addr(u.addrSize)
			add(lo, hi, !b.bad)
		case rleStartLength:
			lo := b.addr(u.addrSize)
			n := b.uleb()
			add(lo, lo+n, !b.bad)
		default:
			return out, false // an unknown kind: its operands' size is unknown
		}
	}
	return out, b.bad
}

// arangeSets reads .debug_aranges: the address ranges of each unit that
// has a set, by the unit's .debug_info offset. ok is false when the
// section is absent or corrupt; then no set is used.
func (d *Data) arangeSets() (sets map[uint64][][2]uint64, ok bool) {
	if len(d.aranges) == 0 {
		return nil, false
	}
	sets = make(map[uint64][][2]uint64)
	b := dbuf{data: d.aranges, big: d.big}
	for b.left() > 0 {
		start := b.off
		n, dwarf64 := b.unitLength()
		if b.bad || n > uint64(b.left()) {
			return nil, false
		}
		end := b.off + int(n)
		version := b.u16()
		infoOff := b.offset(dwarf64)
		addrSize, segSize := b.u8(), b.u8()
		if b.bad || version != 2 || segSize != 0 || (addrSize != 4 && addrSize != 8) {
			return nil, false
		}
		// Tuples start at a multiple of their size from the set's start.
		tuple := 2 * int(addrSize)
		if pad := (b.off - start) % tuple; pad != 0 {
			b.skip(uint64(tuple - pad))
		}
		rs := sets[infoOff]
		for b.off+tuple <= end {
			lo, length := b.addr(addrSize), b.addr(addrSize)
			if lo == 0 && length == 0 {
				break
			}
			if length > 0 && lo+length > lo {
				rs = append(rs, [2]uint64{lo, lo + length})
			}
		}
		if b.bad {
			return nil, false
		}
		sets[infoOff] = rs
		b.off = end
	}
	return sets, true
}
