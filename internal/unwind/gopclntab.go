package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
)

// Go 1.18+ .gopclntab layout (runtime/symtab.go: pcHeader, _func; the
// pc-value encoding of cmd/internal/obj): a header, the function table
// (entry offset from runtime.text, _func offset; uint32 pairs), and per
// function a "pcsp" pc-value table giving, for every pc, how many bytes the
// function has pushed since its entry (the SP delta). With it the CFA is
// rsp + delta + 8 at every pc, the return address at CFA-8. goFuncs
// (golazy.go) reads it.
const (
	goMagic118 = 0xfffffff0
	goMagic120 = 0xfffffff1
	// maxGoFuncs bounds the function count read from a header.
	maxGoFuncs = 1 << 22
)

var errNotGo118 = errors.New(".gopclntab is not Go 1.18 or later")

// goTextAddr is where .gopclntab's entry offsets start: the runtime.text
// symbol, else the start of .text (Go 1.26 leaves the header's word 0).
// It scans .symtab in place (scanSymbol): f.Symbols() made a string and a
// Symbol of every one of a Go binary's tens of thousands of symbols.
// read gives a section's bytes (sectionData, or a mapping of them).
func goTextAddr(f *elf.File, read func(*elf.Section) ([]byte, error)) uint64 {
	if v, ok := symbolValue(f, "runtime.text", read); ok {
		return v
	}
	if s := f.Section(".text"); s != nil {
		return s.Addr
	}
	return 0
}

// symbolValue returns the value of the first symbol of f's .symtab named
// name (ELF64 little-endian files only), reading the sections with read.
func symbolValue(f *elf.File, name string, read func(*elf.Section) ([]byte, error)) (uint64, bool) {
	if f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian {
		return 0, false
	}
	symtab := f.SectionByType(elf.SHT_SYMTAB)
	if symtab == nil || symtab.Link == 0 || int(symtab.Link) >= len(f.Sections) {
		return 0, false
	}
	syms, err := read(symtab)
	if err != nil {
		return 0, false
	}
	strs, err := read(f.Sections[symtab.Link])
	if err != nil {
		return 0, false
	}
	return scanSymbol(syms, strs, name)
}

// scanSymbol finds name in a little-endian ELF64 symbol table and its
// string table, reading them in place (forSymbols64).
func scanSymbol(syms, strs []byte, name string) (value uint64, ok bool) {
	if name == "" {
		return 0, false
	}
	forSymbols64(syms, strs, name[0], func(n []byte, v uint64) bool {
		if string(n) == name {
			value, ok = v, true
		}
		return !ok
	})
	return value, ok
}
