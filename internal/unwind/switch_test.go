package unwind

import (
	"debug/elf"
	"encoding/binary"
	"slices"
	"testing"
)

// TestUnwindSwitch walks a window of two stacks as the sampler copies
// one for a Go function that called the vDSO on the g0 stack
// (attach.FlagStackSwitch): a frameless leaf (CFA = rsp+8, like the
// vDSO's clock read) on the first stack returns into a function whose
// frame is found from rbp (CFA = rbp+16, as time.now's past its
// prologue), on the second stack, below the first in memory; one more
// frame-pointer frame there ends with a return address of 0.
func TestUnwindSwitch(t *testing.T) {
	cie := hostileCIE("zR", []byte{0x1b})
	leaf := fdeAfter(len(cie), uint32(len(cie)+4), 0x5000, 0x100, nil)
	fpInsns := []byte{0x0c, 6, 16, 0x86, 2} // def_cfa rbp+16; rbp at CFA-16
	fp := fdeAfter(len(cie)+len(leaf), uint32(len(cie)+len(leaf)+4), 0x7000, 0x100, fpInsns)
	tab, err := buildFrom(slices.Concat(cie, leaf, fp), true)
	if err != nil || tab.Rows() == 0 {
		t.Fatalf("table: %v, %d rows", err, tab.Rows())
	}
	const sp, gsp = 0x7fff0000, 0x10000 // the first stack and the second, lower
	le := binary.LittleEndian
	first := le.AppendUint64(nil, 0x7010) // the leaf's return address
	second := make([]byte, 0x40)
	le.PutUint64(second[0x10:], gsp+0x30) // saved rbp
	le.PutUint64(second[0x18:], 0x7020)   // return address
	le.PutUint64(second[0x30:], 0)        // saved rbp
	le.PutUint64(second[0x38:], 0)        // return address: the end
	window := slices.Concat(first, second)
	regs := Regs{RegRSP: sp, RegRIP: 0x5000, RegRBP: gsp + 0x10}
	want := []uint64{0x5000, 0x7010, 0x7020}

	u := New(Options{MaxFrames: 64})
	u.cache.get("fuzz", func() *Table { return tab })
	pcs, stop, top := u.UnwindSwitch(nil, fuzzProcess{}, &regs, window, StackSwitch{Off: len(first), SP: gsp})
	if !slices.Equal(pcs, want) || stop != StopComplete || top != 0 { // ended by a return address of 0: no top
		t.Errorf("switched: %#x, %v, top %#x; want %#x, complete, 0", pcs, stop, top, want)
	}
	// As one stack, the rbp frame reads below the window.
	pcs, stop, _ = u.UnwindExtent(nil, fuzzProcess{}, &regs, window)
	if len(pcs) != 2 || stop != StopReadOutside {
		t.Errorf("one stack: %#x, %v; want 2 frames, read-outside", pcs, stop)
	}
	// A switch past the window's end is no switch.
	pcs, stop, _ = u.UnwindSwitch(nil, fuzzProcess{}, &regs, window, StackSwitch{Off: len(window) + 1, SP: gsp})
	if len(pcs) != 2 || stop != StopReadOutside {
		t.Errorf("switch past the end: %#x, %v; want 2 frames, read-outside", pcs, stop)
	}
	// After the move the walk goes on up the second stack: a saved rbp
	// below the first stack's sp reads outside both, and cuts the stack.
	le.PutUint64(window[len(first)+0x10:], sp-0x100) // saved rbp on the first stack, below sp
	pcs, stop, _ = u.UnwindSwitch(nil, fuzzProcess{}, &regs, window, StackSwitch{Off: len(first), SP: gsp})
	if len(pcs) != 3 || stop == StopComplete {
		t.Errorf("second move: %#x, %v; want 3 frames, cut", pcs, stop)
	}
}

// TestGoAsmcgocallRule: runtime.asmcgocall (goFPNames) gets the
// frame-pointer rule (CFA = rbp+16, rbp at CFA-16) at every pc, in the
// lazy table of a Go binary, where its SP deltas would read the g0 stack
// past its switch.
func TestGoAsmcgocallRule(t *testing.T) {
	bin := buildGoChain(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := NewTable(f)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range syms {
		if s.Name != "runtime.asmcgocall.abi0" && s.Name != "runtime.asmcgocall" || s.Size == 0 {
			continue
		}
		found = true
		for _, pc := range []uint64{s.Value, s.Value + s.Size/2, s.Value + s.Size - 1} {
			r, _, ok := tab.lookup(pc)
			if !ok || r.cfaKind != cfaRBP || r.cfaOff != 16 || r.rbpKind != rbpOffset || r.rbpOff != -16 || r.raOff != -8 {
				t.Errorf("%s at %#x: rule %+v (%v), want CFA = rbp+16, rbp at CFA-16, ra at CFA-8", s.Name, pc, r, ok)
			}
		}
	}
	if !found {
		t.Fatal("no runtime.asmcgocall in the Go binary's .symtab")
	}
}
