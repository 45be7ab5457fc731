// Package symbolize turns sampled instruction pointers into named frames:
// [Symbolizer.Stack] gives a [Stack] of [Frame]s, kernel and user, each
// with its [Mapping], and a [Reason] when it could not be named.
//
// # What it owns
//
// The processes and the caches: each process's executable mappings
// (/proc/PID/maps, re-read on exec and on unknown addresses), its perf
// map for JIT code, one entry per binary (by device and inode) and one per
// address. The formats it reads are in its sub-packages: objfile (one ELF
// file: symbols, load bias, lines from dwarfline or gopclntab, debug
// files from debuginfo), kallsyms and ksym (kernel symbols), procmaps,
// perfmap, and the leaves srcline, elfio and demangle.
//
// # Kernel and privileges
//
// Nothing here needs privileges by itself, but other users' /proc/PID/maps
// and /proc/PID/root need root or CAP_SYS_PTRACE, and kallsyms shows
// addresses only to root (or CAP_SYSLOG) with kernel.kptr_restrict=1.
//
// # More
//
// docs/architecture.md tells how files are opened inside containers,
// where debug files and lines come from, and what is cached.
package symbolize
