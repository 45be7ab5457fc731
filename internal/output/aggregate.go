package output

import (
	"cmp"
	"slices"
	"strings"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// Sample is the sum of all samples with the same SampleKey (process,
// thread, CPU and thread name, as far as the caller filled them in) and the
// same symbolized stack.
type Sample struct {
	// PID is the process ID (the kernel's tgid) the samples were taken in.
	PID uint32
	// TID is the thread ID; 0 when the caller did not key samples by thread
	// (Aggregator.Add, or AddSample with a zero TID).
	TID uint32
	// CPU is the CPU the samples were taken on; 0 when the caller did not
	// key samples by CPU (Add, or AddSample with a zero CPU).
	CPU uint32
	// Comm is the thread name (the kernel's comm, at most 15 bytes) at the
	// time of the samples; "" when unknown.
	Comm string
	// Cgroup is the cgroup v2 path of the task (e.g.
	// "/system.slice/ssh.service"); "" when not keyed by cgroup.
	Cgroup string
	// Stack is the symbolized stack, shared with every other Sample of the
	// same stack; nil stands for an empty stack.
	Stack *symbolize.Stack
	// Count is the number of samples.
	Count int64
	// Nanos is the CPU time the samples stand for, in nanoseconds: the sum
	// of their sample periods.
	Nanos int64
}

// SampleKey is what, besides the stack, tells samples apart in an
// Aggregator. The caller zeroes the fields it does not want to tell samples
// apart by (and does not want as pprof labels): a zero TID merges the
// threads of a process, a zero CPU merges the CPUs.
type SampleKey struct {
	PID, TID, CPU uint32
	Comm          string
	Cgroup        string
}

// sampleKey identifies one Sample. The stack is compared by pointer: the
// caller memoizes stacks, so equal raw stacks share one *symbolize.Stack.
type sampleKey struct {
	st *symbolize.Stack
	SampleKey
}

// Aggregator merges samples with the same SampleKey and stack into one
// Sample. The zero value is ready to use; an Aggregator is not safe for
// concurrent use.
type Aggregator struct {
	index   map[sampleKey]int // key -> index in samples
	samples []Sample          // in order of first Add
	count   int64
	nanos   int64
}

// NewAggregator returns an empty Aggregator.
func NewAggregator() *Aggregator {
	return &Aggregator{index: make(map[sampleKey]int)}
}

// Add counts one sample of process pid, thread name comm and stack st that
// stands for nanos nanoseconds of CPU time (its sample period). It is
// AddSample with a key that holds only pid and comm.
func (a *Aggregator) Add(pid uint32, comm string, st *symbolize.Stack, nanos int64) {
	a.AddSample(SampleKey{PID: pid, Comm: comm}, st, nanos)
}

// AddSample counts one sample with key and stack st that stands for nanos
// nanoseconds of CPU time (its sample period). Samples are merged when
// every field of key is equal and st is the same pointer.
//
// Samples are merged by the st pointer, not by the frames it holds: the
// caller must hand the same *symbolize.Stack for equal stacks of a process,
// and must not change it afterwards. Adding to an existing entry is one map
// lookup and allocates nothing.
func (a *Aggregator) AddSample(key SampleKey, st *symbolize.Stack, nanos int64) {
	a.count++
	a.nanos += nanos
	k := sampleKey{st: st, SampleKey: key}
	if i, ok := a.index[k]; ok {
		s := &a.samples[i]
		s.Count++
		s.Nanos += nanos
		return
	}
	if a.index == nil {
		a.index = make(map[sampleKey]int)
	}
	a.index[k] = len(a.samples)
	a.samples = append(a.samples, Sample{PID: key.PID, TID: key.TID, CPU: key.CPU, Comm: key.Comm,
		Cgroup: key.Cgroup, Stack: st, Count: 1, Nanos: nanos})
}

// Samples returns a new slice with one Sample per distinct key and stack,
// sorted by pid, then tid, then comm (byte order), then cpu, then cgroup,
// then stack
// (frame by frame from the leaf: address, then function name), so that the
// order does not depend on the order the samples arrived in. The Stacks are
// shared with the Aggregator and the caller.
func (a *Aggregator) Samples() []Sample {
	out := slices.Clone(a.samples)
	slices.SortStableFunc(out, compareSamples)
	return out
}

// Len returns the number of distinct (key, stack) entries, which is the
// length of the slice Samples returns.
func (a *Aggregator) Len() int {
	return len(a.samples)
}

// Total returns the number of samples added and the CPU time they stand
// for, in nanoseconds (the sum of the nanos passed to Add).
func (a *Aggregator) Total() (count, nanos int64) {
	return a.count, a.nanos
}

func compareSamples(a, b Sample) int {
	if c := cmp.Compare(a.PID, b.PID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.TID, b.TID); c != 0 {
		return c
	}
	if c := strings.Compare(a.Comm, b.Comm); c != 0 {
		return c
	}
	if c := cmp.Compare(a.CPU, b.CPU); c != 0 {
		return c
	}
	if c := strings.Compare(a.Cgroup, b.Cgroup); c != 0 {
		return c
	}
	return slices.CompareFunc(stackFrames(a.Stack), stackFrames(b.Stack), compareFrames)
}

func compareFrames(a, b symbolize.Frame) int {
	if c := cmp.Compare(a.Address, b.Address); c != 0 {
		return c
	}
	if c := strings.Compare(a.Function, b.Function); c != 0 {
		return c
	}
	// An inlined frame sorts before a physical one at the same address.
	switch {
	case a.Inlined == b.Inlined:
		return 0
	case a.Inlined:
		return -1
	default:
		return 1
	}
}

// stackFrames returns the frames of st, nil for a nil stack.
func stackFrames(st *symbolize.Stack) []symbolize.Frame {
	if st == nil {
		return nil
	}
	return st.Frames
}
