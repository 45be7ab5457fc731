// Package objfile is the object-file layer: a [Binary] is one ELF file's
// function symbols (.symtab, .dynsym, MiniDebugInfo or .gopclntab,
// respecting sizes), its load segments for the load bias of a mapping
// ([Binary.Bias], [Binary.ELFAddress]), and the line source it chose
// ([Binary.Lines]: .gopclntab's inline tree for Go 1.20+, else DWARF,
// else .gopclntab without inlining), with its separate debug file
// found through [github.com/gprofile/gprofile/internal/symbolize/debuginfo].
//
// # Spec
//
// The System V gABI (symbol tables, program headers); google/pprof's
// internal/elfexec (GetBase) for the bias of a mapping.
package objfile
