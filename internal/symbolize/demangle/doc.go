// Package demangle turns the C++ (Itanium) and Rust (legacy and v0)
// names of symbol tables and DWARF into the names people read, through
// github.com/ianlancetaylor/demangle, and shortens them for display
// ([ShortName]).
//
// # Spec
//
// The Itanium C++ ABI, "Mangling"; Rust RFC 2603 (the v0 scheme).
package demangle
