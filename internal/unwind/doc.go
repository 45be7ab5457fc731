// Package unwind walks user stacks without frame pointers: from the user
// registers of a sample and a copy of its stack (bytes from sp upward) it
// recovers the return addresses, frame by frame, with the call frame
// information (CFI) of each binary: .eh_frame (LSB Core, "Exception Frame"
// section, https://refspecs.linuxfoundation.org/LSB_5.0.0/LSB-Core-generic/LSB-Core-generic/ehframechpt.html)
// and .debug_frame (DWARF 5, §6.4 "Call Frame Information",
// https://dwarfstd.org/doc/DWARF5.pdf), including the DWARF expressions of
// glibc's PLT and signal trampoline. Objects without CFI (JIT code from perf
// maps, binaries built without it) are walked with frame pointers.
//
// Tables are built lazily per binary into a compact sorted array (a pc and a
// 2-byte rule index per row, rules deduplicated), cached by build ID and
// bounded in bytes. A binary whose only CFI is .eh_frame, with the sorted
// FDE table of its .eh_frame_hdr, gets one such array per FDE, built when
// a pc inside the FDE is first looked up (lazyFDEs): a profile touches a
// few hundred of a binary's thousands of FDEs. A Go binary's own functions get their rules from the
// SP deltas of its .gopclntab (not its .debug_frame, which Go's linker
// writes from the same deltas), decoded one function at a time as each is
// first looked up (goFuncs). The package reads ELF files and, for the vDSO, this process's
// own memory; it needs nothing from the kernel at unwind time and knows
// nothing of how the registers and the stack were captured.
//
// Depth: a walk stops at Options.MaxFrames (DefaultMaxFrames, 4096) frames,
// a bound against loops only: every step must move sp up, so in practice
// the copied stack window is the limit (each frame costs at least 8 bytes
// of it, usually 32–200).
//
// Tests compare the tables with readelf --debug-dump=frames-interp and
// delve's pkg/dwarf/frame, and unwind real stacks captured offline by
// testdata/stackdump.c and testdata/gostack.
package unwind
