package objfile

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// a2lFrame is one function of addr2line -f -i output.
type a2lFrame struct {
	function, file string
	line           int
}

// addr2line runs binutils addr2line -a -f -i on addrs of bin and returns
// the frames of each address, innermost first, with file base names.
func addr2line(t testing.TB, bin string, addrs []uint64) map[uint64][]a2lFrame {
	t.Helper()
	tool := symtest.LookPath(t, "addr2line", "gives the expected lines (binutils)")
	args := []string{"-a", "-f", "-i", "-e", bin}
	for _, a := range addrs {
		args = append(args, fmt.Sprintf("%#x", a))
	}
	out, err := exec.Command(tool, args...).Output()
	if err != nil {
		t.Fatalf("addr2line: %v", err)
	}
	res := make(map[uint64][]a2lFrame)
	var cur uint64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		text := sc.Text()
		if strings.HasPrefix(text, "0x") {
			cur, _ = strconv.ParseUint(text[2:], 16, 64)
			continue
		}
		if !sc.Scan() {
			break
		}
		loc, _, _ := strings.Cut(sc.Text(), " (discriminator")
		file, lineText, _ := strings.Cut(loc, ":")
		line, _ := strconv.Atoi(lineText)
		if text == "??" {
			text = ""
		}
		res[cur] = append(res[cur], a2lFrame{function: text, file: filepath.Base(file), line: line})
	}
	return res
}

// sourceFrames converts Binary.Lines output for comparison with
// addr2line's.
func sourceFrames(lines []srcline.Line) []a2lFrame {
	var out []a2lFrame
	for _, l := range lines {
		file := "??"
		if l.File != "" {
			file = filepath.Base(l.File)
		}
		out = append(out, a2lFrame{function: l.Function, file: file, line: l.Line})
	}
	return out
}

func TestLinesMatchAddr2line(t *testing.T) {
	for _, flags := range [][]string{{"-gdwarf-5"}, {"-gdwarf-4", "-no-pie"}} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			bin := symtest.BuildInline(t, flags...)
			b, err := Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			var addrs []uint64
			for _, fn := range []string{"work", "plain", "main"} {
				addrs = append(addrs, symtest.SymbolRange(t, bin, fn)...)
			}
			want := addr2line(t, bin, addrs)
			inlined := 0
			for _, a := range addrs {
				got := sourceFrames(b.Lines(a))
				if fmt.Sprint(got) != fmt.Sprint(want[a]) {
					t.Errorf("Lines(%#x) = %v; addr2line says %v", a, got, want[a])
				}
				if len(got) > 1 {
					inlined++
				}
			}
			if inlined == 0 {
				t.Errorf("no address of work has inlined frames")
			}
		})
	}
}

// TestLinesNestedFunctions: the inlined calls of a unit's functions are
// read at a function's first lookup (dwarfline's inline tree), and a
// function whose DIE lies inside another's (a GCC nested function, an
// OpenMP region) is found whether it is asked for before its parent or
// after: every address gives what addr2line gives, in both orders.
func TestLinesNestedFunctions(t *testing.T) {
	bin := symtest.BuildNested(t)
	var nested, outer []uint64
	for _, fn := range []string{"inner.0", "par._omp_fn.0"} {
		nested = append(nested, symtest.SymbolRange(t, bin, fn)...)
	}
	for _, fn := range []string{"outer", "par", "plain", "main"} {
		outer = append(outer, symtest.SymbolRange(t, bin, fn)...)
	}
	want := addr2line(t, bin, append(slices.Clone(nested), outer...))
	for _, order := range []struct {
		name  string
		addrs []uint64
	}{
		{"nested first", append(slices.Clone(nested), outer...)},
		{"parents first", append(slices.Clone(outer), nested...)},
	} {
		t.Run(order.name, func(t *testing.T) {
			b, err := Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			named := map[string]bool{}
			for _, a := range order.addrs {
				got := sourceFrames(b.Lines(a))
				if fmt.Sprint(got) != fmt.Sprint(want[a]) {
					t.Errorf("Lines(%#x) = %v; addr2line says %v", a, got, want[a])
				}
				for _, f := range got {
					named[f.function] = true
				}
			}
			for _, fn := range []string{"inner", "par._omp_fn.0", "sq"} {
				if !named[fn] {
					t.Errorf("no address has a frame of %s: %v", fn, named)
				}
			}
		})
	}
}

func TestLinesInlined(t *testing.T) {
	bin := symtest.BuildInline(t)
	b, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../testdata/inline.c")
	if err != nil {
		t.Fatal(err)
	}
	lineOf := func(text string) int {
		i := bytes.Index(src, []byte(text))
		return bytes.Count(src[:i], []byte("\n")) + 1
	}
	want := []a2lFrame{
		{"square_plus", "inline.c", lineOf("int y = x * x")},
		{"sum_squares", "inline.c", lineOf("s += square_plus")},
		{"work", "inline.c", lineOf("int r = sum_squares")},
	}
	found := false
	for _, a := range symtest.SymbolRange(t, bin, "work") {
		got := sourceFrames(b.Lines(a))
		if fmt.Sprint(got) == fmt.Sprint(want) {
			found = true
			break
		}
	}
	if !found {
		t.Errorf("no address of work expands to %v", want)
	}
	plain := symtest.ElfSymbol(t, bin, "plain")
	got := b.Lines(plain.Value + plain.Size/2)
	if len(got) != 1 || got[0].Function != "plain" || filepath.Base(got[0].File) != "inline.c" || got[0].Line < lineOf("int plain") {
		t.Errorf("Lines(plain+%d) = %+v", plain.Size/2, got)
	}
}

func TestLinesNoDWARF(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nodwarf")
	symtest.Run(t, symtest.LookPath(t, "gcc", "builds the test workload"), "-O2", "-o", bin, "../testdata/inline.c")
	b, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	if b.lines != nil {
		t.Errorf("binary without DWARF has a line source %T", b.lines)
	}
	for _, a := range symtest.SymbolRange(t, bin, "work") {
		if got := b.Lines(a); got != nil {
			t.Fatalf("Lines(%#x) = %+v without DWARF", a, got)
		}
	}
}

// corruptSection returns a copy of the ELF file at path with edit applied
// to the contents of its section name.
func corruptSection(t *testing.T, path, name string, edit func([]byte)) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(name)
	if s == nil || s.Flags&elf.SHF_COMPRESSED != 0 {
		t.Fatalf("fixture: %s has no uncompressed %s", path, name)
	}
	edit(data[s.Offset : s.Offset+s.FileSize])
	return data
}

func TestLinesCorruptDWARF(t *testing.T) {
	bin := symtest.BuildInline(t, "-gdwarf-5")
	addrs := symtest.SymbolRange(t, bin, "work")
	for _, tt := range []struct {
		name string
		edit func([]byte)
	}{
		{"unit length past the end", func(b []byte) { binary.LittleEndian.PutUint32(b, 0xfff0_0000) }},
		{"truncated unit", func(b []byte) { binary.LittleEndian.PutUint32(b, 20) }},
		{"garbage DIEs", func(b []byte) {
			for i := 12; i < len(b); i++ {
				b[i] = byte(i*151) | 0x80
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := corruptSection(t, bin, ".debug_info", tt.edit)
			b, err := New(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("NewBinary: %v; corrupt DWARF must not fail the binary", err)
			}
			for _, a := range addrs {
				if got := b.Lines(a); got != nil {
					t.Fatalf("Lines(%#x) = %+v from corrupt DWARF", a, got)
				}
			}
			if got, ok := b.Lookup(addrs[0]); !ok || got.Function != "work" {
				t.Errorf("Lookup(work) = %+v, %v; symbols must survive corrupt DWARF", got, ok)
			}
		})
	}
}

// TestLinesRandomDWARFDamage flips bytes in the DWARF sections: lookups
// may find lines or not, but must not panic.
func TestLinesRandomDWARFDamage(t *testing.T) {
	bin := symtest.BuildInline(t, "-gdwarf-4")
	addrs := symtest.SymbolRange(t, bin, "work")
	rng := rand.New(rand.NewPCG(3, 4))
	for _, name := range []string{".debug_info", ".debug_abbrev", ".debug_line"} {
		for range 100 {
			data := corruptSection(t, bin, name, func(b []byte) {
				for range 1 + rng.IntN(4) {
					b[rng.IntN(len(b))] = byte(rng.Uint32())
				}
			})
			b, err := New(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("NewBinary with damaged %s: %v", name, err)
			}
			for _, a := range addrs {
				b.Lines(a)
			}
		}
	}
}

// TestLinesGoDWARF checks a Go binary built with DWARF: its inlined
// calls expand as for C.
func TestLinesGoDWARF(t *testing.T) {
	bin := symtest.BuildGo(t, t.TempDir(), "goinline", "../testdata/goinline.go")
	b, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../testdata/goinline.go")
	if err != nil {
		t.Fatal(err)
	}
	lineOf := func(text string) int {
		return bytes.Count(src[:bytes.Index(src, []byte(text))], []byte("\n")) + 1
	}
	want := fmt.Sprint([]a2lFrame{
		{"main.add", "goinline.go", lineOf("return a*b + a")},
		{"main.sum", "goinline.go", lineOf("s += add(i, n)")},
		{"main.work", "goinline.go", lineOf("return sum(n) * 2")},
	})
	for _, a := range symtest.SymbolRange(t, bin, "main.work") {
		if fmt.Sprint(sourceFrames(b.Lines(a))) == want {
			return
		}
	}
	t.Errorf("no address of main.work expands to %s", want)
}

// TestLinesConcurrent looks up lines from several goroutines at once on
// cold caches (run with -race).
func TestLinesConcurrent(t *testing.T) {
	bin := symtest.BuildInline(t)
	b, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	addrs := symtest.SymbolRange(t, bin, "work")
	want := fmt.Sprint(sourceFrames(b.Lines(addrs[len(addrs)/2])))
	b, _ = Open(bin) // cold again
	done := make(chan string)
	for range 4 {
		go func() {
			for _, a := range addrs {
				b.Lines(a)
			}
			done <- fmt.Sprint(sourceFrames(b.Lines(addrs[len(addrs)/2])))
		}()
	}
	for range 4 {
		if got := <-done; got != want {
			t.Errorf("concurrent Lines = %s, want %s", got, want)
		}
	}
}

// TestLinesPreload checks that Preload (parallel unit loading) gives the
// same lines as cold lookups one by one, with Lines running alongside.
func TestLinesPreload(t *testing.T) {
	libc, debug := symtest.LibcDebugFile(t)
	cold, err := Open(libc)
	if err != nil || cold.DebugFile() != debug {
		t.Fatalf("Open(%s): DebugFile() = %q, %v; want %s (libc6-dbg installs it)", libc, cold.DebugFile(), err, debug)
	}
	var addrs []uint64
	for i := 0; i < cold.Len(); i += 7 {
		addrs = append(addrs, cold.syms[i].start+1)
	}
	want := make([]string, len(addrs))
	for i, a := range addrs {
		want[i] = fmt.Sprint(cold.Lines(a))
	}
	b, err := Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, a := range addrs[:len(addrs)/4] {
			b.Lines(a)
		}
	}()
	b.Preload(addrs)
	<-done
	for i, a := range addrs {
		if got := fmt.Sprint(b.Lines(a)); got != want[i] {
			t.Fatalf("after Preload, Lines(%#x) = %s, want %s", a, got, want[i])
		}
	}
}
