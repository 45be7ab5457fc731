package unwind

// A rule is one deduplicated row of a Table: how to find the CFA, the
// return address and the caller's rbp at a pc. Rows of the common shapes
// (CFA = rsp or rbp + offset, values saved at CFA + small offsets) take 12
// bytes, shared by every row with the same shape; anything else (DWARF
// expressions, signal frames, other registers) points at a complexRule.
type rule struct {
	cfaOff  int32 // CFA offset from the CFA register, or the complexRule index
	rbpOff  int16 // rbpOffset: caller's rbp saved at CFA+rbpOff
	raOff   int16 // raOffset: return address saved at CFA+raOff
	cfaKind uint8
	rbpKind uint8
	raKind  uint8
	// clobber has bit i set when callee-saved register calleeSaved[i]
	// was saved by this frame: its value in the caller is not restored,
	// so it becomes unknown.
	clobber uint8
}

const (
	cfaNone    = iota // a gap between FDEs: no CFI for the pc
	cfaRSP            // CFA = rsp + cfaOff
	cfaRBP            // CFA = rbp + cfaOff
	cfaComplex        // see Table.complex[cfaOff]
)

const (
	rbpSame = iota
	rbpOffset
	rbpUndef
)

const (
	raOffset = iota
	raUndef
)

// calleeSaved are the callee-saved registers besides rbp (x86-64 psABI):
// rbx, r12–r15.
var calleeSaved = [5]uint8{3, 12, 13, 14, 15}

// complexRule is a full CFA row, for rows the compact rule cannot hold.
type complexRule struct {
	cfa    cfaRule
	regs   [numRegs]regRule
	signal bool // from a CIE with the S augmentation: a signal frame
}

func fitsInt16(v int64) bool { return v >= -1<<15 && v < 1<<15 }

// compact turns a CFA row into a compact rule, or reports that it needs a
// complexRule.
func compact(st *cfaState, raReg uint64, signal bool) (rule, bool) {
	var r rule
	if signal || st.cfa.expr != nil || st.cfa.off != int64(int32(st.cfa.off)) {
		return r, false
	}
	switch st.cfa.reg {
	case RegRSP:
		r.cfaKind = cfaRSP
	case RegRBP:
		r.cfaKind = cfaRBP
	default:
		return r, false
	}
	r.cfaOff = int32(st.cfa.off)
	ra := st.regs[raReg]
	switch {
	case ra.kind == rUndefined:
		r.raKind = raUndef
	case ra.kind == rOffset && fitsInt16(ra.off):
		r.raKind, r.raOff = raOffset, int16(ra.off)
	default:
		return r, false
	}
	switch bp := st.regs[RegRBP]; {
	case bp.kind == rUnset || bp.kind == rSame:
		r.rbpKind = rbpSame
	case bp.kind == rUndefined:
		r.rbpKind = rbpUndef
	case bp.kind == rOffset && fitsInt16(bp.off):
		r.rbpKind, r.rbpOff = rbpOffset, int16(bp.off)
	default:
		return r, false
	}
	if k := st.regs[RegRSP].kind; k != rUnset && k != rSame {
		return r, false
	}
	for i, reg := range calleeSaved {
		if k := st.regs[reg].kind; k != rUnset && k != rSame {
			r.clobber |= 1 << i
		}
	}
	return r, true
}

// complexOf copies a CFA row into a complexRule, copying its expressions
// so the table does not keep the section alive.
func complexOf(st *cfaState, signal bool) complexRule {
	c := complexRule{cfa: st.cfa, regs: st.regs, signal: signal}
	if c.cfa.expr != nil {
		c.cfa.expr = append([]byte{}, c.cfa.expr...)
	}
	for i := range c.regs {
		if c.regs[i].expr != nil {
			c.regs[i].expr = append([]byte{}, c.regs[i].expr...)
		}
	}
	return c
}
