// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Fork following without tracefs: a raw tracepoint on task_newtask that
// adds the processes a target forks to the sampler's target map (shared
// with bpf/profile.bpf.c through the loader's map replacement).
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

// As in profile.bpf.c: TARGET_ON, and the COUNTER_FORKS slot.
#define TARGET_ON 1
#define COUNTER_FORKS 5

// Replaced by the sampler's maps at load; the loader copies their sizes.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_FORKS + 1);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// follow_fork_raw runs in the parent (current) of every new task: a new
// process forked by a target becomes a target, as follow_fork in
// profile.bpf.c. args[0] is the new task, args[1] its clone flags.
SEC("raw_tracepoint/task_newtask")
int follow_fork_raw(struct bpf_raw_tracepoint_args *ctx)
{
	if (ctx->args[1] & CLONE_THREAD)
		return 0; // a new thread: covered by its tgid already
	__u32 ptgid = bpf_get_current_pid_tgid() >> 32;
	__u8 *v = bpf_map_lookup_elem(&targets, &ptgid);
	if (!v || *v != TARGET_ON)
		return 0;
	struct task_struct *task = (struct task_struct *)ctx->args[0];
	__u32 ctgid = BPF_CORE_READ(task, tgid);
	__u8 on = TARGET_ON;
	bpf_map_update_elem(&targets, &ctgid, &on, BPF_ANY);
	__u32 slot = COUNTER_FORKS;
	__u64 *n = bpf_map_lookup_elem(&counters, &slot);
	if (n)
		*n += 1;
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
