package dwarfline

import (
	"debug/elf"
	"fmt"
	"testing"
)

// mustSymbols returns the .symtab symbols of f.
func mustSymbols(t *testing.T, f *elf.File) []elf.Symbol {
	t.Helper()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	return syms
}

// TestForms checks that every form is skipped by its size and read as
// its value.
func TestForms(t *testing.T) {
	u32 := &unit{version: 5, addrSize: 8}
	u64 := &unit{version: 5, addrSize: 4, dwarf64: true}
	u2 := &unit{version: 2, addrSize: 4}
	for _, tt := range []struct {
		u    *unit
		form uint16
		data []byte
		want uint64
	}{
		{u32, formAddr, []byte{1, 2, 3, 4, 5, 6, 7, 8}, 0x0807060504030201},
		{u64, formAddr, []byte{1, 2, 3, 4}, 0x04030201},
		{u32, formData1, []byte{0xff}, 0xff},
		{u32, formData2, []byte{1, 2}, 0x201},
		{u32, formData4, []byte{1, 2, 3, 4}, 0x4030201},
		{u32, formData8, []byte{1, 0, 0, 0, 0, 0, 0, 2}, 0x0200000000000001},
		{u32, formData16, make([]byte, 16), 0},
		{u32, formSdata, []byte{0x7f}, ^uint64(0)},
		{u32, formUdata, []byte{0xe5, 0x8e, 0x26}, 624485},
		{u32, formString, []byte("abc\x00"), 0},
		{u32, formStrp, []byte{1, 0, 0, 0}, 1},
		{u64, formStrp, []byte{1, 0, 0, 0, 0, 0, 0, 0}, 1},
		{u64, formLineStrp, []byte{2, 0, 0, 0, 0, 0, 0, 0}, 2},
		{u32, formSecOffset, []byte{3, 0, 0, 0}, 3},
		{u2, formRefAddr, []byte{4, 0, 0, 0}, 4},
		{u64, formRefAddr, []byte{4, 0, 0, 0, 0, 0, 0, 0}, 4},
		{u32, formRef1, []byte{5}, 5},
		{u32, formRef2, []byte{5, 0}, 5},
		{u32, formRef4, []byte{5, 0, 0, 0}, 5},
		{u32, formRef8, []byte{5, 0, 0, 0, 0, 0, 0, 0}, 5},
		{u32, formRefUdata, []byte{0x85, 0x01}, 133},
		{u32, formRefSig8, []byte{1, 2, 3, 4, 5, 6, 7, 8}, 0x0807060504030201},
		{u32, formExprloc, []byte{2, 0x91, 0x7f}, 0},
		{u32, formBlock1, []byte{2, 0, 0}, 0},
		{u32, formBlock2, []byte{1, 0, 9}, 0},
		{u32, formBlock4, []byte{1, 0, 0, 0, 9}, 0},
		{u32, formBlock, []byte{1, 9}, 0},
		{u32, formFlag, []byte{1}, 1},
		{u32, formFlagPresent, nil, 1},
		{u32, formStrx, []byte{0x81, 0x01}, 129},
		{u32, formStrx1, []byte{7}, 7},
		{u32, formStrx2, []byte{7, 1}, 0x107},
		{u32, formStrx3, []byte{7, 1, 2}, 0x20107},
		{u32, formStrx4, []byte{7, 0, 0, 1}, 0x1000007},
		{u32, formAddrx, []byte{3}, 3},
		{u32, formAddrx1, []byte{3}, 3},
		{u32, formAddrx2, []byte{3, 0}, 3},
		{u32, formAddrx3, []byte{3, 0, 0}, 3},
		{u32, formAddrx4, []byte{3, 0, 0, 0}, 3},
		{u32, formLoclistx, []byte{4}, 4},
		{u32, formRnglistx, []byte{4}, 4},
		{u32, formGNURefAlt, []byte{4, 0, 0, 0}, 4},
		{u32, formGNUStrpAlt, []byte{4, 0, 0, 0}, 4},
		{u32, formIndirect, []byte{formData2, 1, 2}, 0x201},
	} {
		t.Run(fmt.Sprintf("%#x/v%d", tt.form, tt.u.version), func(t *testing.T) {
			data := append(append([]byte{}, tt.data...), 0xaa) // a byte past the value
			b := dbuf{data: data}
			if !skipForm(&b, tt.form, tt.u) || b.off != len(tt.data) {
				t.Errorf("skipForm moved %d bytes (bad %v), want %d", b.off, b.bad, len(tt.data))
			}
			r := dieReader{u: tt.u, b: dbuf{data: data}}
			v := r.value(&attrSpec{form: tt.form})
			if r.b.off != len(tt.data) || r.b.bad {
				t.Errorf("value moved %d bytes (bad %v), want %d", r.b.off, r.b.bad, len(tt.data))
			}
			if v.s == nil && v.u != tt.want {
				t.Errorf("value = %#x, want %#x", v.u, tt.want)
			}
			b = dbuf{data: tt.data[:len(tt.data)/2]} // truncated: bad, never a panic
			skipForm(&b, tt.form, tt.u)
		})
	}
}

// TestImplicitConst checks DW_FORM_implicit_const in an abbreviation.
func TestImplicitConst(t *testing.T) {
	// code 1, DW_TAG_subprogram, no children, DW_AT_call_line implicit -3.
	abbrev := []byte{1, tagSubprogram, 0, attrCallLine, formImplicitConst, 0x7d, 0, 0, 0}
	u := &unit{version: 5, addrSize: 8}
	tab := parseAbbrevs(abbrev, u, false)
	if tab == nil {
		t.Fatal("parseAbbrevs failed")
	}
	ab := tab.lookup(1)
	r := dieReader{u: u, abbrevs: tab}
	specs := r.specs(ab)
	if ab.fixed != 0 || len(specs) != 1 || int64(r.value(&specs[0]).u) != -3 {
		t.Errorf("abbrev = %+v, specs %+v", ab, specs)
	}
}

// TestRanges checks .debug_ranges (base address selection) and every
// DW_RLE_* kind of .debug_rnglists, with DW_FORM_rnglistx and .debug_addr.
func TestRanges(t *testing.T) {
	le := func(vs ...uint64) []byte {
		var out []byte
		for _, v := range vs {
			for i := 0; i < 8; i++ {
				out = append(out, byte(v>>(8*i)))
			}
		}
		return out
	}
	d := &Data{
		ranges: le(0x10, 0x20, ^uint64(0), 0x1000, 0x1, 0x2, 0, 0),
		addr:   append(make([]byte, 8), le(0x5000, 0x5100, 0x6000)...), // addr_base 8
	}
	u := &unit{version: 4, addrSize: 8}
	u.once.Do(func() {})
	u.root = unitRoot{base: 0x400, addrBase: 8}
	a := pcAttrs{ranges: attrVal{form: formSecOffset}, hasRanges: true}
	if got := fmt.Sprintf("%#x", d.rangesOf(u, &a, nil)); got != "[[0x410 0x420] [0x1001 0x1002]]" {
		t.Errorf("debug_ranges = %s", got)
	}
	// .debug_rnglists: 4 padding bytes, an offset table of one entry at
	// rnglists_base 4, then the list.
	list := []byte{
		rleBaseAddressx, 0, // base 0x5000
		rleOffsetPair, 0x10, 0x20, // [0x5010, 0x5020)
		rleStartxEndx, 1, 2, // [0x5100, 0x6000)
		rleStartxLength, 0, 0x08, // [0x5000, 0x5008)
		rleBaseAddress}
	list = append(list, le(0x7000)...)
	list = append(list, rleOffsetPair, 1, 2, rleStartEnd)
	list = append(list, le(0x8000, 0x8010)...)
	list = append(list, rleStartLength)
	list = append(list, le(0x9000)...)
	list = append(list, 0x04, rleEndOfList)
	d.rnglists = append([]byte{0, 0, 0, 0, 4, 0, 0, 0}, list...)
	u = &unit{version: 5, addrSize: 8}
	u.once.Do(func() {})
	u.root = unitRoot{addrBase: 8, rnglistsBase: 4}
	a = pcAttrs{low: attrVal{form: formAddr, u: 0x100}, high: attrVal{form: formData1, u: 0x10},
		ranges: attrVal{form: formRnglistx, u: 0}, hasLow: true, hasHigh: true, hasRanges: true}
	want := "[[0x100 0x110] [0x5010 0x5020] [0x5100 0x6000] [0x5000 0x5008] [0x7001 0x7002] [0x8000 0x8010] [0x9000 0x9004]]"
	if got := fmt.Sprintf("%#x", d.rangesOf(u, &a, nil)); got != want {
		t.Errorf("rnglists = %s, want %s", got, want)
	}
}

// TestLEB128 checks LEB128 decoding, including overlong and truncated
// encodings.
func TestLEB128(t *testing.T) {
	b := dbuf{data: []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x9b, 0xf1, 0x59}}
	if v := b.uleb(); v != 0 || b.bad {
		t.Errorf("overlong uleb = %#x, bad %v", v, b.bad)
	}
	if v := b.sleb(); v != -624485 || b.bad {
		t.Errorf("sleb = %d, bad %v", v, b.bad)
	}
	b = dbuf{data: []byte{0x80}}
	if b.uleb(); !b.bad || b.left() != 0 {
		t.Error("truncated uleb not bad")
	}
}
