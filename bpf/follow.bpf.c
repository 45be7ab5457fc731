// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Fork following without tracefs: a raw tracepoint on task_newtask that
// adds the processes a target forks to the sampler's target map and
// reports new processes to the reader (FLAG_FORK records in the events
// ring buffer), as follow_fork in bpf/profile.bpf.c does; the maps are
// the sampler's (shared through the loader's map replacement).
//
// The classic tracepoint in profile.bpf.c reads the child's pid from the
// tracepoint record, whose layout and id come from tracefs. Where tracefs
// is neither mounted nor mountable (no CAP_SYS_ADMIN, read-only /sys),
// internal/attach loads this program instead: a raw tracepoint is attached
// by name, and its arguments are the tracepoint's C arguments
// (struct task_struct *task, u64 clone_flags), so it reads the child's
// tgid with a CO-RE relocation. Loading it needs kernel BTF
// (/sys/kernel/btf/vmlinux), which costs a decode that the tracefs path
// does not pay.

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/sched.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

// The one field read, relocated against the running kernel's BTF.
struct task_struct {
	int tgid;
} __attribute__((preserve_access_index));

// As in profile.bpf.c: TARGET_ON, the COUNTER_FORKS and
// COUNTER_EVENTS_LOST slots, FLAG_FORK.
#define TARGET_ON 1
#define COUNTER_FORKS 5
#define COUNTER_EVENTS_LOST 11
#define FLAG_FORK 2048
#define TASK_COMM_LEN 16

// Set at load time, as in profile.bpf.c.
const volatile __u8 follow_forks = 1; // 1: add children of targets
const volatile __u8 report_forks = 0; // 1: send a FLAG_FORK record per new process (of a target, with follow_forks)

// The fixed part of struct sample in profile.bpf.c: a FLAG_FORK record
// (the new process in tgid and tid, its parent's tgid in probe).
struct fork_record {
	__u64 time_ns;
	__u64 period;
	__u64 cgroup_id;
	__u32 tgid;
	__u32 tid;
	__u32 cpu;
	__u32 flags;
	__u32 kstack_len;
	__u32 ustack_len;
	char comm[TASK_COMM_LEN];
	__u32 window_len;
	__u32 probe;
	__u64 switch_sp;
	__u32 switch_off;
	__u32 pad;
	__u64 regs[17];
};
_Static_assert(__builtin_offsetof(struct fork_record, probe) == 68, "struct sample probe");
_Static_assert(sizeof(struct fork_record) == 224, "struct sample header");

// Replaced by the sampler's maps at load; the loader copies their sizes.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_EVENTS_LOST + 1);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

// count adds one to the counter at slot on this CPU, as in profile.bpf.c.
static __always_inline void count(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &slot);
	if (v)
		*v += 1;
}

// follow_fork_raw runs in the parent (current) of every new task: a new
// process forked by a target becomes a target, and is reported to the
// reader with its parent, as follow_fork in profile.bpf.c. args[0] is the
// new task, args[1] its clone flags.
SEC("raw_tracepoint/task_newtask")
int follow_fork_raw(struct bpf_raw_tracepoint_args *ctx)
{
	if (ctx->args[1] & CLONE_THREAD)
		return 0; // a new thread: covered by its tgid already
	__u32 ptgid = bpf_get_current_pid_tgid() >> 32;
	__u8 *v = bpf_map_lookup_elem(&targets, &ptgid);
	int target = v && *v == TARGET_ON;
	if (follow_forks && !target)
		return 0;
	struct task_struct *task = (struct task_struct *)ctx->args[0];
	__u32 ctgid = BPF_CORE_READ(task, tgid);
	if (follow_forks) {
		__u8 on = TARGET_ON;
		bpf_map_update_elem(&targets, &ctgid, &on, BPF_ANY);
		count(COUNTER_FORKS);
	}
	if (report_forks) {
		struct fork_record r = {};
		r.time_ns = bpf_ktime_get_ns();
		r.tgid = ctgid;
		r.tid = ctgid;
		r.cpu = bpf_get_smp_processor_id();
		r.flags = FLAG_FORK;
		r.probe = ptgid;
		bpf_get_current_comm(r.comm, sizeof(r.comm));
		if (bpf_ringbuf_output(&events, &r, sizeof(r), BPF_RB_NO_WAKEUP))
			count(COUNTER_EVENTS_LOST);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
