package symbolize

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
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

// textMapping returns the /proc/PID/maps line the kernel would write for
// the executable segment of the ELF at path loaded with bias base.
func textMapping(t testing.TB, path string, base uint64) MapsEntry {
	t.Helper()
	seg := execSegment(t, path)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	mask := pageSize - 1
	e := MapsEntry{
		Start:  base + seg.Vaddr&^mask,
		Limit:  base + (seg.Vaddr+seg.Memsz+mask)&^mask,
		Offset: seg.Off &^ mask,
		Perms:  "r-xp",
		Path:   path,
	}
	e.Device, e.Inode = statDevIno(st)
	return e
}

// statDevIno returns the device and inode of a stat result.
func statDevIno(st os.FileInfo) (dev, ino uint64) {
	s := st.Sys().(*syscall.Stat_t)
	return uint64(s.Dev), uint64(s.Ino)
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
