// Package attach samples stacks with a BPF perf_event program: it loads
// the object generated from bpf/profile.bpf.c, opens one perf event per
// selected CPU, attaches the program to each with a BPF link, and reads
// the ring buffer, handing each record to the caller as a [Sample]. With
// target processes or [Config].ReportExits it also follows forks, execs
// and exits. User stacks are the frame-pointer walk ([CallGraphFP]) or,
// with [CallGraphDWARF], the user registers and a copy of the user stack
// from sp up to the first page that does not read, at most
// [Config].StackWindow bytes ([Sample].Regs, [Sample].Stack), for
// internal/unwind. Kernel symbols are internal/symbolize/ksym's.
//
// # Kernel interfaces
//
// BPF ring buffers (Linux 5.8), bpf_link for perf events (5.15; older
// kernels fall back to PERF_EVENT_IOC_SET_BPF), tracefs for following
// forks (mounted when missing, else a raw tracepoint with kernel BTF),
// raw tracepoints for execs and exits. [CallGraphDWARF] calls BTF-typed
// helpers (Linux 5.15 built with BTF; 5.17 for bpf_find_vma with
// [Config].StackBoundByVMA); where the verifier refuses them, Open falls
// back to frame pointers ([Sampler].CallGraph says which). On 5.17+ the
// stack copy runs under bpf_loop (the program profile_loop), which the
// verifier checks in a third of the time of the bounded loops that older
// kernels get (profile). Privileges:
// root, or CAP_BPF and CAP_PERFMON; errors a user can act on wrap
// [ErrPermission], [ErrNoRingbuf], [ErrNoPMU] and [ErrNoProcess].
//
// docs/architecture.md tells how sampling works; BenchmarkOpenSampler
// measures the start-up.
package attach
