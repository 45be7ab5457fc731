// Package attach samples stacks with a BPF perf_event program: it loads
// the object generated from bpf/profile.bpf.c, opens one perf event per
// selected CPU, attaches the program to each with a BPF link, and reads
// the ring buffer, handing each record to the caller as a [Sample].
// With target processes or [Config].ReportExits it also follows forks,
// execs and exits with tracepoint programs. User stacks are the
// frame-pointer walk ([CallGraphFP]) or, with [CallGraphDWARF], the user
// registers and a copy of the user stack from sp up to the end of its
// VMA ([Sample].Regs, [Sample].Stack) for an unwinder (internal/unwind).
// Kernel symbols are
// internal/symbolize/ksym's; this package only samples.
//
// # Kernel interfaces
//
// BPF ring buffers (Linux 5.8), bpf_link for perf events (5.15; older
// kernels fall back to PERF_EVENT_IOC_SET_BPF), tracefs for following
// forks (mounted when missing, else a raw tracepoint with kernel BTF),
// and raw tracepoints for execs and exits. The sampler itself decodes no
// kernel BTF; [CallGraphDWARF] calls helpers that take kernel objects by
// BTF id (bpf_get_current_task_btf, bpf_task_pt_regs; bpf_find_vma with
// [Config].StackBoundByVMA), which the kernel's verifier resolves with
// its own BTF: it needs Linux 5.15 (5.17 for bpf_find_vma) built with
// BTF, and where the verifier refuses it Open falls back
// to frame pointers ([Sampler].CallGraph says which). Privileges: root,
// or CAP_BPF and CAP_PERFMON (with kernel.perf_event_paranoid allowing
// it); errors a user can act on wrap [ErrPermission], [ErrNoRingbuf],
// [ErrNoPMU] and [ErrNoProcess].
//
// # More
//
// docs/architecture.md tells how sampling works; BenchmarkOpenSampler
// measures the start-up. Nothing is cached here beyond the open file
// descriptors of one [Sampler].
package attach
