package attach

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// SetStackTop tells the BPF program that thread tid's user stack ends
// below address top (exclusive): with Config.StackTops, a sample of tid
// copies the stack from sp up to top only, and is marked FlagWindowTop
// when that cut it. top is the CFA of the outermost frame of one of the
// thread's whole stacks (unwind.Unwinder.UnwindExtent). The map is an LRU
// hash of 16384 threads (stack_tops in bpf/profile.bpf.c). Safe to call
// from any goroutine while Run runs; an error when the map update fails.
func (s *Sampler) SetStackTop(tid uint32, top uint64) error {
	if s.objs.StackTops == nil {
		return errors.New("stack tops: sampler not loaded")
	}
	if err := s.objs.StackTops.Put(tid, top); err != nil {
		return fmt.Errorf("set stack top of thread %d: %w", tid, err)
	}
	return nil
}

// DeleteStackTop forgets thread tid's stack top (the thread exited, or
// its top cut a stack: FlagWindowTop), so that its samples copy the
// whole window again. A tid without a top is no error.
func (s *Sampler) DeleteStackTop(tid uint32) error {
	if s.objs.StackTops == nil {
		return errors.New("stack tops: sampler not loaded")
	}
	err := s.objs.StackTops.Delete(tid)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete stack top of thread %d: %w", tid, err)
	}
	return nil
}
