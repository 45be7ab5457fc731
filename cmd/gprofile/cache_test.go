package main

import (
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/gprofile/gprofile/internal/testutil"
)

func TestDefaultCacheDir(t *testing.T) {
	for _, tt := range []struct{ xdg, home, want string }{
		{"/x/cache", "/home/u", "/x/cache/gprofile"},
		{"relative", "/home/u", "/home/u/.cache/gprofile"}, // XDG wants absolute paths
		{"", "/root", "/root/.cache/gprofile"},
		{"", "", ""},
	} {
		env := map[string]string{"XDG_CACHE_HOME": tt.xdg, "HOME": tt.home}
		if got := defaultCacheDir(func(k string) string { return env[k] }); got != tt.want {
			t.Errorf("XDG_CACHE_HOME=%q HOME=%q: %q, want %q", tt.xdg, tt.home, got, tt.want)
		}
	}
}

// TestCacheDir profiles a program built with zlib-compressed DWARF:
// with --cache-dir, the run leaves its inflated sections under the
// program's build ID, and a second run that reads them names the same
// frames with the same lines; --cache-dir "" (none) writes nothing.
func TestCacheDir(t *testing.T) {
	testutil.RequirePrivileges(t)
	bin := testutil.BuildC(t, "testdata/chain.c", "-O2", "-g", "-gz=zlib", "-fno-omit-frame-pointer")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".debug_info")
	f.Close()
	if s == nil || s.Flags&elf.SHF_COMPRESSED == 0 {
		testutil.Skipf(t, "gcc -gz=zlib wrote no compressed .debug_info")
	}
	cache := t.TempDir()
	// run profiles the program and returns the function:line of every
	// location of the profile whose function is in chain.c.
	run := func(dir string) map[string]bool {
		path := filepath.Join(t.TempDir(), "p.pb.gz")
		_, _, code := runGprofile(t, "-q", "-f", "499", "--cache-dir", dir, "-o", path, "--", bin, "1")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		pf, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer pf.Close()
		p, err := profile.Parse(pf)
		if err != nil {
			t.Fatal(err)
		}
		lines := map[string]bool{}
		for _, loc := range p.Location {
			for _, l := range loc.Line {
				if strings.HasSuffix(l.Function.Filename, "chain.c") && l.Line > 0 {
					lines[fmt.Sprintf("%s:%d", l.Function.Name, l.Line)] = true
				}
			}
		}
		return lines
	}
	first := run(cache)
	entries, _ := filepath.Glob(filepath.Join(cache, "*", "info-*"))
	if len(entries) == 0 {
		t.Fatalf("no .debug_info entry under %s", cache)
	}
	second := run(cache)
	for _, fn := range []string{"main", "chain_a", "chain_b", "chain_c"} {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(second)), func(k string) bool { return strings.HasPrefix(k, fn+":") }) {
			t.Errorf("second run (from the cache): no line of %s in %v", fn, second)
		}
	}
	// Both runs sample the same loop: the lines seen in common agree in
	// kind (the cache must not shift lines); most are seen by both.
	common := 0
	for k := range second {
		if first[k] {
			common++
		}
	}
	if common*2 < len(second) {
		t.Errorf("runs share %d of %d lines: first %v, second %v", common, len(second), first, second)
	}
	empty := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", empty)
	run("")
	if left, _ := os.ReadDir(empty); len(left) != 0 {
		t.Errorf("--cache-dir '' wrote %d entries under XDG_CACHE_HOME", len(left))
	}
}
