// Package attach samples stacks with a BPF perf_event program.
//
// It owns the kernel side of gprofile: it loads the BPF object generated
// from bpf/profile.bpf.c, opens one perf event per selected CPU (frequency
// mode, hardware cycles with a fallback to the software cpu-clock event),
// attaches the program to each with a BPF link, and reads the ring buffer
// the program writes one record per sample into. Sample hands every record
// to the caller, decoded with fixed offsets, without copying the stacks.
//
// With target processes or Config.ReportExits it also attaches raw
// tracepoint programs on sched_process_exec and sched_process_exit (to
// start targets at exec and report execs and exits), and with target
// processes a classic tracepoint program on task_newtask (to follow
// forks of targets), through tracefs (/sys/kernel/tracing or
// /sys/kernel/debug/tracing), whose format file gives the layout of the
// task_newtask record it reads. The sampler needs no kernel BTF. Closing
// a classic tracepoint's perf event waits for an RCU grace period (20-50
// ms), which is why exec and exit use raw tracepoints.
//
// The BPF programs that name kernel addresses are
// internal/symbolize/ksym's; this package only samples.
//
// Kernel requirements: BPF ring buffers (Linux 5.8), bpf_link for perf
// events (5.15; older kernels fall back to PERF_EVENT_IOC_SET_BPF),
// tracefs for following forks and reporting execs and exits, syscall
// programs, bpf_loop and bpf_kallsyms_lookup_name for the kernel symbol
// lookup (Linux 5.16), and BTF (/sys/kernel/btf/vmlinux) for the kallsyms
// iterator only (Linux 6.0; callers fall back to /proc/kallsyms without
// either).
// Privileges: root, or CAP_BPF and CAP_PERFMON (with kernel.perf_event_paranoid
// allowing it). Errors a user can act on wrap ErrPermission, ErrNoRingbuf,
// ErrNoPMU and ErrNoProcess.
//
// Nothing is cached here beyond the open file descriptors of one Sampler.
package attach
