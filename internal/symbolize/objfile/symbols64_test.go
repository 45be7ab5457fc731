package objfile

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// TestAppendFuncs64MatchesDebugELF reads the function symbols of .symtab
// and .dynsym of real binaries in place (appendFuncs64) and through
// debug/elf's Symbols and DynamicSymbols (appendFuncs), and requires the
// same symbols in the same order: libc (.dynsym and .symtab as Debian
// ships it), ls (stripped: .dynsym only), and the Go toolchain's compile
// (tens of thousands of symbols).
func TestAppendFuncs64MatchesDebugELF(t *testing.T) {
	paths := []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/ls"}
	if out, err := exec.Command("go", "env", "GOTOOLDIR").Output(); err == nil {
		paths = append(paths, filepath.Join(strings.TrimSpace(string(out)), "compile"))
	} else {
		t.Errorf("go env GOTOOLDIR: %v", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			file, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer file.Close()
			f, lr, err := elfio.OpenELF(file)
			if err != nil {
				t.Fatal(err)
			}
			b := &Binary{}
			for _, p := range f.Progs {
				if p.Type == elf.PT_LOAD {
					b.loads = append(b.loads, p.ProgHeader)
				}
			}
			total := 0
			for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
				got, err := b.appendFuncs64(nil, f, lr, typ)
				if err != nil {
					t.Fatalf("%v: %v", typ, err)
				}
				var syms []elf.Symbol
				if typ == elf.SHT_SYMTAB {
					syms, err = f.Symbols()
				} else {
					syms, err = f.DynamicSymbols()
				}
				if err != nil && f.SectionByType(typ) != nil {
					t.Fatalf("debug/elf %v: %v", typ, err)
				}
				want := b.appendFuncs(nil, f, syms)
				if !slices.Equal(got, want) {
					t.Fatalf("%v: %d functions in place, %d through debug/elf; first difference %v", typ, len(got), len(want), firstDiff(got, want))
				}
				total += len(got)
			}
			want := 1000
			if filepath.Base(path) == "ls" {
				want = 1 // stripped: the functions it exports
			}
			if total < want {
				t.Errorf("only %d function symbols, want %d or more", total, want)
			}
		})
	}
}

func firstDiff(a, b []rawSym) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return "at " + a[i].name + " / " + b[i].name
		}
	}
	return "at the end"
}

// BenchmarkReadSymbols reads the function symbols of the Go toolchain's
// compile: in place (appendFuncs64, what Load does) and through
// debug/elf's Symbols (what it did).
func BenchmarkReadSymbols(b *testing.B) {
	out, err := exec.Command("go", "env", "GOTOOLDIR").Output()
	if err != nil {
		b.Skipf("go env GOTOOLDIR: %v", err)
	}
	file, err := os.Open(filepath.Join(strings.TrimSpace(string(out)), "compile"))
	if err != nil {
		b.Skipf("compile: %v", err)
	}
	defer file.Close()
	f, lr, err := elfio.OpenELF(file)
	if err != nil {
		b.Fatal(err)
	}
	bin := &Binary{}
	b.Run("in-place", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bin.appendFuncs64(nil, f, lr, elf.SHT_SYMTAB); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("debug-elf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			syms, err := f.Symbols()
			if err != nil {
				b.Fatal(err)
			}
			bin.appendFuncs(nil, f, syms)
		}
	})
}
