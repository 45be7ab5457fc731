package unwind

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// maxSectionBytes bounds a CFI section read from a file (a larger one is
// hostile or not CFI): 256 MiB.
const maxSectionBytes = 256 << 20

// NewTable builds the unwind table of an ELF file from its .eh_frame and
// .debug_frame (compressed or not; .eh_frame rows win where both cover a
// pc); a Go 1.18+ binary's own functions get their rules from the SP
// deltas of its .gopclntab instead of .debug_frame, read as each function
// is first looked up. A file with none of these gets a table whose HasCFI
// is false. Malformed CIEs and FDEs are skipped and counted in Stats; the
// error is for a file that cannot be read at all.
func NewTable(f *elf.File) (*Table, error) { return newTable(f, nil, false) }

// newTable is newTableFrom without mapping: the CFI sections are read
// into the heap.
func newTable(f *elf.File, pcln io.ReaderAt, lazy bool) (*Table, error) {
	return newTableFrom(f, pcln, lazy, nil)
}

// newTableFrom is NewTable; for a Go binary, pcln (when not nil) is where
// the table reads its .gopclntab from as functions are first looked up
// (an open file, which the table keeps). With nil it reads the section
// into memory, since f may be closed once NewTable returns. With lazy,
// a binary whose only CFI is .eh_frame, with an .eh_frame_hdr table, and
// that is not Go gets its FDEs built one at a time on first lookup
// (lazyFDEs) instead of all at once. With lr (the same file as f, opened
// by the caller), .eh_frame and .eh_frame_hdr are mapped from it
// (elfio.MapSection: read from the page cache as they are touched, not
// copied into the heap) where they can be; the lazy FDEs keep the
// mapping, and a read of it that faults (the file shrank) gives an
// error here, or no rule for that FDE later (lazyFDEs.build).
func newTableFrom(f *elf.File, pcln io.ReaderAt, lazy bool, lr *elfio.ReaderAt) (t *Table, err error) {
	defer func() {
		if t != nil {
			t.entry = f.Entry
		}
	}()
	if lr != nil {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if elfio.RecoverFault(recover()) {
				t, err = nil, errors.New("read .eh_frame: memory fault (the file shrank)")
			}
		}()
	}
	// section reads s, mapped when it can be. The mappings stay
	// reachable (keep) until the table is built: the bytes of a Mapping
	// do not keep it alive, and it is unmapped once unreachable.
	var keep []*elfio.Mapping
	defer func() { runtime.KeepAlive(keep) }()
	section := func(s *elf.Section) ([]byte, *elfio.Mapping, error) {
		if lr != nil {
			if m := elfio.MapSection(lr, s, maxSectionBytes); m != nil {
				keep = append(keep, m)
				return m.Data, m, nil
			}
		}
		data, err := sectionData(s)
		return data, nil, err
	}
	read := func(s *elf.Section) ([]byte, error) {
		data, _, err := section(s)
		return data, err
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("not an x86-64 ELF file (%v, %v)", f.Class, f.Machine)
	}
	b := newTableBuilder()
	// A Go 1.18+ binary: its functions' rules come from .gopclntab, one
	// function at a time (goFuncs); its .debug_frame, which Go's linker
	// writes from the same SP deltas, is not read. Its .eh_frame (cgo's
	// C code) is.
	var gofn *goFuncs
	if s := f.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS && s.Flags&elf.SHF_COMPRESSED == 0 {
		src := pcln
		if src == nil {
			if data, err := sectionData(s); err == nil {
				src = bytes.NewReader(data)
			}
		}
		if src != nil {
			gofn, _ = newGoFuncs(src, int64(s.Size), goTextAddr(f, read))
		}
	}
	if gofn == nil {
		b.topFuncs = goTopFuncs(f)
	}
	var text, got uint64
	if s := f.Section(".text"); s != nil {
		text = s.Addr
	}
	if s := f.Section(".got"); s != nil {
		got = s.Addr
	}
	found := gofn != nil
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		data, mapped, err := section(s)
		if err != nil {
			return nil, fmt.Errorf("read .eh_frame: %w", err)
		}
		found = true
		sec := &frameSection{data: data, eh: true, addr: s.Addr, textAddr: text, dataAddr: got}
		h := f.Section(".eh_frame_hdr")
		if lazy && h != nil && gofn == nil && len(b.topFuncs) == 0 && !hasDebugFrame(f) {
			// The header's table is decoded here; its mapping goes
			// once unreachable.
			if hb, _, err := section(h); err == nil {
				starts, offs := ehFrameHdrTable(hb, h.Addr, s.Addr, uint64(len(data)))
				if l := newLazyFDEs(sec, starts, offs); l != nil {
					l.mapped = mapped
					return &Table{fdes: l, stats: TableStats{FDEs: len(starts)}}, nil
				}
			}
		}
		hdr := func() []int {
			if h == nil {
				return nil
			}
			hb, err := sectionData(h)
			if err != nil {
				return nil
			}
			return ehFrameHdrFDEs(hb, h.Addr, s.Addr, uint64(len(data)))
		}
		b.addSection(sec, 0, hdr)
	}
	if gofn == nil {
		data, err := debugFrame(f)
		if err != nil {
			return nil, err
		}
		if data != nil {
			found = true
			b.addSection(&frameSection{data: data}, 1, nil)
		}
	}
	t, err = b.finish()
	if err != nil {
		return nil, err
	}
	if gofn != nil {
		t.gofn, t.stats.GoFuncs = gofn, gofn.count()
	}
	t.noCFI = !found
	return t, nil
}

// sectionData reads s whole (inflated when SHF_COMPRESSED: debug/elf then
// gives its inflated Size) into one buffer of its size, where io.ReadAll's
// doubling would copy and clear about twice the bytes (a Go binary's
// .gopclntab is megabytes).
func sectionData(s *elf.Section) ([]byte, error) {
	if s.Size > maxSectionBytes {
		return nil, fmt.Errorf("section %s of %d bytes", s.Name, s.Size)
	}
	data := make([]byte, s.Size)
	if _, err := io.ReadFull(s.Open(), data); err != nil {
		return nil, fmt.Errorf("read section %s: %w", s.Name, err)
	}
	return data, nil
}

// hasDebugFrame reports whether f has a .debug_frame or .zdebug_frame
// with contents.
func hasDebugFrame(f *elf.File) bool {
	for _, name := range []string{".debug_frame", ".zdebug_frame"} {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			return true
		}
	}
	return false
}

// debugFrame returns .debug_frame, inflating SHF_COMPRESSED (debug/elf
// does) or the older .zdebug_frame ("ZLIB", 8-byte big-endian size, zlib).
func debugFrame(f *elf.File) ([]byte, error) {
	if s := f.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := sectionData(s)
		if err != nil {
			return nil, fmt.Errorf("read .debug_frame: %w", err)
		}
		return data, nil
	}
	s := f.Section(".zdebug_frame")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	raw, err := sectionData(s)
	if err != nil {
		return nil, fmt.Errorf("read .zdebug_frame: %w", err)
	}
	if len(raw) < 12 || string(raw[:4]) != "ZLIB" {
		return nil, errors.New(".zdebug_frame has no ZLIB header")
	}
	size := binary.BigEndian.Uint64(raw[4:12])
	if size > maxSectionBytes {
		return nil, fmt.Errorf(".zdebug_frame of %d bytes", size)
	}
	zr, err := zlib.NewReader(bytes.NewReader(raw[12:]))
	if err != nil {
		return nil, fmt.Errorf("inflate .zdebug_frame: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, int64(size)))
	if err != nil {
		return nil, fmt.Errorf("inflate .zdebug_frame: %w", err)
	}
	return data, nil
}

// goTopNames are the Go runtime functions that start a stack: a
// goroutine's runtime.goexit, a thread's mstart, the process's rt0_go,
// and those that switch to the thread's g0 stack leaving no frame pointer
// into the goroutine's frames (mcall, morestack).
// Go's .debug_frame gives them an ordinary return address rule (the
// runtime's own traceback stops at them by their TOPFRAME flag), so
// without this a walk would go on into whatever lies above the stack.
var goTopNames = map[string]bool{
	"runtime.goexit": true, "runtime.goexit.abi0": true,
	"runtime.mstart": true, "runtime.mstart.abi0": true,
	"runtime.rt0_go": true, "runtime.rt0_go.abi0": true,
	// mcall runs its argument on the g0 stack, which never returns to it.
	"runtime.mcall": true, "runtime.mcall.abi0": true,
	// morestack calls newstack on the g0 stack with g0's rbp: the
	// goroutine's frames are on its own stack, which nothing on g0 leads
	// to, and the walk went on into what lies above g0's saved sp, an
	// address in no mapping. (systemstack, which switches too, keeps rbp
	// at its frame on the goroutine's stack: it writes SP, so its rule
	// past its prologue is rbp's: goFlagSPWrite in golazy.go.)
	"runtime.morestack": true, "runtime.morestack.abi0": true,
}

// goEntryNames are a Go program's entry point (ELF e_entry) and what it
// jumps to before runtime.rt0_go: their sp is the process's initial
// one, at argc, with no return address above it, so a sample there has
// a whole stack of one frame (it read argc as a return address before).
// Go 1.18+ binaries only (goFuncs): scanTopFuncs looks for names that
// start with "runtime.".
var goEntryNames = map[string]bool{"_rt0_amd64_linux": true, "_rt0_amd64": true}

// goFPNames are the Go runtime functions whose caller's frame is found
// from rbp alone (CFA = rbp + 16): asmcgocall runs C code (cgo) on the
// g0 stack, with no frame of its own (its return address is on the
// goroutine's stack at an offset only the goroutine's g records), and
// leaves rbp at its caller's frame, runtime.cgocall's, on the
// goroutine's stack; the step from it gives cgocall's caller, so
// cgocall's own frame is not in the stack. The sampler copies the
// goroutine's stack for such samples (switch_tgids in
// bpf/profile.bpf.c).
var goFPNames = map[string]bool{
	"runtime.asmcgocall": true, "runtime.asmcgocall.abi0": true,
}

// IsGoELF reports whether f is a Go program or library: it has the Go
// toolchain's .gopclntab or .go.buildinfo section (read from f's section
// headers alone).
func IsGoELF(f *elf.File) bool {
	return f.Section(".gopclntab") != nil || f.Section(".go.buildinfo") != nil
}

// goTopFuncs returns the start addresses of goTopNames in a Go binary
// (IsGoELF) from its .symtab, or nil.
func goTopFuncs(f *elf.File) map[uint64]bool {
	if !IsGoELF(f) {
		return nil
	}
	if f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian {
		return nil // scanTopFuncs reads ELF64 little-endian entries
	}
	symtab := f.SectionByType(elf.SHT_SYMTAB)
	if symtab == nil || symtab.Link == 0 || int(symtab.Link) >= len(f.Sections) {
		return nil
	}
	syms, err := sectionData(symtab)
	if err != nil {
		return nil
	}
	strs, err := sectionData(f.Sections[symtab.Link])
	if err != nil {
		return nil
	}
	return scanTopFuncs(syms, strs)
}

// scanTopFuncs finds goTopNames in a little-endian ELF64 symbol table and
// its string table, reading the entries in place (forSymbols64):
// f.Symbols() made a string and a Symbol of every one of a Go binary's
// tens of thousands of symbols to find four.
func scanTopFuncs(syms, strs []byte) map[uint64]bool {
	top := map[uint64]bool{}
	forSymbols64(syms, strs, 'r', func(name []byte, value uint64) bool { // every goTopNames entry starts with "runtime."
		if goTopNames[string(name)] { // no allocation: map lookup of a converted []byte
			top[value] = true
		}
		return true
	})
	return top
}

// forSymbols64 calls fn with the name and value of every symbol of a
// little-endian ELF64 symbol table (24-byte Elf64_Sym entries) whose
// value is not 0 and whose NUL-terminated name in strs starts with
// first, reading both tables in place, until fn returns false.
func forSymbols64(syms, strs []byte, first byte, fn func(name []byte, value uint64) bool) {
	const entry = 24 // Elf64_Sym: name u32, info, other, shndx u16, value u64, size u64
	for off := entry; off+entry <= len(syms); off += entry {
		name := binary.LittleEndian.Uint32(syms[off:])
		value := binary.LittleEndian.Uint64(syms[off+8:])
		if value == 0 || int64(name) >= int64(len(strs)) || strs[name] != first {
			continue
		}
		end := bytes.IndexByte(strs[name:], 0)
		if end < 0 {
			continue
		}
		if !fn(strs[name:int(name)+end], value) {
			return
		}
	}
}

// debugDirs are where separate debug files are looked up by build ID
// (/usr/lib/debug/.build-id/ab/cdef….debug), as gdb does.
var debugDirs = []string{"/usr/lib/debug"}

// loadTable opens path and builds its table. A binary with no CFI of its
// own gets the .debug_frame of its separate debug file when one is
// installed (found by build ID under root+/usr/lib/debug).
func loadTable(path, root string) (*Table, error) {
	// One open file for the headers and the mappings, so that both are
	// of the same file even if path is replaced meanwhile.
	of, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	keep := false // the table reads .gopclntab through of
	defer func() {
		if !keep {
			of.Close() // the mappings outlive it
		}
	}()
	f, err := elf.NewFile(of)
	if err != nil {
		return nil, err
	}
	// A Go binary's table reads .gopclntab from a mapping of the file
	// (page cache, no system call a function), else through the open
	// file, for as long as the table lives (the mapping is unmapped and
	// the os.File closed once unreachable). Its .eh_frame and
	// .eh_frame_hdr are mapped too (newTableFrom).
	var pcln io.ReaderAt
	var mapped *elfio.Mapping
	lr := elfio.NewReaderAt(of, elfio.MaxPclntabBytes)
	throughFile := false
	if s := f.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		if mapped = elfio.MapSection(lr, s, elfio.MaxPclntabBytes); mapped != nil {
			pcln = bytes.NewReader(mapped.Data)
		} else {
			pcln, throughFile = io.NewSectionReader(of, int64(s.Offset), int64(s.Size)), true
		}
	}
	t, err := newTableFrom(f, pcln, true, lr)
	keep = throughFile && err == nil && t.gofn != nil
	if err == nil && t.gofn != nil {
		t.gofn.mapped = mapped
	}
	if err != nil || t.HasCFI() {
		return t, err
	}
	id := buildID(f)
	if len(id) < 2 {
		return t, nil
	}
	h := hex.EncodeToString(id)
	for _, d := range debugDirs {
		p := filepath.Join(root, d, ".build-id", h[:2], h[2:]+".debug")
		if _, err := os.Stat(p); err != nil {
			continue
		}
		df, err := elf.Open(p)
		if err != nil {
			continue
		}
		dt, err := NewTable(df)
		df.Close()
		if err == nil && dt.HasCFI() {
			return dt, nil
		}
	}
	return t, nil
}

// buildID returns the GNU build ID note's bytes, or nil.
func buildID(f *elf.File) []byte {
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		return nil
	}
	data, err := s.Data()
	if err != nil || len(data) < 16 {
		return nil
	}
	nameSize := binary.LittleEndian.Uint32(data[0:4])
	descSize := binary.LittleEndian.Uint32(data[4:8])
	off := 12 + (uint64(nameSize)+3)&^3
	if off+uint64(descSize) > uint64(len(data)) {
		return nil
	}
	return data[off : off+uint64(descSize)]
}
