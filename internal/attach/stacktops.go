package attach

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// Bounds of the stack_tops map's size (stackTopsEntries): maxStackTops
// is the BPF object's.
const (
	minStackTops = 1024
	maxStackTops = 16384
)

// stackTopsEntries sizes the stack_tops LRU hash: four entries for each
// of threads (the threads running at load), and at least 256 for each of
// ncpu possible CPUs (an LRU hash keeps free entries on per-CPU lists),
// as a power of two from minStackTops to maxStackTops. An LRU hash is
// preallocated, and its creation costs in proportion to its size
// (BenchmarkOpenSampler): most machines need far fewer than the most.
func stackTopsEntries(threads, ncpu int) uint32 {
	want := max(4*threads, 256*ncpu, minStackTops)
	n := minStackTops
	for n < want && n < maxStackTops {
		n *= 2
	}
	return uint32(n)
}

// runningThreads returns the number of threads on the machine, from
// /proc/loadavg (its fourth field, running/total); maxStackTops when it
// does not read.
func runningThreads() int {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return maxStackTops
	}
	f := strings.Fields(string(raw))
	if len(f) < 4 {
		return maxStackTops
	}
	_, total, ok := strings.Cut(f[3], "/")
	n, err := strconv.Atoi(total)
	if !ok || err != nil || n <= 0 {
		return maxStackTops
	}
	return n
}

// StackTopsCap returns how many threads' stack tops the sampler holds
// (stackTopsEntries at load; 0 when it is not loaded): past it, the LRU
// map forgets the least recently used.
func (s *Sampler) StackTopsCap() int {
	if s.objs.StackTops == nil {
		return 0
	}
	return int(s.objs.StackTops.MaxEntries())
}

// SetStackTop tells the BPF program that thread tid's user stack ends
// below address top (exclusive): with Config.StackTops, a sample of tid
// copies the stack from sp up to top only, and is marked FlagWindowTop
// when that cut it. top is the CFA of the outermost frame of one of the
// thread's whole stacks (unwind.Unwinder.UnwindExtent). The map is an LRU
// hash of StackTopsCap threads (stack_tops in bpf/profile.bpf.c). Safe to call
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

// SetStackSwitch lists process pid, whose Go code lies at the addresses
// [lo, hi) (the executable mapping of its Go program or library, from
// /proc/PID/maps), in the BPF program's switch_tgids map: its samples
// whose frame pointer leads off the copied window (C code a Go function
// called on the g0 stack: cgo) then get a second window copied from
// where it leads (FlagStackSwitch), and a window ends where its
// frame-pointer chain ends in a frame whose return address is in [lo,
// hi) (a goroutine's outermost frame; a C thread's, under libc's
// start_thread, is not). An LRU map, so processes that exit age out.
// The first listing turns the lookups on (switch_any): until then
// samples pay none. Safe from any goroutine.
func (s *Sampler) SetStackSwitch(pid uint32, lo, hi uint64) error {
	if s.objs.SwitchTgids == nil {
		return errors.New("stack switches: sampler not loaded")
	}
	if err := s.objs.SwitchTgids.Put(pid, profileGoText{Lo: lo, Hi: hi}); err != nil {
		return fmt.Errorf("list process %d for stack switches: %w", pid, err)
	}
	if !s.switchAny.Load() { // the program looks pids up from now on
		if err := s.objs.SwitchAny.Put(uint32(0), uint32(1)); err != nil {
			return fmt.Errorf("turn stack switches on: %w", err)
		}
		s.switchAny.Store(true)
	}
	return nil
}

// DeleteStackSwitch takes process pid off switch_tgids (it exec'd or
// exited). A process not listed is no error.
func (s *Sampler) DeleteStackSwitch(pid uint32) error {
	if s.objs.SwitchTgids == nil {
		return errors.New("stack switches: sampler not loaded")
	}
	err := s.objs.SwitchTgids.Delete(pid)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("take process %d off stack switches: %w", pid, err)
	}
	return nil
}
