package unwind

import (
	"encoding/binary"
	"strings"
	"testing"
)

// record frames a CFI record body with its 4-byte length.
func record(body []byte) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	return append(out, body...)
}

// hostileCIE is an .eh_frame CIE (id 0, version 1, code align 1, data
// align -8, ra 16) with augmentation aug and augmentation data augData,
// whose initial instructions say CFA = rsp+8, ra at CFA-8.
func hostileCIE(aug string, augData []byte) []byte {
	body := []byte{0, 0, 0, 0, 1}
	body = append(body, aug...)
	body = append(body, 0, 1, 0x78, 16)
	if strings.HasPrefix(aug, "z") {
		body = append(body, byte(len(augData)))
		body = append(body, augData...)
	}
	body = append(body, 0x0c, 7, 8, 0x90, 1)
	return record(body)
}

// fdeAfter is an FDE whose CIE pointer points back by back bytes from its
// id field, covering [start, start+size) (pcrel sdata4 against address
// 0x1000+position), with program insns.
func fdeAfter(sectionOff int, back uint32, start, size uint32, insns []byte) []byte {
	body := binary.LittleEndian.AppendUint32(nil, back)
	pos := uint32(0x1000 + sectionOff + 8)
	body = binary.LittleEndian.AppendUint32(body, start-pos)
	body = binary.LittleEndian.AppendUint32(body, size)
	body = append(body, 0) // augmentation data length
	body = append(body, insns...)
	return record(body)
}

// TestHostileCFI checks that malformed CFI is cut and counted, never
// crashes nor loops, and leaves the good FDEs usable.
func TestHostileCFI(t *testing.T) {
	good := hostileCIE("zR", []byte{0x1b})
	withFDE := func(cie []byte, insns []byte) []byte {
		fde := fdeAfter(len(cie), uint32(len(cie)+4), 0x5000, 0x100, insns)
		return append(append([]byte{}, cie...), fde...)
	}
	cases := []struct {
		name             string
		data             []byte
		badFDEs, badCIEs int
		rows             bool // the FDE's rows must be usable
	}{
		{"good", withFDE(good, []byte{0x41, 0x0e, 16}), 0, 0, true},
		{"unknown augmentation", withFDE(hostileCIE("zQ", []byte{1}), nil), 1, 1, false},
		{"augmentation without z", withFDE(hostileCIE("eh", nil), nil), 1, 1, false},
		{"length past the section", append(append([]byte{}, good...), 0xff, 0xff, 0xff, 0x7f, 1, 2), 0, 0, false},
		{"64-bit length past the section", append([]byte{0xff, 0xff, 0xff, 0xff}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), 0, 0, false},
		{"CIE pointer into itself", func() []byte {
			fde := fdeAfter(len(good), 4, 0x5000, 0x100, nil) // points at its own length field: an FDE
			return append(append([]byte{}, good...), fde...)
		}(), 1, 0, false},
		{"CIE pointer before the section", func() []byte {
			fde := fdeAfter(len(good), 0x7fffffff, 0x5000, 0x100, nil)
			return append(append([]byte{}, good...), fde...)
		}(), 1, 0, false},
		{"restore_state without remember", withFDE(good, []byte{0x41, 0x0b}), 1, 0, false},
		{"remember_state nested too deep", withFDE(good, []byte(strings.Repeat("\x0a", 100))), 1, 0, false},
		{"unknown CFA op", withFDE(good, []byte{0x41, 0x3f}), 1, 0, false},
		{"truncated operand", withFDE(good, []byte{0x41, 0x0c, 7}), 1, 0, false},
		{"set_loc backwards", withFDE(good, []byte{0x41, 0x01, 0, 0, 0, 0}), 1, 0, false},
		{"huge advance", withFDE(good, []byte{0x04, 0xff, 0xff, 0xff, 0xff, 0x0e, 16}), 0, 0, true},
		{"expression longer than the FDE", withFDE(good, []byte{0x0f, 0x7f, 0x77}), 1, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := buildFrom(tc.data, true)
			if err != nil {
				t.Fatal(err)
			}
			s := tab.Stats()
			if s.BadFDEs != tc.badFDEs || s.BadCIEs != tc.badCIEs {
				t.Errorf("bad FDEs %d, bad CIEs %d, want %d, %d (err %v)", s.BadFDEs, s.BadCIEs, tc.badFDEs, tc.badCIEs, s.Err)
			}
			if tc.badFDEs+tc.badCIEs > 0 && s.Err == nil {
				t.Errorf("no error recorded")
			}
			_, _, ok := tab.lookup(0x5000)
			if ok != tc.rows {
				t.Errorf("rule at 0x5000 found %v, want %v", ok, tc.rows)
			}
		})
	}
}

// TestStops checks the reasons an unwind stops, on a small table: CFA =
// rsp+8, ra at CFA-8 for [0x5000, 0x5100), nothing covering 0x6000.
func TestStops(t *testing.T) {
	good := hostileCIE("zR", []byte{0x1b})
	fde := fdeAfter(len(good), uint32(len(good)+4), 0x5000, 0x100, nil)
	tab, err := buildFrom(append(append([]byte{}, good...), fde...), true)
	if err != nil || tab.Rows() == 0 {
		t.Fatalf("table: %v, %d rows", err, tab.Rows())
	}
	const sp = 0x7fff0000
	// A stack of return addresses, each into 0x5000+: every frame is 8 bytes.
	stackOf := func(ras ...uint64) []byte {
		var b []byte
		for _, ra := range ras {
			b = binary.LittleEndian.AppendUint64(b, ra)
		}
		return b
	}
	many := make([]uint64, 2000)
	for i := range many {
		many[i] = 0x5010
	}
	cases := []struct {
		name   string
		stack  []byte
		frames int
		stop   Stop
		rip    uint64 // 0x5000 when 0
		rbp    uint64
	}{
		// 0x6000 has no FDE: the frame-pointer step takes over (rbp at
		// sp+16: saved rbp 0, return address 0x5010), then CFI again.
		{"no FDE: frame pointers", stackOf(0, 0, 0, 0x5010, 0), 2, StopComplete, 0x6000, sp + 16},
		{"zero return address ends the stack", stackOf(0x5010, 0x5020, 0), 3, StopComplete, 0, 0},
		{"window ends", stackOf(0x5010, 0x5020), 3, StopWindow, 0, 0},
		{"no CFI for the pc", stackOf(0x6000), 2, StopNoCFI, 0, 0},
		{"no object", stackOf(1 << 40), 2, StopNoObject, 0, 0},
		{"1500 frames deep, limit 1024", stackOf(many...), 1024, StopDepth, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := New(Options{MaxFrames: 1024})
			u.cache.get("fuzz", func() *Table { return tab })
			regs := Regs{RegRSP: sp, RegRIP: 0x5000, RegRBP: tc.rbp}
			if tc.rip != 0 {
				regs[RegRIP] = tc.rip
			}
			pcs, stop := u.Unwind(nil, fuzzProcess{}, &regs, tc.stack)
			if len(pcs) != tc.frames || stop != tc.stop {
				t.Errorf("got %d frames, %v; want %d, %v", len(pcs), stop, tc.frames, tc.stop)
			}
		})
	}
}
