package unwind

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// buildWith runs a compiler command that writes out into a temp dir.
func buildWith(t *testing.T, tool string, args ...string) string {
	t.Helper()
	path := testutil.RequireTool(t, tool)
	out := filepath.Join(t.TempDir(), "bin")
	cmd := exec.Command(path, append(args, "-o", out)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", tool, args, err, b)
	}
	return out
}

// TestBinariesAgainstReadelf compares, row by row, the CFA tables of
// binaries built at test time with readelf --debug-dump=frames-interp:
// C without frame pointers, C++ with exceptions, Rust without frame
// pointers (.eh_frame), and Go (.debug_frame, compressed by the linker).
func TestBinariesAgainstReadelf(t *testing.T) {
	t.Run("c", func(t *testing.T) {
		bin := testutil.BuildC(t, "testdata/stackdump.c", "-O2", "-fomit-frame-pointer", "-pthread")
		t.Logf("%d rows compared", compareReadelf(t, bin, ".eh_frame"))
	})
	t.Run("c++", func(t *testing.T) {
		bin := buildWith(t, "g++", "-O2", "-fomit-frame-pointer", "testdata/exceptions.cpp")
		t.Logf("%d rows compared", compareReadelf(t, bin, ".eh_frame"))
	})
	t.Run("rust", func(t *testing.T) {
		bin := buildWith(t, "rustc", "-O", "-C", "force-frame-pointers=no", "testdata/chain.rs")
		t.Logf("%d rows compared", compareReadelf(t, bin, ".eh_frame"))
	})
	t.Run("go", func(t *testing.T) {
		bin := buildGoChain(t)
		t.Logf("%d rows compared", compareReadelf(t, bin, ".debug_frame"))
		checkGoTopFrames(t, bin)
	})
}

// buildGoChain builds testdata/gochain with go build flags and returns
// the binary's path.
func buildGoChain(t testing.TB, flags ...string) string {
	t.Helper()
	return testutil.BuildGo(t, "testdata/gochain", flags...)
}

// checkGoTopFrames: in a Go binary, a walk ends as complete at
// runtime.goexit and runtime.mstart (their return address is undefined),
// and at the program's entry point (goEntryNames).
func checkGoTopFrames(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := NewTable(f)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	found, entries := 0, 0
	for _, s := range syms {
		if !goTopNames[s.Name] && !goEntryNames[s.Name] {
			continue
		}
		r, _, ok := tab.lookup(s.Value + 1)
		if !ok || r.cfaKind == cfaComplex || r.raKind != raUndef {
			t.Errorf("%s: rule %+v (found %v), want an undefined return address", s.Name, r, ok)
		}
		if goEntryNames[s.Name] {
			entries++
		} else {
			found++
		}
	}
	if found < 2 || entries != len(goEntryNames) {
		t.Errorf("found %d of Go's top functions and %d of its %d entry functions, want goexit and mstart at least, and every entry function", found, entries, len(goEntryNames))
	}
	// An ordinary function keeps its return address.
	for _, s := range syms {
		if s.Name == "main.middle" {
			if r, _, ok := tab.lookup(s.Value + 1); !ok || r.raKind != raOffset {
				t.Errorf("main.middle: rule %+v (found %v), want ra at CFA-8", r, ok)
			}
		}
	}
}
