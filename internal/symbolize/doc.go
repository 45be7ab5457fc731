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
// Caches: one entry per binary (keyed by device and inode), one per process
// (its executable mappings, read when the process is first seen so that a
// process that exits later still gets names), and one per address. Nothing
// here needs privileges by itself, but reading other users' /proc/PID/maps
// and /proc/PID/root needs root or CAP_SYS_PTRACE, and kallsyms shows
// addresses only to root (or CAP_SYSLOG) when kernel.kptr_restrict is 1.
//
// A frame that cannot be named keeps its address and mapping, and its
// Reason says why; Stats counts them.
package symbolize
