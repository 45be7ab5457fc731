package objfile

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/gopclntab"
)

// maxSymbolBytes bounds a symbol or string table read whole: 1 GiB, as
// elfio.CheckSymbolTable bounds them.
const maxSymbolBytes = 1 << 30

// rawSym is a candidate function symbol while a Binary is built.
type rawSym struct {
	name  string
	start uint64
	size  uint64
	limit uint64 // end of the symbol's section (or segment), bytes
	bind  elf.SymBind
	typ   elf.SymType
}

// readSymbols fills b.syms and b.names from .symtab and .dynsym. When f
// has no .symtab functions, the separate debug file's .symtab stands in
// for it (setting b.debugFile), else MiniDebugInfo's, else .gopclntab's
// functions. A file without any of them is valid and has no symbols.
// Errors concern f's own tables; a bad debug file is skipped.
func (b *Binary) readSymbols(f *elf.File, lr *elfio.ReaderAt, dbg *debuginfo.File, gt *gopclntab.Table) error {
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		if err := elfio.CheckSymbolTable(lr, f, typ); err != nil {
			return err
		}
	}
	if f.Class == elf.ELFCLASS64 && f.ByteOrder == binary.LittleEndian {
		return b.readSymbols64(f, lr, dbg, gt)
	}
	symtab, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("read .symtab: %w", err)
	}
	dynsym, err := f.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("read .dynsym: %w", err)
	}
	raws := make([]rawSym, 0, len(symtab)+len(dynsym))
	raws = b.appendFuncs(raws, f, symtab)
	return b.finishSymbols(raws, f, lr, dbg, gt, func(raws []rawSym) ([]rawSym, error) {
		return b.appendFuncs(raws, f, dynsym), nil
	})
}

// readSymbols64 is readSymbols for a little-endian ELF64 file: it reads
// .symtab and .dynsym in place (appendFuncs64), making a name string for
// function symbols only; debug/elf's Symbols makes a Symbol and a string
// of every one of a Go binary's tens of thousands of symbols
// (BenchmarkReadSymbols).
func (b *Binary) readSymbols64(f *elf.File, lr *elfio.ReaderAt, dbg *debuginfo.File, gt *gopclntab.Table) error {
	raws, err := b.appendFuncs64(nil, f, lr, elf.SHT_SYMTAB)
	if err != nil {
		return fmt.Errorf("read .symtab: %w", err)
	}
	return b.finishSymbols(raws, f, lr, dbg, gt, func(raws []rawSym) ([]rawSym, error) {
		raws, err := b.appendFuncs64(raws, f, lr, elf.SHT_DYNSYM)
		if err != nil {
			return nil, fmt.Errorf("read .dynsym: %w", err)
		}
		return appendPLT64(raws, f, lr), nil
	})
}

// pltEntry is the size of an x86-64 PLT entry, bytes.
const pltEntry = 16

// appendPLT64 appends a symbol "NAME@plt" for each PLT entry of a
// little-endian ELF64 x86-64 file, as perf names them: entry i of
// .plt.sec (with IBT), else entry i+1 of .plt (entry 0 is the resolver's
// stub), calls the function of the i-th R_X86_64_JUMP_SLOT relocation
// of .rela.plt, named by .dynsym. PLT stubs have no symbol of their own,
// so without these a sample in one would be an unnamed address. A file
// without those sections, or with unreadable ones, gets none.
func appendPLT64(raws []rawSym, f *elf.File, lr *elfio.ReaderAt) []rawSym {
	const relaEntry = 24 // Elf64_Rela: offset u64, info u64, addend i64
	rela, plt := f.Section(".rela.plt"), f.Section(".plt.sec")
	first := uint64(0)
	if plt == nil {
		plt, first = f.Section(".plt"), 1
	}
	if f.Machine != elf.EM_X86_64 || rela == nil || plt == nil || rela.Type != elf.SHT_RELA || plt.Type == elf.SHT_NOBITS ||
		int(rela.Link) <= 0 || int(rela.Link) >= len(f.Sections) {
		return raws
	}
	dynsym := f.Sections[rela.Link]
	if dynsym.Type != elf.SHT_DYNSYM || int(dynsym.Link) <= 0 || int(dynsym.Link) >= len(f.Sections) {
		return raws
	}
	rels, err := elfio.SectionData(lr, rela, maxSymbolBytes)
	if err != nil {
		return raws
	}
	syms, err := elfio.SectionData(lr, dynsym, maxSymbolBytes)
	if err != nil {
		return raws
	}
	strs, err := elfio.SectionData(lr, f.Sections[dynsym.Link], maxSymbolBytes)
	if err != nil {
		return raws
	}
	le := binary.LittleEndian
	limit := plt.Addr + plt.Size
	for i := uint64(0); (i+1)*relaEntry <= uint64(len(rels)); i++ {
		info := le.Uint64(rels[i*relaEntry+8:])
		addr := plt.Addr + (i+first)*pltEntry
		if addr+pltEntry > limit {
			break
		}
		sym := info >> 32
		if elf.R_X86_64(uint32(info)) != elf.R_X86_64_JMP_SLOT || sym == 0 || (sym+1)*24 > uint64(len(syms)) {
			continue
		}
		name := uint64(le.Uint32(syms[sym*24:]))
		if name == 0 || name >= uint64(len(strs)) {
			continue
		}
		end := bytes.IndexByte(strs[name:], 0)
		if end <= 0 {
			continue
		}
		raws = append(raws, rawSym{
			name: string(strs[name:name+uint64(end)]) + "@plt", start: addr, size: pltEntry, limit: limit,
			bind: elf.STB_LOCAL, typ: elf.STT_FUNC,
		})
	}
	return raws
}

// finishSymbols completes readSymbols from raws, f's .symtab functions:
// the stand-ins when there are none, then .dynsym's (dynsym appends them).
func (b *Binary) finishSymbols(raws []rawSym, f *elf.File, lr *elfio.ReaderAt, dbg *debuginfo.File, gt *gopclntab.Table, dynsym func([]rawSym) ([]rawSym, error)) error {
	if len(raws) == 0 && dbg != nil {
		raws = b.appendFuncs(raws, dbg.ELF, safeSymbols(dbg.ELF, dbg.Reader))
		if len(raws) > 0 {
			b.debugFile = dbg.Path
		}
	}
	if len(raws) == 0 {
		if mini := debuginfo.MiniDebugInfo(f, lr); mini != nil {
			raws = b.appendFuncs(raws, mini, safeSymbols(mini, nil))
		}
	}
	if len(raws) == 0 {
		raws = appendGoFuncs(raws, gt) // a Go binary stripped of .symtab
	}
	raws, err := dynsym(raws)
	if err != nil {
		return err
	}
	b.build(bestRaws(raws))
	return nil
}

// appendFuncs64 appends the function symbols of f's symbol table of type
// typ (SHT_SYMTAB or SHT_DYNSYM; absent: none) to raws, reading the
// little-endian Elf64_Sym entries in place, with appendFuncs's rules.
// Names are cut at the string table's end.
func (b *Binary) appendFuncs64(raws []rawSym, f *elf.File, lr *elfio.ReaderAt, typ elf.SectionType) ([]rawSym, error) {
	const entry = 24 // Elf64_Sym: name u32, info u8, other u8, shndx u16, value u64, size u64
	sec := f.SectionByType(typ)
	if sec == nil {
		return raws, nil
	}
	if sec.Size%entry != 0 {
		return raws, fmt.Errorf("section %s: %d bytes, not a multiple of %d", sec.Name, sec.Size, entry)
	}
	syms, err := elfio.SectionData(lr, sec, maxSymbolBytes)
	if err != nil {
		return raws, err
	}
	var strs []byte
	if int(sec.Link) > 0 && int(sec.Link) < len(f.Sections) {
		if strs, err = elfio.SectionData(lr, f.Sections[sec.Link], maxSymbolBytes); err != nil {
			return raws, err
		}
	}
	le := binary.LittleEndian
	// Room for every candidate at once: raws grew by doubling before,
	// copying and clearing about twice the bytes.
	n := 0
	for off := entry; off+entry <= len(syms); off += entry {
		if t := elf.ST_TYPE(syms[off+4]); t == elf.STT_FUNC || t == elf.STT_GNU_IFUNC || t == elf.STT_NOTYPE {
			n++
		}
	}
	raws = slices.Grow(raws, n)
	for off := entry; off+entry <= len(syms); off += entry { // entry 0 is the null symbol
		e := syms[off : off+entry]
		name := le.Uint32(e)
		info := e[4]
		s := elf.Symbol{Info: info, Section: elf.SectionIndex(le.Uint16(e[6:])), Value: le.Uint64(e[8:]), Size: le.Uint64(e[16:])}
		if s.Section == elf.SHN_UNDEF || s.Value == 0 || name == 0 || int64(name) >= int64(len(strs)) || strs[name] == 0 {
			continue
		}
		t := elf.ST_TYPE(info)
		if t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC && (t != elf.STT_NOTYPE || s.Size == 0) {
			continue
		}
		limit, exec := b.sectionLimit(f, &s)
		if t == elf.STT_NOTYPE && !exec {
			continue
		}
		end := bytes.IndexByte(strs[name:], 0)
		if end < 0 {
			end = len(strs) - int(name)
		}
		raws = append(raws, rawSym{
			// The name stays in strs, which is not written again, until
			// build copies the names kept into one arena: a copy per
			// symbol here was most of what reading a table allocated.
			name: unsafe.String(&strs[name], end), start: s.Value, size: s.Size, limit: limit,
			bind: elf.ST_BIND(info), typ: t,
		})
	}
	return raws, nil
}

// safeSymbols returns the .symtab of a debug file, or nil when it has
// none or it is corrupt (debug/elf errors and panics alike) or too large.
func safeSymbols(f *elf.File, lr *elfio.ReaderAt) (syms []elf.Symbol) {
	defer func() {
		if recover() != nil {
			syms = nil
		}
	}()
	if elfio.CheckSymbolTable(lr, f, elf.SHT_SYMTAB) != nil {
		return nil
	}
	syms, _ = f.Symbols()
	return syms
}

// appendFuncs appends the function symbols of syms to raws.
func (b *Binary) appendFuncs(raws []rawSym, f *elf.File, syms []elf.Symbol) []rawSym {
	for i := range syms {
		s := &syms[i]
		typ := elf.ST_TYPE(s.Info)
		if s.Section == elf.SHN_UNDEF || s.Value == 0 || s.Name == "" {
			continue
		}
		limit, exec := b.sectionLimit(f, s)
		switch {
		case typ == elf.STT_FUNC || typ == elf.STT_GNU_IFUNC:
		case typ == elf.STT_NOTYPE && s.Size > 0 && exec:
		default:
			continue
		}
		raws = append(raws, rawSym{
			name: s.Name, start: s.Value, size: s.Size, limit: limit,
			bind: elf.ST_BIND(s.Info), typ: typ,
		})
	}
	return raws
}

// sectionLimit returns the end address of the section that holds s and
// whether that section is executable. Without a usable section header it
// falls back to the end of the PT_LOAD segment holding s, then to no
// limit.
func (b *Binary) sectionLimit(f *elf.File, s *elf.Symbol) (limit uint64, exec bool) {
	if int(s.Section) < len(f.Sections) {
		sec := f.Sections[s.Section]
		if sec.Flags&elf.SHF_ALLOC != 0 && sec.Addr <= s.Value {
			return sec.Addr + sec.Size, sec.Flags&elf.SHF_EXECINSTR != 0
		}
	}
	for _, p := range b.loads {
		if p.Vaddr <= s.Value && s.Value < p.Vaddr+p.Memsz {
			return p.Vaddr + p.Memsz, p.Flags&elf.PF_X != 0
		}
	}
	return math.MaxUint64, false
}

// rankRaw scores a symbol among those at one address; lower is better,
// at most 1259.
func rankRaw(s rawSym) int {
	r := 0
	if s.size == 0 {
		r += 1000
	}
	switch s.bind {
	case elf.STB_GLOBAL:
	case elf.STB_WEAK:
		r += 100
	default:
		r += 200
	}
	if s.typ == elf.STT_NOTYPE {
		r += 50
	}
	return r + min(len(s.name)-len(strings.TrimLeft(s.name, "_")), 9)
}

// bestRaws returns the best symbol at each address of raws, sorted by
// address: sized over size 0, global over weak over local, function over
// no type, fewer leading underscores ("malloc" over "__libc_malloc")
// (rankRaw), then the least name. Each symbol is ranked once, and the
// sort moves keys, not symbols: packed into one uint64 (offset from the
// lowest address, rank, index) when they fit, which sorts with inlined
// comparisons, else 16-byte pairs (BenchmarkLoadSymbols).
func bestRaws(raws []rawSym) []rawSym {
	if len(raws) == 0 {
		return nil
	}
	lo, hi := raws[0].start, raws[0].start
	for i := range raws {
		lo, hi = min(lo, raws[i].start), max(hi, raws[i].start)
	}
	// A key is the start and rank<<32 | index; packed, the offset from
	// lo, rank and index, when each fits its bits (rank: rankRaw's
	// at most 1259).
	const rankBits, idxBits = 11, 21
	type pair struct{ start, rest uint64 }
	keys := make([]pair, len(raws))
	for i := range raws {
		keys[i] = pair{raws[i].start, uint64(rankRaw(raws[i]))<<32 | uint64(i)}
	}
	if hi-lo < 1<<(64-rankBits-idxBits) && len(raws) < 1<<idxBits {
		packed := make([]uint64, len(keys))
		for i, k := range keys {
			packed[i] = (k.start-lo)<<(rankBits+idxBits) | k.rest>>32<<idxBits | k.rest&(1<<idxBits-1)
		}
		slices.Sort(packed)
		for i, p := range packed {
			keys[i] = pair{lo + p>>(rankBits+idxBits), p>>idxBits&(1<<rankBits-1)<<32 | p&(1<<idxBits-1)}
		}
	} else {
		slices.SortFunc(keys, func(a, b pair) int {
			if c := cmp.Compare(a.start, b.start); c != 0 {
				return c
			}
			return cmp.Compare(a.rest, b.rest)
		})
	}
	best := make([]rawSym, 0, len(keys))
	for i := 0; i < len(keys); {
		// A run of one address: the best rank comes first; among the
		// symbols of that rank, the least name wins.
		w := uint32(keys[i].rest)
		j := i + 1
		for ; j < len(keys) && keys[j].start == keys[i].start; j++ {
			if keys[j].rest>>32 == keys[i].rest>>32 {
				if x := uint32(keys[j].rest); raws[x].name < raws[w].name {
					w = x
				}
			}
		}
		best = append(best, raws[w])
		i = j
	}
	return best
}

// build sets the end of each symbol of raws (sorted by address, one
// per address) and copies their names into one arena.
func (b *Binary) build(raws []rawSym) {
	n := len(raws)
	size := 0
	for i := range raws {
		size += len(raws[i].name)
	}
	var arena strings.Builder
	arena.Grow(size)
	for i := range raws {
		arena.WriteString(raws[i].name)
	}
	b.names = arena.String()
	b.syms = make([]elfSym, n)
	off := uint32(0)
	for i := range raws {
		r := &raws[i]
		end := r.start + r.size
		if r.size == 0 {
			end = r.limit
			if i+1 < n {
				end = min(end, raws[i+1].start)
			}
		}
		b.syms[i] = elfSym{start: r.start, end: end, name: off, nlen: uint32(len(r.name)), sized: r.size > 0}
		off += uint32(len(r.name))
	}
}

// appendGoFuncs appends the functions of a Go binary's .gopclntab to raws.
// It is the symbol source for Go binaries without .symtab (go build
// -ldflags=-s, and the binaries go test and go run build). A missing or
// unparsable table adds nothing: the other symbol tables still count.
func appendGoFuncs(raws []rawSym, gt *gopclntab.Table) []rawSym {
	tab := gt.Get()
	if tab == nil {
		return raws
	}
	for i := range tab.Funcs {
		fn := &tab.Funcs[i]
		if fn.End <= fn.Entry || fn.Name == "" {
			continue
		}
		raws = append(raws, rawSym{
			name: fn.Name, start: fn.Entry, size: fn.End - fn.Entry, limit: math.MaxUint64,
			bind: elf.STB_GLOBAL, typ: elf.STT_FUNC,
		})
	}
	return raws
}
