// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// gprofile's kernel symbol lookup: names a batch of kernel addresses on
// demand, so that a profile pays for the few hundred addresses its stacks
// hold instead of for a listing of all of kallsyms (120k symbols, 40-70 ms
// of kernel time however it is read).
//
// Two BPF_PROG_TYPE_SYSCALL programs, run from user space with
// BPF_PROG_TEST_RUN (ksym.OpenLookup):
//
//   lookup      writes the kernel's "%pS" text for batch.addrs[0..count)
//               into texts[i] and bpf_snprintf's result into lens[i]. "%pS" is
//               printk's symbol format, from kallsyms_lookup (the kernel
//               image, modules, BPF programs, ftrace and kprobe
//               trampolines): "name+0xoff/0xsize" with " [module]" for a
//               module symbol, or "0x<addr>" when no symbol covers addr.
//   text_range  sets text_start and text_end to the addresses of _stext
//               and _etext (bpf_kallsyms_lookup_name), and text_err to its
//               error: -EPERM when kallsyms hides addresses from the
//               caller (kernel.kptr_restrict), which user space honours
//               by not using lookup at all.
//
// Everything is exchanged through one global, batch (.bss, memory-mapped
// by user space): one BPF_PROG_TEST_RUN per batch, no map syscalls.
// Needs Linux 5.16 (syscall programs, bpf_loop, bpf_kallsyms_lookup_name)
// and no kernel BTF.

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

// Addresses per run (ksym.LookupBatch).
#define BATCH 64
// Bytes per text: the kernel's KSYM_SYMBOL_LEN is 665 with 512-byte names
// (Linux 6.1+), the most "%pS" can write (ksym.LookupTextLen).
#define TEXT_LEN 672

// The one global (.bss), shared with user space; ksym reads its
// layout from the type bpf2go generates of it.
struct lookup_batch {
	__u32 count;                 // addresses in addrs, set by user space
	__s32 text_err;              // text_range: 0, or the lookup's -errno
	__u64 text_start;            // text_range: _stext
	__u64 text_end;              // text_range: _etext
	__u64 addrs[BATCH];          // kernel addresses to name
	__s32 lens[BATCH];           // bpf_snprintf's result: text bytes + 1, or -errno
	char texts[BATCH][TEXT_LEN]; // NUL-terminated "%pS" texts
} batch;

static long name_one(__u32 i, void *unused)
{
	if (i >= BATCH)
		return 1;
	__u64 arg = batch.addrs[i];
	batch.lens[i] = bpf_snprintf(batch.texts[i], TEXT_LEN, "%pS", &arg, sizeof(arg));
	return 0;
}

SEC("syscall")
int lookup(void *ctx)
{
	__u32 n = batch.count;
	if (n > BATCH)
		n = BATCH;
	bpf_loop(n, name_one, NULL, 0);
	return 0;
}

static const char stext[] = "_stext";
static const char etext[] = "_etext";

SEC("syscall")
int text_range(void *ctx)
{
	long err = bpf_kallsyms_lookup_name(stext, sizeof(stext), 0, &batch.text_start);
	if (err == 0)
		err = bpf_kallsyms_lookup_name(etext, sizeof(etext), 0, &batch.text_end);
	batch.text_err = (__s32)err;
	return 0;
}
