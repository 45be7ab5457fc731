package unwind

import (
	"encoding/binary"
	"testing"
)

// TestPoppedSlot steps a frame whose rule says rbp is saved in the red
// zone below sp (GCC's CFI between pop %rbp and ret), with a compact rule
// and with a full row: rbp must keep the value in the register, which the
// pop restored, not become unknown because the slot lies below the
// window; a slot further below than the red zone is still a failed read.
func TestPoppedSlot(t *testing.T) {
	const sp, ra, callerBP = 0x7ffc0000, 0x401234, 0x7ffc0100
	window := make([]byte, 64)
	binary.LittleEndian.PutUint64(window, ra) // the return address at sp
	start := func() (frameRegs, memory) {
		var fr frameRegs
		fr.set(RegRSP, sp)
		fr.set(RegRBP, callerBP)
		fr.set(RegRIP, 0x401000)
		return fr, memory{base: sp, b: window}
	}
	check := func(t *testing.T, name string, fr frameRegs, s Stop, wantBP bool) {
		t.Helper()
		if s != 0 {
			t.Fatalf("%s: stop %v, want a step", name, s)
		}
		if pc, _ := fr.get(RegRIP); pc != ra {
			t.Errorf("%s: caller's pc %#x, want %#x", name, pc, ra)
		}
		if got, _ := fr.get(RegRSP); got != sp+8 {
			t.Errorf("%s: caller's sp %#x, want %#x", name, got, sp+8)
		}
		bp, ok := fr.get(RegRBP)
		if wantBP && (!ok || bp != callerBP) {
			t.Errorf("%s: caller's rbp %#x (known %v), want %#x", name, bp, ok, uint64(callerBP))
		}
		if !wantBP && ok {
			t.Errorf("%s: caller's rbp %#x known, want unknown (a slot below the red zone does not read)", name, bp)
		}
	}
	for _, tc := range []struct {
		name   string
		rbpOff int64 // from the CFA (sp+8)
		wantBP bool
	}{
		{"after pop %rbp", -16, true},
		{"below the red zone", -8 - redZone - 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rule{cfaKind: cfaRSP, cfaOff: 8, raKind: raOffset, raOff: -8, rbpKind: rbpOffset, rbpOff: int16(tc.rbpOff)}
			fr, mem := start()
			s, _ := step(nil, r, &fr, &mem)
			check(t, "compact rule", fr, s, tc.wantBP)

			var c complexRule
			c.cfa = cfaRule{reg: RegRSP, off: 8}
			c.regs[RegRIP] = regRule{kind: rOffset, off: -8}
			c.regs[RegRBP] = regRule{kind: rOffset, off: tc.rbpOff}
			fr, mem = start()
			s, _ = stepComplex(&c, &fr, &mem)
			check(t, "full row", fr, s, tc.wantBP)
		})
	}
}
