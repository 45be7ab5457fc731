package dwarfline

import (
	"bytes"
	"debug/elf"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

// FuzzDWARFReader feeds the reader's entry points (unit headers,
// abbreviation tables, the DIE walk, range lists, line programs and name
// resolution) with damaged sections: they must neither panic nor hang.
// The seeds are the DWARF 5 sections of testdata/fuzz/tiny.elf, and in
// testdata/fuzz/FuzzDWARFReader those of tiny.c built with -gdwarf-4.
func FuzzDWARFReader(f *testing.F) {
	d := dwarfSeed(f)
	f.Add(d["info"], d["abbrev"], d["line"], d["str"], d["line_str"], d["rnglists"], d["ranges"], d["addr"], d["str_offsets"], d["aranges"], false)
	f.Fuzz(func(t *testing.T, info, abbrev, line, str, lineStr, rnglists, ranges, addr, strOffsets, aranges []byte, big bool) {
		dd := newDWARFData(map[string][]byte{
			"info": info, "abbrev": abbrev, "line": line, "str": str, "line_str": lineStr,
			"rnglists": rnglists, "ranges": ranges, "addr": addr, "str_offsets": strOffsets, "aranges": aranges,
		}, big)
		if dd == nil {
			return
		}
		x := NewTable(dd)
		x.mu.Lock()
		x.indexed = true
		x.buildIndex()
		x.mu.Unlock()
		for _, r := range x.ranges {
			for _, l := range x.Lines(r.lo) {
				if l.Line < 0 {
					t.Errorf("negative line %+v", l)
				}
			}
		}
		loader := newUnitLoader(dd)
		for _, cu := range x.units {
			cu.once.Do(func() { loader.loadUnit(cu) })
			if cu.u != nil { // the functions' inlined calls, read late
				x.mu.Lock()
				x.expandAll(cu)
				x.mu.Unlock()
			}
			for i := range cu.tree.nodes {
				loader.nameAt(cu.tree.nodes[i].die, maxOriginHops)
			}
		}
	})
}

// TestDWARFReaderSeeds checks that the seed ELF's DWARF gives lines
// through the fuzz target's entry points.
func TestDWARFReaderSeeds(t *testing.T) {
	ef, err := elf.NewFile(bytes.NewReader(symtest.MustRead(t, "../testdata/fuzz/tiny.elf")))
	if err != nil {
		t.Fatal(err)
	}
	d := Load(ef, elfio.NewReaderAt(bytes.NewReader(symtest.MustRead(t, "../testdata/fuzz/tiny.elf")), 1<<30), nil)
	if d == nil || len(d.units) == 0 {
		t.Fatal("no DWARF units in tiny.elf")
	}
	x := NewTable(d)
	found := false
	for _, s := range mustSymbols(t, ef) {
		if len(x.Lines(s.Value)) > 0 {
			found = true
		}
	}
	if !found {
		t.Error("no symbol of tiny.elf has lines")
	}
}
