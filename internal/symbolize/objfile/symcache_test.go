package objfile

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gprofile/gprofile/internal/symbolize/dwarfline"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

// TestSymbolCacheAcrossRuns checks that a binary read again with the same
// cache gets its symbol table from the entry the first reading kept,
// equal to the one read from the ELF file (libc, whose symbols come from
// its debug file, and the gcc inlining workload), that the entries of
// reads with and without a debug file are apart, and that a corrupt
// entry is ignored.
func TestSymbolCacheAcrossRuns(t *testing.T) {
	libc, debug := symtest.LibcDebugFile(t)
	for _, path := range []string{libc, symtest.BuildInline(t)} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			dir := t.TempDir()
			plain := loadWithCache(t, path, "")
			first := loadWithCache(t, path, dir)
			withDebug := path == libc
			entry := filepath.Join(dir, first.BuildID(), symbolsName(withDebug))
			if _, err := os.Stat(entry); err != nil {
				t.Fatalf("no symbol table kept: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, first.BuildID(), symbolsName(!withDebug))); err == nil {
				t.Errorf("a table kept under %s too", symbolsName(!withDebug))
			}
			cache := dwarfline.NewSectionCache(dir, dwarfline.DefaultSectionCacheBytes)
			probe := &Binary{buildID: first.BuildID()}
			if !probe.loadSymbols(cache, symbolsName(withDebug), plain.DebugFile()) {
				t.Fatal("the kept table does not read back")
			}
			again := loadWithCache(t, path, dir)
			if !slices.Equal(again.syms, plain.syms) || again.names != plain.names {
				t.Errorf("the table read back differs: %d symbols, want %d", len(again.syms), len(plain.syms))
			}
			if again.DebugFile() != plain.DebugFile() {
				t.Errorf("DebugFile() = %q read back, %q read from the file", again.DebugFile(), plain.DebugFile())
			}
			if withDebug && plain.DebugFile() != debug {
				t.Errorf("libc's symbols came from %q, want its debug file %s", plain.DebugFile(), debug)
			}
			for _, s := range plain.syms[:min(len(plain.syms), 200)] {
				got, ok := again.Lookup(s.start)
				want, _ := plain.Lookup(s.start)
				if !ok || got != want {
					t.Errorf("Lookup(%#x) = %+v, %v read back; want %+v", s.start, got, ok, want)
				}
			}
			// A corrupt entry (its CRC-32C no longer matches) is a miss,
			// so the next Load reads the file and keeps the table again.
			corruptEntry(t, entry)
			if (&Binary{buildID: first.BuildID()}).loadSymbols(cache, symbolsName(withDebug), "") {
				t.Error("a corrupt entry was read")
			}
			if b := loadWithCache(t, path, dir); !slices.Equal(b.syms, plain.syms) {
				t.Error("beside a corrupt entry, the table read from the file differs")
			}
			if !probe.loadSymbols(cache, symbolsName(withDebug), "") {
				t.Error("the Load beside a corrupt entry did not keep the table again")
			}
		})
	}
}

// TestSymbolsEncoding checks the round trip, and that a truncated table,
// names outside the arena, starts out of order and unknown flags are
// refused.
func TestSymbolsEncoding(t *testing.T) {
	syms := []elfSym{{start: 0x10, end: 0x20, name: 0, nlen: 3, sized: true}, {start: 0x20, end: 0x40, name: 3, nlen: 4}}
	names := "foobarx"
	enc := encodeSymbols(syms, names, true)
	got, gotNames, fromDebug, err := decodeSymbols(enc)
	if err != nil || !slices.Equal(got, syms) || gotNames != names || !fromDebug {
		t.Fatalf("decode(encode) = %v %q %v %v", got, gotNames, fromDebug, err)
	}
	for n := range len(enc) {
		if _, _, _, err := decodeSymbols(enc[:n]); err == nil {
			t.Errorf("a table cut to %d of %d bytes was read", n, len(enc))
		}
	}
	bad := map[string][]elfSym{
		"name past the arena": {{start: 0x10, end: 0x20, name: 5, nlen: 3}},
		"starts out of order": {{start: 0x20, end: 0x30}, {start: 0x10, end: 0x20}},
		"equal starts":        {{start: 0x20, end: 0x30}, {start: 0x20, end: 0x28}},
	}
	for what, s := range bad {
		if _, _, _, err := decodeSymbols(encodeSymbols(s, names, false)); err == nil {
			t.Errorf("%s: read", what)
		}
	}
	flags := slices.Clone(enc)
	flags[16] = 2
	if _, _, _, err := decodeSymbols(flags); err == nil {
		t.Error("unknown flags: read")
	}
}

// FuzzSymbolsDecode feeds decodeSymbols arbitrary bytes: it refuses or
// decodes without panicking, and a table it decodes encodes back to the
// same bytes.
func FuzzSymbolsDecode(f *testing.F) {
	f.Add(encodeSymbols([]elfSym{{start: 1, end: 9, name: 0, nlen: 2, sized: true}}, "ab", false))
	f.Fuzz(func(t *testing.T, data []byte) {
		syms, names, fromDebug, err := decodeSymbols(data)
		if err != nil {
			return
		}
		if again := encodeSymbols(syms, names, fromDebug); string(again) != string(data) {
			t.Fatalf("re-encoded table differs from its input")
		}
	})
}

// BenchmarkSymbolCache reads the symbol table of the Go toolchain's
// compile (tens of thousands of functions) with Load: from the ELF file
// (read, ranked, sorted; the section cache holds no table) and from the
// table an earlier Load kept in the cache.
func BenchmarkSymbolCache(b *testing.B) {
	out, err := exec.Command("go", "env", "GOTOOLDIR").Output()
	if err != nil {
		b.Skipf("go env GOTOOLDIR: %v", err)
	}
	compile := filepath.Join(strings.TrimSpace(string(out)), "compile")
	dir := b.TempDir()
	loadWithCache(b, compile, dir)
	b.Run("elf", func(b *testing.B) {
		for b.Loop() {
			loadWithCache(b, compile, "")
		}
	})
	b.Run("cache", func(b *testing.B) {
		for b.Loop() {
			loadWithCache(b, compile, dir)
		}
	})
}

// TestSymbolsInPlace: a table read back from the section cache is used
// in its mapping (on hosts whose layout allows), Lookup's names do not
// point into that mapping (a name may outlive the Binary), and a lookup
// that reads past the end of an entry truncated under the mapping finds
// nothing instead of crashing.
func TestSymbolsInPlace(t *testing.T) {
	if !symbolsInPlace {
		t.Skip("this host's elfSym layout differs from the encoding: tables are copied")
	}
	page := os.Getpagesize()
	names := strings.Repeat("x", 3*page) + "far" + "near"
	syms := []elfSym{
		{start: 0x1000, end: 0x1100, name: uint32(3*page + 3), nlen: 4, sized: true}, // near the end of the arena
		{start: 0x2000, end: 0x2100, name: uint32(3 * page), nlen: 3, sized: true},
	}
	dir := t.TempDir()
	cache := dwarfline.NewSectionCache(dir, dwarfline.DefaultSectionCacheBytes)
	cache.Put("feed", symbolsName(false), encodeSymbols(syms, names, false))
	b := &Binary{buildID: "feed"}
	if !b.loadSymbols(cache, symbolsName(false), "") {
		t.Fatal("the kept table does not read back")
	}
	if b.symMap == nil {
		t.Fatal("the table was copied, not used in place")
	}
	sym, ok := b.Lookup(0x2010)
	if !ok || sym.Function != "far" || sym.SystemName != "far" {
		t.Fatalf("Lookup(0x2010) = %+v, %v; want far", sym, ok)
	}
	data := b.symMap.Data
	lo, hi := uintptr(unsafe.Pointer(&data[0])), uintptr(unsafe.Pointer(&data[len(data)-1]))
	for _, s := range []string{sym.Function, sym.SystemName} {
		if p := uintptr(unsafe.Pointer(unsafe.StringData(s))); p >= lo && p <= hi {
			t.Errorf("the name %q points into the mapped entry", s)
		}
	}
	if err := os.Truncate(filepath.Join(dir, "feed", symbolsName(false)), int64(page)); err != nil {
		t.Fatal(err)
	}
	if sym, ok := b.Lookup(0x1010); ok {
		t.Errorf("Lookup(0x1010) with its name cut off = %+v; want none", sym)
	}
}
