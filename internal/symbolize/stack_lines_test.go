package symbolize

import (
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
)

func TestStackInlined(t *testing.T) {
	bin := symtest.BuildInline(t)
	const pid, base = 5, 0x555555554000
	fp := newFakeProc(t)
	fp.setMaps(pid, textMapping(t, bin, base))
	s := fp.symbolizer("testdata/kallsyms.txt")
	b, err := objfile.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	work := symtest.ElfSymbol(t, bin, "work")
	var addr uint64
	for _, a := range symtest.SymbolRange(t, bin, "work") {
		if len(b.Lines(a)) == 3 {
			addr = a
			break
		}
	}
	if addr == 0 {
		t.Fatal("no address of work has two inlined frames")
	}
	// As the leaf, and as a return address (looked up at address-1).
	st := s.Stack(pid, nil, []uint64{base + addr, base + addr + 1})
	checkFrames(t, st.Frames, []wantFrame{
		{"square_plus", ReasonNone, bin}, {"sum_squares", ReasonNone, bin}, {"work", ReasonNone, bin},
		{"square_plus", ReasonNone, bin}, {"sum_squares", ReasonNone, bin}, {"work", ReasonNone, bin},
	})
	want := b.Lines(addr)
	for i, f := range st.Frames[:3] {
		if f.Address != base+addr || f.Mapping != st.Frames[0].Mapping || f.Inlined != (i < 2) ||
			f.File != want[i].File || f.Line != want[i].Line {
			t.Errorf("frame %d = %+v; want address %#x, inlined %v, %s:%d", i, f, base+addr, i < 2, want[i].File, want[i].Line)
		}
	}
	if f := st.Frames[2]; f.SymbolStart != base+work.Value || st.Frames[0].SymbolStart != 0 {
		t.Errorf("SymbolStart = %#x (physical), %#x (inlined); want %#x, 0", f.SymbolStart, st.Frames[0].SymbolStart, base+work.Value)
	}
	if st.Frames[5].Address != base+addr+1 || st.Frames[5].Line != want[2].Line {
		t.Errorf("return-address frame = %+v", st.Frames[5])
	}
	if n := s.Stats().Named(); n != 6 {
		t.Errorf("Stats().Named() = %d, want 6", n)
	}
}
