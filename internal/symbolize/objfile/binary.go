package objfile

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/demangle"
	"github.com/gprofile/gprofile/internal/symbolize/dwarfline"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/gopclntab"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// ErrBadELF wraps every error that says a file is not a usable ELF
// executable or shared object: a bad header, a truncated file, corrupt
// symbol tables (including a panic inside debug/elf, which New turns
// into this error).
var ErrBadELF = errors.New("bad ELF file")

// PageSize is the size of a memory page (bytes); mapping offsets in
// /proc/PID/maps are multiples of it.
var PageSize = uint64(os.Getpagesize())

// maxSymbolWalk is how many symbols Lookup looks back past the nearest one
// for a symbol that encloses the address (a sized function that contains a
// smaller, nested symbol).
const maxSymbolWalk = 4

// Binary is the symbol and line view of one ELF executable or shared
// object: its function symbols, GNU build ID, PT_LOAD segments and source
// line information. Symbols and lines may come from a separate debug file
// (see debuginfo.Options) or from MiniDebugInfo; the build ID and segments
// always come from the binary itself. A Binary keeps no file open; it
// holds 32 bytes per symbol plus the names, and the DWARF sections it
// found (decompressed), which it parses one compilation unit at a time
// on demand. A Binary is safe for concurrent use.
type Binary struct {
	typ       elf.Type
	buildID   string
	loads     []elf.ProgHeader // PT_LOAD, in file order
	syms      []elfSym         // sorted by start, starts unique
	names     string           // arena holding every kept symbol name
	symMap    *elfio.Mapping   // holds syms and names when they are a cache entry's, in place; else nil
	debugFile string           // separate debug file used, "" if none
	lines     srcline.Source   // nil without line information
	memo      *lineMemo        // Lines' answers when lines is DWARF; nil otherwise
	demangled sync.Map         // uint32 name offset -> Function, for mangled names looked up
}

// elfSym is one function symbol: [start, end) in ELF virtual addresses,
// name names[name:name+nlen].
type elfSym struct {
	start, end uint64
	name, nlen uint32
	sized      bool
}

// Symbol is a function symbol of a Binary.
type Symbol struct {
	// Function is the display name: C++ and Rust (legacy and v0) names
	// demangled, without clone suffixes or Rust legacy hashes; C++
	// parameter lists are kept (see ShortName).
	Function string
	// SystemName is the name as it stands in .symtab or .dynsym.
	SystemName string
	// Start is the ELF virtual address (st_value) of the first byte.
	Start uint64
	// Size is st_size in bytes; 0 when the symbol has none, and it then
	// covers the addresses up to the next symbol or its section's end.
	Size uint64
}

// Open reads the ELF file at path, with separate debug information
// from DefaultDebugDirs or next to it (see debuginfo.Options). Errors from
// opening the file are returned wrapped as they are (fs.ErrNotExist,
// fs.ErrPermission); everything else wraps ErrBadELF.
func Open(path string) (*Binary, error) {
	f, err := elfio.OpenRegular(path, elfio.MaxBinaryBytes)
	if err != nil {
		return nil, fmt.Errorf("load binary: %w", err)
	}
	defer f.Close()
	dir := ""
	if abs, err := filepath.Abs(path); err == nil {
		dir = filepath.Dir(abs)
	}
	b, err := Load(f, debuginfo.Options{Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// New reads an ELF binary from r as Load does with the zero
// debuginfo.Options: separate debug files are found by build ID only.
func New(r io.ReaderAt) (*Binary, error) {
	return Load(r, debuginfo.Options{})
}

// Load reads an ELF executable (ET_EXEC) or shared object or PIE
// (ET_DYN) from r: the function symbols of .symtab and .dynsym (STT_FUNC,
// STT_GNU_IFUNC, and sized STT_NOTYPE in executable sections), merged,
// sorted by address and deduplicated (at one address a sized, global name
// with fewer leading underscores wins); the NT_GNU_BUILD_ID note; the
// PT_LOAD program headers; and the DWARF sections, or .gopclntab, for
// source lines. With opts.CacheDir, the symbol table as it was built is
// kept there by build ID (apart for binaries read with and without a
// debug file), and the next Load of the same build ID reads it back
// instead (symcache.go).
//
// When the binary has no .symtab or no DWARF, its separate debug file is
// searched as opts says (by build ID, then by .gnu_debuglink with its
// CRC checked) and supplies both; without .symtab from either, the
// symbols come from MiniDebugInfo (.gnu_debugdata), else, for a Go
// binary, from .gopclntab. r is not used after Load returns. Every
// error wraps ErrBadELF and concerns the binary itself: a corrupt or
// unreadable debug file is skipped. It never panics on corrupt input,
// and reads are capped (header tables 16 MiB, each symbol table 1 GiB,
// DWARF 512 MiB decompressed, 3 GiB in all), so that a sparse file with
// absurd section sizes costs little; sections that lie outside the file
// are refused.
func Load(r io.ReaderAt, opts debuginfo.Options) (b *Binary, err error) {
	defer func() {
		if p := recover(); p != nil {
			b, err = nil, fmt.Errorf("%w: debug/elf panicked: %v", ErrBadELF, p)
		}
	}()
	f, lr, err := elfio.OpenELF(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadELF, err)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return nil, fmt.Errorf("%w: type %v is not an executable or shared object", ErrBadELF, f.Type)
	}
	b = &Binary{typ: f.Type, buildID: elfio.BuildID(f)}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			b.loads = append(b.loads, p.ProgHeader)
		}
	}
	var dbg *debuginfo.File
	if debuginfo.Needed(f) {
		dbg = debuginfo.Find(f, b.buildID, r, &opts)
		defer dbg.Close()
	}
	gt := &gopclntab.Table{File: f, Reader: lr}
	cache := dwarfline.NewSectionCache(opts.CacheDir, dwarfline.DefaultSectionCacheBytes)
	symName := symbolsName(dbg != nil)
	debugPath := ""
	if dbg != nil {
		debugPath = dbg.Path
	}
	if !b.loadSymbols(cache, symName, debugPath) {
		if err := b.readSymbols(f, lr, dbg, gt); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadELF, err)
		}
		b.saveSymbols(cache, symName)
	}
	b.readLines(f, lr, dbg, gt, cache)
	return b, nil
}

// DebugFile returns the path of the separate debug file that supplied
// symbols or lines (a host path, as found through debuginfo.Options), or ""
// when none was used.
func (b *Binary) DebugFile() string { return b.debugFile }

// BuildID returns the hex GNU build ID (NT_GNU_BUILD_ID), "" if none.
func (b *Binary) BuildID() string { return b.buildID }

// Type returns the ELF type: elf.ET_EXEC (fixed addresses) or elf.ET_DYN
// (PIE or shared object, loaded at a bias).
func (b *Binary) Type() elf.Type { return b.typ }

// Loads returns the PT_LOAD program headers in file order. The slice is
// shared and must not be modified.
func (b *Binary) Loads() []elf.ProgHeader { return b.loads }

// Len returns the number of function symbols kept.
func (b *Binary) Len() int { return len(b.syms) }

// Lookup returns the function symbol covering the ELF virtual address
// elfAddr: the nearest symbol at or below it whose [start, start+size)
// holds it (for a size-0 symbol: before the next symbol and its section's
// end). ok is false when no symbol covers it.
func (b *Binary) Lookup(elfAddr uint64) (sym Symbol, ok bool) {
	if b.symMap != nil {
		// The table is a cache entry's mapping, which faults if its
		// file shrinks: that address goes unnamed.
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if elfio.RecoverFault(recover()) {
				sym, ok = Symbol{}, false
			}
		}()
	}
	if j := b.covering(elfAddr); j >= 0 {
		return b.symbol(&b.syms[j]), true
	}
	return Symbol{}, false
}

// covering returns the index in b.syms of the symbol covering elfAddr
// (see Lookup), or -1. A caller whose table is mapped (b.symMap)
// recovers from the fault a truncated file gives.
func (b *Binary) covering(elfAddr uint64) int {
	i := b.search(elfAddr)
	for j := i; j >= 0 && j > i-maxSymbolWalk; j-- {
		if elfAddr < b.syms[j].end {
			return j
		}
	}
	return -1
}

// sizedSymbol returns the bounds [start, end) of the sized function
// symbol covering elfAddr, as Lookup finds it, without building its
// names; ok is false when none covers it or the one that does has no
// size.
func (b *Binary) sizedSymbol(elfAddr uint64) (start, end uint64, ok bool) {
	if b.symMap != nil {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if elfio.RecoverFault(recover()) {
				start, end, ok = 0, 0, false
			}
		}()
	}
	if j := b.covering(elfAddr); j >= 0 {
		s := &b.syms[j]
		return s.start, s.end, s.sized
	}
	return 0, 0, false
}

// symbol builds the exported form of s, demangling its name once. Its
// names are b.names' own, or copies when b.names is mapped (b.symMap),
// which a name must not outlive.
func (b *Binary) symbol(s *elfSym) Symbol {
	raw := b.names[s.name : s.name+s.nlen]
	if b.symMap != nil {
		raw = strings.Clone(raw)
	}
	fn := raw
	if demangle.Mangled(raw) {
		if v, ok := b.demangled.Load(s.name); ok {
			fn = v.(string)
		} else {
			fn = demangle.Name(raw)
			b.demangled.Store(s.name, fn)
		}
	}
	sym := Symbol{
		Function:   fn,
		SystemName: raw,
		Start:      s.start,
	}
	if s.sized {
		sym.Size = s.end - s.start
	}
	return sym
}

// search returns the index of the last symbol starting at or below addr,
// or -1.
func (b *Binary) search(addr uint64) int {
	lo, hi := 0, len(b.syms)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b.syms[m].start <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// Bias returns the load bias of a mapping of this file that starts at
// process address start with file offset offset (both from
// /proc/PID/maps): elfAddr = addr - bias, and addr = elfAddr + bias, in
// wrapping uint64 arithmetic. It uses the PT_LOAD segment whose file range
// holds offset (the segment's offset rounded down to a page counts), an
// executable one first. ok is false when no segment holds offset. For
// ET_EXEC files the bias is normally 0.
func (b *Binary) Bias(start, offset uint64) (bias uint64, ok bool) {
	seg, ok := b.segmentFor(offset)
	if !ok {
		return 0, false
	}
	return start - offset + seg.Off - seg.Vaddr, true
}

// ELFAddress translates the process address addr, in a mapping that starts
// at start with file offset offset, to an ELF virtual address; ok is false
// as for Bias.
func (b *Binary) ELFAddress(addr, start, offset uint64) (elfAddr uint64, ok bool) {
	bias, ok := b.Bias(start, offset)
	return addr - bias, ok
}

// segmentFor returns the PT_LOAD segment whose file range holds the
// mapping offset, preferring executable segments.
func (b *Binary) segmentFor(offset uint64) (elf.ProgHeader, bool) {
	for _, execOnly := range []bool{true, false} {
		for _, p := range b.loads {
			if execOnly && p.Flags&elf.PF_X == 0 {
				continue
			}
			if p.Off&^(PageSize-1) <= offset && offset < p.Off+p.Filesz {
				return p, true
			}
		}
	}
	return elf.ProgHeader{}, false
}
