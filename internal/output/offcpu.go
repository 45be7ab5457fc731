package output

import (
	"strings"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// Off-CPU profiles (gprofile --off-cpu): an Aggregator with the columns
// OffCPUType and WallType after ColumnCount and ColumnWeight (cpu), whose
// off-CPU stacks end, at the leaf, with a marker frame (OffCPUFrame).
var (
	// OffCPUType is the column of the time a stack spent blocked, in ns.
	OffCPUType = ValueType{Type: "offcpu", Unit: "nanoseconds"}
	// WallType is the column of on-CPU plus off-CPU time, in ns: the
	// wall-clock time of the threads, by stack.
	WallType = ValueType{Type: "wall", Unit: "nanoseconds"}
)

// LabelState is the string label that holds, in a profile of an
// Aggregator with an OffCPUType column, how a sample's thread spent its
// time: StateOnCPU, or the state of its off-CPU marker frame ("S"
// sleeping, "D" uninterruptible, "R" preempted).
const LabelState = "state"

// StateOnCPU is the LabelState of on-CPU samples.
const StateOnCPU = "on-cpu"

// offCPUPrefix starts the name of every off-CPU marker frame.
const offCPUPrefix = "[off-cpu:"

// OffCPUFrame returns the marker frame that an off-CPU stack gets as its
// leaf (first) frame: "[off-cpu:S]" for a block of state S, or, when
// short is not "", "[off-cpu:S < 1ms]" for the blocks shorter than short
// (the threshold as written, e.g. "1ms") that were summed without
// stacks. It is a kernel frame without a mapping or an address, so that
// it ends the line of folded stacks (without the "_[k]" suffix) and
// pprof shows it as a function of its own.
func OffCPUFrame(state byte, short string) symbolize.Frame {
	name := offCPUPrefix + string(rune(state))
	if short != "" {
		name += " < " + short
	}
	name += "]"
	return symbolize.Frame{Function: name, SystemName: name, Kernel: true}
}

// isOffCPUMarker reports whether a function name is an off-CPU marker's.
func isOffCPUMarker(fn string) bool {
	return strings.HasPrefix(fn, offCPUPrefix) && strings.HasSuffix(fn, "]")
}

// offCPUState returns the state in an off-CPU marker's name ("S"), or
// StateOnCPU for any other name.
func offCPUState(fn string) string {
	if !isOffCPUMarker(fn) {
		return StateOnCPU
	}
	st := fn[len(offCPUPrefix) : len(fn)-1]
	if i := strings.IndexByte(st, ' '); i >= 0 {
		st = st[:i]
	}
	return st
}

// hasOffCPU reports whether a has the OffCPUType column.
func (a *Aggregator) hasOffCPU() bool {
	for _, c := range a.extra {
		if c == OffCPUType {
			return true
		}
	}
	return false
}

// stateOf returns the LabelState of stack id: its leaf frame's.
func (a *Aggregator) stateOf(id StackID) string {
	it := a.frames(id)
	c := it.next()
	if c == nil || !c.kernel {
		return StateOnCPU
	}
	return offCPUState(a.strs.str(c.fn))
}
