package unwind

import (
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// TestEHFrameHdrRecovers breaks the length of a record in the middle of
// libc's .eh_frame: the walk stops there, and the FDEs after it are found
// through .eh_frame_hdr, with the same rules as in the intact table.
func TestEHFrameHdrRecovers(t *testing.T) {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		testutil.Skipf(t, "%v", err)
	}
	defer f.Close()
	eh, hdr := f.Section(".eh_frame"), f.Section(".eh_frame_hdr")
	if eh == nil || hdr == nil {
		t.Fatal("libc has no .eh_frame or .eh_frame_hdr")
	}
	data, _ := sectionData(eh)
	hb, _ := sectionData(hdr)
	offs := ehFrameHdrFDEs(hb, hdr.Addr, eh.Addr, uint64(len(data)))
	if len(offs) < 1000 {
		t.Fatalf(".eh_frame_hdr lists %d FDEs", len(offs))
	}
	build := func(d []byte, withHdr bool) *Table {
		b := newTableBuilder()
		var h func() []int
		if withHdr {
			h = func() []int { return offs }
		}
		b.addSection(&frameSection{data: d, eh: true, addr: eh.Addr}, 0, h)
		tab, err := b.finish()
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	whole := build(data, false)
	if whole.Stats().FDEs != len(offs) {
		t.Errorf("walk finds %d FDEs, .eh_frame_hdr lists %d", whole.Stats().FDEs, len(offs))
	}
	broken := append([]byte{}, data...)
	mid := offs[len(offs)/2]
	binary.LittleEndian.PutUint32(broken[mid:], 0x7ffffff0)
	cut, healed := build(broken, false), build(broken, true)
	if cut.Stats().Err == nil || cut.Rows() >= whole.Rows()*2/3 {
		t.Fatalf("broken walk: %d of %d rows, err %v", cut.Rows(), whole.Rows(), cut.Stats().Err)
	}
	after := 0
	for _, off := range offs {
		if off > mid {
			after++
		}
	}
	if healed.Stats().Recovered != after || after < 100 {
		t.Errorf("recovered %d FDEs, want the %d after the broken one", healed.Stats().Recovered, after)
	}
	// The broken FDE's range (its rows are lost).
	var lost *fde
	w, _ := (&frameSection{data: data, eh: true, addr: eh.Addr}).parseFrames(&frameStats{}, func(*fde) {})
	w.fn = func(f *fde) { lost = f }
	w.record(mid, true)
	if lost == nil {
		t.Fatal("no FDE at the broken offset")
	}
	// Every row of the intact table outside the broken FDE has the same rule.
	checked := 0
	for i, off := range whole.pcs {
		pc := whole.base + uint64(off)
		want, _, wok := whole.lookup(pc)
		got, _, gok := healed.lookup(pc)
		if pc >= lost.start && pc < lost.end {
			continue
		}
		if wok != gok || (wok && want.cfaKind != cfaComplex && want != got) {
			if checked < 10 {
				t.Errorf("row %d at %#x: healed %+v (%v), intact %+v (%v)", i, pc, got, gok, want, wok)
			}
			checked++
		}
	}
	if checked > 0 {
		t.Errorf("%d rows differ after healing", checked)
	}
}
