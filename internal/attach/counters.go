package attach

import "fmt"

// Counter slots of the BPF program's per-CPU "counters" array (enum counter
// in bpf/profile.bpf.c).
const (
	counterSamples = iota
	counterLost
	counterKernelStackErr
	counterUserStackErr
	counterFiltered
	counterForks
	counterWindowBytes
	counterWindowFault
	counterWindowMax
	counterNoRegs
	counterNested
	counterEventsLost
	numCounters
)

// Counters are the BPF program's counts, summed over CPUs, plus the
// records the reader could not decode. All are numbers of samples except
// Forks.
type Counters struct {
	// Samples counts program runs that passed the pid and idle filters.
	Samples uint64
	// Lost counts samples not delivered because the ring buffer was full.
	Lost uint64
	// KernelStackErrors and UserStackErrors count stacks bpf_get_stack
	// could not take (the sample is still delivered, without that stack).
	KernelStackErrors, UserStackErrors uint64
	// Filtered counts samples of other processes (or of idle) left out.
	Filtered uint64
	// Forks counts child processes added to the targets while running.
	Forks uint64
	// WindowBytes counts the bytes of user stack copied (CallGraphDWARF);
	// WindowFaults and WindowMax count copies that ended at a page that
	// did not read (usually the stack's end) and at Config.StackWindow;
	// NoRegs counts samples with no user registers (kernel threads).
	WindowBytes, WindowFaults, WindowMax, NoRegs uint64
	// Nested counts probe hits dropped because a probe program (fentry,
	// fexit) already ran on the CPU, interrupted.
	Nested uint64
	// EventsLost counts exec, exit and fork records not delivered because
	// the ring buffer was full (records, not samples).
	EventsLost uint64
	// Malformed counts ring buffer records that did not decode.
	Malformed uint64
}

// Counters reads the BPF program's per-CPU counters and sums them.
func (s *Sampler) Counters() (Counters, error) {
	var sums [numCounters]uint64
	for slot := uint32(0); slot < numCounters; slot++ {
		var perCPU []uint64
		if err := s.objs.Counters.Lookup(slot, &perCPU); err != nil {
			return Counters{}, fmt.Errorf("read BPF counter %d: %w", slot, err)
		}
		for _, v := range perCPU {
			sums[slot] += v
		}
	}
	return Counters{
		Samples:           sums[counterSamples],
		Lost:              sums[counterLost],
		KernelStackErrors: sums[counterKernelStackErr],
		UserStackErrors:   sums[counterUserStackErr],
		Filtered:          sums[counterFiltered],
		Forks:             sums[counterForks],
		WindowBytes:       sums[counterWindowBytes],
		WindowFaults:      sums[counterWindowFault],
		WindowMax:         sums[counterWindowMax],
		NoRegs:            sums[counterNoRegs],
		Nested:            sums[counterNested],
		EventsLost:        sums[counterEventsLost],
		Malformed:         s.malformed.Load(),
	}, nil
}

// EventsDelivered reports whether every exec, exit and fork record the
// BPF programs made so far reached the ring buffer (the counters' events
// lost slot is 0 on every CPU): one map lookup. It reports false when
// the counter cannot be read.
func (s *Sampler) EventsDelivered() bool {
	var perCPU []uint64
	if err := s.objs.Counters.Lookup(uint32(counterEventsLost), &perCPU); err != nil {
		return false
	}
	for _, v := range perCPU {
		if v != 0 {
			return false
		}
	}
	return true
}
