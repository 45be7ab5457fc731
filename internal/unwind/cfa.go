package unwind

import (
	"bytes"
	"errors"
	"fmt"
)

// numRegs is the number of DWARF registers the unwinder tracks (rax…rip).
// Rules for higher registers (SSE, x87) are parsed and dropped.
const numRegs = 17

// ruleKind is the DWARF register rule of one column (DWARF 5 §6.4.1).
type ruleKind uint8

const (
	rUnset     ruleKind = iota // not mentioned: same value (x86-64 ABI)
	rUndefined                 // DW_CFA_undefined: not recoverable
	rSame                      // DW_CFA_same_value
	rOffset                    // saved at CFA+off
	rValOffset                 // value is CFA+off
	rRegister                  // value is in register reg
	rExpr                      // saved at the address expr computes (CFA pushed first)
	rValExpr                   // value is what expr computes (CFA pushed first)
)

// regRule is the rule of one register column.
type regRule struct {
	kind ruleKind
	reg  uint8
	off  int64
	expr []byte
}

// cfaRule is the CFA rule: reg+off, or expr when expr is not nil.
type cfaRule struct {
	reg  uint64
	off  int64
	expr []byte
}

// cfaState is one row of the CFA table: the rules in force at a pc.
type cfaState struct {
	cfa  cfaRule
	regs [numRegs]regRule
}

// Bounds on hostile programs: nesting of DW_CFA_remember_state.
const maxRememberDepth = 64

var errStateUnderflow = errors.New("DW_CFA_restore_state without remember_state")

// cfaVM runs the CFA program of one FDE.
type cfaVM struct {
	s     *frameSection
	f     *fde
	loc   uint64
	st    cfaState
	init  cfaState
	stack []cfaState
	emit  func(loc uint64, st *cfaState)
	done  bool
}

// runFDE runs the CIE's initial instructions and the FDE's program on vm
// (reused from FDE to FDE: it keeps no state between them) and calls emit
// for each row, in increasing pc order: the rules in force from loc up to
// the next row (or f.end). emit must copy what it keeps.
func runFDE(vm *cfaVM, s *frameSection, f *fde, emit func(loc uint64, st *cfaState)) error {
	*vm = cfaVM{s: s, f: f, loc: f.start, stack: vm.stack[:0]}
	if f.cie.raReg >= numRegs {
		return fmt.Errorf("return address column %d", f.cie.raReg)
	}
	if err := vm.run(f.cie.initial); err != nil {
		return fmt.Errorf("CIE initial instructions: %w", err)
	}
	vm.init = vm.st
	vm.emit = emit
	if err := vm.run(f.insns); err != nil {
		return err
	}
	if !vm.done {
		emit(vm.loc, &vm.st)
	}
	return nil
}

// advance moves to newLoc, emitting the row in force before it.
func (vm *cfaVM) advance(newLoc uint64) error {
	if newLoc < vm.loc {
		return fmt.Errorf("location %#x goes back before %#x", newLoc, vm.loc)
	}
	if newLoc == vm.loc || vm.emit == nil {
		return nil
	}
	vm.emit(vm.loc, &vm.st)
	vm.loc = newLoc
	if newLoc >= vm.f.end {
		vm.done = true
	}
	return nil
}

func (vm *cfaVM) setReg(reg uint64, r regRule) {
	if reg < numRegs {
		vm.st.regs[reg] = r
	}
}

func (vm *cfaVM) restore(reg uint64) {
	if reg < numRegs {
		vm.st.regs[reg] = vm.init.regs[reg]
	}
}

// run interprets insns until they end, the FDE's range is passed, or an
// error. Each op consumes at least one byte, so it ends in linear time.
func (vm *cfaVM) run(insns []byte) error {
	r := &buf{b: insns}
	c := vm.f.cie
	for r.left() > 0 && !vm.done {
		op := r.u8()
		var err error
		switch op >> 6 {
		case 1: // DW_CFA_advance_loc
			err = vm.advance(vm.loc + uint64(op&0x3f)*c.codeAlign)
		case 2: // DW_CFA_offset
			vm.setReg(uint64(op&0x3f), regRule{kind: rOffset, off: int64(r.uleb()) * c.dataAlign})
		case 3: // DW_CFA_restore
			vm.restore(uint64(op & 0x3f))
		default:
			err = vm.extended(op, r)
		}
		if err != nil {
			return err
		}
		if r.err != nil {
			return fmt.Errorf("CFA program: %w", r.err)
		}
	}
	return nil
}

// extended interprets the ops whose high two bits are 0.
func (vm *cfaVM) extended(op uint8, r *buf) error {
	c := vm.f.cie
	switch op {
	case 0x00: // DW_CFA_nop
	case 0x01: // DW_CFA_set_loc
		var loc uint64
		var err error
		if vm.s.eh {
			loc, err = vm.s.readPtr(r, c.fdeEnc, true)
		} else if c.addrSize == 4 {
			loc = uint64(r.u32())
		} else {
			loc = r.u64()
		}
		if err != nil {
			return err
		}
		return vm.advance(loc)
	case 0x02: // DW_CFA_advance_loc1
		return vm.advance(vm.loc + uint64(r.u8())*c.codeAlign)
	case 0x03: // DW_CFA_advance_loc2
		return vm.advance(vm.loc + uint64(r.u16())*c.codeAlign)
	case 0x04: // DW_CFA_advance_loc4
		return vm.advance(vm.loc + uint64(r.u32())*c.codeAlign)
	case 0x1d: // DW_CFA_MIPS_advance_loc8
		return vm.advance(vm.loc + r.u64()*c.codeAlign)
	case 0x05: // DW_CFA_offset_extended
		reg := r.uleb()
		vm.setReg(reg, regRule{kind: rOffset, off: int64(r.uleb()) * c.dataAlign})
	case 0x11: // DW_CFA_offset_extended_sf
		reg := r.uleb()
		vm.setReg(reg, regRule{kind: rOffset, off: r.sleb() * c.dataAlign})
	case 0x2f: // DW_CFA_GNU_negative_offset_extended
		reg := r.uleb()
		vm.setReg(reg, regRule{kind: rOffset, off: -int64(r.uleb()) * c.dataAlign})
	case 0x14: // DW_CFA_val_offset
		reg := r.uleb()
		vm.setReg(reg, regRule{kind: rValOffset, off: int64(r.uleb()) * c.dataAlign})
	case 0x15: // DW_CFA_val_offset_sf
		reg := r.uleb()
		vm.setReg(reg, regRule{kind: rValOffset, off: r.sleb() * c.dataAlign})
	case 0x06: // DW_CFA_restore_extended
		vm.restore(r.uleb())
	case 0x07: // DW_CFA_undefined
		vm.setReg(r.uleb(), regRule{kind: rUndefined})
	case 0x08: // DW_CFA_same_value
		vm.setReg(r.uleb(), regRule{kind: rSame})
	case 0x09: // DW_CFA_register
		reg, from := r.uleb(), r.uleb()
		if from >= numRegs {
			vm.setReg(reg, regRule{kind: rUndefined})
		} else {
			vm.setReg(reg, regRule{kind: rRegister, reg: uint8(from)})
		}
	case 0x10, 0x16: // DW_CFA_expression, DW_CFA_val_expression
		reg := r.uleb()
		e := bytes.Clone(r.bytes(r.uleb())) // not the section's: it may be a mapping
		k := rExpr
		if op == 0x16 {
			k = rValExpr
		}
		vm.setReg(reg, regRule{kind: k, expr: e})
	default:
		return vm.cfaOp(op, r)
	}
	return nil
}

// cfaOp interprets the ops that change the CFA rule or the state stack.
func (vm *cfaVM) cfaOp(op uint8, r *buf) error {
	c := vm.f.cie
	switch op {
	case 0x0a: // DW_CFA_remember_state
		if len(vm.stack) >= maxRememberDepth {
			return errors.New("DW_CFA_remember_state nested too deep")
		}
		vm.stack = append(vm.stack, vm.st)
	case 0x0b: // DW_CFA_restore_state (the CFA rule is restored too, as GCC and LLVM expect)
		if len(vm.stack) == 0 {
			return errStateUnderflow
		}
		vm.st = vm.stack[len(vm.stack)-1]
		vm.stack = vm.stack[:len(vm.stack)-1]
	case 0x0c: // DW_CFA_def_cfa
		vm.st.cfa = cfaRule{reg: r.uleb(), off: int64(r.uleb())}
	case 0x12: // DW_CFA_def_cfa_sf
		vm.st.cfa = cfaRule{reg: r.uleb(), off: r.sleb() * c.dataAlign}
	case 0x0d: // DW_CFA_def_cfa_register
		vm.st.cfa.reg, vm.st.cfa.expr = r.uleb(), nil
	case 0x0e: // DW_CFA_def_cfa_offset
		vm.st.cfa.off, vm.st.cfa.expr = int64(r.uleb()), nil
	case 0x13: // DW_CFA_def_cfa_offset_sf
		vm.st.cfa.off, vm.st.cfa.expr = r.sleb()*c.dataAlign, nil
	case 0x0f: // DW_CFA_def_cfa_expression
		e := bytes.Clone(r.bytes(r.uleb())) // as above
		if e == nil {
			e = []byte{}
		}
		vm.st.cfa = cfaRule{expr: e}
	case 0x2e: // DW_CFA_GNU_args_size: the unwinder does not need it
		r.uleb()
	default:
		return fmt.Errorf("unknown CFA op %#x", op)
	}
	return nil
}
