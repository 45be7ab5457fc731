package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"strings"
	"testing"
)

// TestGoPclntabMatchesDebugFrame builds a Go binary's table twice, from
// its .debug_frame (which the Go linker writes from the same SP deltas)
// and from its .gopclntab alone, and requires the same CFA and return
// address rule at every row of both.
func TestGoPclntabMatchesDebugFrame(t *testing.T) {
	bin := buildGoChain(t)
	fromDebug := sectionTable(t, bin, ".debug_frame")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g := readGoPclntab(t, f)
	b := newTableBuilder()
	b.addGoPclntab(g, 0)
	fromPcln, err := b.finish()
	if err != nil {
		t.Fatal(err)
	}
	if s := fromPcln.Stats(); s.FDEs < 1000 || s.BadFDEs > s.FDEs/100 {
		t.Fatalf(".gopclntab: %d functions, %d unreadable", s.FDEs, s.BadFDEs)
	}
	compared, diffs, padding, spWrite := 0, 0, 0, 0
	for _, tabs := range [][2]*Table{{fromDebug, fromPcln}, {fromPcln, fromDebug}} {
		for _, off := range tabs[0].pcs {
			pc := tabs[0].base + uint64(off)
			want, _, wok := tabs[0].lookup(pc)
			got, _, gok := tabs[1].lookup(pc)
			if !wok && !gok {
				continue
			}
			compared++
			dbg, pcl := wok, gok
			if tabs[0] == fromPcln {
				dbg, pcl = gok, wok
			}
			if pcl && !dbg {
				// Only .gopclntab covers the padding between functions
				// (a function runs up to the next one's entry there).
				padding++
				continue
			}
			if wok && gok && (want.raKind == raUndef) != (got.raKind == raUndef) {
				continue // Go's top functions: only the .gopclntab table marks them
			}
			if wok && gok && (want.cfaKind == cfaRBP) != (got.cfaKind == cfaRBP) {
				spWrite++ // Go's SP-writing functions: only .gopclntab's flag marks them
				continue
			}
			if wok != gok || want.cfaKind != got.cfaKind || want.cfaOff != got.cfaOff || want.raKind != got.raKind || want.raOff != got.raOff {
				diffs++
				if diffs <= 10 {
					t.Errorf("at %#x: %+v (%v) vs %+v (%v)", pc, want, wok, got, gok)
				}
			}
		}
	}
	if diffs > 0 || compared < 10000 {
		t.Errorf("%d of %d rows differ", diffs, compared)
	}
	if padding > compared/10 {
		t.Errorf("%d of %d rows only in .gopclntab: more than padding", padding, compared)
	}
	if spWrite == 0 || spWrite > compared/100 {
		t.Errorf("%d of %d rows differ by the SPWrite flag's rbp rule: want a few", spWrite, compared)
	}
	t.Logf("%d rows compared, %d in padding only .gopclntab covers, %d with the SPWrite rbp rule", compared, padding, spWrite)

	// NewTable's table reads each function as it is first looked up
	// (goFuncs): it must give the whole-table reader's rule at the first
	// and last byte of every row, and through a file as from memory.
	lazy, err := NewTable(f)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := loadTable(bin, "")
	if err != nil {
		t.Fatal(err)
	}
	if lazy.gofn == nil || fromFile.gofn == nil || lazy.Stats().GoFuncs != g.nfunc {
		t.Fatalf("NewTable read no .gopclntab lazily (%+v), want %d functions", lazy.Stats(), g.nfunc)
	}
	checked := 0
	for i, off := range fromPcln.pcs {
		pcs := []uint64{fromPcln.base + uint64(off)}
		if i+1 < len(fromPcln.pcs) {
			pcs = append(pcs, fromPcln.base+uint64(fromPcln.pcs[i+1])-1)
		}
		for _, pc := range pcs {
			want, _, wok := fromPcln.lookup(pc)
			for _, tab := range []*Table{lazy, fromFile} {
				got, _, gok := tab.lookup(pc)
				checked++
				if gok != wok || (wok && got != want) {
					t.Fatalf("at %#x: lazy %+v (%v), whole table %+v (%v)", pc, got, gok, want, wok)
				}
			}
		}
	}
	if checked < 20000 {
		t.Errorf("only %d lookups compared", checked)
	}
}

// TestGoWithoutDebugFrame: a Go binary linked with -w (no DWARF) gets its
// table from .gopclntab, and Go's top functions still end a walk.
func TestGoWithoutDebugFrame(t *testing.T) {
	bin := buildGoChain(t, "-ldflags=-w")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Section(".debug_frame") != nil {
		t.Fatal("-ldflags=-w left a .debug_frame")
	}
	tab, err := NewTable(f)
	if err != nil {
		t.Fatal(err)
	}
	if !tab.HasCFI() || tab.Stats().GoFuncs < 1000 {
		t.Fatalf("table from .gopclntab: CFI %v, %+v", tab.HasCFI(), tab.Stats())
	}
	checkGoTopFrames(t, bin)
}

// FuzzGoPclntab feeds arbitrary bytes to the .gopclntab reader.
func FuzzGoPclntab(f *testing.F) {
	hdr := make([]byte, 8+8*8+64)
	copy(hdr, []byte{0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8, 2})
	hdr[8+6*8] = 72 // pctab
	hdr[8+7*8] = 80 // functab
	f.Add(hdr)
	f.Fuzz(func(t *testing.T, data []byte) {
		lazy, lerr := newGoFuncs(bytes.NewReader(data), int64(len(data)), 0x401000)
		g, err := parseGoPclntab(data, 0x401000)
		if (err == nil) != (lerr == nil) {
			t.Fatalf("whole-table reader: %v; lazy reader: %v", err, lerr)
		}
		if err != nil {
			return
		}
		b := newTableBuilder()
		b.addGoPclntab(g, 0)
		tab, err := b.finish()
		if err != nil {
			return
		}
		// In a function table in address order, both readers give the
		// same rule at every row's first byte (out of order, the whole
		// table drops overlaps and the lazy reader finds what its binary
		// search finds: neither may crash or loop).
		sorted := true
		for i := 1; i < len(lazy.entries); i++ {
			sorted = sorted && lazy.entries[i-1] < lazy.entries[i]
		}
		for _, off := range tab.pcs {
			if !sorted {
				lazy.lookup(tab.base + uint64(off))
				continue
			}
			pc := tab.base + uint64(off)
			want, _, wok := tab.lookup(pc)
			got, gok := lazy.lookup(pc)
			if gok != wok || (wok && got != want) {
				t.Fatalf("at %#x: lazy %+v (%v), whole table %+v (%v)", pc, got, gok, want, wok)
			}
		}
	})
}

// TestGoStrippedTopFrames: in a stripped Go binary (-ldflags=-s: no
// .symtab, no DWARF) the .gopclntab names still mark runtime.goexit and
// mstart as the ends of a stack.
func TestGoStrippedTopFrames(t *testing.T) {
	bin := buildGoChain(t, "-ldflags=-s")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Symbols(); err == nil {
		t.Fatal("-ldflags=-s left a .symtab")
	}
	tab, err := NewTable(f)
	if err != nil {
		t.Fatal(err)
	}
	// Without .symtab the entry offsets count from .text: the same
	// address as runtime.text in the unstripped build of the same code.
	wf, err := elf.Open(buildGoChain(t, "-ldflags=-w"))
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	if got, want := goTextAddr(f, sectionData), goTextAddr(wf, sectionData); got != want {
		t.Errorf("text start %#x in the stripped binary, runtime.text %#x in the unstripped one", got, want)
	}
	g := readGoPclntab(t, f)
	found := 0
	for i := range g.nfunc {
		name := g.funcName(i)
		start, _, _, ok := g.funcSP(i)
		if !ok {
			continue
		}
		r, _, rok := tab.lookup(start)
		switch {
		case goTopNames[name]:
			found++
			if !rok || r.raKind != raUndef {
				t.Errorf("%s at %#x: rule %+v (found %v), want an undefined return address", name, start, r, rok)
			}
		case name == "main.middle":
			found++
			if !rok || r.raKind != raOffset {
				t.Errorf("main.middle: rule %+v (found %v)", r, rok)
			}
		}
	}
	if found < 3 {
		t.Errorf("found %d of goexit, mstart, main.middle", found)
	}
}

// TestGoSPWriteFramePointer: a Go function that writes SP (nanotime1
// switches to the g0 stack around its vDSO call, systemstack around its
// call) gets its CFA from rbp past its PUSHQ BP; MOVQ SP, BP prologue,
// where the SP deltas no longer hold, up to where its SP delta is 0
// again (after POPQ BP, at RET or a tail jump), and the SP-delta rule
// before and after; an ordinary function keeps the
// SP deltas throughout.
func TestGoSPWriteFramePointer(t *testing.T) {
	bin := buildGoChain(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := loadTable(bin, "")
	if err != nil {
		t.Fatal(err)
	}
	if tab.gofn == nil || tab.gofn.mapped == nil {
		t.Fatalf("loadTable did not map .gopclntab (goFuncs %v)", tab.gofn != nil)
	}
	g := readGoPclntab(t, f)
	checked := map[string]bool{}
	for i := range g.nfunc {
		name := strings.TrimSuffix(g.funcName(i), ".abi0")
		if name != "runtime.nanotime1" && name != "runtime.systemstack" && name != "main.middle" {
			continue
		}
		start, end, pcsp, ok := g.funcSP(i)
		if !ok || end-start < 16 {
			t.Fatalf("%s: no pcsp table", name)
		}
		checked[name] = true
		if g.funcFlag(i)&goFlagSPWrite != 0 != (name != "main.middle") {
			t.Errorf("%s: flag %#x", name, g.funcFlag(i))
		}
		at := func(pc uint64) rule {
			r, ok := tab.gofn.lookup(pc)
			if !ok {
				t.Fatalf("%s+%d: no rule", name, pc-start)
			}
			return r
		}
		if r := at(start); r.cfaKind != cfaRSP || r.cfaOff != 8 {
			t.Errorf("%s at entry: %+v, want CFA rsp+8", name, r)
		}
		switch name {
		case "main.middle":
			for pc := start; pc < end; pc++ {
				if r := at(pc); r.cfaKind != cfaRSP {
					t.Fatalf("main.middle+%d: %+v, want an rsp rule", pc-start, r)
				}
			}
		default:
			if r := at(start + 1); r.cfaKind != cfaRSP || r.cfaOff != 16 || r.rbpKind != rbpOffset || r.rbpOff != -16 {
				t.Errorf("%s after PUSHQ BP: %+v, want CFA rsp+16, rbp at CFA-16", name, r)
			}
			delta := spDeltas(t, start, end, pcsp)
			popped := 0
			for pc := start + 4; pc < end; pc++ {
				if delta(pc) < 0 {
					continue // padding past the table's last row
				}
				r := at(pc)
				if delta(pc) == 0 { // past POPQ BP
					popped++
					if r.cfaKind != cfaRSP || r.cfaOff != 8 {
						t.Fatalf("%s+%d (SP delta 0): %+v, want CFA rsp+8", name, pc-start, r)
					}
					continue
				}
				if r.cfaKind != cfaRBP || r.cfaOff != 16 || r.raKind != raOffset || r.raOff != -8 || r.rbpOff != -16 {
					t.Fatalf("%s+%d (SP delta %d): %+v, want CFA rbp+16, return address at CFA-8, rbp at CFA-16", name, pc-start, delta(pc), r)
				}
			}
			if popped == 0 {
				t.Errorf("%s: no pc past POPQ BP (SP delta 0)", name)
			}
		}
	}
	if len(checked) != 3 {
		t.Errorf("found %v of nanotime1, systemstack and main.middle", checked)
	}
}

// TestGoPclntabMappedTruncated: the table reads .gopclntab from a mapping
// of the file; once the file is cut short, a function on the lost pages
// gets no rule instead of killing the process (SIGBUS).
func TestGoPclntabMappedTruncated(t *testing.T) {
	bin := copyToTemp(t, buildGoChain(t))
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	sec := f.Section(".gopclntab")
	g := readGoPclntab(t, f)
	f.Close()
	tab, err := loadTable(bin, "")
	if err != nil || tab.gofn == nil || tab.gofn.mapped == nil {
		t.Fatalf("loadTable: %v (mapped: %v)", err, tab != nil && tab.gofn != nil && tab.gofn.mapped != nil)
	}
	// The last function whose _func record lies past the cut.
	cut := int64(sec.Offset) + int64(sec.Size)/2
	cut &^= 4095
	var pc uint64
	for i := g.nfunc - 1; i >= 0; i-- {
		funcOff := int64(binary.LittleEndian.Uint32(g.functab[8*i+4:]))
		start, _, _, ok := g.funcSP(i)
		if ok && int64(sec.Offset)+int64(len(g.data)-len(g.functab))+funcOff > cut+4096 {
			pc = start
			break
		}
	}
	if pc == 0 {
		t.Fatal("no function past the cut")
	}
	if err := os.Truncate(bin, cut); err != nil {
		t.Fatal(err)
	}
	if r, ok := tab.gofn.lookup(pc); ok {
		t.Errorf("after truncation, lookup(%#x) = %+v, want no rule", pc, r)
	}
}

// spDeltas decodes a function's pcsp table (start to end) into its SP
// delta at a pc, in bytes; -1 before the first row or past the last.
func spDeltas(t *testing.T, start, end uint64, pcsp []byte) func(pc uint64) int64 {
	t.Helper()
	type row struct {
		lo, hi uint64
		val    int64
	}
	var rows []row
	r := &buf{b: pcsp}
	pc, val := start, int64(-1)
	for pc < end && r.left() > 0 {
		d := r.uleb()
		if d == 0 && pc != start {
			break
		}
		val += int64(d>>1) ^ -int64(d&1)
		n := r.uleb()
		if r.err != nil {
			t.Fatalf("pcsp at %#x: %v", pc, r.err)
		}
		rows = append(rows, row{pc, pc + n, val})
		pc += n
	}
	return func(pc uint64) int64 {
		for _, x := range rows {
			if pc >= x.lo && pc < x.hi {
				return x.val
			}
		}
		return -1
	}
}
