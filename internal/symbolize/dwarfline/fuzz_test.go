package dwarfline

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"hash/adler32"
	"maps"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"

	"github.com/klauspost/compress/flate"
)

// dwarfSeed returns the DWARF sections of the seed ELF.
func dwarfSeed(f *testing.F) map[string][]byte {
	ef, err := elf.NewFile(bytes.NewReader(symtest.TinyELF(f)))
	if err != nil {
		f.Fatal(err)
	}
	out := map[string][]byte{}
	for _, name := range dwarfSections {
		if s := ef.Section(".debug_" + name); s != nil {
			if out[name], err = s.Data(); err != nil {
				f.Fatal(err)
			}
		}
	}
	return out
}

func FuzzDWARFLines(f *testing.F) {
	d := dwarfSeed(f)
	f.Add(d["abbrev"], d["info"], d["line"], d["str"], d["line_str"], d["rnglists"], uint64(0x401000))
	f.Fuzz(func(t *testing.T, abbrev, info, line, str, lineStr, rnglists []byte, pc uint64) {
		data := map[string][]byte{"abbrev": abbrev, "info": info, "line": line, "str": str, "line_str": lineStr, "rnglists": rnglists}
		dd := dwarfFromSections(data)
		if dd == nil {
			return
		}
		x := NewTable(dd)
		for _, a := range []uint64{pc, pc + 1, pc &^ 0xfff, 0x401000, 0x401010} {
			for _, l := range x.Lines(a) {
				if l.Line < 0 {
					t.Errorf("negative line %+v", l)
				}
			}
		}
	})
}

// lazyFrom returns plain as a section inflated on demand from a zlib
// stream of stored (uncompressed) blocks, in steps of step bytes. The
// stream is written by hand, not by compress/zlib, whose writer costs
// more per call than the lookups under test; the reader's own logic is
// what is fuzzed, not the inflater.
func lazyFrom(t *testing.T, plain []byte, step int) *lazySection {
	z := []byte{0x78, 0x01}
	rest := plain
	for {
		n := min(len(rest), 0xffff)
		final := byte(0)
		if n == len(rest) {
			final = 1
		}
		z = append(z, final, byte(n), byte(n>>8), ^byte(n), ^byte(n>>8))
		z = append(z, rest[:n]...)
		rest = rest[n:]
		if final == 1 {
			break
		}
	}
	z = binary.BigEndian.AppendUint32(z, adler32.Checksum(plain))
	return &lazySection{buf: make([]byte, len(plain)), zr: flate.NewReader(bytes.NewReader(z[2:])), step: step}
}

// pagedFrom returns plain as a section read on demand from memory, a
// sectionPage at a time (the caller sets sectionPage).
func pagedFrom(t *testing.T, plain []byte, _ int) *lazySection {
	return &lazySection{buf: make([]byte, len(plain)), src: bytes.NewReader(plain), paged: len(plain), avail: len(plain)}
}

// FuzzLazyDWARFLines runs the line reader over sections whose
// .debug_info, .debug_abbrev, .debug_line and .debug_str are inflated on demand (in
// steps of 1-64 bytes, so that every read ends near a step), or, when
// step's high bit is set, read on demand in pages of 1-64 bytes, with
// and without .debug_aranges. Without it, the answers must equal those
// of the reader given whole sections.
func FuzzLazyDWARFLines(f *testing.F) {
	d := dwarfSeed(f)
	f.Add(d["abbrev"], d["info"], d["line"], d["str"], d["aranges"], uint64(0x401000), uint8(7))
	f.Add(d["abbrev"], d["info"], d["line"], d["str"], []byte(nil), uint64(0x401010), uint8(1))
	f.Add(d["abbrev"], d["info"], d["line"], d["str"], d["aranges"], uint64(0x401000), uint8(0x80|5))
	f.Add(d["abbrev"], d["info"], d["line"], d["str"], []byte(nil), uint64(0x401010), uint8(0x80|16))
	f.Fuzz(func(t *testing.T, abbrev, info, line, str, aranges []byte, pc uint64, step uint8) {
		data := map[string][]byte{"abbrev": abbrev, "info": info, "line": line, "str": str, "aranges": aranges}
		n := int(step%64) + 1
		from := lazyFrom
		if step&0x80 != 0 {
			old := sectionPage
			sectionPage = n
			defer func() { sectionPage = old }()
			from = pagedFrom
		}
		lazy := &Data{InfoZ: from(t, info, n), AbbrevZ: from(t, abbrev, n), LineZ: from(t, line, n), strZ: from(t, str, n)}
		lazyData := maps.Clone(data)
		lazyData["info"], lazyData["abbrev"], lazyData["line"] = lazy.InfoZ.buf, lazy.AbbrevZ.buf, lazy.LineZ.buf
		lazyData["str"] = lazy.strZ.buf
		ld, wd := lazy.init(lazyData), dwarfFromSections(data)
		if (ld == nil) != (wd == nil) {
			t.Fatalf("lazy reader found units: %v, whole reader: %v", ld != nil, wd != nil)
		}
		if ld == nil {
			return
		}
		lx, wx := NewTable(ld), NewTable(wd)
		for _, a := range []uint64{pc, pc + 1, pc &^ 0xfff, 0x401000, 0x401010} {
			got, want := lx.Lines(a), wx.Lines(a)
			for _, l := range got {
				if l.Line < 0 {
					t.Errorf("negative line %+v", l)
				}
			}
			if len(aranges) == 0 && fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("lines(%#x): lazy %v, whole %v", a, got, want)
			}
		}
	})
}
