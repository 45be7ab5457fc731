package ksym

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/gprofile/gprofile/internal/privilege"
)

// Layout of the global "batch" that bpf/ksymlookup.bpf.c and [Lookup]
// share through the memory-mapped .bss map: offsets in bytes, from the
// type bpf2go generated from the C struct (integers in host byte order).
const (
	// LookupBatch is how many addresses one run of the lookup program
	// names (BATCH).
	LookupBatch = len(ksymlookupLookupBatch{}.Addrs)
	// LookupTextLen is the room for each text (TEXT_LEN): the kernel's
	// KSYM_SYMBOL_LEN is 665 bytes with 512-byte names.
	LookupTextLen = len(ksymlookupLookupBatch{}.Texts[0])

	lookupOffCount     = int64(unsafe.Offsetof(ksymlookupLookupBatch{}.Count))
	lookupOffTextErr   = int64(unsafe.Offsetof(ksymlookupLookupBatch{}.TextErr))
	lookupOffTextStart = int64(unsafe.Offsetof(ksymlookupLookupBatch{}.TextStart))
	lookupOffTextEnd   = int64(unsafe.Offsetof(ksymlookupLookupBatch{}.TextEnd))
	lookupOffAddrs     = int64(unsafe.Offsetof(ksymlookupLookupBatch{}.Addrs))
	lookupOffLens      = int64(unsafe.Offsetof(ksymlookupLookupBatch{}.Lens))
	lookupOffTexts     = int64(unsafe.Offsetof(ksymlookupLookupBatch{}.Texts))
	lookupSize         = uint32(unsafe.Sizeof(ksymlookupLookupBatch{}))
)

// Lookup names kernel addresses on demand, in the kernel: a
// BPF_PROG_TYPE_SYSCALL program (bpf/ksymlookup.bpf.c) that user space
// runs with BPF_PROG_TEST_RUN writes printk's "%pS" text for each address
// (kallsyms_lookup: the kernel image, modules, BPF programs, ftrace and
// kprobe trampolines). Naming the few hundred addresses of a profile's
// stacks costs far less than listing kallsyms (BenchmarkKernelSymbolLookup
// against kallsyms' BenchmarkKallsymsRead). Safe for use by one goroutine at a time per method call
// (Lookup serializes itself).
type Lookup struct {
	objs       lookupObjects
	mem        *ebpf.Memory
	start, end uint64

	mu  sync.Mutex
	buf []byte // one text, read from mem
}

// lookupObjects are the loaded programs (generated) and the map behind
// the global batch, memory-mapped to read and write parts of it (bpf2go
// generates a Variable for batch, which reads and writes it whole).
type lookupObjects struct {
	ksymlookupPrograms
	Bss *ebpf.Map `ebpf:".bss"`
}

// ErrHidden: kallsyms hides kernel addresses from this process
// (kernel.kptr_restrict=2, or 1 without CAP_SYSLOG), and
// OpenLookup honours it by not opening.
var ErrHidden = errors.New("kallsyms hides kernel addresses from this process (kernel.kptr_restrict)")

// OpenLookup loads the kernel symbol lookup programs and asks
// the kernel for the kernel image's text range (_stext, _etext) with
// bpf_kallsyms_lookup_name, which applies kallsyms' own rule for showing
// addresses to the caller: when it refuses, the error wraps
// ErrHidden. It needs Linux 5.16 (syscall programs, bpf_loop,
// bpf_kallsyms_lookup_name), BPF maps that can be memory-mapped, and root
// or CAP_BPF and CAP_PERFMON (errors then wrap ErrPermission); no kernel
// BTF. Any error means the caller should list
// kallsyms instead (OpenIter, /proc/kallsyms). Close releases it.
func OpenLookup() (*Lookup, error) {
	spec, err := loadKsymlookup()
	if err != nil {
		return nil, err
	}
	var specs ksymlookupVariableSpecs
	if err := spec.Assign(&specs); err != nil || specs.Batch.Size() != lookupSize {
		return nil, fmt.Errorf("BPF kernel symbol lookup: the object's batch does not match its generated type (rebuild with make generate)")
	}
	l := &Lookup{buf: make([]byte, LookupTextLen)}
	if err := spec.LoadAndAssign(&l.objs, nil); err != nil {
		return nil, privilege.Wrap("load BPF kernel symbol lookup (needs Linux 5.16)", err)
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
		return nil, ErrHidden
	case errno != 0:
		l.Close()
		return nil, fmt.Errorf("BPF kernel symbol lookup: _stext, _etext: %w", syscall.Errno(errno))
	}
	l.start = binary.NativeEndian.Uint64(head[lookupOffTextStart:])
	l.end = binary.NativeEndian.Uint64(head[lookupOffTextEnd:])
	return l, nil
}

// run runs prog once with BPF_PROG_TEST_RUN.
func (l *Lookup) run(prog *ebpf.Program) error {
	if _, err := prog.Run(&ebpf.RunOptions{}); err != nil {
		return privilege.Wrap("run BPF kernel symbol lookup", err)
	}
	return nil
}

// TextRange returns the kernel image's text [start, end): the addresses
// of _stext and _etext.
func (l *Lookup) TextRange() (start, end uint64) { return l.start, l.end }

// Lookup sets texts[i] to the kernel's "%pS" text for addrs[i], which
// must have the same length: "name+0xoff/0xsize" (offset of addrs[i] in
// the symbol, and the symbol's size, in bytes), followed by " [module]"
// for a module's symbol, or "0x<addr>" when no symbol covers addrs[i].
// It runs the program once per LookupBatch addresses. An error
// (the run failed) leaves the remaining texts empty.
func (l *Lookup) Lookup(addrs []uint64, texts []string) error {
	if len(texts) != len(addrs) {
		return fmt.Errorf("kernel symbol lookup: %d addresses but room for %d texts", len(addrs), len(texts))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var in [8 * LookupBatch]byte
	var lens [4 * LookupBatch]byte
	for done := 0; done < len(addrs); {
		n := min(len(addrs)-done, LookupBatch)
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
			size = min(size, int32(LookupTextLen))
			text := l.buf[:size]
			if _, err := l.mem.ReadAt(text, lookupOffTexts+int64(LookupTextLen*i)); err != nil {
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
func (l *Lookup) Close() error {
	// Program.Close and Map.Close accept nil.
	err := errors.Join(l.objs.ksymlookupPrograms.Close(), l.objs.Bss.Close())
	l.objs = lookupObjects{}
	return err
}
