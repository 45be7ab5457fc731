package elfio

import (
	"debug/elf"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Mapping is a read-only, private mapping (mmap) of a range of a file (a
// section's bytes: MapSection; any range: MapFile), in Data. The pages
// are the page cache's, counted in RSS only as they are touched (and
// until Discard) and reclaimable under pressure, where a copy would be
// heap for as long as the binary is cached. The mapping lasts
// until the Mapping is unreachable (runtime.AddCleanup unmaps it), so
// whatever slices Data must keep its Mapping. A file truncated below a
// mapped page makes reading it fault (SIGBUS): readers of Data run with
// debug.SetPanicOnFault(true) and recover.
type Mapping struct {
	Data []byte

	mem   []byte // the whole mapping, from a page boundary
	delta int    // Data's offset in mem
}

// MapSection maps the bytes of s, at most max, when lr reads an *os.File
// and s is stored whole and uncompressed inside it; nil otherwise (the
// caller reads the section instead).
func MapSection(lr *ReaderAt, s *elf.Section, max uint64) *Mapping {
	f, ok := lr.r.(*os.File)
	if !ok || s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 || s.Size == 0 ||
		s.Size != s.FileSize || s.Size > max || !lr.InFile(s) || lr.size < 0 {
		return nil
	}
	return MapFile(f, s.Offset, s.Size)
}

// MapFile maps n bytes of f from offset off, read-only and private; nil
// when n is 0 or the mapping fails (the caller reads the bytes instead).
// The mapping outlives f's closing. See Mapping for faults.
func MapFile(f *os.File, off, n uint64) *Mapping {
	page := uint64(os.Getpagesize())
	start := off &^ (page - 1)
	length := off - start + n
	if n == 0 || length > 1<<40 || start > 1<<62 {
		return nil
	}
	sc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var mem []byte
	var merr error
	if err := sc.Control(func(fd uintptr) {
		mem, merr = unix.Mmap(int(fd), int64(start), int(length), unix.PROT_READ, unix.MAP_PRIVATE)
	}); err != nil || merr != nil {
		return nil
	}
	m := &Mapping{Data: mem[off-start:], mem: mem, delta: int(off - start)}
	runtime.AddCleanup(m, func(b []byte) { _ = unix.Munmap(b) }, mem)
	return m
}

// Discard drops the mapped pages that lie wholly inside Data[off:off+n]
// from the process (madvise MADV_DONTNEED), so that they no longer count
// in RSS: reading them again maps them again from the file (the page
// cache). It returns the range [lo, hi) of Data it dropped, empty when
// none.
func (m *Mapping) Discard(off, n int) (lo, hi int) {
	page := os.Getpagesize()
	alo := (m.delta + max(off, 0) + page - 1) / page * page
	ahi := min(m.delta+off+n, len(m.mem)) / page * page
	if ahi <= alo || unix.Madvise(m.mem[alo:ahi], unix.MADV_DONTNEED) != nil {
		return 0, 0
	}
	return alo - m.delta, ahi - m.delta
}

// RecoverFault reports whether r, a recovered panic value, is a memory
// fault: under debug.SetPanicOnFault(true), a read of a Mapping whose
// file was truncated below the page read (the runtime's error gives the
// faulting address). Any other panic goes on. Use:
//
//	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
//	defer func() {
//		if elfio.RecoverFault(recover()) {
//			// the mapping's file changed: give up on it
//		}
//	}()
func RecoverFault(r any) bool {
	if r == nil {
		return false
	}
	if _, ok := r.(interface {
		runtime.Error
		Addr() uintptr
	}); ok {
		return true
	}
	panic(r)
}

// Buffer is zeroed memory outside the Go heap, Data: an anonymous
// private mapping, whose pages count in RSS only once touched, so that a
// buffer the size of a section that is filled in a few places costs
// those places. Like a Mapping, it lasts until the Buffer is unreachable
// (runtime.AddCleanup unmaps it): whatever slices Data must keep its
// Buffer.
type Buffer struct {
	Data   []byte
	mapped bool // Data is the mapping (not the Go heap)
}

// Discard gives the whole pages of Data[off:off+n] back to the kernel
// (madvise MADV_DONTNEED): they read as zeros after, and count in RSS
// again only once written. It returns the range [lo, hi) it discarded,
// empty when none is (a Buffer in the Go heap, or no whole page inside).
func (b *Buffer) Discard(off, n int) (lo, hi int) {
	page := os.Getpagesize()
	lo = (max(off, 0) + page - 1) / page * page
	hi = min(off+n, len(b.Data)) / page * page
	if !b.mapped || hi <= lo {
		return 0, 0
	}
	if unix.Madvise(b.Data[lo:hi], unix.MADV_DONTNEED) != nil {
		return 0, 0
	}
	return lo, hi
}

// NewBuffer returns a Buffer of n bytes; in the Go heap when n is 0 or
// the mapping fails.
func NewBuffer(n int) *Buffer {
	if n <= 0 {
		return &Buffer{Data: []byte{}}
	}
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return &Buffer{Data: make([]byte, n)}
	}
	b := &Buffer{Data: mem, mapped: true}
	runtime.AddCleanup(b, func(m []byte) { _ = unix.Munmap(m) }, mem)
	return b
}
