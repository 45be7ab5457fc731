// Package procmaps parses /proc/PID/maps: one [Entry] per mapping, with
// its address range, permissions, file offset, device, inode and path.
//
// # Spec
//
// proc(5), /proc/pid/maps; the kernel's fs/proc/task_mmu.c
// (show_map_vma) for the escapes and the " (deleted)" suffix.
package procmaps
