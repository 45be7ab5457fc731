package srcline

// Line is one function activation at a machine-code address, from
// DWARF or .gopclntab.
type Line struct {
	// Function is the display name (demangled from DW_AT_linkage_name
	// when there is one, else DW_AT_name); "" when the debug information
	// does not name it.
	Function string
	// SystemName is the name as it stands in the debug information
	// (mangled for C++ and Rust); equal to Function for C and Go.
	SystemName string
	// File is the source file as the debug information records it,
	// joined to its directory and, for DWARF 4 and older, the compilation
	// directory; it may be relative when the producer remapped those
	// (-fdebug-prefix-map, as distributions build). "" when unknown.
	File string
	// Line is the 1-based source line; 0 when unknown.
	Line int
}

// Source maps ELF virtual addresses to source lines.
type Source interface {
	// lines returns the source lines of elfAddr, innermost first, or nil.
	Lines(elfAddr uint64) []Line
}
