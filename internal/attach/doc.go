// Package attach samples stacks with a BPF perf_event program: it loads
// the object generated from bpf/profile.bpf.c, opens one perf event per
// selected CPU, attaches the program to each with a BPF link, and reads
// the ring buffer, handing each record to the caller as a [Sample].
// With target processes or [Config].ReportExits it also follows forks,
// execs and exits with tracepoint programs. Kernel symbols are
// internal/symbolize/ksym's; this package only samples.
//
// # Kernel interfaces
//
// BPF ring buffers (Linux 5.8), bpf_link for perf events (5.15; older
// kernels fall back to PERF_EVENT_IOC_SET_BPF), tracefs for following
// forks (mounted when missing, else a raw tracepoint with kernel BTF),
// and raw tracepoints for execs and exits. The sampler itself needs no
// kernel BTF. Privileges: root, or CAP_BPF and CAP_PERFMON (with
// kernel.perf_event_paranoid allowing it); errors a user can act on wrap
// [ErrPermission], [ErrNoRingbuf], [ErrNoPMU] and [ErrNoProcess].
//
// # More
//
// docs/architecture.md tells how sampling works; BenchmarkOpenSampler
// measures the start-up. Nothing is cached here beyond the open file
// descriptors of one [Sampler].
package attach
