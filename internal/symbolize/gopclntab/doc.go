// Package gopclntab reads a Go binary's .gopclntab: the function table
// ([Table], through debug/gosym) and, for Go 1.20 and later, the inline
// tree ([InlineLines]), so that Go binaries, stripped or not, get source
// lines and inlined frames without DWARF.
//
// It knows nothing of processes: it takes an *elf.File and an
// [github.com/gprofile/gprofile/internal/symbolize/elfio.ReaderAt].
//
// # Spec
//
// The Go runtime's layout: src/runtime/symtab.go (pcHeader, _func,
// moduledata, funcdata and pcdata indices), src/internal/abi/symtab.go
// and src/runtime/symtabinl.go (the inline tree).
package gopclntab
