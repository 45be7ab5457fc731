package unwind

import "encoding/binary"

// frameRegs are the register values of one frame; known has bit i set when
// v[i] is known.
type frameRegs struct {
	v     [numRegs]uint64
	known uint32
}

func (f *frameRegs) get(reg uint64) (uint64, bool) {
	if reg >= numRegs || f.known&(1<<reg) == 0 {
		return 0, false
	}
	return f.v[reg], true
}

func (f *frameRegs) set(reg int, v uint64) {
	f.v[reg] = v
	f.known |= 1 << reg
}

// memory is the copied stack window: bytes b hold addresses [base, base+len(b)).
type memory struct {
	base uint64
	b    []byte
	// A second stack (StackSwitch): b2 holds the bytes from base2 up;
	// nil for none.
	base2 uint64
	b2    []byte
	// log, when not nil, gets every read (the stack memo's record).
	log *[]memRead
	// complex: a step applied a full row (stepComplex), which may read
	// any register (the stack memo's record).
	complex bool
}

// inSecond reports whether addr is in the second stack's bytes.
func (m *memory) inSecond(addr uint64) bool {
	return m.b2 != nil && addr >= m.base2 && addr-m.base2 < uint64(len(m.b2))
}

// read reads size (1, 2, 4 or 8) bytes at addr, little-endian; from an
// empty window (nothing could be copied) it reports StopNoStack.
func (m *memory) read(addr uint64, size uint64) (uint64, Stop) {
	v, s := m.readWindow(addr, size)
	if m.log != nil {
		*m.log = append(*m.log, memRead{addr: addr, v: v, size: uint8(size), ok: s == 0})
	}
	return v, s
}

// readWindow is read, unlogged.
func (m *memory) readWindow(addr uint64, size uint64) (uint64, Stop) {
	if len(m.b) == 0 && len(m.b2) == 0 {
		return 0, StopNoStack
	}
	if m.inSecond(addr) {
		return readIn(m.b2, addr-m.base2, size)
	}
	if addr < m.base {
		return 0, StopReadOutside
	}
	return readIn(m.b, addr-m.base, size)
}

// readIn reads size bytes at off in b (StopWindow past its end,
// StopReadOutside when off+size wraps).
func readIn(b []byte, off, size uint64) (uint64, Stop) {
	if off+size < off {
		return 0, StopReadOutside
	}
	if off+size > uint64(len(b)) {
		return 0, StopWindow
	}
	p := b[off : off+size]
	switch size {
	case 1:
		return uint64(p[0]), 0
	case 2:
		return uint64(binary.LittleEndian.Uint16(p)), 0
	case 4:
		return uint64(binary.LittleEndian.Uint32(p)), 0
	}
	return binary.LittleEndian.Uint64(p), 0
}

// Bounds on expression evaluation: stack depth and ops executed (DW_OP_bra
// and DW_OP_skip can loop).
const (
	maxExprStack = 64
	maxExprSteps = 1024
)

// evalExpr evaluates a DWARF expression (DWARF 5 §2.5) as CFI uses it:
// initial is pushed first (the CFA, for register rules), registers come
// from regs, memory from mem. It returns the value on top of the stack.
// Location descriptions (DW_OP_regN, DW_OP_piece) and ops a CFI
// expression cannot use are errors (StopBadRule).
func evalExpr(e []byte, regs *frameRegs, mem *memory, initial uint64, push bool) (uint64, Stop) {
	var st [maxExprStack]uint64
	n := 0
	if push {
		st[0], n = initial, 1
	}
	r := buf{b: e}
	for steps := 0; r.left() > 0; steps++ {
		if steps >= maxExprSteps {
			return 0, StopBadRule
		}
		op := r.u8()
		var v uint64
		pushV := true
		switch {
		case op >= 0x30 && op <= 0x4f: // DW_OP_lit0..31
			v = uint64(op - 0x30)
		case op >= 0x70 && op <= 0x8f: // DW_OP_breg0..31
			reg, ok := regs.get(uint64(op - 0x70))
			if !ok {
				return 0, StopBadRule
			}
			v = reg + uint64(r.sleb())
		case op == 0x92: // DW_OP_bregx
			reg, ok := regs.get(r.uleb())
			if !ok {
				return 0, StopBadRule
			}
			v = reg + uint64(r.sleb())
		case op == 0x03 || (op >= 0x08 && op <= 0x0e) || op == 0x10 || op == 0x11: // constants
			var ok bool
			if v, ok = exprConst(op, &r); !ok {
				return 0, StopBadRule
			}
		default:
			pushV = false
			var s Stop
			if n, s = exprOp(op, &r, &st, n, mem); s != 0 {
				return 0, s
			}
		}
		if r.err != nil {
			return 0, StopBadRule
		}
		if pushV {
			if n >= maxExprStack {
				return 0, StopBadRule
			}
			st[n] = v
			n++
		}
	}
	if n == 0 {
		return 0, StopBadRule
	}
	return st[n-1], 0
}

// exprConst reads the operand of a constant op.
func exprConst(op uint8, r *buf) (uint64, bool) {
	switch op {
	case 0x03: // DW_OP_addr
		return r.u64(), true
	case 0x08: // const1u
		return uint64(r.u8()), true
	case 0x09: // const1s
		return uint64(int64(int8(r.u8()))), true
	case 0x0a:
		return uint64(r.u16()), true
	case 0x0b:
		return uint64(int64(int16(r.u16()))), true
	case 0x0c:
		return uint64(r.u32()), true
	case 0x0d:
		return uint64(int64(int32(r.u32()))), true
	case 0x0e:
		return r.u64(), true
	case 0x10: // constu
		return r.uleb(), true
	case 0x11: // consts
		return uint64(r.sleb()), true
	}
	return 0, false
}

// exprOp runs a stack, arithmetic, memory or control op on st[:n] and
// returns the new depth.
func exprOp(op uint8, r *buf, st *[maxExprStack]uint64, n int, mem *memory) (int, Stop) {
	need := func(k int) bool { return n >= k }
	switch op {
	case 0x12: // dup
		if !need(1) || n >= maxExprStack {
			return n, StopBadRule
		}
		st[n] = st[n-1]
		return n + 1, 0
	case 0x13: // drop
		if !need(1) {
			return n, StopBadRule
		}
		return n - 1, 0
	case 0x14: // over
		if !need(2) || n >= maxExprStack {
			return n, StopBadRule
		}
		st[n] = st[n-2]
		return n + 1, 0
	case 0x15: // pick
		i := int(r.u8())
		if i >= n || n >= maxExprStack {
			return n, StopBadRule
		}
		st[n] = st[n-1-i]
		return n + 1, 0
	case 0x16: // swap
		if !need(2) {
			return n, StopBadRule
		}
		st[n-1], st[n-2] = st[n-2], st[n-1]
		return n, 0
	case 0x17: // rot
		if !need(3) {
			return n, StopBadRule
		}
		st[n-1], st[n-2], st[n-3] = st[n-2], st[n-3], st[n-1]
		return n, 0
	case 0x06, 0x94: // deref, deref_size
		size := uint64(8)
		if op == 0x94 {
			size = uint64(r.u8())
			if size != 1 && size != 2 && size != 4 && size != 8 {
				return n, StopBadRule
			}
		}
		if !need(1) {
			return n, StopBadRule
		}
		v, s := mem.read(st[n-1], size)
		if s != 0 {
			return n, s
		}
		st[n-1] = v
		return n, 0
	case 0x2f: // skip
		return n, exprJump(r, int64(int16(r.u16())))
	case 0x28: // bra
		off := int64(int16(r.u16()))
		if !need(1) {
			return n, StopBadRule
		}
		n--
		if st[n] != 0 {
			return n, exprJump(r, off)
		}
		return n, 0
	case 0x96: // nop
		return n, 0
	case 0x19, 0x1f, 0x20, 0x23: // abs, neg, not, plus_uconst
		if !need(1) {
			return n, StopBadRule
		}
		st[n-1] = unaryOp(op, st[n-1], r)
		return n, 0
	}
	if op >= 0x1a && op <= 0x2e && op != 0x1f && op != 0x20 && op != 0x23 && op != 0x28 {
		if !need(2) {
			return n, StopBadRule
		}
		v, ok := binaryOp(op, st[n-2], st[n-1])
		if !ok {
			return n, StopBadRule
		}
		st[n-2] = v
		return n - 1, 0
	}
	return n, StopBadRule
}

func exprJump(r *buf, off int64) Stop {
	to := int64(r.off) + off
	if r.err != nil || to < 0 || to > int64(len(r.b)) {
		return StopBadRule
	}
	r.off = int(to)
	return 0
}

func unaryOp(op uint8, a uint64, r *buf) uint64 {
	switch op {
	case 0x19: // abs
		if int64(a) < 0 {
			return -a
		}
		return a
	case 0x1f: // neg
		return -a
	case 0x20: // not
		return ^a
	}
	return a + r.uleb() // plus_uconst
}

// binaryOp applies a two-operand op: a is below b on the stack.
func binaryOp(op uint8, a, b uint64) (uint64, bool) {
	bt := func(c bool) uint64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case 0x1a:
		return a & b, true
	case 0x1b: // div (signed)
		if b == 0 || (int64(a) == -1<<63 && int64(b) == -1) {
			return 0, false
		}
		return uint64(int64(a) / int64(b)), true
	case 0x1c:
		return a - b, true
	case 0x1d: // mod
		if b == 0 {
			return 0, false
		}
		return a % b, true
	case 0x1e:
		return a * b, true
	case 0x21:
		return a | b, true
	case 0x22:
		return a + b, true
	case 0x24:
		return a << (b & 63), b < 64
	case 0x25:
		return a >> (b & 63), b < 64
	case 0x26:
		return uint64(int64(a) >> (b & 63)), b < 64
	case 0x27:
		return a ^ b, true
	case 0x29:
		return bt(a == b), true
	case 0x2a:
		return bt(int64(a) >= int64(b)), true
	case 0x2b:
		return bt(int64(a) > int64(b)), true
	case 0x2c:
		return bt(int64(a) <= int64(b)), true
	case 0x2d:
		return bt(int64(a) < int64(b)), true
	case 0x2e:
		return bt(a != b), true
	}
	return 0, false
}
