package objfile

import (
	"debug/elf"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/testutil"
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
			f, lr := openELF(t, path)
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
	f, lr := openELF(b, filepath.Join(strings.TrimSpace(string(out)), "compile"))
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

// BenchmarkLoadSymbols reads the symbol table of the Go toolchain's
// compile (tens of thousands of functions) the way Load does: .symtab
// and .dynsym read in place, ranked, sorted and copied into an arena
// (readSymbols64).
func BenchmarkLoadSymbols(b *testing.B) {
	out, err := exec.Command("go", "env", "GOTOOLDIR").Output()
	if err != nil {
		b.Skipf("go env GOTOOLDIR: %v", err)
	}
	f, lr := openELF(b, filepath.Join(strings.TrimSpace(string(out)), "compile"))
	b.ReportAllocs()
	for b.Loop() {
		bin := &Binary{}
		if err := bin.readSymbols64(f, lr, nil, nil); err != nil {
			b.Fatal(err)
		}
		if len(bin.syms) == 0 {
			b.Fatal("no symbols read")
		}
	}
}

// TestPLTMatchesObjdump names the PLT entries of real binaries
// (appendPLT64) and requires what objdump -d prints for them ("ADDR
// <NAME@plt>:"): ls as Debian ships it, and testdata/calls.c (four libc
// functions through the PLT) built as PIE, not, and with an IBT PLT (the
// entries called are in .plt.sec). Every entry objdump names must come
// out, at its address.
func TestPLTMatchesObjdump(t *testing.T) {
	objdump := testutil.RequireTool(t, "objdump", "binutils: the oracle of the PLT names")
	gcc := symtest.LookPath(t, "gcc", "builds testdata/calls.c")
	paths := []string{"/usr/bin/ls"}
	for _, flags := range [][]string{{"-pie", "-fPIE"}, {"-no-pie", "-fno-PIE"}, {"-fcf-protection=full", "-Wl,-z,ibtplt"}} {
		out := filepath.Join(t.TempDir(), "calls")
		args := append([]string{"-O2", "-o", out, symtest.Testdata("calls.c")}, flags...)
		if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, b)
		}
		paths = append(paths, out)
	}
	rx := regexp.MustCompile(`(?m)^([0-9a-f]+) <([^>@]+)@plt>:$`)
	for i, path := range paths {
		t.Run(fmt.Sprint(i, filepath.Base(path)), func(t *testing.T) {
			out, err := exec.Command(objdump, "-d", "-j", ".plt", "-j", ".plt.sec", path).Output()
			if err != nil {
				t.Fatalf("objdump: %v", err)
			}
			want := map[uint64]string{}
			for _, m := range rx.FindAllStringSubmatch(string(out), -1) {
				addr, _ := strconv.ParseUint(m[1], 16, 64)
				want[addr] = m[2] + "@plt"
			}
			if len(want) < 3 {
				t.Fatalf("objdump names %d PLT entries of %s", len(want), path)
			}
			f, lr := openELF(t, path)
			got := map[uint64]string{}
			for _, r := range appendPLT64(nil, f, lr) {
				got[r.start] = r.name
			}
			for addr, name := range want {
				if got[addr] != name {
					t.Errorf("%#x: %q, objdump says %q", addr, got[addr], name)
				}
			}
			if i == len(paths)-1 && f.Section(".plt.sec") == nil {
				t.Errorf("-z ibtplt made no .plt.sec")
			}
		})
	}
}

// openELF opens the ELF file at path as Load does, closing it when tb ends.
func openELF(tb testing.TB, path string) (*elf.File, *elfio.ReaderAt) {
	tb.Helper()
	file, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { file.Close() })
	f, lr, err := elfio.OpenELF(file)
	if err != nil {
		tb.Fatal(err)
	}
	return f, lr
}

// TestBestRawsRanksAliases gives bestRaws several symbols at one address
// in every order and requires the one perf's rules pick (sized, global,
// a function, fewest leading underscores, then by name), and one symbol
// per address, sorted; with keys packed, and not (addresses far apart).
func TestBestRawsRanksAliases(t *testing.T) {
	at := func(start uint64, name string, size uint64, bind elf.SymBind, typ elf.SymType) rawSym {
		return rawSym{name: name, start: start, size: size, bind: bind, typ: typ, limit: 0x9000}
	}
	raws := []rawSym{
		at(0x2000, "zeta", 16, elf.STB_GLOBAL, elf.STT_FUNC),
		at(0x1000, "__libc_malloc", 64, elf.STB_GLOBAL, elf.STT_FUNC),
		at(0x1000, "malloc_unsized", 0, elf.STB_GLOBAL, elf.STT_FUNC),
		at(0x1000, "malloc_weak", 64, elf.STB_WEAK, elf.STT_FUNC),
		at(0x1000, "malloc_local", 64, elf.STB_LOCAL, elf.STT_FUNC),
		at(0x1000, "malloc_notype", 64, elf.STB_GLOBAL, elf.STT_NOTYPE),
		at(0x1000, "malloc", 64, elf.STB_GLOBAL, elf.STT_FUNC),
		at(0x2000, "alpha", 16, elf.STB_GLOBAL, elf.STT_FUNC),
		at(0x0800, "first", 8, elf.STB_LOCAL, elf.STT_FUNC),
	}
	// A symbol 2^45 bytes away: the keys no longer pack into a uint64.
	far := append(slices.Clone(raws), at(1<<45, "far", 8, elf.STB_GLOBAL, elf.STT_FUNC))
	for round := range 20 {
		shuffled := slices.Clone(raws)
		want := []string{"0x800:first", "0x1000:malloc", "0x2000:alpha"}
		if round%2 == 1 {
			shuffled = slices.Clone(far)
			want = append(want, "0x200000000000:far")
		}
		rand.New(rand.NewPCG(uint64(round), 1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		var got []string
		for _, r := range bestRaws(shuffled) {
			got = append(got, fmt.Sprintf("%#x:%s", r.start, r.name))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: bestRaws = %v, want %v", round, got, want)
		}
	}
}
