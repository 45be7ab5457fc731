// Package symbolize turns sampled instruction pointers into named frames.
//
// Kernel addresses are named from /proc/kallsyms. User addresses are mapped
// through /proc/PID/maps to the ELF file behind them (opened through
// /proc/PID/root, or /proc/PID/map_files for deleted files), translated to
// ELF virtual addresses with the mapping's load bias (PIE executables and
// shared libraries), and named from the file's .symtab and .dynsym
// function symbols, respecting symbol sizes (or from .gopclntab for Go
// binaries stripped of .symtab). [vdso] frames are named from our own
// vDSO image, read once from /proc/self/mem.
//
// A binary without .symtab or DWARF gets them from its separate debug
// file, as gdb and perf find it: by GNU build ID under each debug
// directory (Options.DebugDirs, host paths, default /usr/lib/debug:
// <dir>/.build-id/xx/yyyy.debug), else by .gnu_debuglink, whose CRC-32
// must match, next to the binary (in the process's mount namespace), in
// its .debug subdirectory, or under each debug directory. Failing those,
// the xz-compressed symbol table of MiniDebugInfo (.gnu_debugdata) names
// local functions that .dynsym lacks.
//
// Source lines and inlined frames come from DWARF (debug/dwarf; versions
// 2 to 5, compressed sections too), in the binary or its debug file: the
// line table gives file and line, and DW_TAG_inlined_subroutine DIEs
// expand one address into its inlined functions, innermost first, each
// outer one at its call site, as pprof's Location.Line orders them. Go
// binaries without DWARF get file and line, but no inlining, from
// .gopclntab.
//
// Caches: one entry per binary (keyed by device and inode), one per process
// (its executable mappings, read when the process is first seen so that a
// process that exits later still gets names), and one per address. A
// binary with DWARF keeps the DWARF sections it needs in memory,
// decompressed (at most 512 MiB; glibc's take about 20 MiB of heap),
// indexes its compilation units' ranges on the first lookup, and reads
// each unit's line table and inline tree on the first lookup in it.
// Nothing here needs privileges by itself, but reading other users' /proc/PID/maps
// and /proc/PID/root needs root or CAP_SYS_PTRACE, and kallsyms shows
// addresses only to root (or CAP_SYSLOG) when kernel.kptr_restrict is 1.
//
// A frame that cannot be named keeps its address and mapping, and its
// Reason says why; Stats counts them.
package symbolize
