package unwind

import (
	"encoding/binary"
	"testing"
)

// pltExpr is the CFA expression GCC and binutils give a lazy-binding .plt
// section: CFA = rsp + 8 + ((rip & 15) >= 11) * 8 (the push of the second
// instruction moved rsp by 8 in the last 5 bytes of each 16-byte entry).
var pltExpr = []byte{
	0x77, 8, // DW_OP_breg7 (rsp): 8
	0x80, 0, // DW_OP_breg16 (rip): 0
	0x3f, // DW_OP_lit15
	0x1a, // DW_OP_and
	0x3b, // DW_OP_lit11
	0x2a, // DW_OP_ge
	0x33, // DW_OP_lit3
	0x24, // DW_OP_shl
	0x22, // DW_OP_plus
}

func TestExprPLT(t *testing.T) {
	for _, tc := range []struct{ rip, want uint64 }{
		{0x1020, 0x7f08}, {0x102a, 0x7f08}, {0x102b, 0x7f10}, {0x102f, 0x7f10}, {0x1030, 0x7f08},
	} {
		var regs frameRegs
		regs.set(RegRSP, 0x7f00)
		regs.set(RegRIP, tc.rip)
		got, s := evalExpr(pltExpr, &regs, &memory{}, 0, false)
		if s != stopNone || got != tc.want {
			t.Errorf("rip %#x: CFA %#x (%v), want %#x", tc.rip, got, s, tc.want)
		}
	}
}

// TestExprSignalFrame evaluates glibc's __restore_rt rules against a
// ucontext laid out on a stack window: CFA = *(rsp+160) (uc_mcontext.rsp),
// rip saved at rsp+168.
func TestExprSignalFrame(t *testing.T) {
	const sp = 0x7000
	stack := make([]byte, 256)
	binary.LittleEndian.PutUint64(stack[160:], 0x9000)
	binary.LittleEndian.PutUint64(stack[168:], 0x401234)
	mem := &memory{base: sp, b: stack}
	var regs frameRegs
	regs.set(RegRSP, sp)
	cfa, s := evalExpr([]byte{0x77, 0xa0, 0x01, 0x06}, &regs, mem, 0, false) // breg7 160; deref
	if s != stopNone || cfa != 0x9000 {
		t.Fatalf("CFA %#x (%v), want 0x9000", cfa, s)
	}
	addr, s := evalExpr([]byte{0x77, 0xa8, 0x01}, &regs, mem, cfa, true) // breg7 168 (the CFA pushed first)
	if s != stopNone || addr != sp+168 {
		t.Fatalf("rip's address %#x (%v), want %#x", addr, s, sp+168)
	}
}

func TestExprHostile(t *testing.T) {
	var regs frameRegs
	regs.set(RegRSP, 0x7000)
	mem := &memory{base: 0x7000, b: make([]byte, 64)}
	for _, tc := range []struct {
		name string
		expr []byte
		want Stop
	}{
		{"empty", nil, StopBadRule},
		{"endless loop", []byte{0x2f, 0xfd, 0xff}, StopBadRule}, // skip -3: to itself
		{"stack overflow", func() []byte {
			b := []byte{0x30}
			for range 100 {
				b = append(b, 0x12) // dup
			}
			return b
		}(), StopBadRule},
		{"underflow", []byte{0x22}, StopBadRule},
		{"division by zero", []byte{0x31, 0x30, 0x1b}, StopBadRule},
		{"unknown register", []byte{0x73, 0}, StopBadRule},
		{"location description", []byte{0x50}, StopBadRule},
		{"read below the window", []byte{0x77, 0x78, 0x06}, StopReadOutside},
		{"read above the window", []byte{0x77, 0xc0, 0x00, 0x06}, StopWindow},
		{"jump outside", []byte{0x2f, 0x00, 0x10}, StopBadRule},
		{"truncated operand", []byte{0x0e, 1, 2}, StopBadRule},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, s := evalExpr(tc.expr, &regs, mem, 0, false); s != tc.want {
				t.Errorf("stop %v, want %v", s, tc.want)
			}
		})
	}
}
