package unwind

import (
	"debug/elf"
	"testing"
)

// TestGoTopFuncs checks the in-place symbol table scan against
// debug/elf's Symbols on testdata/gochain (a Go binary with .symtab).
func TestGoTopFuncs(t *testing.T) {
	exe := buildGoChain(t)
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("gochain has no symbol table: %v", err)
	}
	want := map[uint64]bool{}
	for _, s := range syms {
		if goTopNames[s.Name] && s.Value != 0 {
			want[s.Value] = true
		}
	}
	if len(want) == 0 {
		t.Fatal("no runtime.goexit or runtime.mstart in the test binary's symbols")
	}
	got := goTopFuncs(f)
	if len(got) != len(want) {
		t.Fatalf("goTopFuncs found %d addresses, Symbols %d: %v vs %v", len(got), len(want), got, want)
	}
	for a := range want {
		if !got[a] {
			t.Errorf("goTopFuncs misses %#x", a)
		}
	}
}

// TestScanTopFuncsBad: truncated and out-of-range symbol tables find
// nothing and do not panic.
func TestScanTopFuncsBad(t *testing.T) {
	sym := make([]byte, 48)
	sym[24] = 0xff // name offset past the string table
	sym[32] = 1    // value
	if got := scanTopFuncs(sym, []byte("\x00runtime.goexit")); len(got) != 0 {
		t.Errorf("got %v", got)
	}
	sym[24] = 1 // "runtime.goexit" without its NUL
	if got := scanTopFuncs(sym, []byte("\x00runtime.goexit")); len(got) != 0 {
		t.Errorf("unterminated name: got %v", got)
	}
	if got := scanTopFuncs(sym, []byte("\x00runtime.goexit\x00")); !got[1] {
		t.Errorf("goexit at 1 not found: %v", got)
	}
	if got := scanTopFuncs(sym[:30], nil); len(got) != 0 {
		t.Errorf("truncated: got %v", got)
	}
}
