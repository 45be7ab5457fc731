package symbolize

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"
)

// splitDebug builds testdata/prog.c (PIE, -g) and splits it as
// distributions do: it returns the original, a copy stripped of .symtab
// and DWARF, and the debug file made by objcopy --only-keep-debug, all in
// one new temporary directory.
func splitDebug(t testing.TB) (orig, stripped, debug string) {
	t.Helper()
	objcopy := symtest.LookPath(t, "objcopy", "splits debug information off the test binary")
	orig = symtest.BuildProg(t, true)
	dir := t.TempDir()
	stripped, debug = filepath.Join(dir, "prog"), filepath.Join(dir, "prog.debug")
	symtest.Run(t, objcopy, "--only-keep-debug", orig, debug)
	symtest.Run(t, objcopy, "--strip-debug", "--strip-unneeded", orig, stripped)
	return orig, stripped, debug
}

// copyFile copies src to dst, creating dst's directory.
func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadFile runs objfile.Load on the file at path.
func loadFile(t testing.TB, path string, opts debuginfo.Options) *objfile.Binary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := objfile.Load(f, opts)
	if err != nil {
		t.Fatalf("LoadBinary(%s): %v", path, err)
	}
	return b
}

// checkNamed checks that b names the address of orig's symbol name (a
// function only .symtab has) as name, or, when !want, does not.
func checkNamed(t *testing.T, b *objfile.Binary, orig, name string, want bool) {
	t.Helper()
	s := symtest.ElfSymbol(t, orig, name)
	got, ok := b.Lookup(s.Value + 1)
	if named := ok && got.Function == name; named != want {
		t.Errorf("Lookup(%s+1) = %+v, %v; want named %v", name, got, ok, want)
	}
}

func TestDebugFileByBuildID(t *testing.T) {
	orig, stripped, debug := splitDebug(t)
	id := symtest.GnuBuildID(t, orig)
	root := t.TempDir()
	want := filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
	copyFile(t, debug, want)

	b := loadFile(t, stripped, debuginfo.Options{DebugDirs: []string{t.TempDir(), root}})
	checkNamed(t, b, orig, "leaf", true)
	checkNamed(t, b, orig, "middle", true)
	if b.DebugFile() != want || b.BuildID() != id {
		t.Errorf("DebugFile() = %q, BuildID() = %q; want %q, %q", b.DebugFile(), b.BuildID(), want, id)
	}
	leaf := symtest.ElfSymbol(t, orig, "leaf")
	if got := b.Lines(leaf.Value + 1); len(got) != 1 || filepath.Base(got[0].File) != "prog.c" || got[0].Line == 0 {
		t.Errorf("Lines(leaf+1) = %+v; want a line of prog.c from the debug file", got)
	}
	if len(b.Loads()) < 2 || b.Type() != elf.ET_DYN {
		t.Errorf("Loads() = %v, Type() = %v; want the stripped binary's", b.Loads(), b.Type())
	}

	none := loadFile(t, stripped, debuginfo.Options{DebugDirs: []string{}})
	checkNamed(t, none, orig, "leaf", false)
	if none.DebugFile() != "" || none.Lines(leaf.Value+1) != nil {
		t.Errorf("without debug dirs DebugFile() = %q", none.DebugFile())
	}
}

func TestDebugFileByDebugLink(t *testing.T) {
	orig, stripped, debug := splitDebug(t)
	objcopy := symtest.LookPath(t, "objcopy", "adds .gnu_debuglink")
	linked := filepath.Join(t.TempDir(), "linked")
	symtest.Run(t, objcopy, "--add-gnu-debuglink="+debug, stripped, linked)
	dir, global := filepath.Dir(linked), t.TempDir()
	for _, tt := range []struct {
		name, path string
		opts       debuginfo.Options
	}{
		{"next to it", filepath.Join(dir, "prog.debug"), debuginfo.Options{DebugDirs: []string{}, Dir: dir}},
		{".debug", filepath.Join(dir, ".debug", "prog.debug"), debuginfo.Options{DebugDirs: []string{}, Dir: dir}},
		{"global", filepath.Join(global, "opt/app/prog.debug"), debuginfo.Options{DebugDirs: []string{global}, Dir: dir, OrigDir: "/opt/app"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			copyFile(t, debug, tt.path)
			defer os.Remove(tt.path)
			b := loadFile(t, linked, tt.opts)
			checkNamed(t, b, orig, "leaf", true)
			if b.DebugFile() != tt.path {
				t.Errorf("DebugFile() = %q, want %q", b.DebugFile(), tt.path)
			}

			// The same name with other contents fails the CRC check.
			data, err := os.ReadFile(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)/2] ^= 0xff
			if err := os.WriteFile(tt.path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			b = loadFile(t, linked, tt.opts)
			checkNamed(t, b, orig, "leaf", false)
			if b.DebugFile() != "" {
				t.Errorf("corrupt debug file used: DebugFile() = %q", b.DebugFile())
			}
		})
	}
}

func TestDebugFileRejected(t *testing.T) {
	orig, stripped, debug := splitDebug(t)
	objcopy := symtest.LookPath(t, "objcopy", "splits debug information off the test binary")
	other := filepath.Join(t.TempDir(), "other.debug") // another build ID
	symtest.Run(t, objcopy, "--only-keep-debug", symtest.BuildProg(t, false), other)
	id := symtest.GnuBuildID(t, orig)
	root := t.TempDir()
	path := filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
	junk := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(junk, []byte("not ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, src string
		used      bool
	}{
		{"not ELF", junk, false},
		{"other build ID", other, false},
		{"matching", debug, true},
	} {
		copyFile(t, tt.src, path)
		b := loadFile(t, stripped, debuginfo.Options{DebugDirs: []string{root}})
		checkNamed(t, b, orig, "leaf", tt.used)
		if used := b.DebugFile() != ""; used != tt.used {
			t.Errorf("%s: DebugFile() = %q", tt.name, b.DebugFile())
		}
	}
}

func TestMiniDebugInfo(t *testing.T) {
	orig, _, debug := splitDebug(t)
	objcopy := symtest.LookPath(t, "objcopy", "builds a MiniDebugInfo binary")
	xzPath := symtest.LookPath(t, "xz", "compresses the MiniDebugInfo section (apt install xz-utils)")
	dir := t.TempDir()
	mini, mini2 := filepath.Join(dir, "mini"), filepath.Join(dir, "mini.xz")
	symtest.Run(t, objcopy, "--strip-debug", "--remove-section=.comment", debug, mini)
	symtest.Run(t, xzPath, "-z", "-k", mini)
	bin := filepath.Join(dir, "prog")
	symtest.Run(t, objcopy, "--strip-all", "--add-section", ".gnu_debugdata="+mini2, orig, bin)
	if f, err := elf.Open(bin); err != nil || f.Section(".symtab") != nil || f.Section(".gnu_debugdata") == nil {
		t.Fatalf("fixture: %s must have .gnu_debugdata and no .symtab (%v)", bin, err)
	}
	b := loadFile(t, bin, debuginfo.Options{DebugDirs: []string{}})
	checkNamed(t, b, orig, "leaf", true)
	checkNamed(t, b, orig, "_ZN2ns7mangledEi", false) // named ns::mangled(int)
	if got, ok := b.Lookup(symtest.ElfSymbol(t, orig, "_ZN2ns7mangledEi").Value); !ok || got.Function != "ns::mangled(int)" {
		t.Errorf("Lookup(mangled) = %+v, %v", got, ok)
	}
	if b.DebugFile() != "" {
		t.Errorf("DebugFile() = %q; MiniDebugInfo is embedded", b.DebugFile())
	}
}

func TestUnxzLimits(t *testing.T) {
	xzPath := symtest.LookPath(t, "xz", "makes the xz test input (apt install xz-utils)")
	plain := make([]byte, 100000)
	for i := range plain {
		plain[i] = byte(i * 7 % 251)
	}
	in := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(in, plain, 0o644); err != nil {
		t.Fatal(err)
	}
	symtest.Run(t, xzPath, "-z", "-k", in)
	data, err := os.ReadFile(in + ".xz")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := debuginfo.Unxz(data, 1<<20); err != nil || string(out) != string(plain) {
		t.Fatalf("unxz = %d bytes, %v; want %d bytes", len(out), err, len(plain))
	}
	if _, err := debuginfo.Unxz(data, 1000); err == nil {
		t.Error("unxz over the size cap succeeded")
	}
	for _, n := range []int{0, 12, 31, len(data) / 2, len(data) - 1} {
		if _, err := debuginfo.Unxz(data[:n], 1<<20); err == nil {
			t.Errorf("unxz(first %d bytes) succeeded", n)
		}
	}
	for i := 0; i < len(data); i += 3 {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x5a
		debuginfo.Unxz(bad, 1<<20) // must not panic
	}
}

// TestStackDebugFiles checks the Symbolizer's wiring: Options.DebugDirs
// for build IDs, and .gnu_debuglink next to the binary as the process
// sees it (through <ProcRoot>/PID/root).
func TestStackDebugFiles(t *testing.T) {
	orig, stripped, debug := splitDebug(t)
	objcopy := symtest.LookPath(t, "objcopy", "adds .gnu_debuglink")
	linked := filepath.Join(t.TempDir(), "linked")
	symtest.Run(t, objcopy, "--add-gnu-debuglink="+debug, stripped, linked)
	copyFile(t, debug, filepath.Join(filepath.Dir(linked), ".debug", "prog.debug"))
	id := symtest.GnuBuildID(t, orig)
	root := t.TempDir()
	copyFile(t, debug, filepath.Join(root, ".build-id", id[:2], id[2:]+".debug"))

	const base = 0x555555554000
	leaf := base + symtest.ElfSymbol(t, orig, "leaf").Value
	for _, tt := range []struct {
		name, bin string
		dirs      []string
		want      string
	}{
		{"build-id", stripped, []string{root}, "leaf"},
		{"no debug dirs", stripped, []string{}, ""},
		{"debuglink", linked, []string{}, "leaf"},
	} {
		fp := newFakeProc(t)
		fp.setMaps(1, textMapping(t, tt.bin, base))
		s, err := New(Options{ProcRoot: fp.root, KallsymsPath: "testdata/kallsyms.txt", DebugDirs: tt.dirs})
		if err != nil {
			t.Fatal(err)
		}
		if f := s.Stack(1, nil, []uint64{leaf}).Frames[0]; f.Function != tt.want {
			t.Errorf("%s: frame = %+v; want %q", tt.name, f, tt.want)
		}
		s.Close()
	}
}
