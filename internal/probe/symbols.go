package probe

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
)

// Func is a function symbol of an ELF file.
type Func struct {
	// Name is the symbol's name as the symbol table spells it (mangled).
	Name string
	// Offset is the symbol's start as a byte offset in the file: what a
	// uprobe attaches to (the kernel maps file offsets, not addresses).
	Offset uint64
	// Size is the symbol's size in bytes (0 when the table does not say).
	Size uint64
}

// ErrNoFunc is wrapped by Lookup when the file has no function of that
// name.
var ErrNoFunc = errors.New("no such function")

// Funcs returns the defined function symbols of the ELF file r, from
// .symtab and .dynsym, one per name (the .symtab entry first), sorted by
// name, with their addresses turned into file offsets through the
// executable PT_LOAD segment that holds them. A file with no symbols
// returns none and no error.
func Funcs(r io.ReaderAt) ([]Func, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("read ELF: %w", err)
	}
	defer f.Close()
	var syms []elf.Symbol
	for _, read := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		s, err := read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("read ELF symbols: %w", err)
		}
		syms = append(syms, s...)
	}
	seen := map[string]bool{}
	var out []Func
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 || seen[s.Name] {
			continue
		}
		off, ok := fileOffset(f, s.Value, elf.PF_X)
		if !ok {
			continue
		}
		seen[s.Name] = true
		out = append(out, Func{Name: s.Name, Offset: off, Size: s.Size})
	}
	slices.SortFunc(out, func(a, b Func) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

// fileOffset turns the virtual address addr of f into a file offset
// through the PT_LOAD segment (with the flags want, if not 0) that holds
// it.
func fileOffset(f *elf.File, addr uint64, want elf.ProgFlag) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&want != want {
			continue
		}
		if p.Vaddr <= addr && addr < p.Vaddr+p.Memsz {
			return addr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}

// Match returns the functions of fs whose names match pattern, a shell
// glob (path.Match: *, ?, [...]); a pattern without metacharacters
// matches only the function of that name. A malformed pattern matches
// nothing and returns path.ErrBadPattern.
func Match(fs []Func, pattern string) ([]Func, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	var out []Func
	for _, f := range fs {
		if ok, _ := path.Match(pattern, f.Name); ok {
			out = append(out, f)
		}
	}
	return out, nil
}

// IsGlob reports whether s has shell glob metacharacters.
func IsGlob(s string) bool {
	for _, c := range s {
		if c == '*' || c == '?' || c == '[' {
			return true
		}
	}
	return false
}
