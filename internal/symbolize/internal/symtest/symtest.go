package symtest

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/testutil"
)

// BuildProg compiles testdata/prog.c with gcc into t.TempDir() as a PIE
// (pie) or a fixed-address executable, and returns its path. It skips the
// test when gcc is missing (see LookPath).
func BuildProg(t testing.TB, pie bool) string {
	t.Helper()
	gcc := LookPath(t, "gcc", "builds the ELF test workload from testdata/prog.c")
	out := filepath.Join(t.TempDir(), "prog")
	args := []string{"-O2", "-g", "-fno-omit-frame-pointer", "-o", out, Testdata("prog.c")}
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

// ElfSymbol returns the .symtab symbol name of the ELF file at path, read
// with debug/elf independently of this package.
func ElfSymbol(t testing.TB, path, name string) elf.Symbol {
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

// ExecSegment returns the executable PT_LOAD header of the ELF at path.
func ExecSegment(t testing.TB, path string) elf.ProgHeader {
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

// StatDevIno returns the device and inode of a stat result.
func StatDevIno(st os.FileInfo) (dev, ino uint64) {
	s := st.Sys().(*syscall.Stat_t)
	return uint64(s.Dev), uint64(s.Ino)
}

// LookPath returns the path of tool, or skips the test naming why it
// needs it (fails it under GPROFILE_REQUIRE_PRIV=1: testutil.RequireTool).
func LookPath(t testing.TB, tool, why string) string {
	t.Helper()
	return testutil.RequireTool(t, tool, "it "+why)
}

// Run runs a command and fails the test with its output on error.
func Run(t testing.TB, name string, args ...string) {
	t.Helper()
	if b, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, b)
	}
}

// MustRead returns the contents of path.
func MustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TinyELF returns the seed ELF of the binary fuzz targets: a 6 KiB static
// executable with DWARF 5 and an inlined function, built from
// testdata/fuzz/tiny.c (see testdata/fuzz/README).
func TinyELF(f testing.TB) []byte {
	data, err := os.ReadFile(Testdata("fuzz/tiny.elf"))
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// BuildGo builds the Go package or file src into dir/name with
// GOFLAGS= CGO_ENABLED=0 and the extra go build flags, and returns the
// path. It skips the test when go is missing.
func BuildGo(t testing.TB, dir, name, src string, flags ...string) string {
	t.Helper()
	return BuildGoWith(t, "", dir, name, src, flags...)
}

// BuildGoWith is buildGo with the Go toolchain toolchain (GOTOOLCHAIN,
// which the go command downloads once; "" for the go in PATH). With a
// toolchain, src must be a single file: it is copied to dir and built
// there, outside this module, whose go.mod asks for a newer Go.
func BuildGoWith(t testing.TB, toolchain, dir, name, src string, flags ...string) string {
	t.Helper()
	goTool := LookPath(t, "go", "builds the Go workloads of the .gopclntab tests")
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

// FindSymbol returns the .symtab symbol name of the ELF at path.
func FindSymbol(path, name string) (elf.Symbol, bool) {
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

// SystemLibc returns the path of the system's libc.so.6, or skips.
func SystemLibc(t testing.TB) string {
	t.Helper()
	for _, pattern := range []string{"/lib/*-linux-gnu/libc.so.6", "/usr/lib/*-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib64/libc.so.6"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			if p, err := filepath.EvalSymlinks(m[0]); err == nil {
				return p
			}
		}
	}
	testutil.Skipf(t, "no libc.so.6 in the usual places")
	return ""
}

// LibcDebugFile returns the separate debug file of the system's libc that
// Debian's libc6-dbg installs, /usr/lib/debug/.build-id/xx/yyyy.debug
// after libc's build ID (read here with debug/elf, apart from the code
// under test). Without it it skips (fails under GPROFILE_REQUIRE_PRIV=1:
// CI installs libc6-dbg), so that a test of debug-file lookup can fail
// when the lookup, not the machine, is what broke.
func LibcDebugFile(t testing.TB) (libc, debug string) {
	t.Helper()
	libc = SystemLibc(t)
	id := GnuBuildID(t, libc)
	if len(id) < 3 {
		t.Fatalf("%s has no build ID", libc)
	}
	debug = "/usr/lib/debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug"
	testutil.RequireFile(t, debug, "libc's debug file: apt install libc6-dbg")
	return libc, debug
}

// OpenELFFile reads the ELF at path and opens it as objfile.Load does.
func OpenELFFile(t testing.TB, path string) (*elf.File, *elfio.ReaderAt) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, lr, err := elfio.OpenELF(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return f, lr
}

// BuildInline compiles testdata/inline.c with gcc -O2 -g (and extra
// flags) into t.TempDir() and returns its path; it skips without gcc.
func BuildInline(t testing.TB, extra ...string) string {
	t.Helper()
	gcc := LookPath(t, "gcc", "builds the inlining test workload from testdata/inline.c")
	out := filepath.Join(t.TempDir(), "inline")
	args := append([]string{"-O2", "-g", "-o", out, Testdata("inline.c")}, extra...)
	Run(t, gcc, args...)
	return out
}

// BuildNested compiles testdata/nested.c with gcc -O2 -g -fopenmp into
// t.TempDir() and returns its path: a GCC nested function (inner.0) and
// an OpenMP region (par._omp_fn.0), whose subprogram DIEs lie inside
// another function's. Without gcc it skips as LookPath does.
func BuildNested(t testing.TB) string {
	t.Helper()
	gcc := LookPath(t, "gcc", "builds the nested-function test workload from testdata/nested.c")
	out := filepath.Join(t.TempDir(), "nested")
	Run(t, gcc, "-O2", "-g", "-fopenmp", "-o", out, Testdata("nested.c"))
	return out
}

// SymbolRange returns every address of the .symtab function name of bin.
func SymbolRange(t testing.TB, bin, name string) []uint64 {
	s := ElfSymbol(t, bin, name)
	var addrs []uint64
	for a := s.Value; a < s.Value+s.Size; a++ {
		addrs = append(addrs, a)
	}
	return addrs
}

// GnuBuildID reads the build ID from the .note.gnu.build-id section.
func GnuBuildID(t testing.TB, path string) string {
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

// BreakModuledata overwrites, in the ELF image raw, every pointer-aligned
// word of .go.module and .noptrdata that equals the address of
// .gopclntab, so that runtime.firstmoduledata cannot be found.
func BreakModuledata(t *testing.T, raw []byte) {
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

// GoFuncEntry returns the entry of the function name in the
// .gopclntab of the ELF image raw, read by debug/gosym (text start from
// .text, as cmd/internal/objfile does).
func GoFuncEntry(t testing.TB, raw []byte, name string) (uint64, bool) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return 0, false
	}
	data, err := pcln.Data()
	if err != nil {
		return 0, false
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return 0, false
	}
	if fn := tab.LookupFunc(name); fn != nil {
		return fn.Entry, true
	}
	return 0, false
}

// GoinlineBinary builds testdata/goinline.go into t.TempDir() and
// returns its bytes.
func GoinlineBinary(t testing.TB, flags ...string) []byte {
	t.Helper()
	raw, err := os.ReadFile(BuildGo(t, t.TempDir(), "goinline", Testdata("goinline.go"), flags...))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// AppendRecord appends one iterator record to b.
func AppendRecord(b []byte, addr uint64, typ byte, name, mod string) []byte {
	b = binary.LittleEndian.AppendUint64(b, addr)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(name)))
	b = append(b, typ, byte(len(mod)))
	return append(append(b, name...), mod...)
}

// KallsymsRecords encodes /proc/kallsyms text as the BPF kallsyms
// iterator's records (kallsyms_iter.go), one per non-empty line.
func KallsymsRecords(t testing.TB, text []byte) []byte {
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
		out = AppendRecord(out, addr, f[1][0], name, mod)
	}
	return out
}

// FakeStream is an iterator stream that records being closed.
type FakeStream struct {
	io.Reader
	Closed int
}

// Close counts the call.
func (f *FakeStream) Close() error { f.Closed++; return nil }

// Testdata returns the path of name in internal/symbolize/testdata, the
// fixtures and workload sources the symbolize packages' tests share.
func Testdata(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", name)
}

// Kallsyms returns the text of /proc/kallsyms and whether it shows real
// addresses (any non-zero one among its first lines: kernel.kptr_restrict
// and the reader's privileges decide), read here apart from the kallsyms
// package under test. It skips when the file cannot be read (fails under
// GPROFILE_REQUIRE_PRIV=1).
func Kallsyms(t testing.TB) (text []byte, visible bool) {
	t.Helper()
	text, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		testutil.Skipf(t, "cannot read /proc/kallsyms: %v", err)
	}
	for i, line := range bytes.SplitN(text, []byte("\n"), 1000) {
		if addr, _, ok := bytes.Cut(line, []byte(" ")); ok && i < 999 && strings.Trim(string(addr), "0") != "" {
			return text, true
		}
	}
	return text, false
}

// RequireKallsymsAddresses returns the text of /proc/kallsyms when it
// shows real addresses; otherwise it skips, saying why (fails under
// GPROFILE_REQUIRE_PRIV=1, where CI runs as root).
func RequireKallsymsAddresses(t testing.TB) []byte {
	t.Helper()
	text, visible := Kallsyms(t)
	if !visible {
		if os.Geteuid() != 0 {
			testutil.RequirePrivileges(t)
		}
		testutil.Skipf(t, "/proc/kallsyms shows zero addresses to root (kernel.kptr_restrict=2)")
	}
	return text
}

// HasVDSO reports whether /proc/self/maps has a [vdso] mapping, read here
// apart from the code under test.
func HasVDSO(t testing.TB) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(maps, []byte(" [vdso]\n"))
}
