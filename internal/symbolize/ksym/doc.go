// Package ksym owns the kernel-symbol BPF programs and what they say:
// the kallsyms iterator (bpf/ksym.bpf.c; [OpenIter], its records decoded
// by [ParseIter] into a [kallsyms.Table]) and the on-demand lookup
// (bpf/ksymlookup.bpf.c; [OpenLookup], the kernel's own "%pS"). The
// record and batch layouts come from the types bpf2go generates from the
// C structs (gen.go). Sampling lives in internal/attach; neither package
// imports the other.
//
// # Kernel interfaces
//
// [OpenIter] needs Linux 6.0 (the ksym iterator) and kernel BTF;
// [OpenLookup] Linux 5.16 (syscall programs, bpf_loop,
// bpf_kallsyms_lookup_name) and memory-mappable maps. Both need root, or
// CAP_BPF and CAP_PERFMON (errors wrap [privilege.ErrPermission]), and
// honour kernel.kptr_restrict as /proc/kallsyms does.
//
// # Spec
//
// The kernel's kernel/kallsyms.c (bpf_iter__ksym, s_show) and
// Documentation/bpf/bpf_iterators.rst.
package ksym
