// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// gprofile's sampler: a BPF_PROG_TYPE_PERF_EVENT program attached to one
// perf event per CPU. On every sample it takes the kernel and the user
// callchain with bpf_get_stack and sends one variable-length record through
// a BPF ring buffer (only the used part of each stack). A tracepoint on
// task_newtask adds the children of target processes to the target map,
// so `-p PID` follows forks the way `perf record -p` does; raw tracepoints
// on sched_process_exec and sched_process_exit start targets at their
// exec and report execs and exits.
//
// Built with bpf2go (see internal/attach/gen.go); needs no vmlinux.h and
// no kernel BTF: the programs are classic and raw tracepoint programs that
// read the current task through helpers, and the one tracepoint record they
// read (task_newtask) is declared below from its format file, whose
// offsets internal/attach checks before attaching.

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <linux/sched.h>
#include <bpf/bpf_helpers.h>

// Must match the kernel's default kernel.perf_event_max_stack (127) and
// attach.MaxStackDepth.
#define MAX_STACK_DEPTH 127
#define TASK_COMM_LEN 16

// Record flags (attach.Flag*).
#define FLAG_KSTACK_ERR 1 // bpf_get_stack failed for the kernel stack
#define FLAG_USTACK_ERR 2 // bpf_get_stack failed for the user stack
#define FLAG_EXIT 4       // not a sample: process tgid exited (no stacks)
#define FLAG_EXEC 8       // not a sample: process tgid exec'd a new program

// Counter slots of the per-CPU "counters" array (attach.Counter*).
enum counter {
	COUNTER_SAMPLES = 0,  // program runs that passed the filters
	COUNTER_LOST,         // records not delivered: ring buffer full
	COUNTER_KSTACK_ERR,   // kernel stacks that could not be taken
	COUNTER_USTACK_ERR,   // user stacks that could not be taken
	COUNTER_FILTERED,     // samples dropped by the pid/idle filters
	COUNTER_FORKS,        // children added to the target map
	COUNTER_MAX,
};

// One ring-buffer record. The header is fixed; ips holds kstack_len/8
// kernel IPs followed by ustack_len/8 user IPs, leaf first, and the record
// is cut after the last used IP. Layout mirrors attach.decodeRecord.
struct sample {
	__u64 time_ns;    // bpf_ktime_get_ns(): CLOCK_MONOTONIC, ns
	__u64 period;     // sample period of the event (ns for cpu-clock)
	__u64 cgroup_id;  // cgroup v2 id of the task (inode of its directory)
	__u32 tgid;       // process id
	__u32 tid;        // thread id
	__u32 cpu;
	__u32 flags;      // FLAG_*
	__u32 kstack_len; // bytes of kernel IPs
	__u32 ustack_len; // bytes of user IPs
	char comm[TASK_COMM_LEN];
	__u64 ips[2 * MAX_STACK_DEPTH];
};

// Set at load time (const volatile: the verifier prunes dead branches).
const volatile __u8 filter_tgid = 0;   // 1: only tgids in the targets map
const volatile __u8 filter_tid = 0;    // 1: only tids in the target_tids map
const volatile __u8 filter_cgroup = 0; // 1: only tasks in cgroup_id or below
const volatile __u64 cgroup_id = 0;    // the cgroup v2 id to keep
const volatile __u32 cgroup_level = 0; // its depth below the root (root = 0)
const volatile __u64 tp_period = 1;    // tracepoints: keep every Nth hit
const volatile __u8 report_exits = 0;  // 1: send a FLAG_EXIT record per exit
const volatile __u32 skip_tgid = 0;    // a process never sampled (gprofile itself)
const volatile __u8 include_idle = 0;  // 1: keep samples of pid 0
const volatile __u8 follow_forks = 1;  // 1: add children of targets
const volatile __u64 wakeup_bytes = 0; // wake the reader past this much data
const volatile __u8 user_mode_check = 0; // 1 (amd64): no kernel walk for user-mode samples

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22); // resized by the loader
} events SEC(".maps");

// Target values: sampled, or waiting for its exec (gprofile -- CMD: the
// child is a target from its fork, but only its exec'd program counts).
#define TARGET_ON 1
#define TARGET_AT_EXEC 2

// Target processes (tgid -> TARGET_*); the loader fills it, forks extend it.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

// Target threads (tid -> 1), for -t.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} target_tids SEC(".maps");

// Per-CPU tracepoint hit counter, for tp_period.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tp_hits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// Per-CPU scratch record: too large for the 512-byte BPF stack.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample);
} scratch SEC(".maps");

// Emit the record type into BTF for bpf2go -type.
const struct sample *unused_sample __attribute__((unused));

static __always_inline void count(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &slot);
	if (v)
		*v += 1;
}

static __always_inline int is_target(__u32 tgid)
{
	__u8 *v = bpf_map_lookup_elem(&targets, &tgid);
	return v && *v == TARGET_ON;
}

// keep applies the load-time filters to the current task.
static __always_inline int keep(__u32 tgid, __u32 tid)
{
	if (tgid == 0 && !include_idle)
		return 0;
	if (skip_tgid && tgid == skip_tgid)
		return 0;
	if (filter_tgid && !is_target(tgid))
		return 0;
	if (filter_tid && !bpf_map_lookup_elem(&target_tids, &tid))
		return 0;
	if (filter_cgroup && bpf_get_current_ancestor_cgroup_id(cgroup_level) != cgroup_id)
		return 0;
	return 1;
}

// take_sample records the current task's stacks and submits them. in_user
// says the sample interrupted user mode, where the kernel stack is empty:
// the kernel walk (get_perf_callchain would find nothing) is then skipped.
static __always_inline int take_sample(void *ctx, __u64 period, int in_user)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 tid = (__u32)id;
	__u32 zero = 0;

	if (!keep(tgid, tid)) {
		count(COUNTER_FILTERED);
		return 0;
	}
	count(COUNTER_SAMPLES);

	struct sample *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	s->time_ns = bpf_ktime_get_ns();
	s->period = period;
	s->cgroup_id = bpf_get_current_cgroup_id();
	s->tgid = tgid;
	s->tid = tid;
	s->cpu = bpf_get_smp_processor_id();
	s->flags = 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));

	long klen = in_user ? 0 : bpf_get_stack(ctx, s->ips, MAX_STACK_DEPTH * 8, 0);
	if (klen < 0) {
		s->flags |= FLAG_KSTACK_ERR;
		count(COUNTER_KSTACK_ERR);
		klen = 0;
	}
	__u32 kn = (__u32)klen / 8;
	if (kn > MAX_STACK_DEPTH)
		kn = MAX_STACK_DEPTH;

	long ulen = bpf_get_stack(ctx, &s->ips[kn], MAX_STACK_DEPTH * 8, BPF_F_USER_STACK);
	if (ulen < 0) {
		s->flags |= FLAG_USTACK_ERR;
		count(COUNTER_USTACK_ERR);
		ulen = 0;
	}
	__u32 un = (__u32)ulen / 8;
	if (un > MAX_STACK_DEPTH)
		un = MAX_STACK_DEPTH;
	s->kstack_len = kn * 8;
	s->ustack_len = un * 8;

	__u64 size = __builtin_offsetof(struct sample, ips) + (__u64)(kn + un) * 8;
	if (size > sizeof(*s))
		size = sizeof(*s);

	__u64 flags = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	if (bpf_ringbuf_output(&events, s, size, flags) != 0)
		count(COUNTER_LOST);
	return 0;
}

// profile runs on every sample of a hardware or software perf event.
SEC("perf_event")
int profile(struct bpf_perf_event_data *ctx)
{
	// x86-64: the privilege level of the interrupted code is in the low
	// two bits of cs (3: user mode), as the kernel's user_mode(regs).
	int in_user = user_mode_check && (ctx->regs.cs & 3) == 3;
	return take_sample(ctx, ctx->sample_period, in_user);
}

// profile_tp runs on every hit of a tracepoint perf event (the kernel calls
// a tracepoint's program on each hit, whatever the sample period); it keeps
// every tp_period-th hit of each CPU.
SEC("tracepoint")
int profile_tp(void *ctx)
{
	if (tp_period > 1) {
		__u32 zero = 0;
		__u64 *hits = bpf_map_lookup_elem(&tp_hits, &zero);
		if (!hits)
			return 0;
		*hits += 1;
		if (*hits % tp_period != 0)
			return 0;
	}
	return take_sample(ctx, tp_period, 0);
}

// The record of the task/task_newtask tracepoint, as its format file
// (/sys/kernel/tracing/events/task/task_newtask/format) lays it out; only
// pid and clone_flags are read, and attach.checkTracepointFormat checks their
// offsets and sizes against the running kernel's before attaching.
struct task_newtask_args {
	__u64 common; // common_type, _flags, _preempt_count, _pid
	__s32 pid;    // the new task's pid: its tgid, for a process
	char comm[TASK_COMM_LEN];
	__u64 clone_flags;
};
_Static_assert(__builtin_offsetof(struct task_newtask_args, pid) == 8, "task_newtask pid");
_Static_assert(__builtin_offsetof(struct task_newtask_args, clone_flags) == 32, "task_newtask clone_flags");

// follow_fork runs in the parent (current) of every new task: a new
// process forked by a target becomes a target.
SEC("tracepoint/task/task_newtask")
int follow_fork(struct task_newtask_args *ctx)
{
	if (!follow_forks)
		return 0;
	if (ctx->clone_flags & CLONE_THREAD)
		return 0; // a new thread: covered by its tgid already
	__u32 ptgid = bpf_get_current_pid_tgid() >> 32;
	if (!is_target(ptgid))
		return 0;
	__u32 ctgid = ctx->pid;
	__u8 on = TARGET_ON;
	bpf_map_update_elem(&targets, &ctgid, &on, BPF_ANY);
	count(COUNTER_FORKS);
	return 0;
}

// send_event sends a stackless record (FLAG_EXIT, FLAG_EXEC) about the
// current task's process.
static __always_inline void send_event(__u32 tgid, __u32 flag, __u64 wakeup)
{
	__u32 zero = 0;
	struct sample *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return;
	s->time_ns = bpf_ktime_get_ns();
	s->period = 0;
	s->cgroup_id = 0;
	s->tgid = tgid;
	s->tid = tgid;
	s->cpu = bpf_get_smp_processor_id();
	s->flags = flag;
	s->kstack_len = 0;
	s->ustack_len = 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));
	bpf_ringbuf_output(&events, s, __builtin_offsetof(struct sample, ips), wakeup);
}

// start_at_exec turns a target waiting for its exec on, once the new
// program is loaded (as perf's enable_on_exec does); with report_exits it
// also tells the reader at once (waking it), so that a process that lives
// a few milliseconds is seen alive, its new maps read. The exec'ing task
// is current (by now its thread group's leader). A raw tracepoint: it
// reads no argument, and detaching it costs no RCU grace period (closing
// a classic tracepoint's perf event waits for one, 20-50 ms).
SEC("raw_tracepoint/sched_process_exec")
int start_at_exec(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u8 *v = bpf_map_lookup_elem(&targets, &tgid);
	if (v && *v == TARGET_AT_EXEC)
		*v = TARGET_ON;
	if (report_exits && keep(tgid, tgid))
		send_event(tgid, FLAG_EXEC, BPF_RB_FORCE_WAKEUP);
	return 0;
}

// report_exit tells the reader that a process (thread group) ended, so
// that it can drop what it caches about it once its last samples are in.
// It runs for every exiting thread (current); the leader stands for the
// process. A raw tracepoint, as start_at_exec.
SEC("raw_tracepoint/sched_process_exit")
int report_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!report_exits || (__u32)id != tgid)
		return 0;
	if (!keep(tgid, tgid))
		return 0;
	send_event(tgid, FLAG_EXIT, BPF_RB_NO_WAKEUP);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
