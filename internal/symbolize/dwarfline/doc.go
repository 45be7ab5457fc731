// Package dwarfline is a lazy DWARF reader for one question: the source
// lines and inlined functions at a machine-code address ([Table.Lines],
// innermost first). It reads DWARF versions 2 to 5, 32- and 64-bit, from
// an ELF file's sections, inflating compressed sections only as far as
// the compilation unit a lookup needs, and keeps inflated bytes in an
// optional on-disk [SectionCache]. Large sections live outside the Go
// heap, a page at a time; a unit's pages that can be read again are given
// back once its line table and inline tree are read, and a line table
// keeps a mark every 16 rows instead of its rows.
//
// It knows nothing of processes: it takes an *elf.File and an
// [github.com/gprofile/gprofile/internal/symbolize/elfio.ReaderAt].
//
// # Spec
//
// DWARF Debugging Information Format, Version 5 (dwarfstd.org), sections
// 6.2 (line number information), 3.3.8 (inlined subroutines) and 7
// (data representation); version 4 for the older forms.
package dwarfline
