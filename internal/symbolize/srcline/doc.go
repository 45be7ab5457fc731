// Package srcline is the seam between the object-file layer and its line
// backends: a [Line] is one function activation at a machine-code
// address, and a [Source] answers, for an ELF virtual address, its lines
// innermost first, as google/pprof's plugin.ObjFile.SourceLine and
// profile.Location.Line order them.
//
// The backends are [github.com/gprofile/gprofile/internal/symbolize/dwarfline]
// and [github.com/gprofile/gprofile/internal/symbolize/gopclntab].
package srcline
