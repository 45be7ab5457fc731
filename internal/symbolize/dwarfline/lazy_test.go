package dwarfline

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
	"github.com/gprofile/gprofile/internal/testutil"
)

// prefix makes the first n bytes of s valid (see lazySection.span).
func (s *lazySection) prefix(n uint64) int { return s.span(0, n) }

// TestLazySectionPrefix checks that a lazySection inflates what is asked
// and no more than a step beyond, gives the same bytes as inflating
// whole, and stops short (without panicking) on a corrupt stream.
func TestLazySectionPrefix(t *testing.T) {
	// The compressed bytes read whole up front, and read from the file
	// as the inflating goes (a reader kept open: retain).
	for _, kept := range []bool{false, true} {
		t.Run(fmt.Sprintf("kept=%v", kept), func(t *testing.T) { testLazySectionPrefix(t, kept) })
	}
}

func testLazySectionPrefix(t *testing.T, kept bool) {
	plain := make([]byte, 5*lazyInflateStep+123)
	for i := range plain {
		plain[i] = byte(i * 7 / 3)
	}
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(plain)
	w.Close()
	raw := z.Bytes()
	le := binary.LittleEndian
	f := &elf.File{FileHeader: elf.FileHeader{Class: elf.ELFCLASS64, ByteOrder: le}}
	sec := func(body []byte) *lazySection {
		var hdr [24]byte // Elf64_Chdr
		le.PutUint32(hdr[:], elfCompressZlib)
		le.PutUint64(hdr[8:], uint64(len(plain)))
		file := append(hdr[:], body...)
		s := &elf.Section{SectionHeader: elf.SectionHeader{Name: ".debug_info", Type: elf.SHT_PROGBITS,
			Flags: elf.SHF_COMPRESSED, FileSize: uint64(len(file)), Size: uint64(len(plain))}}
		read := new(atomic.Int64)
		src := &countingReaderAt{r: bytes.NewReader(file), n: read}
		lr := elfio.NewReaderAt(io.NewSectionReader(src, 0, int64(len(file))), 1<<30)
		var retain func() *elfio.ReaderAt
		if kept {
			retain = func() *elfio.ReaderAt { return lr }
		}
		got, err := dwarfSectionData(lr, f, s, 1<<30, true, nil, retain)
		if err != nil || got.lazy == nil {
			t.Fatalf("dwarfSectionData: lazy %v, err %v", got.lazy != nil, err)
		}
		if n := read.Load(); kept && n > 24+2 {
			t.Errorf("%d bytes of the compressed section read before a lookup, want its headers' 26", n)
		}
		return got.lazy
	}
	old := lazySectionMin
	lazySectionMin = 0
	defer func() { lazySectionMin = old }()

	s := sec(raw)
	if got := s.prefix(10); got != 10 || s.valid() != lazyInflateStep {
		t.Errorf("prefix(10) = %d and made %d bytes valid, want 10 and one step (%d)", got, s.valid(), lazyInflateStep)
	}
	if got := s.prefix(uint64(3*lazyInflateStep + 1)); got != 3*lazyInflateStep+1 || s.complete() {
		t.Errorf("prefix(3 steps + 1) = %d, complete %v; want exactly that, not complete", got, s.complete())
	}
	if got := s.prefix(1 << 40); got != len(plain) || !s.complete() || !bytes.Equal(s.buf, plain) {
		t.Fatalf("prefix(all) = %d of %d, complete %v, bytes equal %v", got, len(plain), s.complete(), bytes.Equal(s.buf, plain))
	}

	bad := slices.Clone(raw)
	for i := len(bad) / 2; i < len(bad); i++ {
		bad[i] = 0xff
	}
	s = sec(bad)
	if got := s.prefix(1 << 40); got >= len(plain) || !s.complete() || !s.failed {
		t.Errorf("corrupt stream: prefix(all) = %d of %d, failed %v; want short and failed", got, len(plain), s.failed)
	}
	if got := s.prefix(1 << 40); got >= len(plain) {
		t.Errorf("corrupt stream: second prefix(all) = %d", got)
	}
}

// TestLazyDWARFMatchesWhole builds a C program of many compilation units
// with zlib-compressed DWARF and checks that the reader that inflates
// .debug_info, .debug_abbrev and .debug_line on demand answers every
// address exactly as the one given the whole sections, that a lookup in
// the first unit inflates only the start of .debug_info, and that an
// address no unit holds completes the index.
func TestLazyDWARFMatchesWhole(t *testing.T) {
	bin, raw, f, ref := lazyManyUnits(t)
	load := func() *Data {
		ef, lr, err := elfio.OpenELF(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		d := Load(ef, lr, nil)
		if d == nil || d.InfoZ == nil || d.AbbrevZ == nil || d.LineZ == nil || d.strZ == nil || d.lineStrZ == nil || d.rnglistsZ == nil {
			t.Fatalf("loadDWARF: %v; want .debug_info, .debug_abbrev, .debug_line, the string sections and .debug_rnglists inflated on demand", d != nil)
		}
		return d
	}

	// The first unit's function: only the start of .debug_info is read.
	d := load()
	x := NewTable(d)
	first := symtest.ElfSymbol(t, bin, "f0_0").Value
	if got := x.Lines(first); len(got) == 0 || got[len(got)-1].Function != "f0_0" {
		t.Fatalf("lines(f0_0) = %+v", got)
	}
	if !x.partial || d.InfoZ.complete() || d.InfoZ.valid() > len(d.info)/2 {
		t.Errorf("after one lookup in the first unit: partial index %v, %d of %d bytes of .debug_info inflated; want a partial index and under half",
			x.partial, d.InfoZ.valid(), len(d.info))
	}

	// Every function start and a few addresses inside: the same answers.
	checkAllLines(t, f, ref, x)

	// An address no unit holds completes the index: every unit header
	// is read (inflating the section through the last one).
	d = load()
	x = NewTable(d)
	if got := x.Lines(1); got != nil {
		t.Errorf("lines(1) = %v, want none", got)
	}
	if last := d.units[len(d.units)-1]; x.partial || !d.allUnits || d.InfoZ.valid() < int(last.dieOff) {
		t.Errorf("after a miss: partial %v, every header read %v, %d bytes inflated; want the whole index, through the last header at %d",
			x.partial, d.allUnits, d.InfoZ.valid(), last.off)
	}
	if got, want := fmt.Sprint(x.Lines(first)), fmt.Sprint(ref.Lines(first)); got != want {
		t.Errorf("after a miss, lines(f0_0) = %s, want %s", got, want)
	}
}

// checkAllLines checks that x answers every function of f (its start,
// middle and last byte) as ref does.
func checkAllLines(t *testing.T, f *elf.File, ref, x srcline.Source) {
	t.Helper()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
			continue
		}
		for _, off := range []uint64{0, s.Size / 2, max(s.Size, 1) - 1} {
			pc := s.Value + off
			want, got := fmt.Sprint(ref.Lines(pc)), fmt.Sprint(x.Lines(pc))
			if got != want {
				t.Errorf("lines(%#x) (%s+%d) = %s, want %s", pc, s.Name, off, got, want)
			}
			checked++
		}
	}
	if checked < 240 {
		t.Fatalf("checked %d addresses; the program has 240 functions", checked)
	}
}

// lazyManyUnits is buildManyUnits, with its bytes, for tests of inflating
// on demand: until the test ends, every compressed section is inflated
// on demand whatever its size, in steps of 512 bytes (the program's
// .debug_info is tens of KiB).
func lazyManyUnits(t *testing.T) (bin string, raw []byte, f *elf.File, ref srcline.Source) {
	bin, f, ref = buildManyUnits(t)
	oldMin, oldStep := lazySectionMin, lazyInflateStep
	lazySectionMin, lazyInflateStep = 0, 512
	t.Cleanup(func() { lazySectionMin, lazyInflateStep = oldMin, oldStep })
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return bin, raw, f, ref
}

// buildManyUnits builds a C program of 40 compilation units, each with
// six functions and an inlined one, with zlib-compressed DWARF, and
// returns its path, the open ELF file and a line reader given its whole
// sections (the reference). It skips when gcc cannot compress DWARF.
func buildManyUnits(t *testing.T) (string, *elf.File, srcline.Source) {
	return buildManyUnitsDWARF(t, true)
}

// buildManyUnitsDWARF is buildManyUnits, with compressed DWARF or not.
func buildManyUnitsDWARF(t *testing.T, compressed bool) (string, *elf.File, srcline.Source) {
	return buildUnitsDWARF(t, compressed, 40)
}

// buildUnitsDWARF is buildManyUnitsDWARF with the 240 functions in
// files source files (40 or fewer: one makes a unit of several pages).
func buildUnitsDWARF(t *testing.T, compressed bool, files int) (string, *elf.File, srcline.Source) {
	gcc := symtest.LookPath(t, "gcc", "builds the test program with compressed DWARF")
	dir := t.TempDir()
	var srcs []string
	texts := make([]strings.Builder, files)
	for i := range 40 {
		b := &texts[i%files]
		fmt.Fprintf(b, "static inline __attribute__((always_inline)) int in%d(int x) { return x * %d + (x >> 3); }\n", i, i+3)
		for j := range 6 {
			fmt.Fprintf(b, "__attribute__((noinline)) int f%d_%d(int x) { for (int k = 0; k < x; k++) x += in%d(k); return x; }\n", i, j, i)
		}
	}
	for i := range texts {
		p := filepath.Join(dir, fmt.Sprintf("u%02d.c", i))
		if err := os.WriteFile(p, []byte(texts[i].String()), 0o644); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, p)
	}
	main := filepath.Join(dir, "main.c")
	if err := os.WriteFile(main, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "many")
	gz := "-gz=zlib"
	if !compressed {
		gz = "-gz=none"
	}
	symtest.Run(t, gcc, append([]string{"-O2", "-g", gz, "-o", bin, main}, srcs...)...)

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if s := f.Section(".debug_info"); compressed && (s == nil || s.Flags&elf.SHF_COMPRESSED == 0) {
		testutil.Skipf(t, "gcc -gz=zlib wrote no compressed .debug_info (binutils without zlib?)")
	}
	whole := map[string][]byte{}
	for _, s := range f.Sections {
		if name := dwarfName(s.Name); slices.Contains(dwarfSections, name) {
			if whole[name], err = s.Data(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return bin, f, NewTable(newDWARFData(whole, false))
}

// TestLazyUncompressedMatchesWhole: uncompressed DWARF sections of
// lazySectionMin bytes or more are read on demand too (from the file, not
// inflated), and answer every address as the whole sections do.
func TestLazyUncompressedMatchesWhole(t *testing.T) {
	bin, f, ref := buildManyUnitsDWARF(t, false)
	oldMin, oldStep := lazySectionMin, lazyInflateStep
	lazySectionMin, lazyInflateStep = 0, 512
	t.Cleanup(func() { lazySectionMin, lazyInflateStep = oldMin, oldStep })
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	ef, lr, err := elfio.OpenELF(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if s := ef.Section(".debug_info"); s == nil || s.Flags&elf.SHF_COMPRESSED != 0 {
		t.Fatalf("gcc -gz=none wrote a compressed or no .debug_info")
	}
	d := Load(ef, lr, nil)
	if d == nil || d.InfoZ == nil || d.LineZ == nil || d.strZ == nil || d.lineStrZ == nil || d.rnglistsZ == nil {
		t.Fatalf("Load: %v; want .debug_info, .debug_line, the string sections and .debug_rnglists read on demand", d != nil)
	}
	x := NewTable(d)
	first := symtest.ElfSymbol(t, bin, "f0_0").Value
	if got := x.Lines(first); len(got) == 0 || got[len(got)-1].Function != "f0_0" {
		t.Fatalf("lines(f0_0) = %+v", got)
	}
	if d.InfoZ.complete() || d.InfoZ.valid() > len(d.info)/2 {
		t.Errorf("after one lookup in the first unit: %d of %d bytes of .debug_info read; want under half", d.InfoZ.valid(), len(d.info))
	}
	checkAllLines(t, f, ref, x)
}

// TestLazyUncompressedOutlivesFile: a binary's uncompressed sections are
// mapped from its file (newMappedSection), so lookups
// made after the caller has closed the file it gave Load (as
// objfile.Load's callers do) still find every line, and a lookup in the
// last unit reads its pages, not the headers before it.
func TestLazyUncompressedOutlivesFile(t *testing.T) {
	bin, f, ref := buildManyUnitsDWARF(t, false)
	d, _ := loadMapped(t, bin)
	if d.InfoZ.paged != len(d.info) {
		t.Fatalf("the mapped .debug_info's paged part is %d bytes of %d; want all", d.InfoZ.paged, len(d.info))
	}
	x := NewTable(d)
	if got := x.Lines(symtest.ElfSymbol(t, bin, "f39_5").Value); len(got) == 0 || got[len(got)-1].Function != "f39_5" {
		t.Fatalf("lines(f39_5) after the file was closed = %+v", got)
	}
	// The first unit's header (read by Load) and the last unit's page
	// or two: not the headers between (a unit is well under a page).
	if got := d.InfoZ.valid(); got > 3*sectionPage || len(d.info) < 5*sectionPage {
		t.Errorf("one lookup in the last unit read %d of %d bytes of .debug_info; want at most 3 pages of %d", got, len(d.info), sectionPage)
	}
	checkAllLines(t, f, ref, x)
}

// TestLazyReleasesLoadedUnit: once a unit's line table and inline tree
// are read, its .debug_info pages are given back (lazySection.release),
// and the names looked up later read their DIEs' pages again: every
// address still gets the lines and names of the whole sections.
func TestLazyReleasesLoadedUnit(t *testing.T) {
	bin, f, ref := buildUnitsDWARF(t, false, 1)
	oldMin := lazySectionMin
	lazySectionMin = 0
	t.Cleanup(func() { lazySectionMin = oldMin })
	ef, lr := symtest.OpenELFFile(t, bin)
	d := Load(ef, lr, nil)
	if d == nil || d.InfoZ == nil {
		t.Fatalf("Load: %v; want .debug_info read a page at a time", d != nil)
	}
	x := NewTable(d)
	if got := x.Lines(symtest.ElfSymbol(t, bin, "f20_3").Value); len(got) == 0 || got[len(got)-1].Function != "f20_3" {
		t.Fatalf("lines(f20_3) = %+v", got)
	}
	var big *unit
	for _, u := range d.everyUnit() {
		if big == nil || u.end-u.off > big.end-big.off {
			big = u
		}
	}
	size := int(big.end - big.off)
	if size < 4*sectionPage {
		t.Fatalf("the one-file unit has %d bytes; want at least 4 pages to release", size)
	}
	if got := d.InfoZ.valid(); got > size/2 {
		t.Errorf("after the unit was loaded, %d bytes of .debug_info are read, of its %d; want its pages released", got, size)
	}
	checkAllLines(t, f, ref, x)
}

// TestMappedSectionTruncated: a binary truncated under its mapped
// sections makes the lookups that touch the lost pages fault; the table
// recovers, answers nothing from then on, and the process lives.
func TestMappedSectionTruncated(t *testing.T) {
	src, _, _ := buildManyUnitsDWARF(t, false)
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	d, ef := loadMapped(t, bin)
	info := ef.Section(".debug_info")
	x := NewTable(d)
	last := symtest.ElfSymbol(t, src, "f39_5").Value
	if err := os.Truncate(bin, int64(info.Offset)+64); err != nil {
		t.Fatal(err)
	}
	if got := x.Lines(last); got != nil {
		t.Errorf("lines(f39_5) with .debug_info truncated = %+v; want none", got)
	}
	if !x.faulted.Load() {
		t.Fatal("the lookup past the end of the truncated file did not fault")
	}
	if got := x.Lines(symtest.ElfSymbol(t, src, "f0_0").Value); got != nil {
		t.Errorf("lines(f0_0) after a fault = %+v; want none", got)
	}
}

// loadMapped loads the DWARF of the binary at path with every lazy
// section read on demand (lazySectionMin 0, for the test), through a
// file it closes before returning, and fails the test unless
// .debug_info is mapped from the file. It returns the DWARF and the ELF
// file it was read from.
func loadMapped(t *testing.T, path string) (*Data, *elf.File) {
	t.Helper()
	oldMin := lazySectionMin
	lazySectionMin = 0
	t.Cleanup(func() { lazySectionMin = oldMin })
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ef, lr, err := elfio.OpenELF(file)
	if err != nil {
		t.Fatal(err)
	}
	d := Load(ef, lr, nil)
	file.Close()
	if d == nil || d.InfoZ == nil || !d.InfoZ.mapped {
		t.Fatalf("Load: %v; want .debug_info mapped from the file", d != nil)
	}
	return d, ef
}
