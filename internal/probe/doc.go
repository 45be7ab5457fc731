// Package probe reads what user-space probes attach to from ELF files:
// function symbols as file offsets (uprobes) and the SystemTap SDT notes
// of .note.stapsdt (USDT probes), with their semaphores. It takes an
// io.ReaderAt and knows nothing of processes or of the kernel; attach
// resolves paths and attaches.
//
// The note layout is SystemTap's
// (https://sourceware.org/systemtap/wiki/UserSpaceProbeImplementation).
package probe
