package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/procmaps"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/symbolize/objfile"

	"github.com/gprofile/gprofile/internal/testutil"
	"golang.org/x/sys/unix"
)

// withTimeout runs fn and fails t if it takes longer than d: the file
// access tests must never hang on a FIFO or a device.
func withTimeout(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still running after %v: blocked on a file", d)
	}
}

// fakeRoot gives process pid of fp a root directory of its own, a
// temporary directory, instead of the link to "/".
func (f *fakeProc) fakeRoot(pid uint32) string {
	f.t.Helper()
	root := f.t.TempDir()
	link := filepath.Join(f.root, fmt.Sprint(pid), "root")
	os.Remove(link)
	if err := os.Symlink(root, link); err != nil {
		f.t.Fatal(err)
	}
	return root
}

// TestOpenInRootSymlink: an absolute symlink inside a process's root
// resolves inside that root, not on the host, where the same path holds
// another file.
func TestOpenInRootSymlink(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	const pid, base = 31, 0x555555554000
	fp := newFakeProc(t)
	text := textMapping(t, bin, base)
	fp.setMaps(pid, text)
	root := fp.fakeRoot(pid)

	// The host path /…/decoy/prog holds a file that is not ELF; inside the
	// root, the same path holds the real binary, and /usr/bin/prog links
	// to it with an absolute symlink.
	decoy := filepath.Join(t.TempDir(), "decoy", "prog")
	os.MkdirAll(filepath.Dir(decoy), 0o755)
	os.WriteFile(decoy, []byte("#!/bin/sh\necho not the binary\n"), 0o755)
	inRoot := filepath.Join(root, decoy)
	os.MkdirAll(filepath.Dir(inRoot), 0o755)
	if err := os.Link(bin, inRoot); err != nil {
		copyFile(t, bin, inRoot)
		text.Inode = 0 // a copy is another inode
	}
	os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755)
	if err := os.Symlink(decoy, filepath.Join(root, "usr/bin/prog")); err != nil {
		t.Fatal(err)
	}
	text.Path = "/usr/bin/prog"
	fp.setMaps(pid, text)
	s := fp.symbolizer("testdata/kallsyms.txt")
	leaf := symtest.ElfSymbol(t, bin, "leaf")
	st := s.Stack(pid, nil, []uint64{base + leaf.Value})
	checkFrames(t, st.Frames, []wantFrame{{"leaf", ReasonNone, "/usr/bin/prog"}})

	// "..", past the root, stays in it too.
	text.Path = "/../../../../../../../.." + decoy
	fp.setMaps(pid, text)
	s = fp.symbolizer("testdata/kallsyms.txt")
	st = s.Stack(pid, nil, []uint64{base + leaf.Value})
	checkFrames(t, st.Frames, []wantFrame{{"leaf", ReasonNone, text.Path}})
}

// TestOpenNotRegular: a FIFO, a directory and a device node where a
// binary should be give a reason at once; none blocks.
func TestOpenNotRegular(t *testing.T) {
	const pid = 32
	fp := newFakeProc(t)
	fp.setMaps(pid)
	root := fp.fakeRoot(pid)
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(root, "dir"), 0o755)
	entries := []procmaps.Entry{
		{Start: 0x10000, Limit: 0x11000, Perms: "r-xp", Device: 1, Inode: 11, Path: "/fifo"},
		{Start: 0x20000, Limit: 0x21000, Perms: "r-xp", Device: 1, Inode: 12, Path: "/dir"},
	}
	want := []wantFrame{{"", ReasonNoAccess, "/fifo"}, {"", ReasonNoAccess, "/dir"}}
	// A device node needs CAP_MKNOD; a symlink to /dev/zero stays in the
	// root, so the host's /dev/zero is tried through map_files instead.
	zero := procmaps.Entry{Start: 0x30000, Limit: 0x31000, Perms: "r-xp", Device: 1, Inode: 13, Path: "/zero"}
	if unix.Mknod(filepath.Join(root, "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))) != nil {
		fp.linkMapFile(pid, zero, "/dev/zero")
	}
	entries = append(entries, zero)
	want = append(want, wantFrame{"", ReasonNoAccess, "/zero"})
	fp.setMaps(pid, entries...)
	fp.linkMapFile(pid, entries[0], filepath.Join(root, "fifo"))
	s := fp.symbolizer("testdata/kallsyms.txt")
	withTimeout(t, 10*time.Second, func() {
		st := s.Stack(pid, nil, []uint64{0x10010, 0x20010, 0x30010})
		checkFrames(t, st.Frames, want)
	})
	withTimeout(t, 10*time.Second, func() {
		for _, path := range []string{filepath.Join(root, "fifo"), "/dev/zero", root} {
			if _, err := objfile.Open(path); !errors.Is(err, elfio.ErrNotRegular) {
				t.Errorf("OpenBinary(%s) = %v, want %v", path, err, elfio.ErrNotRegular)
			}
		}
	})
}

// writeSparseELF writes a sparse file of size bytes that starts with a
// 64-bit little-endian ELF header whose section header table (shnum
// entries at the end of the file) describes every section with the
// given offset and size, and returns its path.
func writeSparseELF(t *testing.T, size int64, shnum uint16, secOff, secSize uint64, secType uint32) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		testutil.Skipf(t, "cannot make a %d-byte sparse file: %v", size, err)
	}
	shoff := uint64(size) - uint64(shnum)*64
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF\x02\x01\x01")
	le := binary.LittleEndian
	le.PutUint16(hdr[16:], 3)  // ET_DYN
	le.PutUint16(hdr[18:], 62) // EM_X86_64
	le.PutUint32(hdr[20:], 1)
	le.PutUint64(hdr[40:], shoff)
	le.PutUint16(hdr[52:], 64)
	le.PutUint16(hdr[58:], 64)      // shentsize
	le.PutUint16(hdr[60:], shnum)   // shnum
	le.PutUint16(hdr[62:], shnum-1) // shstrndx: the last one
	if _, err := f.WriteAt(hdr, 0); err != nil {
		t.Fatal(err)
	}
	sh := make([]byte, 64)
	for i := 1; i < int(shnum); i++ {
		le.PutUint32(sh[0:], 1)
		le.PutUint32(sh[4:], secType)
		le.PutUint64(sh[24:], secOff)
		le.PutUint64(sh[32:], secSize)
		le.PutUint32(sh[40:], uint32(i-1)) // sh_link: a string table
		le.PutUint64(sh[56:], 24)
		if i == int(shnum)-1 {
			le.PutUint32(sh[4:], 3) // SHT_STRTAB
		}
		if _, err := f.WriteAt(sh, int64(shoff)+int64(i)*64); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestSparseAbsurdELF: a 2 GiB sparse file with an ELF header and
// sections of absurd sizes and offsets is refused (or read within the
// caps), quickly and without reading it whole.
func TestSparseAbsurdELF(t *testing.T) {
	const size = 2 << 30
	for _, tt := range []struct {
		name            string
		shnum           uint16
		secOff, secSize uint64
		secType         uint32
	}{
		{"huge string table in the file", 8, 4096, size - 1<<20, 2},
		{"sections past the end", 8, 1 << 40, 1 << 40, 2},
		{"offset+size overflows", 8, 1<<64 - 4096, 1 << 20, 2},
		{"many symbol tables", 4000, 4096, 1 << 30, 2},
		{"huge DWARF-like progbits", 16, 4096, 1<<30 + 1<<29, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeSparseELF(t, size, tt.shnum, tt.secOff, tt.secSize, tt.secType)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			withTimeout(t, 20*time.Second, func() {
				b, err := objfile.Open(path)
				if err == nil && b.Len() != 0 {
					t.Errorf("OpenBinary found %d symbols in an empty file", b.Len())
				}
			})
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 {
				t.Errorf("allocated %d MiB reading it", alloc>>20)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestLimitedReaderAt checks the budget and the size cut.
func TestLimitedReaderAt(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "lr")
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 100))
	lr := elfio.NewReaderAt(f, 60)
	buf := make([]byte, 50)
	if n, err := lr.ReadAt(buf, 80); n != 20 || err == nil {
		t.Errorf("read past the end: %d, %v", n, err)
	}
	if n, err := lr.ReadAt(buf, 0); n != 40 || err != nil {
		t.Errorf("read over the budget: %d, %v; want 40 bytes", n, err)
	}
	if _, err := lr.ReadAt(buf, 0); !errors.Is(err, elfio.ErrReadBudget) {
		t.Errorf("read with the budget spent: %v", err)
	}
}

// TestSparseHugeDWARF: a real binary grown into a 2 GiB sparse file
// whose .debug_info claims 1.5 GiB of it keeps its symbols and gets no
// lines, without reading the section.
func TestSparseHugeDWARF(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	var idx int
	for i, s := range f.Sections {
		if s.Name == ".debug_info" {
			idx = i
		}
	}
	shoff := f.ByteOrder
	f.Close()
	if idx == 0 {
		testutil.Skipf(t, "the test binary has no .debug_info")
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	const size = 2 << 30
	hdrOff := shoff.Uint64(data[40:]) + uint64(idx)*uint64(shoff.Uint16(data[58:]))
	shoff.PutUint64(data[hdrOff+24:], size-3<<29) // sh_offset
	shoff.PutUint64(data[hdrOff+32:], 3<<29)      // sh_size: 1.5 GiB
	path := filepath.Join(t.TempDir(), "huge-dwarf")
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		testutil.Skipf(t, "cannot make a sparse file: %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	withTimeout(t, 20*time.Second, func() {
		b, err := objfile.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		leaf := symtest.ElfSymbol(t, bin, "leaf")
		if sym, ok := b.Lookup(leaf.Value); !ok || sym.Function != "leaf" {
			t.Errorf("Lookup(leaf) = %+v, %v", sym, ok)
		}
		if lines := b.Lines(leaf.Value); lines != nil {
			t.Errorf("Lines(leaf) = %+v from a 1.5 GiB .debug_info", lines)
		}
	})
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("allocated %d MiB reading it", alloc>>20)
	}
}
