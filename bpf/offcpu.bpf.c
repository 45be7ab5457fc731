// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// gprofile's off-CPU recorder (--off-cpu). It shares the sampler's ring
// buffer and target maps (bpf/profile.bpf.c; the loader passes them in)
// and sends records in the sampler's layout, flagged FLAG_OFFCPU, so that
// they go through the same decoder, unwinder and symbolizer.
//
//   - sched_switch (tp_btf). prev, the task leaving the CPU: a target
//     that blocks (prev_state S or D; R, preempted, with
//     offcpu_runnable) gets its switch-out time and state in its task
//     local storage: one map operation per switch of a target; the
//     storage is sized by threads, freed with the task, and follows it
//     across CPUs. next, the task coming back: a lookup of its storage;
//     if it was blocked, a block under min_ns is summed there, by state,
//     and sent as one stackless FLAG_OFFCPU_SHORT record once the sum
//     reaches flush_ns (or at the thread's exit, or at stop); a longer
//     one becomes pending, with next's kernel stack (bpf_get_task_stack:
//     the path it blocked in).
//   - sys_exit (tp_btf), in the thread returning from a system call: a
//     pending block is sent with the kept kernel stack and the user
//     stack, read here, in the thread's own context, unmoved since it
//     blocked. (Kernels may refuse kprobes and fentry, as this project's
//     does; tracepoints are what every kernel with BTF allows.)
//   - offcpu_start (iter/task), run once at start: targets already
//     blocked get the start time as their switch-out time, so that a
//     sleep that spans the start counts from there.
//   - offcpu_stop (iter.s/task), run once at stop: threads still blocked
//     are sent as ongoing (FLAG_OFFCPU_ONGOING, with their stacks read
//     from their saved registers), and every pending short sum.
//
// The kernel structs it reads are declared below with
// preserve_access_index and relocated against the running kernel's BTF.
// Built with bpf2go (internal/attach/gen.go).

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define MAX_STACK_DEPTH 127
#define TASK_COMM_LEN 16
#define MAX_WINDOW (64 * 1024)
#define PAGE_SIZE 4096
#define NUM_REGS 17

// Record flags shared with bpf/profile.bpf.c (attach.Flag*).
#define FLAG_KSTACK_ERR 1
#define FLAG_USTACK_ERR 2
#define FLAG_USER_REGS 16
#define FLAG_WINDOW_FAULT 32
#define FLAG_WINDOW_MAX 64
// Off-CPU record flags (attach.FlagOffCPU*).
#define FLAG_OFFCPU 256          // period is ns off CPU; probe is the state | blocks << 8
#define FLAG_OFFCPU_SHORT 512    // a sum of blocks under min_ns: no stacks
#define FLAG_OFFCPU_ONGOING 1024 // still blocked at stop

// The sampler's record (struct sample in bpf/profile.bpf.c); the loader's
// test checks that the two layouts are the same.
struct sample {
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
	__u32 probe; // probe samples: the probe index; FLAG_OFFCPU: the state ('S', 'D', 'R') | the number of blocks << 8
	__u64 switch_sp;  // 0: off-CPU stacks are never switched (profile.bpf.c)
	__u32 switch_off; // 0
	__u32 pad;
	__u64 regs[NUM_REGS];
	// The sampler's size (SWITCH_KEEP there is two pages), so that one
	// decoder reads both.
	__u8 data[2 * PAGE_SIZE + MAX_WINDOW + PAGE_SIZE + 2 * MAX_STACK_DEPTH * 8];
};

#define HEADER_LEN __builtin_offsetof(struct sample, data)

// Counter slots of the per-CPU "offcpu_counters" array (attach.OffCPU*).
enum counter {
	OC_BLOCKS = 0, // blocks that ended (switch-ins with a switch-out time)
	OC_LONG,       // blocks sent with stacks
	OC_SHORT_SENT, // short-sum records sent
	OC_LOST,       // records the ring buffer had no room for
	OC_NO_STORAGE, // switch-outs whose storage could not be made
	OC_MAX,
};

// Most short blocks one record sums (24 bits of probe).
#define MAX_SHORT_N ((1 << 24) - 1)

// Task states (include/linux/sched.h).
#define TASK_RUNNING 0
#define TASK_INTERRUPTIBLE 1
#define TASK_UNINTERRUPTIBLE 2

struct task_struct {
	unsigned int __state;
	int pid;
	int tgid;
	char comm[TASK_COMM_LEN];
} __attribute__((preserve_access_index));

struct bpf_iter_meta;
struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

const volatile __u8 filter_tgid = 0;
const volatile __u8 filter_tid = 0;
const volatile __u8 filter_cgroup = 0;
const volatile __u64 cgroup_id = 0;
const volatile __u32 cgroup_level = 0;
const volatile __u32 skip_tgid = 0;
const volatile __u64 min_ns = 1000000;   // blocks at least this long get stacks
const volatile __u64 flush_ns = 10000000; // send a short sum once it reaches this
const volatile __u8 offcpu_runnable = 0; // 1: preempted (R) counts as off CPU
const volatile __u8 call_graph_dwarf = 0;
const volatile __u32 max_window = 32768;
const volatile __u32 iter_slot = 0;      // the scratch slot of the iterators (ncpu)

// Shared with the sampler: the loader replaces these with its maps.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} target_tids SEC(".maps");

// Most kernel frames kept for a block waiting for its user stack.
#define PENDING_DEPTH 64

// Per-thread state: when and how it left the CPU, its short blocks, and
// a long block that ended and waits for the thread's return to user
// space, where its user stack is read.
struct offcpu_task {
	__u64 start;        // bpf_ktime_get_ns() at switch-out; 0: not blocked
	__u32 state;        // 'S', 'D' or 'R'
	__u32 pad;
	__u64 cgroup_id;    // the thread's cgroup at switch-out
	__u64 short_ns[3];  // by state (S, D, R): ns of blocks under min_ns not sent
	__u64 short_n[3];   // their number (below MAX_SHORT_N)
	__u64 pending_ns;   // long blocks ended, not sent yet; 0: none
	__u32 pending_n;    // their number
	__u32 pending_state;
	__u32 kstack_len;   // bytes of kstack: the first one's kernel stack
	__u32 pad2;
	__u64 kstack[PENDING_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_task);
} offcpu_tasks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, OC_MAX);
	__type(key, __u32);
	__type(value, __u64);
} offcpu_counters SEC(".maps");

// Scratch records: one per CPU for the kprobe, one more (iter_slot) for
// the iterators, which may sleep and let the kprobe run on their CPU.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); // resized by the loader to ncpu + 1
	__type(key, __u32);
	__type(value, struct sample);
} offcpu_scratch SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&offcpu_counters, &slot);
	if (v)
		*v += 1;
}

static __always_inline int state_index(__u32 state)
{
	return state == 'S' ? 0 : state == 'D' ? 1 : 2;
}

static const char state_chars[3] = {'S', 'D', 'R'};

// keep applies the load-time filters to a task of tgid and tid; cgroup
// filtering reads the current task's cgroup, so it is only right where
// the task is current (sched_switch's prev).
static __always_inline int keep(__u32 tgid, __u32 tid, int current)
{
	if (tgid == 0)
		return 0;
	if (skip_tgid && tgid == skip_tgid)
		return 0;
	if (filter_tgid) {
		__u8 *v = bpf_map_lookup_elem(&targets, &tgid);
		if (!v || *v != 1)
			return 0;
	}
	if (filter_tid && !bpf_map_lookup_elem(&target_tids, &tid))
		return 0;
	if (filter_cgroup && (!current || bpf_get_current_ancestor_cgroup_id(cgroup_level) != cgroup_id))
		return 0;
	return 1;
}

// blocked_state returns the state a task leaving the CPU in prev_state
// is recorded with, or 0 when that is not off-CPU time to record.
static __always_inline __u32 blocked_state(unsigned int prev_state)
{
	if (prev_state & TASK_UNINTERRUPTIBLE)
		return 'D';
	if (prev_state & TASK_INTERRUPTIBLE)
		return 'S';
	if (prev_state == TASK_RUNNING && offcpu_runnable)
		return 'R';
	return 0;
}

// block_ended handles next, which a switch puts back on the CPU: if it
// was blocked, a short block is summed, a long one becomes pending with
// next's kernel stack (where it blocked) until it returns to user space.
static __always_inline void block_ended(struct task_struct *next);

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, _Bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	block_ended(next);
	__u32 state = blocked_state(prev_state);
	if (!state)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	if (!keep(id >> 32, (__u32)id, 1))
		return 0;
	struct offcpu_task *t = bpf_task_storage_get(&offcpu_tasks, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t) {
		count(OC_NO_STORAGE);
		return 0;
	}
	t->state = state;
	t->cgroup_id = bpf_get_current_cgroup_id();
	t->start = bpf_ktime_get_ns();
	return 0;
}

// fill_header fills the header of an off-CPU record of task (current
// when cur), without stacks.
static __always_inline void fill_header(struct sample *s, struct task_struct *task, __u64 cgroup, __u64 ns, __u32 state, __u32 flags, __u32 blocks)
{
	s->time_ns = bpf_ktime_get_ns();
	s->period = ns;
	s->cgroup_id = cgroup;
	s->tgid = BPF_CORE_READ(task, tgid);
	s->tid = BPF_CORE_READ(task, pid);
	s->cpu = bpf_get_smp_processor_id();
	s->flags = FLAG_OFFCPU | flags;
	s->kstack_len = 0;
	s->ustack_len = 0;
	s->window_len = 0;
	s->probe = state | blocks << 8;
	s->switch_sp = 0;
	s->switch_off = 0;
	BPF_CORE_READ_STR_INTO(&s->comm, task, comm);
}

static __always_inline void send(struct sample *s, __u64 size)
{
	if (size > sizeof(*s))
		size = sizeof(*s);
	if (bpf_ringbuf_output(&events, s, size, 0) != 0)
		count(OC_LOST);
}

// send_short sends the short sum of state index i of task, and zeroes it.
static __always_inline void send_short(struct offcpu_task *t, int i, struct task_struct *task, __u32 slot)
{
	if (i < 0 || i > 2 || t->short_n[i] == 0)
		return;
	struct sample *s = bpf_map_lookup_elem(&offcpu_scratch, &slot);
	if (!s)
		return;
	fill_header(s, task, t->cgroup_id, t->short_ns[i], state_chars[i], FLAG_OFFCPU_SHORT, t->short_n[i]);
	t->short_ns[i] = 0;
	t->short_n[i] = 0;
	count(OC_SHORT_SENT);
	send(s, HEADER_LEN);
}

// user_regs copies the user registers saved at task's entry into the
// kernel into s->regs (DWARF x86-64 order); 0 for a task with none.
static __always_inline int user_regs(struct task_struct *task, struct sample *s)
{
	struct pt_regs r;
	void *kr = (void *)bpf_task_pt_regs(task);
	if (!kr || bpf_probe_read_kernel(&r, sizeof(r), kr) != 0 || (r.cs & 3) != 3)
		return 0;
	__u64 *d = s->regs;
	d[0] = r.rax; d[1] = r.rdx; d[2] = r.rcx; d[3] = r.rbx;
	d[4] = r.rsi; d[5] = r.rdi; d[6] = r.rbp; d[7] = r.rsp;
	d[8] = r.r8; d[9] = r.r9; d[10] = r.r10; d[11] = r.r11;
	d[12] = r.r12; d[13] = r.r13; d[14] = r.r14; d[15] = r.r15;
	d[16] = r.rip;
	return 1;
}

// copy_window copies the current task's user stack from sp upward, page
// by page, to the first page that does not read or max_window bytes (as
// bpf/profile.bpf.c's copy_window without the VMA bound).
__attribute__((noinline)) long copy_window(struct sample *s, __u64 sp)
{
	if (!s)
		return 0;
	__u32 off = 0;
	for (int i = 0; i < MAX_WINDOW / PAGE_SIZE + 1; i++) {
		if (off >= max_window || off >= MAX_WINDOW)
			break;
		__u64 addr = sp + off;
		__u32 chunk = PAGE_SIZE - (addr & (PAGE_SIZE - 1));
		if (chunk > max_window - off)
			chunk = max_window - off;
		chunk &= 2 * PAGE_SIZE - 1; // for the verifier: a bounded size
		if (chunk == 0 || chunk > PAGE_SIZE)
			break;
		if (bpf_probe_read_user(&s->data[off], chunk, (void *)addr) != 0) {
			s->flags |= FLAG_WINDOW_FAULT;
			break;
		}
		off += chunk;
	}
	if (off >= max_window)
		s->flags |= FLAG_WINDOW_MAX;
	return off;
}

// copy_window_task is copy_window for a task that is not current, from
// a sleepable program (bpf_copy_from_user_task may fault pages in).
static __always_inline long copy_window_task(struct sample *s, __u64 sp, struct task_struct *task)
{
	if (!s || !task)
		return 0;
	__u32 off = 0;
	for (int i = 0; i < MAX_WINDOW / PAGE_SIZE + 1; i++) {
		if (off >= max_window || off >= MAX_WINDOW)
			break;
		__u64 addr = sp + off;
		__u32 chunk = PAGE_SIZE - (addr & (PAGE_SIZE - 1));
		if (chunk > max_window - off)
			chunk = max_window - off;
		chunk &= 2 * PAGE_SIZE - 1; // for the verifier: a bounded size
		if (chunk == 0 || chunk > PAGE_SIZE)
			break;
		if (bpf_copy_from_user_task(&s->data[off], chunk, (void *)addr, task, 0) != 0) {
			s->flags |= FLAG_WINDOW_FAULT;
			break;
		}
		off += chunk;
	}
	if (off >= max_window)
		s->flags |= FLAG_WINDOW_MAX;
	return off;
}

// copy_pending copies t's pending kernel stack into s->data at w and
// returns its bytes.
static __always_inline __u32 copy_pending(struct sample *s, struct offcpu_task *t, __u64 w)
{
	__u32 klen = t->kstack_len;
	if (klen > sizeof(t->kstack))
		klen = sizeof(t->kstack);
	if (w > MAX_WINDOW)
		return 0;
	if (klen == 0 || bpf_probe_read_kernel(&s->data[w], klen, t->kstack) != 0)
		return 0;
	return klen;
}

// in_syscall reports whether task entered the kernel by a system call
// (orig_rax holds its number; an interrupt or exception leaves it
// negative): only then does a sys_exit come before it runs user code
// again.
static __always_inline int in_syscall(struct task_struct *task)
{
	struct pt_regs r;
	void *kr = (void *)bpf_task_pt_regs(task);
	if (!kr || bpf_probe_read_kernel(&r, sizeof(r), kr) != 0)
		return 0;
	return (long)r.orig_rax >= 0;
}

// send_now sends one block of next that ended now, taken outside a system
// call (preempted by an interrupt, or waiting in a page fault): with its
// kernel stack and its user registers but no stack window, since next's
// memory is not the current task's here and no sys_exit will come to take
// it. The unwinder then gives the user leaf and a cut root.
static __always_inline void send_now(struct offcpu_task *t, struct task_struct *next, __u32 state, __u64 ns)
{
	__u32 slot = bpf_get_smp_processor_id();
	struct sample *s = bpf_map_lookup_elem(&offcpu_scratch, &slot);
	if (!s)
		return;
	fill_header(s, next, t->cgroup_id, ns, state, 0, 1);
	if (user_regs(next, s))
		s->flags |= FLAG_USER_REGS;
	long klen = bpf_get_task_stack(next, s->data, MAX_STACK_DEPTH * 8, 0);
	if (klen < 0)
		klen = 0;
	s->kstack_len = klen;
	count(OC_LONG);
	send(s, HEADER_LEN + (__u64)klen);
}

static __always_inline void block_ended(struct task_struct *next)
{
	struct offcpu_task *t = bpf_task_storage_get(&offcpu_tasks, next, 0, 0);
	if (!t || t->start == 0)
		return;
	__u32 state = t->state;
	__u64 start = __sync_lock_test_and_set(&t->start, 0); // the stop pass may take it too
	__u64 now = bpf_ktime_get_ns();
	if (start == 0)
		return;
	__u64 ns = now > start ? now - start : 0;
	count(OC_BLOCKS);
	if (ns >= min_ns && !in_syscall(next)) {
		send_now(t, next, state, ns);
		return;
	}
	// One record holds one state: a long block of another state than the
	// one pending is summed without stacks.
	if (ns >= min_ns && (t->pending_ns == 0 || t->pending_state == state)) {
		if (t->pending_ns == 0) {
			long klen = bpf_get_task_stack(next, t->kstack, sizeof(t->kstack), 0);
			t->kstack_len = klen > 0 ? klen : 0;
			t->pending_state = state;
			t->pending_n = 0;
		}
		// Blocks that end before the thread leaves the kernel (woken
		// again and again in one syscall) have one user stack: summed.
		t->pending_ns += ns;
		t->pending_n += 1;
		return;
	}
	int i = state_index(state);
	if (i < 0 || i > 2)
		return;
	t->short_ns[i] += ns;
	t->short_n[i] += 1;
	if (t->short_ns[i] >= flush_ns || t->short_n[i] >= MAX_SHORT_N)
		send_short(t, i, next, bpf_get_smp_processor_id());
}

// offcpu_user runs at every return from a system call, in the thread
// that returns: a pending block is sent with the kernel stack it blocked
// in and the user stack, which has not moved since.
SEC("tp_btf/sys_exit")
int BPF_PROG(offcpu_user, struct pt_regs *regs, long ret)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct offcpu_task *t = bpf_task_storage_get(&offcpu_tasks, task, 0, 0);
	if (!t || t->pending_ns == 0)
		return 0;
	__u32 cpu = bpf_get_smp_processor_id();
	struct sample *s = bpf_map_lookup_elem(&offcpu_scratch, &cpu);
	if (!s)
		return 0;
	fill_header(s, task, t->cgroup_id, t->pending_ns, t->pending_state, 0, t->pending_n);
	t->pending_ns = 0;
	__u64 w = 0;
	if (call_graph_dwarf && user_regs(task, s)) {
		s->flags |= FLAG_USER_REGS;
		w = copy_window(s, s->regs[7]);
	}
	if (w > MAX_WINDOW)
		w = MAX_WINDOW;
	s->window_len = w;
	__u32 kb = copy_pending(s, t, w);
	long ulen = 0;
	if (!call_graph_dwarf) {
		ulen = bpf_get_stack(ctx, &s->data[w + kb], MAX_STACK_DEPTH * 8, BPF_F_USER_STACK);
		if (ulen < 0) {
			s->flags |= FLAG_USTACK_ERR;
			ulen = 0;
		}
	}
	__u32 un = (__u32)ulen / 8;
	if (un > MAX_STACK_DEPTH)
		un = MAX_STACK_DEPTH;
	s->kstack_len = kb;
	s->ustack_len = un * 8;
	count(OC_LONG);
	send(s, HEADER_LEN + w + kb + (__u64)un * 8);
	return 0;
}

// send_pending sends t's pending block from a thread that is not in its
// own user-space return: with its kernel stack, and, when iter (a
// sleepable program) and dwarf, its user registers and stack window.
static __always_inline void send_pending(struct offcpu_task *t, struct task_struct *task, __u32 slot, int iter, __u32 flags)
{
	if (t->pending_ns == 0)
		return;
	struct sample *s = bpf_map_lookup_elem(&offcpu_scratch, &slot);
	if (!s)
		return;
	fill_header(s, task, t->cgroup_id, t->pending_ns, t->pending_state, flags, t->pending_n);
	t->pending_ns = 0;
	__u64 w = 0;
	if (iter && call_graph_dwarf && user_regs(task, s)) {
		s->flags |= FLAG_USER_REGS;
		w = copy_window_task(s, s->regs[7], task);
	}
	if (w > MAX_WINDOW)
		w = MAX_WINDOW;
	s->window_len = w;
	__u32 kb = copy_pending(s, t, w);
	s->kstack_len = kb;
	count(OC_LONG);
	send(s, HEADER_LEN + w + kb);
}

// offcpu_exit sends the short sums and the pending block of a thread
// that exits (without its user stack: its memory is gone): its storage
// goes with it.
SEC("tp_btf/sched_process_exit")
int BPF_PROG(offcpu_exit, struct task_struct *p)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct offcpu_task *t = bpf_task_storage_get(&offcpu_tasks, task, 0, 0);
	if (!t)
		return 0;
	__u32 cpu = bpf_get_smp_processor_id();
	for (int i = 0; i < 3; i++)
		send_short(t, i, task, cpu);
	send_pending(t, task, cpu, 0, 0);
	return 0;
}

// offcpu_start marks the targets blocked when recording starts as
// blocked since now.
SEC("iter/task")
int offcpu_start(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	__u32 state = blocked_state(task->__state);
	if (!state || state == 'R') // a runnable task in an iterator is running or queued
		return 0;
	if (!keep(task->tgid, task->pid, 0))
		return 0;
	if (filter_cgroup)
		return 0; // not current: its cgroup is not read here; it counts from its next block
	struct offcpu_task *t = bpf_task_storage_get(&offcpu_tasks, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t || t->start != 0) // blocked since sched_switch saw it
		return 0;
	t->state = state;
	t->cgroup_id = 0; // not current: unknown until its next switch-out
	t->start = bpf_ktime_get_ns();
	return 0;
}

// offcpu_stop sends the threads still blocked at stop as ongoing, with
// their kernel stacks (bpf_get_task_stack) and user registers and stack
// window (bpf_copy_from_user_task: sleepable), and every short sum.
SEC("iter.s/task")
int offcpu_stop(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	struct offcpu_task *t = bpf_task_storage_get(&offcpu_tasks, task, 0, 0);
	if (!t)
		return 0;
	__u32 slot = iter_slot;
	for (int i = 0; i < 3; i++)
		send_short(t, i, task, slot);
	send_pending(t, task, slot, 1, 0);
	__u32 state = t->state;
	__u64 start = __sync_lock_test_and_set(&t->start, 0);
	if (start == 0)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 ns = now > start ? now - start : 0;
	struct sample *s = bpf_map_lookup_elem(&offcpu_scratch, &slot);
	if (!s)
		return 0;
	fill_header(s, task, t->cgroup_id, ns, state, FLAG_OFFCPU_ONGOING, 1);
	__u64 w = 0;
	if (call_graph_dwarf && user_regs(task, s)) {
		s->flags |= FLAG_USER_REGS;
		w = copy_window_task(s, s->regs[7], task);
	}
	if (w > MAX_WINDOW)
		w = MAX_WINDOW;
	s->window_len = w;
	long klen = bpf_get_task_stack(task, &s->data[w], MAX_STACK_DEPTH * 8, 0);
	if (klen < 0) {
		s->flags |= FLAG_KSTACK_ERR;
		klen = 0;
	}
	__u32 kn = (__u32)klen / 8;
	if (kn > MAX_STACK_DEPTH)
		kn = MAX_STACK_DEPTH;
	s->kstack_len = kn * 8;
	send(s, HEADER_LEN + w + (__u64)kn * 8);
	return 0;
}

// Emit the record type into BTF for bpf2go -type.
const struct sample *unused_sample __attribute__((unused));

char LICENSE[] SEC("license") = "GPL";
