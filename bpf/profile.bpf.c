// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// gprofile's sampler: a BPF_PROG_TYPE_PERF_EVENT program attached to one
// perf event per CPU. On every sample it takes the kernel callchain with
// bpf_get_stack and, for the user side, either the frame-pointer callchain
// (bpf_get_stack, `--call-graph fp`) or the user registers and a copy of
// the user stack from sp upward (`--call-graph dwarf`: unwound in Go from
// .eh_frame), and sends one variable-length record through a BPF ring
// buffer (only the used part of each stack and of the window). A tracepoint on
// task_newtask adds the children of target processes to the target map,
// so `-p PID` follows forks the way `perf record -p` does; raw tracepoints
// on sched_process_exec and sched_process_exit start targets at their
// exec and report execs and exits.
//
// Built with bpf2go (see internal/attach/gen.go); needs no vmlinux.h and
// no CO-RE: the programs are classic and raw tracepoint programs that
// read the current task through helpers, and the one tracepoint record they
// read (task_newtask) is declared below from its format file, whose
// offsets internal/attach checks before attaching. The dwarf mode calls
// helpers that take or return kernel objects by BTF id
// (bpf_get_current_task_btf, bpf_task_pt_regs, bpf_find_vma): the kernel
// verifier resolves them against its own BTF, so the loader decodes none
// (no CO-RE relocation, no kfunc); the two fields read through them
// (struct pt_regs, vm_area_struct.vm_end) are the x86-64 ABI layout.

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
#define FLAG_USER_REGS 16 // regs hold the user registers (dwarf mode)
#define FLAG_WINDOW_FAULT 32 // the stack copy ended at a page it could not read
#define FLAG_WINDOW_MAX 64   // the stack copy stopped at max_window
#define FLAG_NO_VMA 128      // bound_by_vma: bpf_find_vma found no VMA for sp (or its lock was busy)
// 256, 512, 1024: off-CPU records (bpf/offcpu.bpf.c)
#define FLAG_FORK 2048       // not a sample: process tgid was forked by process probe (no stacks)
#define FLAG_WINDOW_TOP 4096 // the stack copy stopped at the thread's stack top (stack_tops)
#define FLAG_STACK_SWITCH 8192 // the window holds two stacks: see switch_sp

// Counter slots of the per-CPU "counters" array (attach.Counter*).
enum counter {
	COUNTER_SAMPLES = 0,  // program runs that passed the filters
	COUNTER_LOST,         // records not delivered: ring buffer full
	COUNTER_KSTACK_ERR,   // kernel stacks that could not be taken
	COUNTER_USTACK_ERR,   // user stacks that could not be taken
	COUNTER_FILTERED,     // samples dropped by the pid/idle filters
	COUNTER_FORKS,        // children added to the target map
	COUNTER_WINDOW_BYTES, // bytes of user stack copied (dwarf mode)
	COUNTER_WINDOW_FAULT, // stack copies cut by a page that did not read
	COUNTER_WINDOW_MAX,   // stack copies cut by max_window
	COUNTER_NO_REGS,      // samples with no user registers (kernel threads)
	COUNTER_NESTED,       // probe hits dropped: a probe program already ran on this CPU
	COUNTER_EVENTS_LOST,  // exec, exit and fork records not delivered: ring buffer full
	COUNTER_MAX,
};

// Most bytes of user stack one sample copies (dwarf mode); the loader sets
// max_window at or below it. A power of two.
#define MAX_WINDOW (64 * 1024)
#define PAGE_SIZE 4096
// Bytes of the first stack a window that switches stacks keeps at most
// (go_switched_sp, fp_switched_sp): the vDSO's frames, or the C frames of
// a cgo call, above sp there.
#define SWITCH_KEEP (2 * PAGE_SIZE)
// Number of user registers recorded: DWARF x86-64 numbers 0 (rax) to 16
// (the return address column, rip).
#define NUM_REGS 17

// One ring-buffer record. The header is fixed; data holds window_len bytes
// of user stack copied from regs[7] (sp) upward, then kstack_len/8 kernel
// IPs, then ustack_len/8 user IPs (frame-pointer mode), leaf first, and
// the record is cut after the last used byte. Layout mirrors
// attach.DecodeRecord.
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
	__u32 window_len; // bytes of user stack in data, from regs[7] up
	__u32 probe;      // probes: the probe's index (its attach cookie); else 0
	// FLAG_STACK_SWITCH: the window's first switch_off bytes are from sp,
	// the rest from switch_sp (go_switched_sp, fp_switched_sp); else both 0.
	__u64 switch_sp;
	__u32 switch_off;
	__u32 pad;
	__u64 regs[NUM_REGS]; // user registers by DWARF number (FLAG_USER_REGS)
	// The window (up to SWITCH_KEEP + MAX_WINDOW, plus a page of slack the
	// verifier needs for the last page-sized read), then the IPs.
	__u8 data[SWITCH_KEEP + MAX_WINDOW + PAGE_SIZE + 2 * MAX_STACK_DEPTH * 8];
};

// The fixed part of a record: what an event record (FLAG_EXIT, FLAG_EXEC)
// sends.
#define HEADER_LEN __builtin_offsetof(struct sample, data)

// Set at load time (const volatile: the verifier prunes dead branches).
const volatile __u8 filter_tgid = 0;   // 1: only tgids in the targets map
const volatile __u8 filter_tid = 0;    // 1: only tids in the target_tids map
const volatile __u8 filter_cgroup = 0; // 1: only tasks in cgroup_id or below
const volatile __u64 cgroup_id = 0;    // the cgroup v2 id to keep
const volatile __u32 cgroup_level = 0; // its depth below the root (root = 0)
const volatile __u64 tp_period = 1;    // tracepoints and probes: keep every Nth hit
const volatile __u8 report_exits = 0;  // 1: send a FLAG_EXIT record per exit
const volatile __u32 skip_tgid = 0;    // a process never sampled (gprofile itself)
const volatile __u8 include_idle = 0;  // 1: keep samples of pid 0
const volatile __u8 follow_forks = 1;  // 1: add children of targets
const volatile __u64 wakeup_bytes = 0; // wake the reader past this much data
const volatile __u8 user_mode_check = 0; // 1 (amd64): no kernel walk for user-mode samples
const volatile __u8 call_graph_dwarf = 0; // 1: user regs + stack window instead of the fp walk
const volatile __u32 max_window = 32768; // bytes of user stack copied at most (<= MAX_WINDOW)
const volatile __u8 bound_by_vma = 0;    // 1: bound the copy by the end of sp's VMA (bpf_find_vma)
const volatile __u8 use_stack_tops = 0;  // 1: bound the copy by the thread's entry in stack_tops

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

// The top of each thread's stack (tid -> address), as the unwinder found
// it: the CFA of the outermost frame (_start, start_thread, goexit) of a
// whole stack. Nothing above it is ever read, so the copy stops there.
// The reader fills it (Sampler.SetStackTop) and deletes an entry that
// cut a stack (FLAG_WINDOW_TOP); LRU: exited threads age out.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} stack_tops SEC(".maps");

// go_text is what switch_tgids holds for a listed process: the
// addresses [lo, hi) of its Go code (the executable mapping of its Go
// program or library), where the return address of a Go stack's
// outermost frame lies (runtime.goexit's, runtime.mstart's).
struct go_text {
	__u64 lo;
	__u64 hi;
};

// Processes whose samples may run on a stack their callers are not on
// (tgid -> go_text): Go programs, which run C code (cgo:
// runtime.asmcgocall) on the g0 stack. The recorder lists a Go program
// at its exec, or a process when an unwind of its ends in Go code
// (Sampler.SetStackSwitch); for its samples the program then copies a
// second window where the frame pointer leads off the first
// (fp_switched_sp). LRU: exited processes age out.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct go_text);
} switch_tgids SEC(".maps");

// Slot 0: 1 once the reader has listed any process in switch_tgids, so
// that the samples of a machine with none look up nothing (an array
// lookup the verifier inlines).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} switch_any SEC(".maps");

// Per-CPU tracepoint hit counter, for tp_period.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tp_hits SEC(".maps");

// Probes (kprobe, uprobe, USDT: the probe programs below) carry their
// index, 0 to MAX_PROBES-1, as their attach cookie.
#define MAX_PROBES 64

// Per-CPU hits of each probe, before any filter: the cost guard's count
// and the base of tp_period for probes.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_PROBES);
	__type(key, __u32);
	__type(value, __u64);
} probe_hits SEC(".maps");

// What the probe programs do on a hit (slot 0): PROBE_OFF nothing,
// PROBE_COUNT count it in probe_hits, PROBE_SAMPLE count it and take a
// sample. Probes fire from the moment they are attached: the loader
// attaches them off and turns them on (Sampler.Enable) or counts first
// (Sampler.CountProbes).
#define PROBE_OFF 0
#define PROBE_COUNT 1
#define PROBE_SAMPLE 2
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} probe_mode SEC(".maps");

// Per-CPU depth of fentry/fexit programs: unlike perf_event and kprobe
// programs (bpf_prog_active), two tracing programs can nest on a CPU (an
// interrupt inside a traced function), and both would write the CPU's
// scratch record.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} probe_depth SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// Scratch record of each CPU, indexed by CPU number (the loader sizes it
// to the possible CPUs): too large for the 512-byte BPF stack, and a
// per-CPU array refuses values over 32 KiB. perf_event programs do not
// nest on a CPU (bpf_prog_active), and the tracepoint programs do not use
// it, so one slot per CPU is enough.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); // resized by the loader
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

static __always_inline void count_add(__u32 slot, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &slot);
	if (v)
		*v += n;
}

struct vm_area_struct;

// The first two fields of the kernel's struct vm_area_struct (stable since
// Linux 2.x); the verifier checks the load against the kernel's BTF.
struct vma_bounds {
	__u64 vm_start;
	__u64 vm_end;
};

static long vma_end_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	*(__u64 *)data = ((struct vma_bounds *)vma)->vm_end;
	return 0;
}

// user_regs fills s->regs with the user registers of the current task,
// in DWARF x86-64 order: the interrupted ones (regs, the program's
// context: a perf_event sample or a uprobe hit) for a sample taken in user
// mode, else those saved at its entry into the kernel (at the top of its
// kernel stack). It returns 0 for a task with no user context (a kernel
// thread). Both go through a copy on the BPF stack: the verifier refuses
// one load instruction used with a context and a kernel pointer.
static __always_inline int user_regs(struct pt_regs *regs, struct sample *s, int in_user)
{
	struct pt_regs r;
	if (in_user && regs) {
		r = *regs;
	} else {
		void *kr = (void *)bpf_task_pt_regs(bpf_get_current_task_btf());
		if (!kr || bpf_probe_read_kernel(&r, sizeof(r), kr) != 0 || (r.cs & 3) != 3)
			return 0;
	}
	__u64 *d = s->regs;
	d[0] = r.rax; d[1] = r.rdx; d[2] = r.rcx; d[3] = r.rbx;
	d[4] = r.rsi; d[5] = r.rdi; d[6] = r.rbp; d[7] = r.rsp;
	d[8] = r.r8; d[9] = r.r9; d[10] = r.r10; d[11] = r.r11;
	d[12] = r.r12; d[13] = r.r13; d[14] = r.r14; d[15] = r.r15;
	d[16] = r.rip;
	return 1;
}

// window_copy is the state of one copy_window copy: the sample, its
// user sp, the bound (see copy_window), where the window starts in
// s->data (base) and the bytes from sp copied so far (off).
struct window_copy {
	struct sample *s;
	__u64 sp;
	__u64 bound;
	__u32 base;
	__u32 off;
};

// copy_page copies the next part of c's window: up to the end of the page
// that holds sp + off, at most max_window bytes from sp and not past a
// non-zero bound. It returns 1 when the copy ends (FLAG_WINDOW_FAULT set
// where a page did not read), else 0.
static __always_inline long copy_page(struct window_copy *c)
{
	__u64 want = max_window;
	__u32 off = c->off;
	if (off >= want || off >= MAX_WINDOW)
		return 1;
	if (c->bound != 0 && off >= c->bound)
		return 1;
	__u64 addr = c->sp + off;
	__u32 chunk = PAGE_SIZE - (addr & (PAGE_SIZE - 1));
	if (chunk > want - off)
		chunk = want - off;
	if (chunk > PAGE_SIZE) // never: tells the verifier
		return 1;
	__u64 at = (__u64)c->base + off; // 64 bits: checked and used in one register
	asm volatile("" : "+r"(at)); // bound the sum itself, as the verifier sees it
	if (at > SWITCH_KEEP + MAX_WINDOW) // never: tells the verifier
		return 1;
	struct sample *s = c->s;
	if (!s)
		return 1;
	if (bpf_probe_read_user(&s->data[at], chunk, (void *)addr) != 0) {
		s->flags |= FLAG_WINDOW_FAULT;
		return 1;
	}
	c->off = off + chunk;
	return 0;
}

// copy_page_cb is copy_page as a bpf_loop callback.
static long copy_page_cb(__u64 i, void *c)
{
	return copy_page(c);
}

// copy_window copies the user stack from sp upward into s->data from base, page by
// page (a read that crosses into an unmapped page fails whole), to the
// first page that does not read (above a stack there is nearly always
// one: the unmapped gap above [stack], a guard page) and at most
// max_window bytes. With use_stack_tops it stops at the thread's stack
// top when the unwinder has found it (stack_tops): most threads' stacks
// are far shorter than the window. With bound_by_vma it also stops at the
// end of the VMA that holds sp: bpf_find_vma takes the mm lock (trylock)
// and, from the timer interrupt, releases it through an irq_work, which
// costs more BPF time a sample than it saves (bench/window/sweep.sh), so
// it is off by default.
// It copies from `from` bytes above sp up to `limit` bytes above sp (0:
// no limit), so that a window can be copied in two parts; a copy that
// stops at limit is not one that a stack top ended (FLAG_WINDOW_TOP).
// It returns the bytes from sp copied so far (from included) and sets
// FLAG_WINDOW_* and FLAG_NO_VMA. With loop (a constant) the pages are
// copied by bpf_loop (Linux 5.17+), whose callback the verifier checks
// once, else by a bounded loop it checks page by page (about two thirds
// of the program's verification: profile_loop, BenchmarkOpenSampler).
// Called from global functions (copy_window, copy_window_loop): the
// verifier checks it once, on its own, instead of checking the rest of
// the program after each way out of the loop (an inlined copy took a
// second to load).
static __always_inline long copy_window_body(struct sample *s, __u64 sp, __u32 base, __u32 from, __u32 limit, const int loop)
{
	if (!s || base > SWITCH_KEEP || from > MAX_WINDOW)
		return 0;
	__u64 want = max_window;
	// A bound below want, 0 for none: the thread's stack top, the end of
	// sp's VMA. Kept apart from want, which the verifier knows (a
	// load-time constant): a loop whose chunk sizes depend on a value it
	// does not know takes it many times longer to verify. The copy may
	// run to the end of the page that holds the bound; what lies past it
	// is not sent.
	__u64 bound = 0;
	if (use_stack_tops) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		__u64 *top = bpf_map_lookup_elem(&stack_tops, &tid);
		if (top && *top > sp && *top - sp < want) {
			bound = *top - sp;
			s->flags |= FLAG_WINDOW_TOP;
		}
	}
	if (bound_by_vma) {
		__u64 end = 0;
		if (bpf_find_vma(bpf_get_current_task_btf(), sp, vma_end_cb, &end, 0) == 0 && end > sp) {
			if (end - sp < want && (bound == 0 || end - sp < bound)) {
				bound = end - sp;
				s->flags &= ~FLAG_WINDOW_TOP; // the VMA, not the top, ends the copy
			}
		} else {
			s->flags |= FLAG_NO_VMA;
		}
	}
	if (limit != 0 && (bound == 0 || limit < bound)) {
		bound = limit;
		s->flags &= ~FLAG_WINDOW_TOP;
	}
	__u32 off = from;
	if (loop) {
		struct window_copy c = {.s = s, .sp = sp, .bound = bound, .base = base, .off = from};
		bpf_loop(MAX_WINDOW / PAGE_SIZE + 1, copy_page_cb, &c, 0);
		off = c.off;
	} else {
		// The same copy as copy_page's, on registers: through a
		// struct on the stack the verifier processes 15 times the
		// instructions.
		for (int i = 0; i < MAX_WINDOW / PAGE_SIZE + 1; i++) {
			if (off >= want || off >= MAX_WINDOW)
				break;
			if (bound != 0 && off >= bound)
				break;
			__u64 addr = sp + off;
			__u32 chunk = PAGE_SIZE - (addr & (PAGE_SIZE - 1));
			if (chunk > want - off)
				chunk = want - off;
			if (chunk > PAGE_SIZE) // never: tells the verifier
				break;
			__u32 at = base + off;
			asm volatile("" : "+r"(at)); // bound the sum itself, as the verifier sees it
			if (at > SWITCH_KEEP + MAX_WINDOW) // never: tells the verifier
				break;
			if (bpf_probe_read_user(&s->data[at], chunk, (void *)addr) != 0) {
				s->flags |= FLAG_WINDOW_FAULT;
				break;
			}
			off += chunk;
		}
	}
	if (bound != 0 && off > bound)
		off = bound;
	if (off >= max_window)
		s->flags |= FLAG_WINDOW_MAX;
	return off;
}

// copy_window is copy_window_body with a bounded loop (any kernel).
__attribute__((noinline)) long copy_window(struct sample *s, __u64 sp, __u32 base, __u32 from, __u32 limit)
{
	return copy_window_body(s, sp, base, from, limit, 0);
}

// copy_window_loop is copy_window_body with bpf_loop (Linux 5.17+).
__attribute__((noinline)) long copy_window_loop(struct sample *s, __u64 sp, __u32 base, __u32 from, __u32 limit)
{
	return copy_window_body(s, sp, base, from, limit, 1);
}

// go_switched_sp returns the goroutine's sp when the sample is in code a
// Go function called on the g0 stack after switching to it (time.now,
// runtime.nanotime1 and runtime.vgetrandom1 call the vDSO so): such a
// function saves the goroutine's sp in r12 (callee-saved, kept by the
// vDSO) right after its prologue, so its frame pointer is r12 + 16, and
// its frame and its callers' are on the goroutine's stack, outside the
// window copied from sp. That frame pointer is rbp itself (a sample in
// the Go function, or at a vDSO function's first instruction) or the
// rbp the vDSO function saved at [rbp] (the vDSO keeps frame pointers).
// It returns 0 for any other sample (w bytes copied from sp).
static __always_inline __u64 go_switched_sp(struct sample *s, __u64 w)
{
	__u64 sp = s->regs[7], bp = s->regs[6], r12 = s->regs[12];
	if (r12 == 0 || r12 - sp < w)
		return 0; // r12 is no sp of another stack
	__u64 i = bp - sp;
	if (i < w && i + 8 <= w) {
		if (i > MAX_WINDOW - 8 || (i & 7) != 0)
			return 0;
		bp = *(__u64 *)&s->data[i];
	}
	return bp - r12 == 16 ? r12 : 0;
}

// SWITCH_HOPS bounds the frames fp_chain follows in a window.
#define SWITCH_HOPS 32

// CHAIN_END marks fp_chain's result where the chain ends.
#define CHAIN_END 1

// chain_step's results besides the next frame pointer (a multiple of 8):
// STEP_OUT, fp is off the window; STEP_END | bytes, the chain ends with
// the frame at fp; 0, no chain.
#define STEP_OUT 1
#define STEP_END 2

// chain_step takes one step of fp_chain from the frame at fp. A global
// function: the verifier walks fp_chain's loop hop by hop, and each hop
// then holds only this call and its three outcomes.
__attribute__((noinline)) __u64 chain_step(struct sample *s, __u32 base, __u64 sp, __u64 w, __u64 fp)
{
	__u64 i = fp - sp;
	if (i >= w || w - i < 16)
		return STEP_OUT;
	if (!s || base > SWITCH_KEEP || i > SWITCH_KEEP - 16 || (i & 7) != 0)
		return 0; // past the part followed, or no frame
	__u32 at = base + i;
	asm volatile("" : "+r"(at)); // bound the sum itself, as the verifier sees it
	if (at > 2 * SWITCH_KEEP) // never: tells the verifier
		return 0;
	__u64 next = *(__u64 *)&s->data[at];
	if (next == 0)
		return (i + 16) | STEP_END;
	if ((next & 7) != 0 || (next - sp < w && next <= fp))
		return 0; // unaligned, or in the window and not above: no chain
	return next;
}

// chain_walk is the state of fp_chain's walk by bpf_loop: its arguments,
// the frame reached (fp), and its result once the walk ended in the
// window (done).
struct chain_walk {
	struct sample *s;
	__u64 sp;
	__u64 w;
	__u64 fp;
	__u64 result;
	__u32 base;
	__u32 done;
};

// chain_hop is one hop of fp_chain as a bpf_loop callback.
static long chain_hop(__u64 k, void *ctx)
{
	struct chain_walk *c = ctx;
	__u64 r = chain_step(c->s, c->base, c->sp, c->w, c->fp);
	if (r == STEP_OUT)
		return 1;
	if (r & STEP_END) {
		c->result = (r & ~(__u64)STEP_END) | CHAIN_END;
		c->done = 1;
		return 1;
	}
	if (r == 0) {
		c->done = 1;
		return 1;
	}
	c->fp = r;
	return 0;
}

// fp_chain follows the frame-pointer chain from fp through up to
// SWITCH_HOPS frames of a window (w bytes copied from sp, at base in
// s->data), each above the last, and returns where it leaves the window:
// an aligned address outside it. It returns 0 when the chain stays in
// the window, is unaligned, does not go up or runs past SWITCH_KEEP
// bytes of the window; when it ends, at a saved frame pointer of 0 (the
// outermost frame of a Go stack, goexit's or mstart's callee), it
// returns the bytes of the window up to and with that frame's saved rbp
// and return address, plus 1 (CHAIN_END: a multiple of 8 plus 1, which
// no address it returns is). With loop (a constant) the hops are
// bpf_loop calls of chain_hop, which the verifier checks once.
static __always_inline __u64 fp_chain(struct sample *s, __u32 base, __u64 sp, __u64 w, __u64 fp, const int loop)
{
	if (loop) {
		struct chain_walk c = {.s = s, .sp = sp, .w = w, .fp = fp, .base = base};
		bpf_loop(SWITCH_HOPS, chain_hop, &c, 0);
		if (c.done)
			return c.result;
		fp = c.fp;
	} else {
		for (int k = 0; k < SWITCH_HOPS; k++) {
			__u64 r = chain_step(s, base, sp, w, fp);
			if (r == STEP_OUT)
				break;
			if (r & STEP_END)
				return (r & ~(__u64)STEP_END) | CHAIN_END;
			if (r == 0)
				return 0;
			fp = r;
		}
	}
	if ((fp & 7) != 0 || fp - sp < w)
		return 0;
	return fp;
}

// switch_listed returns the Go code of process tgid when it is listed
// in switch_tgids, else NULL; a machine with no process listed looks up
// nothing but switch_any.
static __always_inline struct go_text *switch_listed(__u32 tgid)
{
	__u32 zero = 0;
	__u32 *any = bpf_map_lookup_elem(&switch_any, &zero);
	if (!any || *any == 0)
		return NULL;
	return bpf_map_lookup_elem(&switch_tgids, &tgid);
}

// fp_switched_sp returns, for a sample of a listed process (a Go
// program), where the frame-pointer chain leads when it leaves the
// window (w bytes copied from sp): Go code on the g0 stack keeps it. C
// code that a Go function called there (cgo, runtime.asmcgocall) keeps
// rbp, the Go caller's frame pointer on the goroutine's stack,
// callee-saved, or saves it in a frame of its own; a function run by
// runtime.systemstack saves rbp, systemstack's frame on the goroutine's
// stack, in its frame, and so do its callees in theirs. It returns 0 when
// fp_chain finds no way out or the process is not listed (text NULL);
// when the chain ends in the window, fp_chain's end (CHAIN_END set).
static __always_inline __u64 fp_switched_sp(struct sample *s, __u64 w, struct go_text *text, const int loop)
{
	// The lookup first: a program that is not Go (most samples, once
	// any Go program is listed) then walks no chain.
	if (!text)
		return 0;
	return fp_chain(s, 0, s->regs[7], w, s->regs[6], loop);
}

// go_return reports whether the return address at byte at of s->data
// (that of the frame where a frame-pointer chain ended: fp_chain's end
// less 8) lies in [lo, hi), the process's Go code: the chain ended at a
// Go stack's outermost frame, goexit's or mstart's callee, and not at a
// C thread's (under start_thread, in libc), whose unwind needs the
// frames above. A global function, as chain_step.
__attribute__((noinline)) int go_return(struct sample *s, __u64 at, __u64 lo, __u64 hi)
{
	if (!s || at > 2 * SWITCH_KEEP)
		return 0;
	__u32 i = at;
	asm volatile("" : "+r"(i)); // bound the value itself, as the verifier sees it
	if (i > 2 * SWITCH_KEEP) // never: tells the verifier
		return 0;
	__u64 ret = *(__u64 *)&s->data[i];
	return ret >= lo && ret < hi;
}

// WINDOW_ENDED: a copy that stopped at an unreadable page or at the
// thread's learned stack top. Such a stack is not cut where its
// frame-pointer chain ends: a thread's stack (a C thread's in a cgo
// program: its chain ends under start_thread, whose frames its unwind
// needs) is not a goroutine's, which lies in Go's heap with neither
// above it.
#define WINDOW_ENDED (FLAG_WINDOW_FAULT | FLAG_WINDOW_TOP)

// user_window copies the user stack window of a sample whose user
// registers are in s (tgid's): from sp up, in two parts where the first
// shows a stack switch (a second window then follows, FLAG_STACK_SWITCH)
// or a Go stack's frame-pointer chain ends (the window then ends there).
// It returns the window's bytes and counts them. With loop (a constant)
// its copies and walks use bpf_loop (copy_window_body, fp_chain). Called
// from global functions (user_window, user_window_loop): the verifier
// checks its branches once, instead of checking the rest of the program
// after each.
#define copy(...) (loop ? copy_window_loop(__VA_ARGS__) : copy_window(__VA_ARGS__))
static __always_inline long user_window_body(struct sample *s, __u32 tgid, const int loop)
{
	if (!s)
		return 0;
	// First what a stack switch keeps of this stack: where there is
	// one, the rest of it is not needed. The callers are on the
	// goroutine's stack: keep the frames above sp on this one (the
	// vDSO's fit in a page, a cgo call's C frames and a systemstack
	// call's Go frames in SWITCH_KEEP) and copy that.
	__u64 w = copy(s, s->regs[7], 0, 0, SWITCH_KEEP);
	__u64 gsp = go_switched_sp(s, w), end = 0;
	__u64 gfp = gsp + 16; // the Go function's frame, above its sp
	__u32 keep = PAGE_SIZE;
	struct go_text *text = NULL;
	if (gsp == 0) {
		text = switch_listed(tgid);
		gsp = fp_switched_sp(s, w, text, loop);
		if (gsp & CHAIN_END) {
			end = gsp & ~(__u64)CHAIN_END;
			gsp = 0;
			if (!text || !go_return(s, end - 8, text->lo, text->hi))
				end = 0; // a C thread's chain: its frames go on above
		}
		gfp = gsp;
		keep = SWITCH_KEEP;
	}
	if (gsp != 0) {
		if (keep > w)
			keep = w;
		// FLAG_WINDOW_TOP stays: a top that cut either copy is to be
		// checked.
		s->flags &= ~(FLAG_WINDOW_FAULT | FLAG_WINDOW_MAX);
		s->flags |= FLAG_STACK_SWITCH;
		s->switch_sp = gsp;
		s->switch_off = keep;
		// The goroutine's stack the same way: its first part, the
		// rest only where its chain does not end there.
		__u64 w2 = copy(s, gsp, keep, 0, SWITCH_KEEP);
		__u64 r = fp_chain(s, keep, gsp, w2, gfp, loop);
		// A vDSO call's goroutine stack (go_switched_sp: text NULL) is
		// Go's; a listed process's where its chain ends in Go code.
		if ((r & CHAIN_END) && !(s->flags & WINDOW_ENDED) &&
		    (!text || go_return(s, keep + (r & ~(__u64)CHAIN_END) - 8, text->lo, text->hi)))
			w2 = r & ~(__u64)CHAIN_END;
		else if (w2 >= SWITCH_KEEP && !(s->flags & FLAG_WINDOW_FAULT))
			w2 = copy(s, gsp, keep, w2, 0);
		w = keep + w2;
	} else if (end != 0 && !(s->flags & WINDOW_ENDED)) {
		w = end; // a Go stack's chain ended: its frames are all in
	} else if (w >= SWITCH_KEEP && !(s->flags & FLAG_WINDOW_FAULT)) {
		w = copy(s, s->regs[7], 0, w, 0); // the rest
	}
	count_add(COUNTER_WINDOW_BYTES, w);
	if (s->flags & FLAG_WINDOW_FAULT)
		count(COUNTER_WINDOW_FAULT);
	if (s->flags & FLAG_WINDOW_MAX)
		count(COUNTER_WINDOW_MAX);
	return w;
}

#undef copy

// user_window is user_window_body with bounded loops (any kernel).
__attribute__((noinline)) long user_window(struct sample *s, __u32 tgid)
{
	return user_window_body(s, tgid, 0);
}

// user_window_loop is user_window_body with bpf_loop (Linux 5.17+).
__attribute__((noinline)) long user_window_loop(struct sample *s, __u32 tgid)
{
	return user_window_body(s, tgid, 1);
}

// take_sample records the current task's stacks and submits them. in_user
// says the sample interrupted user mode, where the kernel stack is empty:
// the kernel walk (get_perf_callchain would find nothing) is then skipped;
// regs are then the user registers (the context of a perf_event or
// kprobe-type program; NULL for the others). probe is the probe's index
// (0 for events). With loop (a constant) the user window is copied with
// bpf_loop (user_window_loop).
static __always_inline int take_sample(void *ctx, struct pt_regs *regs, __u64 period, int in_user, int dwarf, __u32 probe, const int loop)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 tid = (__u32)id;

	if (!keep(tgid, tid)) {
		count(COUNTER_FILTERED);
		return 0;
	}
	count(COUNTER_SAMPLES);

	__u32 cpu = bpf_get_smp_processor_id();
	struct sample *s = bpf_map_lookup_elem(&scratch, &cpu);
	if (!s)
		return 0;
	s->time_ns = bpf_ktime_get_ns();
	s->period = period;
	s->cgroup_id = bpf_get_current_cgroup_id();
	s->tgid = tgid;
	s->tid = tid;
	s->cpu = cpu;
	s->flags = 0;
	s->window_len = 0;
	s->probe = probe;
	s->switch_sp = 0;
	s->switch_off = 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));

	__u64 w = 0;
	if (dwarf) {
		if (tgid != 0 && user_regs(regs, s, in_user)) {
			s->flags |= FLAG_USER_REGS;
			w = loop ? user_window_loop(s, tgid) : user_window(s, tgid);
		} else {
			count(COUNTER_NO_REGS);
		}
	}
	if (w > SWITCH_KEEP + MAX_WINDOW)
		w = SWITCH_KEEP + MAX_WINDOW;
	s->window_len = w;

	__u64 *ips = (__u64 *)&s->data[w];
	long klen = in_user ? 0 : bpf_get_stack(ctx, ips, MAX_STACK_DEPTH * 8, 0);
	if (klen < 0) {
		s->flags |= FLAG_KSTACK_ERR;
		count(COUNTER_KSTACK_ERR);
		klen = 0;
	}
	__u32 kn = (__u32)klen / 8;
	if (kn > MAX_STACK_DEPTH)
		kn = MAX_STACK_DEPTH;

	long ulen = 0;
	if (!dwarf) {
		ulen = bpf_get_stack(ctx, &s->data[w + kn * 8], MAX_STACK_DEPTH * 8, BPF_F_USER_STACK);
		if (ulen < 0) {
			s->flags |= FLAG_USTACK_ERR;
			count(COUNTER_USTACK_ERR);
			ulen = 0;
		}
	}
	__u32 un = (__u32)ulen / 8;
	if (un > MAX_STACK_DEPTH)
		un = MAX_STACK_DEPTH;
	s->kstack_len = kn * 8;
	s->ustack_len = un * 8;

	__u64 size = HEADER_LEN + w + (__u64)(kn + un) * 8;
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
	return take_sample(ctx, (struct pt_regs *)ctx, ctx->sample_period, in_user, call_graph_dwarf, 0, 0);
}

// profile_loop is profile with the stack copied by bpf_loop (Linux 5.17+):
// the same records, for about a third of the verification (the loader
// tries it first, BenchmarkOpenSampler/dwarf against /dwarf-bounded).
SEC("perf_event")
int profile_loop(struct bpf_perf_event_data *ctx)
{
	int in_user = user_mode_check && (ctx->regs.cs & 3) == 3;
	return take_sample(ctx, (struct pt_regs *)ctx, ctx->sample_period, in_user, call_graph_dwarf, 0, 1);
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
	// A tracepoint's context is its record, not pt_regs: the user stack
	// comes from the frame-pointer walk in either mode.
	return take_sample(ctx, 0, tp_period, 0, 0, 0, 0);
}

// probe_hit counts a hit of probe (its attach cookie) and, when the
// probes sample and this is the tp_period-th hit of the probe on this
// CPU, takes a sample. regs are the probe's registers (NULL for fentry
// and fexit, whose context is the function's arguments).
static __always_inline int probe_hit(void *ctx, struct pt_regs *regs, __u64 probe)
{
	__u32 zero = 0;
	__u32 *mode = bpf_map_lookup_elem(&probe_mode, &zero);
	if (!mode || *mode == PROBE_OFF)
		return 0;
	__u32 idx = probe < MAX_PROBES ? (__u32)probe : MAX_PROBES - 1;
	__u64 *hits = bpf_map_lookup_elem(&probe_hits, &idx);
	if (!hits)
		return 0;
	*hits += 1;
	if (*mode != PROBE_SAMPLE)
		return 0;
	if (tp_period > 1 && *hits % tp_period != 0)
		return 0;
	// A uprobe's registers are the user's (cs says so): no kernel stack.
	int in_user = regs && user_mode_check && (regs->cs & 3) == 3;
	return take_sample(ctx, regs, tp_period, in_user, call_graph_dwarf, idx, 0);
}

// profile_kprobe runs on every hit of a kprobe, kretprobe, uprobe,
// uretprobe (USDT probes are uprobes) or of a probe event made by perf
// probe: all are kprobe-type programs whose context is pt_regs.
SEC("kprobe")
int profile_kprobe(struct pt_regs *ctx)
{
	return probe_hit(ctx, ctx, bpf_get_attach_cookie(ctx));
}

// profile_kprobe_multi is profile_kprobe for kprobe.multi links (a glob of
// kernel functions in one link, Linux 5.18), which need their own attach
// type at load time.
SEC("kprobe.multi")
int profile_kprobe_multi(struct pt_regs *ctx)
{
	return probe_hit(ctx, ctx, bpf_get_attach_cookie(ctx));
}

// probe_trampoline is probe_hit for fentry and fexit programs (kernels
// without kprobes: BPF trampolines): they can nest on a CPU, so a nested
// hit is dropped and counted.
static __always_inline int probe_trampoline(void *ctx)
{
	__u32 zero = 0;
	__u32 *depth = bpf_map_lookup_elem(&probe_depth, &zero);
	if (!depth)
		return 0;
	if (*depth) {
		count(COUNTER_NESTED);
		return 0;
	}
	*depth = 1;
	probe_hit(ctx, 0, bpf_get_attach_cookie(ctx));
	*depth = 0;
	return 0;
}

// profile_fentry is the entry probe on a kernel function where the kernel
// has no kprobes; the loader sets the function (its BTF id) per copy.
SEC("fentry")
int profile_fentry(void *ctx)
{
	return probe_trampoline(ctx);
}

// profile_fexit is profile_fentry at the function's return (kretprobe).
SEC("fexit")
int profile_fexit(void *ctx)
{
	return probe_trampoline(ctx);
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

// send_event sends a stackless record (FLAG_EXIT, FLAG_EXEC, FLAG_FORK)
// about process tgid: the header only, built on the BPF stack, with aux in
// its probe field (FLAG_FORK: the parent's tgid) and the current task's
// comm.
static __always_inline void send_event(__u32 tgid, __u32 flag, __u32 aux, __u64 wakeup)
{
	struct sample *s;
	__u8 buf[HEADER_LEN] = {};
	s = (struct sample *)buf;
	s->time_ns = bpf_ktime_get_ns();
	s->tgid = tgid;
	s->tid = tgid;
	s->cpu = bpf_get_smp_processor_id();
	s->flags = flag;
	s->probe = aux;
	bpf_get_current_comm(s->comm, sizeof(s->comm));
	if (bpf_ringbuf_output(&events, buf, sizeof(buf), wakeup))
		count(COUNTER_EVENTS_LOST);
}

// follow_fork runs in the parent (current) of every new task: a new
// process forked by a target becomes a target, and with report_exits
// the reader is told of the new process and its parent (FLAG_FORK), so
// that a child that exits before its maps are read is named through the
// mappings it shares with its parent (as perf's PERF_RECORD_FORK). No
// wake-up: the record only has to come before the child's samples.
SEC("tracepoint/task/task_newtask")
int follow_fork(struct task_newtask_args *ctx)
{
	if (ctx->clone_flags & CLONE_THREAD)
		return 0; // a new thread: covered by its tgid already
	__u64 id = bpf_get_current_pid_tgid();
	__u32 ptgid = id >> 32;
	__u32 ctgid = ctx->pid;
	if (follow_forks && is_target(ptgid)) {
		__u8 on = TARGET_ON;
		bpf_map_update_elem(&targets, &ctgid, &on, BPF_ANY);
		count(COUNTER_FORKS);
	}
	if (report_exits && keep(ptgid, (__u32)id))
		send_event(ctgid, FLAG_FORK, ptgid, BPF_RB_NO_WAKEUP);
	return 0;
}

// start_at_exec turns a target waiting for its exec on, once the new
// program is loaded (as perf's enable_on_exec does), and drops the
// thread's stack top; with report_exits it also tells the reader at once
// (waking it), so that a process that lives a few milliseconds is seen
// alive, its new maps read. The exec'ing task
// is current (by now its thread group's leader). A raw tracepoint: it
// reads no argument, and detaching it costs no RCU grace period (closing
// a classic tracepoint's perf event waits for one, 20-50 ms).
SEC("raw_tracepoint/sched_process_exec")
int start_at_exec(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	// The exec'ing thread's stack top was the old program's: the new
	// one's stack is elsewhere. The reader forgets it at the exec record,
	// but samples taken before it reads that record would be cut by it.
	bpf_map_delete_elem(&stack_tops, &tgid);
	__u8 *v = bpf_map_lookup_elem(&targets, &tgid);
	if (v && *v == TARGET_AT_EXEC)
		*v = TARGET_ON;
	if (report_exits && keep(tgid, tgid))
		send_event(tgid, FLAG_EXEC, 0, BPF_RB_FORCE_WAKEUP);
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
	send_event(tgid, FLAG_EXIT, 0, BPF_RB_NO_WAKEUP);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
