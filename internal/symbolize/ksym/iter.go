package ksym

import (
	"fmt"
	"io"
	"sync"
	"weak"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/gprofile/gprofile/internal/privilege"
)

// OpenIter loads the BPF kallsyms iterator (bpf/ksym.bpf.c, an
// "iter/ksym" program) and returns a stream of the kernel's symbols as
// binary records ([ParseIter] decodes them; struct ksym_record in
// bpf/ksym.bpf.c gives the layout): the symbols,
// addresses, type letters and module names that /proc/kallsyms lists, in
// its order, without the text formatting that makes reading
// /proc/kallsyms costly for the kernel (BenchmarkOpenKallsymsIter against
// kallsyms' BenchmarkKallsymsRead). Module symbols carry their module's name ("bpf" for
// BPF programs, "__builtin__ftrace" and "__builtin__kprobes" for
// trampolines and kprobe pages), kernel image symbols an empty one. The
// iterator's own program, unloaded when the stream is closed, is left
// out.
//
// Addresses are 0 when kallsyms would hide them from the caller
// (kernel.kptr_restrict; the kernel decides when the stream is opened,
// from the caller's credentials, as for /proc/kallsyms).
//
// Each Read of at least 32 KiB returns whole records, at most 32 KiB of
// them (the iterator's seq_file buffer); the last returns io.EOF. The
// stream is read once. The program and its link are released before
// OpenIter returns (the open iterator holds the program); Close
// releases the iterator.
//
// It needs Linux 6.0 (the ksym iterator), kernel BTF
// (/sys/kernel/btf/vmlinux), and root or CAP_BPF and CAP_PERFMON. Errors
// wrap ErrPermission when the load is refused for lack of privileges;
// any error means the caller should read /proc/kallsyms instead.
//
// Loading verifies and attaches the program once kernel BTF is decoded;
// decoding it (cilium/ebpf: the type index, then the types that the
// attach target bpf_iter_ksym reaches) costs more than the load, unless
// a load running at the same time or [HoldKernelBTF] holds it
// (BenchmarkOpenKallsymsIter; bench/symbolize's kallsyms -source iter
// measures cold and warm loads).
func OpenIter() (io.ReadCloser, error) {
	spec, err := loadKsym()
	if err != nil {
		return nil, err
	}
	var objs ksymPrograms
	opts := &ebpf.CollectionOptions{Cache: sharedKernelBTF()}
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		return nil, privilege.Wrap("load BPF ksym iterator (needs Linux 6.0 and kernel BTF)", err)
	}
	defer objs.GprofileKsym.Close()
	it, err := link.AttachIter(link.IterOptions{Program: objs.GprofileKsym})
	if err != nil {
		return nil, privilege.Wrap("attach BPF ksym iterator", err)
	}
	defer it.Close()
	r, err := it.Open()
	if err != nil {
		return nil, fmt.Errorf("open BPF ksym iterator: %w", err)
	}
	return r, nil
}

// The kernel BTF that BPF loads decode, shared by the loads that overlap
// in time and kept while HoldKernelBTF holds it; otherwise left to the
// garbage collector: it takes megabytes of heap and maps
// /sys/kernel/btf/vmlinux, which gprofile needs only while it starts.
var (
	kernelBTFMu   sync.Mutex
	kernelBTFWeak weak.Pointer[btf.Cache]
	kernelBTFHeld *btf.Cache // while kernelBTFRefs > 0
	kernelBTFRefs int
)

// sharedKernelBTF returns the shared kernel BTF cache, or a new one when
// nothing holds it any more. The caller holds it as long as it keeps the
// pointer.
func sharedKernelBTF() *btf.Cache {
	kernelBTFMu.Lock()
	defer kernelBTFMu.Unlock()
	c := kernelBTFWeak.Value()
	if c == nil {
		c = btf.NewCache()
		kernelBTFWeak = weak.Make(c)
	}
	return c
}

// HoldKernelBTF keeps the kernel BTF that OpenIter decodes
// (megabytes of heap, and /sys/kernel/btf/vmlinux mapped) until release
// is called, so that loads in a row decode it once instead of each
// paying for it. Without a holder it lives only as long as a
// load that uses it. release is idempotent.
func HoldKernelBTF() (release func()) {
	c := sharedKernelBTF()
	kernelBTFMu.Lock()
	kernelBTFHeld = c
	kernelBTFRefs++
	kernelBTFMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			kernelBTFMu.Lock()
			defer kernelBTFMu.Unlock()
			if kernelBTFRefs--; kernelBTFRefs == 0 {
				kernelBTFHeld = nil
			}
		})
	}
}
