// Package elfio reads ELF files defensively: opens that never block or
// escape a process's root, reads capped per file, sections read within
// those caps, and the GNU build-ID note.
//
// # Kernel interfaces
//
// [Root.Open] resolves paths inside /proc/PID/root with openat2
// (RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS, Linux 5.6); without it, paths
// are joined to the root (see [OpenInRootNote]).
//
// # Spec
//
// The System V gABI, "Object Files" (ELF headers, sections, notes), and
// the GNU build-ID note (NT_GNU_BUILD_ID) in binutils' documentation.
package elfio
