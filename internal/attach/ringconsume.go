package attach

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ringConsumer reads the records of a BPF ring buffer map in place, as
// libbpf's ring_buffer__consume does (the layout is the kernel's,
// Documentation/bpf/ringbuf.rst): a read-write page holding the consumer
// position, then a read-only page holding the producer position and the
// data pages mapped twice in a row, so that a record that wraps around
// the end reads as one slice. Each record is an 8-byte header (its length,
// with a busy and a discard bit) and its data, padded to 8 bytes.
//
// Where cilium/ebpf's ringbuf.Reader copies each record out and stores
// the consumer position after each one, consume hands each record's
// bytes to its callback where they lie and stores the position once
// every ringStoreEvery records and at the end: a store per record made
// the cache line that holds it move between the reader's CPU and every
// CPU whose BPF program reserves space (BENCHMARKS.md, "Issue 16,
// session 17"). It is used by one goroutine at a time.
type ringConsumer struct {
	consPage, dataPages []byte
	consPos, prodPos    *uint64
	ring                []byte // the data pages, mapped twice (2*size bytes)
	mask                uint64 // size-1
}

// Bits of a ring buffer record's header length (BPF_RINGBUF_BUSY_BIT,
// BPF_RINGBUF_DISCARD_BIT) and its size (BPF_RINGBUF_HDR_SZ).
const (
	ringBusyBit    = 1 << 31
	ringDiscardBit = 1 << 30
	ringHeaderLen  = 8
)

// ringStoreEvery is how many records consume reads between two stores of
// the consumer position.
const ringStoreEvery = 64

// newRingConsumer maps the ring buffer m (BPF_MAP_TYPE_RINGBUF, its
// MaxEntries the data size in bytes, a power of two).
func newRingConsumer(m *ebpf.Map) (*ringConsumer, error) {
	size := int(m.MaxEntries())
	if m.Type() != ebpf.RingBuf || size <= 0 || size&(size-1) != 0 {
		return nil, fmt.Errorf("map %v of %d bytes is not a ring buffer", m.Type(), size)
	}
	page := os.Getpagesize()
	cons, err := unix.Mmap(m.FD(), 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the ring buffer's consumer page: %w", err)
	}
	data, err := unix.Mmap(m.FD(), int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		unix.Munmap(cons)
		return nil, fmt.Errorf("map the ring buffer's data pages: %w", err)
	}
	return &ringConsumer{consPage: cons, dataPages: data,
		consPos: (*uint64)(unsafe.Pointer(&cons[0])), prodPos: (*uint64)(unsafe.Pointer(&data[0])),
		ring: data[page:], mask: uint64(size - 1)}, nil
}

// available returns the bytes written and not consumed yet.
func (r *ringConsumer) available() uint64 {
	return atomic.LoadUint64(r.prodPos) - atomic.LoadUint64(r.consPos)
}

// consume calls fn with the data of every record committed up to the
// producer position it reads first, in order, skipping discarded ones;
// the slice points into the ring and is valid only during the call. It
// stops early at a record still being written (busy) and returns how
// many records it read (discarded ones included). A header that claims
// more bytes than were written ends the pass (the rest is read once the
// producer's position passes it).
func (r *ringConsumer) consume(fn func([]byte)) int {
	prod := atomic.LoadUint64(r.prodPos)
	cons := atomic.LoadUint64(r.consPos)
	n := 0
	for prod-cons >= ringHeaderLen {
		// The length is read atomically: it is what the kernel's commit
		// (an xchg) publishes, after the data.
		hdr := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.ring[cons&r.mask])))
		if hdr&ringBusyBit != 0 {
			break
		}
		length := uint64(hdr &^ (ringBusyBit | ringDiscardBit))
		next := cons + ringHeaderLen + (length+7)&^7
		if next-cons > prod-cons || length > r.mask+1 {
			break
		}
		if hdr&ringDiscardBit == 0 {
			start := (cons + ringHeaderLen) & r.mask
			fn(r.ring[start : start+length])
		}
		cons = next
		n++
		if n%ringStoreEvery == 0 {
			atomic.StoreUint64(r.consPos, cons)
		}
	}
	if n%ringStoreEvery != 0 {
		atomic.StoreUint64(r.consPos, cons)
	}
	return n
}

// drain consumes until the ring is empty, waiting out records still
// being written (a BPF program that started before the events were
// disabled), for at most tries passes.
func (r *ringConsumer) drain(fn func([]byte), tries int) {
	for range tries {
		r.consume(fn)
		if r.available() == 0 {
			return
		}
		runtime.Gosched()
	}
}

// close unmaps the ring.
func (r *ringConsumer) close() error {
	if r == nil {
		return nil
	}
	err1 := unix.Munmap(r.dataPages)
	err2 := unix.Munmap(r.consPage)
	r.consPage, r.dataPages, r.ring = nil, nil, nil
	if err1 != nil {
		return err1
	}
	return err2
}
