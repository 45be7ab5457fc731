package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// buildProg compiles testdata/prog.c with gcc into t.TempDir() as a PIE
// (pie) or a fixed-address executable, and returns its path. It skips the
// test when gcc is missing.
func buildProg(t testing.TB, pie bool) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("skipping: gcc not found in PATH; it builds the ELF test workload from testdata/prog.c")
	}
	out := filepath.Join(t.TempDir(), "prog")
	args := []string{"-O2", "-g", "-fno-omit-frame-pointer", "-o", out, "testdata/prog.c"}
	if pie {
		args = append(args, "-pie", "-fPIE")
	} else {
		args = append(args, "-no-pie", "-fno-PIE")
	}
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	return out
}

// elfSymbol returns the .symtab symbol name of the ELF file at path, read
// with debug/elf independently of this package.
func elfSymbol(t testing.TB, path, name string) elf.Symbol {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("%s has no symbol %q", path, name)
	return elf.Symbol{}
}

// execSegment returns the executable PT_LOAD header of the ELF at path.
func execSegment(t testing.TB, path string) elf.ProgHeader {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return p.ProgHeader
		}
	}
	t.Fatalf("%s has no executable PT_LOAD", path)
	return elf.ProgHeader{}
}

// statDevIno returns the device and inode of a stat result.
func statDevIno(st os.FileInfo) (dev, ino uint64) {
	s := st.Sys().(*syscall.Stat_t)
	return uint64(s.Dev), uint64(s.Ino)
}

// lookPath returns the path of tool, or skips the test naming why it
// needs it.
func lookPath(t testing.TB, tool, why string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("skipping: %s not found in PATH; it %s", tool, why)
	}
	return p
}

// run runs a command and fails the test with its output on error.
func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if b, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, b)
	}
}

// mustRead returns the contents of path.
func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tinyELF returns the seed ELF of the binary fuzz targets: a 6 KiB static
// executable with DWARF 5 and an inlined function, built from
// testdata/fuzz/tiny.c (see testdata/fuzz/README).
func tinyELF(f testing.TB) []byte {
	data, err := os.ReadFile("testdata/fuzz/tiny.elf")
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// buildGo builds the Go package or file src into dir/name with
// GOFLAGS= CGO_ENABLED=0 and the extra go build flags, and returns the
// path. It skips the test when go is missing.
func buildGo(t testing.TB, dir, name, src string, flags ...string) string {
	t.Helper()
	return buildGoWith(t, "", dir, name, src, flags...)
}

// buildGoWith is buildGo with the Go toolchain toolchain (GOTOOLCHAIN,
// which the go command downloads once; "" for the go in PATH). With a
// toolchain, src must be a single file: it is copied to dir and built
// there, outside this module, whose go.mod asks for a newer Go.
func buildGoWith(t testing.TB, toolchain, dir, name, src string, flags ...string) string {
	t.Helper()
	goTool := lookPath(t, "go", "builds the Go workloads of the .gopclntab tests")
	bin := filepath.Join(dir, name)
	env := append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0")
	var cwd string
	if toolchain != "" {
		code, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		cwd = filepath.Join(dir, "src-"+toolchain) // one path for all builds
		src = filepath.Join(cwd, filepath.Base(src))
		if err := os.MkdirAll(cwd, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(src, code, 0o644); err != nil {
			t.Fatal(err)
		}
		env = append(env, "GOTOOLCHAIN="+toolchain)
	}
	args := append(append([]string{"build", "-o", bin}, flags...), src)
	cmd := exec.Command(goTool, args...)
	cmd.Env, cmd.Dir = env, cwd
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v (GOTOOLCHAIN %q): %v\n%s", args, toolchain, err, out)
	}
	return bin
}

// findSymbol returns the .symtab symbol name of the ELF at path.
func findSymbol(path, name string) (elf.Symbol, bool) {
	f, err := elf.Open(path)
	if err != nil {
		return elf.Symbol{}, false
	}
	defer f.Close()
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == name && s.Size > 0 {
			return s, true
		}
	}
	return elf.Symbol{}, false
}

// systemLibc returns the path of the system's libc.so.6, or skips.
func systemLibc(t testing.TB) string {
	t.Helper()
	for _, pattern := range []string{"/lib/*-linux-gnu/libc.so.6", "/usr/lib/*-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib64/libc.so.6"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			if p, err := filepath.EvalSymlinks(m[0]); err == nil {
				return p
			}
		}
	}
	t.Skip("skipping: no libc.so.6 in the usual places")
	return ""
}

// openELFFile reads the ELF at path and opens it as LoadBinary does.
func openELFFile(t testing.TB, path string) (*elf.File, *limitedReaderAt) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, lr, err := openELF(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return f, lr
}

// buildInline compiles testdata/inline.c with gcc -O2 -g (and extra
// flags) into t.TempDir() and returns its path; it skips without gcc.
func buildInline(t testing.TB, extra ...string) string {
	t.Helper()
	gcc := lookPath(t, "gcc", "builds the inlining test workload from testdata/inline.c")
	out := filepath.Join(t.TempDir(), "inline")
	args := append([]string{"-O2", "-g", "-o", out, "testdata/inline.c"}, extra...)
	run(t, gcc, args...)
	return out
}

// symbolRange returns every address of the .symtab function name of bin.
func symbolRange(t testing.TB, bin, name string) []uint64 {
	s := elfSymbol(t, bin, name)
	var addrs []uint64
	for a := s.Value; a < s.Value+s.Size; a++ {
		addrs = append(addrs, a)
	}
	return addrs
}

// gnuBuildID reads the build ID from the .note.gnu.build-id section.
func gnuBuildID(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(".note.gnu.build-id")
	if sec == nil {
		return ""
	}
	data, err := sec.Data()
	if err != nil || len(data) < 16 {
		t.Fatalf("read build-id note: %v", err)
	}
	return hex.EncodeToString(data[16:])
}

// breakModuledata overwrites, in the ELF image raw, every pointer-aligned
// word of .go.module and .noptrdata that equals the address of
// .gopclntab, so that runtime.firstmoduledata cannot be found.
func breakModuledata(t *testing.T, raw []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	pcln := f.Section(".gopclntab").Addr
	hits := 0
	for _, name := range []string{".go.module", ".noptrdata"} {
		s := f.Section(name)
		if s == nil {
			continue
		}
		for off := s.Offset; off+8 <= s.Offset+s.FileSize; off += 8 {
			if binary.LittleEndian.Uint64(raw[off:]) == pcln {
				binary.LittleEndian.PutUint64(raw[off:], 0)
				hits++
			}
		}
	}
	if hits == 0 {
		t.Fatal("no moduledata found to break")
	}
}

// goFuncEntry returns the entry of the function name in the
// .gopclntab of the ELF image raw, read by debug/gosym.
func goFuncEntry(t testing.TB, raw []byte, name string) (uint64, bool) {
	t.Helper()
	f, lr, err := openELF(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tab := (&goTable{f: f, lr: lr}).get()
	if tab == nil {
		return 0, false
	}
	if fn := tab.LookupFunc(name); fn != nil {
		return fn.Entry, true
	}
	return 0, false
}

// goinlineBinary builds testdata/goinline.go into t.TempDir() and
// returns its bytes.
func goinlineBinary(t testing.TB, flags ...string) []byte {
	t.Helper()
	raw, err := os.ReadFile(buildGo(t, t.TempDir(), "goinline", "testdata/goinline.go", flags...))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// appendRecord appends one iterator record to b.
func appendRecord(b []byte, addr uint64, typ byte, name, mod string) []byte {
	b = binary.LittleEndian.AppendUint64(b, addr)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(name)))
	b = append(b, typ, byte(len(mod)))
	return append(append(b, name...), mod...)
}

// kallsymsRecords encodes /proc/kallsyms text as the BPF kallsyms
// iterator's records (kallsyms_iter.go), one per non-empty line.
func kallsymsRecords(t testing.TB, text []byte) []byte {
	t.Helper()
	var out []byte
	for _, line := range strings.Split(string(text), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 || len(f[1]) != 1 {
			t.Fatalf("malformed kallsyms line %q", line)
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			t.Fatalf("kallsyms line %q: %v", line, err)
		}
		name, mod, _ := strings.Cut(f[2], "\t")
		mod = strings.TrimSuffix(strings.TrimPrefix(mod, "["), "]")
		out = appendRecord(out, addr, f[1][0], name, mod)
	}
	return out
}

// fakeStream is an iterator stream that records being closed.
type fakeStream struct {
	io.Reader
	closed int
}
