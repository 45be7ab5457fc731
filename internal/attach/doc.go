// Package attach samples stacks with a BPF perf_event program.
//
// It owns the kernel side of gprofile: it loads the BPF object generated
// from bpf/profile.bpf.c, opens one perf event per selected CPU (frequency
// mode, hardware cycles with a fallback to the software cpu-clock event),
// attaches the program to each with a BPF link, and reads the ring buffer
// the program writes one record per sample into. Sample hands every record
// to the caller, decoded with fixed offsets, without copying the stacks.
//
// It also loads bpf/ksym.bpf.c, a BPF kallsyms iterator (OpenKallsymsIter)
// that lists the kernel's symbols as binary records, cheaper for the
// kernel than formatting /proc/kallsyms. Both loads decode kernel BTF
// through one shared cilium/ebpf cache (HoldKernelBTF keeps it between
// them).
//
// Kernel requirements: BPF ring buffers (Linux 5.8), bpf_link for perf
// events (5.15; older kernels fall back to PERF_EVENT_IOC_SET_BPF), and BTF
// (/sys/kernel/btf/vmlinux) for following forks of target processes and
// for the kallsyms iterator (Linux 6.0; callers fall back to
// /proc/kallsyms without it).
// Privileges: root, or CAP_BPF and CAP_PERFMON (with kernel.perf_event_paranoid
// allowing it). Errors a user can act on wrap ErrPermission, ErrNoRingbuf,
// ErrNoPMU and ErrNoProcess.
//
// Nothing is cached here beyond the open file descriptors of one Sampler.
package attach
