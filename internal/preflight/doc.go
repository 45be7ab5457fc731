// Package preflight checks, before a profile is trusted, what the machine
// (and, for a process, each binary it maps) lacks for a complete profile:
// `gprofile check`. Each check gives one Item: ok, a warning (the profile
// would miss something; Fix says how to get it) or a note (a fact that
// changes nothing a profile needs).
//
// It reads /proc (sysctls under /proc/sys/kernel, /proc/self/status,
// /proc/self/mounts, /proc/PID/maps), /sys (kernel BTF, lockdown, the
// core PMU's events) and the binaries' ELF headers and sections; it
// probes the BPF ring buffer map type. It changes nothing (tracefs is not
// mounted here; gprofile mounts it when it runs). ELF and debug-file
// discovery are internal/symbolize's (elfio, debuginfo, procmaps).
package preflight
