package objfile

import (
	"bytes"
	"debug/elf"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

func TestBinaryLookup(t *testing.T) {
	for _, pie := range []bool{true, false} {
		t.Run(map[bool]string{true: "pie", false: "no-pie"}[pie], func(t *testing.T) {
			path := symtest.BuildProg(t, pie)
			b, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			wantType := map[bool]elf.Type{true: elf.ET_DYN, false: elf.ET_EXEC}[pie]
			if b.Type() != wantType {
				t.Errorf("Type() = %v, want %v", b.Type(), wantType)
			}
			checkSized(t, b, symtest.ElfSymbol(t, path, "leaf"), "leaf", "leaf")
			checkSized(t, b, symtest.ElfSymbol(t, path, "middle"), "middle", "middle")
			checkSized(t, b, symtest.ElfSymbol(t, path, "_ZN2ns7mangledEi"), "ns::mangled(int)", "_ZN2ns7mangledEi")
			checkUnsized(t, b, symtest.ElfSymbol(t, path, "nosize"), symtest.ElfSymbol(t, path, "nosize_next"))
			if want := symtest.GnuBuildID(t, path); b.BuildID() != want || want == "" {
				t.Errorf("BuildID() = %q, want %q", b.BuildID(), want)
			}
			if len(b.Loads()) < 2 {
				t.Errorf("Loads() = %v", b.Loads())
			}
		})
	}
}

// checkSized checks that the sized symbol s covers exactly
// [s.Value, s.Value+s.Size).
func checkSized(t *testing.T, b *Binary, s elf.Symbol, function, system string) {
	t.Helper()
	for _, addr := range []uint64{s.Value, s.Value + s.Size - 1} {
		got, ok := b.Lookup(addr)
		want := Symbol{Function: function, SystemName: system, Start: s.Value, Size: s.Size}
		if !ok || got != want {
			t.Errorf("Lookup(%#x) = %+v, %v; want %+v", addr, got, ok, want)
		}
	}
	if got, ok := b.Lookup(s.Value + s.Size); ok && got.SystemName == system {
		t.Errorf("Lookup(%#x), past the end of %s, = %+v", s.Value+s.Size, system, got)
	}
}

// checkUnsized checks that a size-0 symbol covers the bytes up to the
// next one.
func checkUnsized(t *testing.T, b *Binary, s, next elf.Symbol) {
	t.Helper()
	if s.Size != 0 || next.Value <= s.Value {
		t.Fatalf("fixture: %s has size %d and the next symbol is at %#x", s.Name, s.Size, next.Value)
	}
	for _, addr := range []uint64{s.Value, next.Value - 1} {
		if got, ok := b.Lookup(addr); !ok || got.Function != s.Name || got.Size != 0 {
			t.Errorf("Lookup(%#x) = %+v, %v; want %s", addr, got, ok, s.Name)
		}
	}
	if got, ok := b.Lookup(next.Value); !ok || got.Function != next.Name {
		t.Errorf("Lookup(%#x) = %+v, %v; want %s", next.Value, got, ok, next.Name)
	}
}

// TestBiasUnalignedSegment covers a segment whose file offset is not page
// aligned (lld, or binaries whose text shares a page with the headers).
func TestBiasUnalignedSegment(t *testing.T) {
	b := &Binary{loads: []elf.ProgHeader{
		{Type: elf.PT_LOAD, Flags: elf.PF_R, Off: 0, Vaddr: 0, Filesz: 0x1234},
		{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x1234, Vaddr: 0x2234, Filesz: 0x3000},
	}}
	const start, offset = 0x7f0000002000, 0x1000 // mapping of the page holding 0x1234
	got, ok := b.ELFAddress(start+0x300, start, offset)
	if want := uint64(0x2300); !ok || got != want {
		t.Errorf("ELFAddress = %#x, %v; want %#x", got, ok, want)
	}
}

func TestNewBinaryCorrupt(t *testing.T) {
	path := symtest.BuildProg(t, true)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 4, 16, 63, 64, 200, len(data) / 2, len(data) - 100, len(data) - 1} {
		if _, err := New(bytes.NewReader(data[:n])); err != nil && !errors.Is(err, ErrBadELF) {
			t.Errorf("NewBinary(first %d bytes) error %v does not wrap ErrBadELF", n, err)
		}
	}
	if _, err := New(bytes.NewReader(data[:len(data)/2])); err == nil {
		t.Error("NewBinary(half a file) succeeded")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, len(data))
	for range 300 {
		copy(buf, data)
		for range 1 + rng.IntN(8) {
			buf[rng.IntN(256+rng.IntN(len(buf)-256))] = byte(rng.Uint32())
		}
		b, err := New(bytes.NewReader(buf)) // must not panic
		if err == nil {
			b.Lookup(0x1180)
			b.Bias(0x555555555000, 0x1000)
		} else if !errors.Is(err, ErrBadELF) {
			t.Fatalf("NewBinary(corrupt) error %v does not wrap ErrBadELF", err)
		}
	}
}

func TestOpenBinaryErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing")); err == nil || errors.Is(err, ErrBadELF) {
		t.Errorf("OpenBinary(missing) error = %v; want a non-ELF error", err)
	}
	text := filepath.Join(dir, "text")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho not ELF\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(text); !errors.Is(err, ErrBadELF) {
		t.Errorf("OpenBinary(script) error = %v; want ErrBadELF", err)
	}
	gcc := symtest.LookPath(t, "gcc", "builds a relocatable object")
	obj := filepath.Join(dir, "prog.o")
	if b, err := exec.Command(gcc, "-c", "-o", obj, "../testdata/prog.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc -c: %v\n%s", err, b)
	}
	if _, err := Open(obj); !errors.Is(err, ErrBadELF) {
		t.Errorf("OpenBinary(relocatable object) error = %v; want ErrBadELF", err)
	}
}

// panicReader is an io.ReaderAt that panics, as a debug/elf bug on corrupt
// input would.
type panicReader struct{}

func (panicReader) ReadAt([]byte, int64) (int, error) { panic("corrupt input") }

func TestNewBinaryRecoversPanic(t *testing.T) {
	b, err := New(panicReader{})
	if b != nil || !errors.Is(err, ErrBadELF) {
		t.Errorf("NewBinary(panicking reader) = %v, %v; want ErrBadELF", b, err)
	}
}
