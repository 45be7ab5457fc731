// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// gprofile's kernel symbol reader: a BPF iterator over kallsyms
// ("iter/ksym", Linux 6.0) that writes one binary record per symbol into
// the iterator's seq_file, in /proc/kallsyms order. Reading /proc/kallsyms
// costs the kernel a vsnprintf of "%px %c %s\t[%s]" per symbol; this
// writes the same fields as they are, which the reader then parses
// without hex or line splitting (ksym.OpenIter).
//
// Record (little-endian, packed, no padding between records):
//
//	offset 0   u64  value: the symbol's address, 0 when show_value is 0
//	offset 8   u16  name_len: bytes of name, 1..512
//	offset 10  u8   type: the type letter as /proc/kallsyms prints it
//	                (for module symbols upper case if exported, else lower)
//	offset 11  u8   module_len: bytes of module name, 0 for the kernel
//	                image, else 1..56 ("bpf" for BPF programs)
//	offset 12       name (no NUL), then the module name (no NUL)
//
// Symbols with an empty name are skipped, as /proc/kallsyms skips them,
// and so is this program's own symbol (see is_self).
//
// The name is copied from the iterator's kallsym_iter with plain
// BTF-typed loads (PTR_TO_BTF_ID, which the JIT guards against faults),
// eight bytes at a time until the word holding the NUL: measured faster
// than bpf_probe_read_kernel_str of the same 512-byte buffer.
//
// The copies load and store 8-byte words at offsets that are not 8-byte
// aligned: the verifier accepts that where the architecture has
// efficient unaligned access (x86-64, arm64, ppc64le); elsewhere the load
// fails and the reader falls back to /proc/kallsyms.
//
// Built with bpf2go (internal/symbolize/ksym/gen.go); needs no vmlinux.h: the
// kernel structs it reads are declared below with preserve_access_index
// and relocated against the running kernel's BTF.

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

// The largest name and module name the kernel has: KSYM_NAME_LEN is 512
// since Linux 6.1 (128 before; the copy loops stop at the real size),
// MODULE_NAME_LEN is 64 - sizeof(long).
#define NAME_MAX 512
#define MODULE_MAX 56
#define HEADER_LEN 12

// Just the fields we read; CO-RE relocates them against kernel BTF.
struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
} __attribute__((preserve_access_index));

struct kallsym_iter {
	unsigned long value;
	char type;
	char name[NAME_MAX];
	char module_name[MODULE_MAX];
	int exported;
	int show_value; // kallsyms_show_value() of the iterator's creator
} __attribute__((preserve_access_index));

struct bpf_iter__ksym {
	struct bpf_iter_meta *meta;
	struct kallsym_iter *ksym;
} __attribute__((preserve_access_index));

// One record; only HEADER_LEN + name_len bytes of it are written, then
// module_len bytes of module.
struct ksym_record {
	__u64 value;
	__u16 name_len;
	__u8 type;
	__u8 module_len;
	char name[NAME_MAX];
	char module[MODULE_MAX];
};

// Per-CPU scratch record: too large for the 512-byte BPF stack. The
// program runs with migration disabled, so one slot per CPU is enough.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ksym_record);
} scratch SEC(".maps");

// The iterator session and seq_num + 1 of the last symbol done with
// (written or skipped). When the iteration ends the kernel runs the
// program once more (in its seq_file stop) with the kallsym_iter of the
// last symbol still filled in (its module name overwritten) and the same
// seq_num as that symbol had: that call must write nothing. A symbol
// whose write overflowed the seq_file buffer is run again with the same
// seq_num, so it does not count as done. One iterator is read at a time
// per loaded program (OpenKallsymsIter loads one per iterator), so plain
// globals do.
__u64 last_session = 0;
__u64 last_seq = 0;

// This program's kallsyms name is bpf_prog_<tag>_gprofile_ksym: 39 bytes,
// "gprofile" at offset 26 and "ile_ksym" at 31 (little-endian words).
#define SELF_NAME_LEN 39
#define SELF_WORD0 0x656c69666f727067ULL // "gprofile"
#define SELF_WORD1 0x6d79736b5f656c69ULL // "ile_ksym"

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

// zero_byte returns the index (0-7) of the first zero byte of w, read
// little-endian, or 8 when it has none. The lowest byte flagged by
// (w - ONES) & ~w & HIGHS is always a real zero byte.
static __always_inline __u32 zero_byte(__u64 w)
{
	__u64 m = (w - ONES) & ~w & HIGHS;
	__u32 i = 0;

	if (!m)
		return 8;
	if (!(m & 0x80808080ULL)) {
		i += 4;
		m >>= 32;
	}
	if (!(m & 0x8080ULL)) {
		i += 2;
		m >>= 16;
	}
	if (!(m & 0x80ULL))
		i += 1;
	return i;
}

// COPY_STR copies the NUL-terminated string in the kernel char array
// src (of max bytes at most; size is its real size from BTF) into dst a
// word at a time and stores its length (size when there is no NUL) in
// len, a field of the scratch record. The loop is unrolled: loads from a
// BTF pointer need constant offsets. Each exit of the loop leaves a
// different constant length; stored to map memory and read back with a
// volatile load, it reaches the verifier as one bounded unknown, so the
// exits' states merge instead of being verified one by one (which took
// the kernel 2 s).
#define COPY_STR(dst, src, max, size, len)                                \
	do {                                                              \
		len = size;                                               \
		_Pragma("unroll") for (int i = 0; i < (max) / 8; i++)     \
		{                                                         \
			if (i * 8 + 8 > size)                             \
				break;                                    \
			__u64 w = *(__u64 *)((src) + i * 8);              \
			*(__u64 *)((dst) + i * 8) = w;                    \
			__u32 z = zero_byte(w);                           \
			if (z < 8) {                                      \
				len = i * 8 + z;                          \
				break;                                    \
			}                                                 \
		}                                                         \
	} while (0)

// is_self reports the record in r, of a name n bytes and a module m
// bytes long, to be this program's own symbol,
// "bpf_prog_<16 hex digits of tag>_gprofile_ksym" in module "bpf" (or
// that of another gprofile's iterator): unloaded as soon as the reader
// closes the iterator, it would name whatever BPF program the kernel
// puts at its address next.
static __always_inline int is_self(struct ksym_record *r, __u32 n, __u32 m)
{
	if (m != 3 || n != SELF_NAME_LEN)
		return 0;
	// "bpf" and its NUL, copied with the word that held them.
	if (*(__u32 *)r->module != ('b' | 'p' << 8 | 'f' << 16))
		return 0;
	// "gprofile_ksym" at offset 26, as two overlapping words.
	return *(__u64 *)(r->name + 26) == SELF_WORD0 && *(__u64 *)(r->name + 31) == SELF_WORD1;
}

// write_record writes the symbol it points at as one record, built in r,
// into the seq_file. It returns 0 when the symbol is done with (written,
// or skipped: no name, or this program) and -1 when the seq_file buffer
// is full: the kernel then runs the program for the symbol again, in the
// next read.
static __always_inline int write_record(struct bpf_iter_meta *meta, struct kallsym_iter *it,
					struct ksym_record *r)
{
	__u32 size = bpf_core_field_size(it->name);
	COPY_STR(r->name, it->name, NAME_MAX, size, r->name_len);
	__u32 n = *(volatile __u16 *)&r->name_len;
	if (n == 0 || n > NAME_MAX)
		return 0; // no name: /proc/kallsyms skips it too

	char type = it->type;
	__u32 m = 0;
	r->module_len = 0;
	if (it->module_name[0]) {
		__u32 msize = bpf_core_field_size(it->module_name);
		COPY_STR(r->module, it->module_name, MODULE_MAX, msize, r->module_len);
		m = *(volatile __u8 *)&r->module_len;
		if (m > MODULE_MAX || is_self(r, n, m))
			return 0;
		// As s_show in kernel/kallsyms.c prints module symbols.
		if (it->exported) {
			if (type >= 'a' && type <= 'z')
				type -= 'a' - 'A';
		} else if (type >= 'A' && type <= 'Z') {
			type += 'a' - 'A';
		}
	}
	r->value = it->show_value ? it->value : 0;
	r->type = type;
	if (bpf_seq_write(meta->seq, r, HEADER_LEN + n))
		return -1;
	if (m && bpf_seq_write(meta->seq, r->module, m))
		return -1;
	return 0;
}

SEC("iter/ksym")
int gprofile_ksym(struct bpf_iter__ksym *ctx)
{
	struct bpf_iter_meta *meta = ctx->meta;
	struct kallsym_iter *it = ctx->ksym;
	__u32 zero = 0;

	if (!it)
		return 0;
	__u64 session = meta->session_id;
	__u64 seq = meta->seq_num + 1;
	if (session == last_session && seq == last_seq)
		return 0; // the end-of-iteration call: see last_seq
	struct ksym_record *r = bpf_map_lookup_elem(&scratch, &zero);
	if (!r)
		return 0;
	if (write_record(meta, it, r) == 0) {
		last_session = session;
		last_seq = seq;
	}
	return 0;
}
