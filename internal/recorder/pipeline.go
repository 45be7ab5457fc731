package recorder

import (
	"context"

	"github.com/gprofile/gprofile/internal/attach"
)

// queueLen is how many samples may wait between the ring buffer reader
// and the symbolizing worker.
const queueLen = 8192

// batchLen is how many samples the reader hands over at a time: one
// channel send and at most one wake-up of the worker per batch instead
// of per sample. A partial batch goes as soon as the ring buffer is
// empty (Sampler.RunIdle), so batching adds no latency.
const batchLen = 64

// collect reads samples from the source on this goroutine and
// symbolizes and aggregates them on another, so that a slow symbolization (the first lookup in a
// large binary reads its DWARF) does not stop the ring buffer from being
// drained. The reader tells the symbolizer about each process as soon as
// it sees it (Observe), so that a process that exits while its samples
// wait in the queue still gets names. Samples travel in batches of up to
// batchLen, in order, and batches are reused. It returns when sampling
// has ended and every sample is in r.c.
func (r *Recorder) collect(ctx context.Context) error {
	c, sym, us := r.c, r.sym, r.us
	work := make(chan []*attach.Sample, queueLen/batchLen)
	free := make(chan []*attach.Sample, queueLen/batchLen)
	done := make(chan struct{})
	if r.cfg.Interval > 0 {
		r.startIntervals()
	}
	go func() {
		defer close(done)
		for b := range work {
			if b == nil { // the reader's mark between two intervals
				r.swap(false)
				continue
			}
			for _, smp := range b {
				c.add(smp)
			}
			select {
			case free <- b:
			default:
			}
		}
	}()
	var batch []*attach.Sample
	send := func() {
		if len(batch) > 0 {
			work <- batch
			batch = nil
		}
	}
	// A swap is marked in the queue (a nil batch) by the reader, so that
	// every sample read before it is in the interval that ends there.
	swap := func() {
		if r.swapDue.Load() && r.swapDue.CompareAndSwap(true, false) {
			send()
			work <- nil
		}
	}
	var n uint64
	var settled settledStacks
	deferred := false // the sample's unwind waits for the worker
	err := r.src.RunIdle(ctx, func(smp *attach.Sample) {
		swap()
		if smp.Flags&attach.FlagProcessFork != 0 {
			sym.ObserveFork(smp.PID, smp.ParentPID)
			return
		}
		switch {
		case smp.Flags&attach.FlagProcessExec != 0:
			// The worker drops its memos of the process too.
			deferred = false
			settled.clear()
			us.forget(smp.PID)
			sym.ObserveExec(smp.PID) // its new program, while it lives
			us.listExec(smp.PID)
		case smp.Flags&attach.FlagProcessExit == 0:
			// With CallGraphDWARF the user stack is unwound here, where
			// its window is (in the ring buffer), rather than copied
			// through the queue (up to 64 KiB a sample, 8192 samples).
			deferred = !us.unwindSample(smp)
			// The raw user IPs: the ones the worker's userIPs starts from.
			// An unwound stack needs no check: the unwinder's lookups
			// (Symbolizer.CodeAt) read the maps on first sight and again
			// for an address in no mapping.
			if smp.Flags&attach.FlagUserRegs == 0 {
				if key := settled.key(smp.PID, smp.UserIPs); !settled.has(key) && sym.ObserveStack(smp.PID, smp.UserIPs) {
					settled.add(key)
				}
			}
			n++
			r.samples.Store(n)
		default:
			deferred = false
			settled.clear()
			us.forget(smp.PID)
		}
		if batch == nil {
			select {
			case b := <-free:
				batch = b[:0]
			default:
				batch = make([]*attach.Sample, 0, batchLen)
			}
		}
		// A reused batch still points at the samples it carried: refill them.
		cp := batch[:len(batch)+1][len(batch)]
		if cp == nil {
			cp = new(attach.Sample)
		}
		copySample(cp, smp, deferred)
		if batch = append(batch, cp); len(batch) == batchLen {
			send()
		}
	}, func() { send(); swap() })
	send()
	close(work)
	<-done
	if r.iv != nil {
		r.endIntervals()
	}
	return err
}

// copySample copies src into dst, reusing dst's slices. The stack window
// is copied (into a new slice, which the worker drops once it has
// unwound it) only when withStack: it points into the ring buffer.
func copySample(dst, src *attach.Sample, withStack bool) {
	comm, kips, uips := dst.Comm, dst.KernelIPs, dst.UserIPs
	*dst = *src
	dst.Stack = nil
	if withStack {
		dst.Stack = append([]byte{}, src.Stack...)
	}
	dst.Comm = append(comm[:0], src.Comm...)
	dst.KernelIPs = append(kips[:0], src.KernelIPs...)
	dst.UserIPs = append(uips[:0], src.UserIPs...)
}

// settledStacks remembers, for the ring buffer reader, stacks that
// Symbolizer.ObserveStack found settled (every checked IP in a known
// mapping), so that a stack seen again skips the check and the
// symbolizer's lock, which the collector holds while it symbolizes: a
// direct-mapped table of 1024 keys, each a hash of the pid and the first
// IPs that ObserveStack checks. It is cleared whenever a process execs
// or exits, after which its stacks may mean something else.
type settledStacks struct {
	keys [1024]uint64
}

// settledIPs is how many leading user IPs the key covers: all that
// ObserveStack checks (symbolize's observeIPs).
const settledIPs = 16

// key returns the nonzero key of pid's stack userIPs (leaf first).
func (t *settledStacks) key(pid uint32, userIPs []uint64) uint64 {
	h := uint64(pid)*0x9e3779b97f4a7c15 + uint64(len(userIPs))
	for _, ip := range userIPs[:min(len(userIPs), settledIPs)] {
		h = (h ^ ip) * 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	return h | 1
}

// has reports whether key is in the table.
func (t *settledStacks) has(key uint64) bool { return t.keys[key%uint64(len(t.keys))] == key }

// add puts key in the table, over whatever held its slot.
func (t *settledStacks) add(key uint64) { t.keys[key%uint64(len(t.keys))] = key }

// clear empties the table.
func (t *settledStacks) clear() { clear(t.keys[:]) }
