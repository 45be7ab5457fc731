package dwarfline

// dieReader walks the DIEs of one unit in .debug_info without
// allocating: next reads a DIE's abbreviation, then the caller reads
// (value) or skips (skipAttrs, skipForm) each of its attributes in order.
type dieReader struct {
	d       *Data
	u       *unit
	abbrevs *abbrevTable
	b       dbuf // over .debug_info up to the unit's end
}

// attrVal is an attribute value as read: its form, and the integer
// (constant, address, offset, index or reference as written) or the
// bytes (inline string, block) it holds.
type attrVal struct {
	form uint16
	u    uint64
	s    []byte
}

// newDIEReader returns a reader of u's DIEs positioned at off; false
// when u's root DIE or the rest of it is unreadable or off is not in u.
func (d *Data) newDIEReader(u *unit, off uint64) (dieReader, bool) {
	r := d.rootOf(u)
	if !r.ok || off < u.dieOff || off > u.end {
		return dieReader{}, false
	}
	b := dbuf{data: d.info[:u.end], off: int(off), big: d.big}
	if d.InfoZ != nil {
		b.data, b.src = d.info[:off], &u.src
	}
	return dieReader{d: d, u: u, abbrevs: r.abbrevs, b: b}, true
}

// next reads the abbreviation code of the next DIE and returns its
// abbreviation: nullDIE for a null entry (the end of a list of
// children), nil at the end of the unit or on corrupt data.
func (r *dieReader) next() *abbrev {
	if r.b.left() <= 0 && !r.b.grow(1) {
		return nil
	}
	code := r.b.uleb()
	if r.b.bad {
		return nil
	}
	if code == 0 {
		return &nullDIE
	}
	ab := r.abbrevs.lookup(code)
	if ab == nil {
		r.b.fail()
	}
	return ab
}

// nullDIE is the abbreviation next returns for a null entry.
var nullDIE = abbrev{}

// specs returns the attributes of ab.
func (r *dieReader) specs(ab *abbrev) []attrSpec {
	return r.abbrevs.specs[ab.lo:ab.hi]
}

// implicit returns the DW_FORM_implicit_const value of a.
func (r *dieReader) implicit(a *attrSpec) int64 {
	if int(a.imp) < len(r.abbrevs.implicits) {
		return r.abbrevs.implicits[a.imp]
	}
	return 0
}

// skipAttrs moves past the attributes of a DIE of ab and returns the
// .debug_info offset of its DW_AT_sibling (0 if none).
func (r *dieReader) skipAttrs(ab *abbrev) uint64 {
	if ab.fixed >= 0 && !ab.sibling {
		r.b.skip(uint64(ab.fixed))
		return 0
	}
	var sib uint64
	specs := r.specs(ab)
	for i := range specs {
		a := &specs[i]
		if a.attr == attrSibling {
			sib = r.ref(r.value(a))
			continue
		}
		if !skipForm(&r.b, a.form, r.u) {
			return 0
		}
	}
	return sib
}

// value reads the value of attribute a.
func (r *dieReader) value(a *attrSpec) attrVal {
	b := &r.b
	form := a.form
	for hops := 0; hops < 4; hops++ {
		v := attrVal{form: form}
		switch form {
		case formImplicitConst:
			v.u = uint64(r.implicit(a))
		case formFlagPresent:
			v.u = 1
		case formIndirect:
			form = uint16(min(b.uleb(), 0xffff))
			continue
		case formString:
			v.s = b.cstr()
		case formBlock1:
			v.s = b.bytes(uint64(b.u8()))
		case formBlock2:
			v.s = b.bytes(uint64(b.u16()))
		case formBlock4:
			v.s = b.bytes(uint64(b.u32()))
		case formBlock, formExprloc:
			v.s = b.bytes(b.uleb())
		case formData16:
			v.s = b.bytes(16)
		case formSdata:
			v.u = uint64(b.sleb())
		case formUdata, formRefUdata, formStrx, formAddrx, formLoclistx, formRnglistx,
			formGNUAddrIndex, formGNUStrIndex:
			v.u = b.uleb()
		default:
			switch formSize(form, r.u) {
			case 1:
				v.u = uint64(b.u8())
			case 2:
				v.u = uint64(b.u16())
			case 3:
				v.u = uint64(b.u24())
			case 4:
				v.u = uint64(b.u32())
			case 8:
				v.u = b.u64()
			default:
				b.fail()
			}
		}
		return v
	}
	b.fail()
	return attrVal{}
}

// ref returns the .debug_info offset a reference value points to; 0
// for references to other files (dwz, type signatures) or non-references.
func (r *dieReader) ref(v attrVal) uint64 {
	switch v.form {
	case formRef1, formRef2, formRef4, formRef8, formRefUdata:
		return r.u.off + v.u
	case formRefAddr:
		return v.u
	}
	return 0
}

// isConst reports whether v is of a constant class form.
func (v attrVal) isConst() bool {
	switch v.form {
	case formData1, formData2, formData4, formData8, formSdata, formUdata, formImplicitConst:
		return true
	}
	return false
}

// isOffset reports whether v may be a section offset: DW_FORM_sec_offset,
// or data4/data8 as DWARF 2 and 3 wrote them.
func (v attrVal) isOffset() bool {
	switch v.form {
	case formSecOffset, formData4, formData8:
		return true
	}
	return false
}

// isAddr reports whether v is of the address class.
func (v attrVal) isAddr() bool {
	switch v.form {
	case formAddr, formAddrx, formAddrx1, formAddrx2, formAddrx3, formAddrx4, formGNUAddrIndex:
		return true
	}
	return false
}

// addrOf returns the address v holds in unit u: DW_FORM_addr directly,
// the addrx forms through .debug_addr and u's DW_AT_addr_base.
func (d *Data) addrOf(u *unit, v attrVal) (uint64, bool) {
	switch v.form {
	case formAddr:
		return v.u, true
	case formAddrx, formAddrx1, formAddrx2, formAddrx3, formAddrx4, formGNUAddrIndex:
		return d.debugAddr(u, v.u)
	}
	return 0, false
}

// debugAddr returns entry idx of u's table in .debug_addr.
func (d *Data) debugAddr(u *unit, idx uint64) (uint64, bool) {
	size := uint64(u.addrSize)
	off := u.root.addrBase + idx*size
	if idx > uint64(len(d.addr)) || off < u.root.addrBase || off+size > uint64(len(d.addr)) {
		return 0, false
	}
	b := dbuf{data: d.addr, off: int(off), big: d.big}
	return b.addr(u.addrSize), !b.bad
}

// strOf returns the string v holds in unit u: inline, or from
// .debug_str, .debug_line_str or (strx forms) .debug_str_offsets; ""
// for strings in other files (dwz) and on corrupt data.
func (d *Data) strOf(u *unit, v attrVal) string {
	switch v.form {
	case formString:
		return string(v.s)
	case formStrp:
		return cstrIn(d.strZ, d.str, v.u)
	case formLineStrp:
		return cstrIn(d.lineStrZ, d.lineStr, v.u)
	case formStrx, formStrx1, formStrx2, formStrx3, formStrx4, formGNUStrIndex:
		size := uint64(u.offSize())
		off := u.root.strOffsetsBase + v.u*size
		if v.u > uint64(len(d.strOffset)) || off < u.root.strOffsetsBase || off+size > uint64(len(d.strOffset)) {
			return ""
		}
		b := dbuf{data: d.strOffset, off: int(off), big: d.big}
		return cstrIn(d.strZ, d.str, b.offset(u.dwarf64))
	}
	return ""
}
