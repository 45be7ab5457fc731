// Package debuginfo finds a binary's separate debug information, as gdb
// and perf do: by GNU build ID under the debug directories, by
// .gnu_debuglink (CRC-32 checked) beside the binary and under them, then
// the xz-compressed MiniDebugInfo symbol table (.gnu_debugdata), then,
// with DEBUGINFOD_URLS set, a debuginfod server
// ([github.com/gprofile/gprofile/internal/symbolize/debuginfo/debuginfod]).
//
// # Spec
//
// GDB manual, "Debugging Information in Separate Files"; GDB manual,
// "MiniDebugInfo"; the .xz file format (tukaani.org/xz/xz-file-format.txt).
package debuginfo
