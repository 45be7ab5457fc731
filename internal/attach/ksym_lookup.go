package attach

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
)

// Layout of the global "batch" that bpf/ksymlookup.bpf.c and
// KernelSymbolLookup share through the memory-mapped .bss map (offsets in
// bytes; integers in host byte order).
const (
	// KernelLookupBatch is how many addresses one run of the lookup
	// program names (BATCH).
	KernelLookupBatch = 64
	// KernelLookupTextLen is the room for each text (TEXT_LEN): the
	// kernel's KSYM_SYMBOL_LEN is 665 bytes with 512-byte names.
	KernelLookupTextLen = 672

	lookupOffCount     = 0
	lookupOffTextErr   = 4
	lookupOffTextStart = 8
	lookupOffTextEnd   = 16
	lookupOffAddrs     = 24
	lookupOffLens      = lookupOffAddrs + 8*KernelLookupBatch
	lookupOffTexts     = lookupOffLens + 4*KernelLookupBatch
	lookupSize         = lookupOffTexts + KernelLookupTextLen*KernelLookupBatch
)

// KernelSymbolLookup names kernel addresses on demand, in the kernel: a
// BPF_PROG_TYPE_SYSCALL program (bpf/ksymlookup.bpf.c) that user space
// runs with BPF_PROG_TEST_RUN writes printk's "%pS" text for each address
// (kallsyms_lookup: the kernel image, modules, BPF programs, ftrace and
// kprobe trampolines). Naming the few hundred addresses of a profile's
// stacks costs microseconds where listing kallsyms costs 40-70 ms of
// kernel time. Safe for use by one goroutine at a time per method call
// (Lookup serializes itself).
type KernelSymbolLookup struct {
	objs struct {
		Lookup    *ebpf.Program `ebpf:"lookup"`
		TextRange *ebpf.Program `ebpf:"text_range"`
		Bss       *ebpf.Map     `ebpf:".bss"`
	}
	mem        *ebpf.Memory
	start, end uint64

	mu  sync.Mutex
	buf []byte // one text, read from mem
}

// ErrKallsymsHidden: kallsyms hides kernel addresses from this process
// (kernel.kptr_restrict=2, or 1 without CAP_SYSLOG), and
// OpenKernelSymbolLookup honours it by not opening.
var ErrKallsymsHidden = errors.New("kallsyms hides kernel addresses from this process (kernel.kptr_restrict)")

// OpenKernelSymbolLookup loads the kernel symbol lookup programs and asks
// the kernel for the kernel image's text range (_stext, _etext) with
// bpf_kallsyms_lookup_name, which applies kallsyms' own rule for showing
// addresses to the caller: when it refuses, the error wraps
// ErrKallsymsHidden. It needs Linux 5.16 (syscall programs, bpf_loop,
// bpf_kallsyms_lookup_name), BPF maps that can be memory-mapped, and root
// or CAP_BPF and CAP_PERFMON (errors then wrap ErrPermission); no kernel
// BTF. Loading costs about 1 ms. Any error means the caller should list
// kallsyms instead (OpenKallsymsIter, /proc/kallsyms). Close releases it.
func OpenKernelSymbolLookup() (*KernelSymbolLookup, error) {
	spec, err := loadKsymlookup()
	if err != nil {
		return nil, err
	}
	if v := spec.Variables["batch"]; v == nil || v.Size() != lookupSize {
		return nil, fmt.Errorf("BPF kernel symbol lookup: the object's batch layout does not match attach's (rebuild with make generate)")
	}
	l := &KernelSymbolLookup{buf: make([]byte, KernelLookupTextLen)}
	if err := spec.LoadAndAssign(&l.objs, nil); err != nil {
		return nil, permissionError("load BPF kernel symbol lookup (needs Linux 5.16)", err)
	}
	if l.mem, err = l.objs.Bss.Memory(); err != nil {
		l.Close()
		return nil, fmt.Errorf("map the BPF kernel symbol lookup's memory: %w", err)
	}
	if err := l.run(l.objs.TextRange); err != nil {
		l.Close()
		return nil, err
	}
	var head [lookupOffAddrs]byte
	if _, err := l.mem.ReadAt(head[:], 0); err != nil {
		l.Close()
		return nil, fmt.Errorf("read the BPF kernel symbol lookup's memory: %w", err)
	}
	switch errno := -int32(binary.NativeEndian.Uint32(head[lookupOffTextErr:])); {
	case errno == int32(syscall.EPERM):
		l.Close()
		return nil, ErrKallsymsHidden
	case errno != 0:
		l.Close()
		return nil, fmt.Errorf("BPF kernel symbol lookup: _stext, _etext: %w", syscall.Errno(errno))
	}
	l.start = binary.NativeEndian.Uint64(head[lookupOffTextStart:])
	l.end = binary.NativeEndian.Uint64(head[lookupOffTextEnd:])
	return l, nil
}

// run runs prog once with BPF_PROG_TEST_RUN.
func (l *KernelSymbolLookup) run(prog *ebpf.Program) error {
	if _, err := prog.Run(&ebpf.RunOptions{}); err != nil {
		return permissionError("run BPF kernel symbol lookup", err)
	}
	return nil
}

// TextRange returns the kernel image's text [start, end): the addresses
// of _stext and _etext.
func (l *KernelSymbolLookup) TextRange() (start, end uint64) { return l.start, l.end }

// Lookup sets texts[i] to the kernel's "%pS" text for addrs[i], which
// must have the same length: "name+0xoff/0xsize" (offset of addrs[i] in
// the symbol, and the symbol's size, in bytes), followed by " [module]"
// for a module's symbol, or "0x<addr>" when no symbol covers addrs[i].
// It runs the program once per KernelLookupBatch addresses. An error
// (the run failed) leaves the remaining texts empty.
func (l *KernelSymbolLookup) Lookup(addrs []uint64, texts []string) error {
	if len(texts) != len(addrs) {
		return fmt.Errorf("kernel symbol lookup: %d addresses but room for %d texts", len(addrs), len(texts))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var in [8 * KernelLookupBatch]byte
	var lens [4 * KernelLookupBatch]byte
	for done := 0; done < len(addrs); {
		n := min(len(addrs)-done, KernelLookupBatch)
		for i, a := range addrs[done : done+n] {
			binary.NativeEndian.PutUint64(in[8*i:], a)
		}
		var cnt [4]byte
		binary.NativeEndian.PutUint32(cnt[:], uint32(n))
		if _, err := l.mem.WriteAt(in[:8*n], lookupOffAddrs); err != nil {
			return err
		}
		if _, err := l.mem.WriteAt(cnt[:], lookupOffCount); err != nil {
			return err
		}
		if err := l.run(l.objs.Lookup); err != nil {
			return err
		}
		if _, err := l.mem.ReadAt(lens[:4*n], lookupOffLens); err != nil {
			return err
		}
		for i := range n {
			size := int32(binary.NativeEndian.Uint32(lens[4*i:]))
			if size <= 0 {
				texts[done+i] = "" // bpf_snprintf failed
				continue
			}
			size = min(size, KernelLookupTextLen)
			text := l.buf[:size]
			if _, err := l.mem.ReadAt(text, int64(lookupOffTexts+KernelLookupTextLen*i)); err != nil {
				return err
			}
			if j := bytes.IndexByte(text, 0); j >= 0 {
				text = text[:j]
			}
			texts[done+i] = string(text)
		}
		done += n
	}
	return nil
}

// Close unloads the programs and unmaps the memory. It is idempotent.
func (l *KernelSymbolLookup) Close() error {
	// Program.Close and Map.Close accept nil.
	err := errors.Join(l.objs.Lookup.Close(), l.objs.TextRange.Close(), l.objs.Bss.Close())
	l.objs.Lookup, l.objs.TextRange, l.objs.Bss = nil, nil, nil
	return err
}
