// Package symbolize turns sampled instruction pointers into named frames.
//
// Kernel addresses are named from kallsyms (its text symbols, modules
// and BPF programs): on demand, a batch of new addresses per stack, by a
// KernelLookup when the caller gives one (Options.KernelLookup; the
// kernel's own kallsyms_lookup through a BPF program, about 1.2 µs per
// address); else from a listing read on one goroutine and parsed on
// another as it comes (about 35 bytes of heap per symbol): the binary
// records of a BPF kallsyms iterator when the caller gives one
// (Options.KallsymsIter), else the text of /proc/kallsyms. User addresses are mapped
// through /proc/PID/maps to the ELF file behind them, translated to ELF
// virtual addresses with the mapping's load bias (PIE executables and
// shared libraries), and named from the file's .symtab and .dynsym
// function symbols, respecting symbol sizes (or from .gopclntab for Go
// binaries stripped of .symtab). [vdso] frames are named from our own
// vDSO image, read once from /proc/self/mem. C++ and Rust (legacy and v0)
// names are demangled (github.com/ianlancetaylor/demangle), Rust hashes
// dropped; ShortName drops C++ parameter lists for display.
//
// Files are opened as the process sees them: its path resolved inside
// /proc/PID/root with openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS)
// (a container's absolute symlinks stay in the container), else
// /proc/PID/map_files/START-LIMIT (deleted or replaced files; needs
// CAP_SYS_ADMIN), else /proc/PID/exe. Every open is O_NONBLOCK and only a
// regular file of at most 4 GiB is read, so that a FIFO or a device where
// a binary should be never blocks; reads of one binary are capped
// (headers 16 MiB, symbol tables 1 GiB, DWARF 512 MiB, 3 GiB in all).
//
// Code that a JIT compiler made, in anonymous or memfd mappings or in
// none, is named from the process's perf map, /tmp/perf-PID.map inside
// its root (PID as the host or, failing that, the process's own PID
// namespace numbers it), read again as it grows (at most every 100 ms,
// and at most 64 MiB; malformed lines and lines over 4 KiB are skipped
// and counted).
//
// A binary without .symtab or DWARF gets them from its separate debug
// file, as gdb and perf find it: by GNU build ID under each debug
// directory (Options.DebugDirs, host paths, default /usr/lib/debug:
// <dir>/.build-id/xx/yyyy.debug), else by .gnu_debuglink, whose CRC-32
// must match, next to the binary (in the process's mount namespace), in
// its .debug subdirectory, or under each debug directory. Failing those,
// the xz-compressed symbol table of MiniDebugInfo (.gnu_debugdata) names
// local functions that .dynsym lacks. When DEBUGINFOD_URLS is set (http
// and https servers, space separated, as for elfutils), a binary with a
// build ID, no DWARF and no debug file on disk gets it from the first
// server that has it (GET <url>/buildid/<id>/debuginfo), into elfutils'
// cache (DEBUGINFOD_CACHE_PATH, else $XDG_CACHE_HOME/debuginfod_client,
// else ~/.cache/debuginfod_client; <cache>/<id>/debuginfo, written
// atomically, kept only if it is ELF with that build ID). Misses are
// remembered for the run, and on disk for cache_miss_s (600 s); a server
// that times out (DEBUGINFOD_TIMEOUT, default 10 s, to connect, to
// answer, or between bytes; DEBUGINFOD_MAXTIME, default 120 s, in all)
// is skipped for 5 minutes; downloads are capped at 4 GiB
// (DEBUGINFOD_MAXSIZE lowers it). Downloads run in the background (one
// per build ID, two at a time), so that symbolizing never waits on the
// network: a Symbolizer uses the file from the Stack call after it
// arrives (see Symbolizer.Generation), and Close cancels them.
// DebuginfodNote sums up what happened.
//
// Source lines and inlined frames come from DWARF (the package's own lazy
// reader, dwarf_*.go: versions 2 to 5, 32- and 64-bit formats, compressed
// sections too), in the binary or its debug file: the
// line table gives file and line, and DW_TAG_inlined_subroutine DIEs
// expand one address into its inlined functions, innermost first, each
// outer one at its call site, as pprof's Location.Line orders them.
// Compressed sections are inflated only as far as the unit a lookup
// needs (through .debug_aranges). Go 1.20+ binaries, stripped or not, get
// lines and inlined frames from .gopclntab instead (gopclntab_*.go: the
// function table, the pc-value tables and the runtime's inline tree,
// with moduledata found by scanning the data sections), which needs no
// DWARF and costs about 2 ms instead of 47 ms for the first lookup in a
// 20 MB binary; DWARF stays the fallback, and older Go binaries without
// DWARF get file and line, but no inlining, from .gopclntab.
//
// Caches: one entry per binary (keyed by device and inode; the file is
// opened when a process that maps it is first seen, and read at its first
// lookup, so that a process that exits, or a binary deleted, right after
// still gets names), one per process (its executable mappings, read when
// it is first seen, again when it exec'd or an address falls in no known
// mapping, and kept after it exits until Forget), and one per address. A
// binary with DWARF keeps the DWARF sections it needs in memory,
// decompressed (at most 512 MiB; glibc's take about 8 MiB of heap),
// indexes its compilation units' ranges on the first lookup (from
// .debug_aranges where it has it), and reads each unit's abbreviation
// table, line table and inline tree on the first lookup in it.
// Nothing here needs privileges by itself, but reading other users' /proc/PID/maps
// and /proc/PID/root needs root or CAP_SYS_PTRACE, and kallsyms shows
// addresses only to root (or CAP_SYSLOG) when kernel.kptr_restrict is 1.
//
// A frame that cannot be named keeps its address and mapping, and its
// Reason says why; Stats counts them.
package symbolize
