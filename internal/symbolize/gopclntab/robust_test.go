package gopclntab

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

// Tests of the .gopclntab decoder's fallbacks and of its robustness to
// corrupt tables; gopclntab_inline_test.go compares it with DWARF.

// TestGoInlineModuledata checks the runtime.text and go:func.* that the
// moduledata scan finds against the symbol table (go tool nm's view),
// for a normal and a PIE build.
func TestGoInlineModuledata(t *testing.T) {
	for _, flags := range [][]string{nil, {"-buildmode=pie"}} {
		raw := symtest.GoinlineBinary(t, flags...)
		f, lr, err := elfio.OpenELF(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		gt := &Table{File: f, Reader: lr}
		g := NewInlineLines(f, lr, gt)
		if g == nil {
			t.Fatalf("%v: no decoder", flags)
		}
		syms, err := f.Symbols()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]uint64{}
		for _, s := range syms {
			want[s.Name] = s.Value
		}
		pcln := f.Section(".gopclntab")
		gofunc, ok := gofuncInPcln(gt.raw(), g)
		if !ok {
			t.Skip("skipping: go:func.* lies outside .gopclntab with this toolchain")
		}
		if got := pcln.Addr + uint64(gofunc); got != want["go:func.*"] || g.text != want["runtime.text"] {
			t.Errorf("%v: text %#x, go:func.* %#x; symbols say %#x, %#x", flags, g.text, got, want["runtime.text"], want["go:func.*"])
		}
	}
}

// TestGoInlineCorrupt checks that truncated and corrupted tables give
// nil or some lines at every pc, never a panic (linesAt, without the
// recover of lines) and never a hang.
func TestGoInlineCorrupt(t *testing.T) {
	raw, g, gt, gofuncOff := goinlineDecoder(t)
	pcln := gt.raw()
	var pcs []uint64
	for _, name := range []string{"main.work", "main.main", "runtime.main"} {
		if pc, ok := symtest.GoFuncEntry(t, raw, name); ok {
			pcs = append(pcs, pc, pc+5, pc+20)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		data := bytes.Clone(pcln[:rng.IntN(len(pcln))])
		if rng.IntN(2) == 0 {
			data = bytes.Clone(pcln)
			for range 1 + rng.IntN(64) {
				data[rng.IntN(len(data))] = byte(rng.Uint32())
			}
		}
		c := parsePclnHeader(binary.LittleEndian, data)
		if c == nil {
			continue
		}
		c.text, c.gofunc = g.text, data[min(len(data), gofuncOff):]
		for _, pc := range pcs {
			c.linesAt(pc)
		}
	}
	if g := parsePclnHeader(binary.LittleEndian, pcln[:100]); g != nil {
		t.Error("parsePclnHeader accepted a table truncated to 100 bytes")
	}
}

// goinlineDecoder builds testdata/goinline.go and returns the binary,
// its .gopclntab decoder, its Table and the offset of go:func.* in its
// .gopclntab. It fails t when the decoder cannot be made, and skips it
// when go:func.* lies outside .gopclntab (other toolchains).
func goinlineDecoder(t testing.TB) (raw []byte, g *InlineLines, gt *Table, gofuncOff int) {
	t.Helper()
	raw = symtest.GoinlineBinary(t)
	f, lr, err := elfio.OpenELF(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	gt = &Table{File: f, Reader: lr}
	if g = NewInlineLines(f, lr, gt); g == nil {
		t.Fatal("no .gopclntab decoder for testdata/goinline.go")
	}
	gofuncOff, ok := gofuncInPcln(gt.raw(), g)
	if !ok {
		t.Skip("skipping: go:func.* lies outside .gopclntab with this toolchain")
	}
	return raw, g, gt, gofuncOff
}

// gofuncInPcln returns the offset of g's go:func.* in pcln, its
// .gopclntab; false when go:func.* lies in another section (the Go 1.26
// linker puts it in .gopclntab).
func gofuncInPcln(pcln []byte, g *InlineLines) (int, bool) {
	off := len(pcln) - len(g.gofunc)
	return off, off >= 0 && bytes.Equal(pcln[off:], g.gofunc)
}

// FuzzGoInline decodes .gopclntab images of testdata/goinline.go (built
// at test time) with a patch written into one of the parts a lookup of
// pc reads (region: the header, the function table, the _func, its pcln,
// pcfile and inline index tables, its inline tree, the cutab), optionally
// truncated to cut bytes: linesAt must not panic (lines recovers, linesAt
// does not) or hang. Patches keep the inputs small: the go fuzzing engine
// does next to nothing with a whole table as input.
func FuzzGoInline(f *testing.F) {
	_, g, gt, gofuncOff := goinlineDecoder(f)
	seed := gt.raw()
	work := gt.Get().LookupFunc("main.work")
	if work == nil {
		f.Fatal("no main.work")
	}
	for pc := work.Entry; pc < work.End; pc += 9 {
		for region := range uint8(8) {
			f.Add(region, uint16(0), []byte{}, uint32(0), uint32(pc-g.text))
			f.Add(region, uint16(4), []byte{0xff, 0xff, 0xff, 0x7f}, uint32(0), uint32(pc-g.text))
		}
	}
	f.Fuzz(func(t *testing.T, region uint8, off uint16, patch []byte, cut, pcOff uint32) {
		pc := g.text + uint64(pcOff)
		base, ok := g.fuzzRegion(region, pc, gofuncOff)
		if !ok {
			return
		}
		data := bytes.Clone(seed)
		if at := base + int(off); at < len(data) {
			copy(data[at:], patch)
		}
		if cut != 0 {
			data = data[:int(cut)%len(data)]
		}
		c := parsePclnHeader(binary.LittleEndian, data)
		if c == nil {
			return
		}
		c.text, c.gofunc = g.text, data[min(len(data), gofuncOff):]
		for _, d := range []uint64{0, 1, 17} {
			if ls := c.linesAt(pc + d); len(ls) > maxInlineDepth+1 {
				t.Errorf("%d frames, over the cap", len(ls))
			}
		}
	})
}

// fuzzRegion returns the offset in .gopclntab of the part region (see
// FuzzGoInline) of the lookup of pc in the unpatched table g, whose
// go:func.* starts at gofuncOff; false when pc is in no function.
func (g *InlineLines) fuzzRegion(region uint8, pc uint64, gofuncOff int) (int, bool) {
	fn, ok := g.funcAt(pc)
	if !ok {
		return 0, false
	}
	pclnOff := int(g.pclnOff)
	i := sort.Search(g.nfunc, func(k int) bool { return g.order.Uint32(g.pclntable[8*k:]) > uint32(fn.entry-g.text) }) - 1
	funcOff := int(g.order.Uint32(g.pclntable[8*i+4:]))
	pctab := pclnOff - len(g.pctab)
	switch region % 8 {
	case 0:
		return 0, true
	case 1:
		return pclnOff + 8*i, true
	case 2:
		return pclnOff + funcOff, true
	case 3:
		return pctab + int(g.order.Uint32(fn.b[funcPcln:])), true
	case 4:
		return pctab + int(g.order.Uint32(fn.b[funcPcfile:])), true
	case 5:
		if g.order.Uint32(fn.b[funcNpcdata:]) <= pcdataInlTreeIndex {
			return 0, true
		}
		return pctab + int(g.order.Uint32(fn.b[funcSize+4*pcdataInlTreeIndex:])), true
	case 6:
		if tree := g.funcdata(fn, funcdataInlTree); tree != nil {
			return gofuncOff + len(g.gofunc) - len(tree), true
		}
		return gofuncOff, true
	default:
		return pclnOff - len(g.pctab) - len(g.filetab) - len(g.cutab), true
	}
}
