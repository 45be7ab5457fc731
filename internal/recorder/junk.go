package recorder

// This file holds what the recorder knows about frame-pointer walks gone
// wrong: the junk cut. It works on symbolized stacks (names, mappings)
// and asks the symbolizer whether an address follows a call
// (BadReturnAddress), so it cannot live in internal/unwind, which must
// not import the symbolizer.

import (
	"github.com/gprofile/gprofile/internal/symbolize"
)

// junkCheck tells whether a return address of a user stack surely is
// none (symbolize.Symbolizer.BadReturnAddress of the stack's process).
type junkCheck func(addr uint64) bool

// trimJunk cuts the user part of st at its first frame that cannot be a
// caller's: frame-pointer unwinding through code built without frame
// pointers (dash, most C libraries) reads other words of the stack as
// return addresses, and each such junk address, and every one after it,
// would make the stack unique. The user leaf (the sampled pc) always
// stays; after it, walking up:
//   - a frame whose return address bad says follows no call instruction
//     is junk, unless its callee is a Go function that the runtime enters
//     without a call (runtime.asyncPreempt, runtime.sigpanic): the cut
//     drops it and all after it;
//   - a frame in no mapping of the process is junk when it is the first
//     after the leaf (the return address that a leaf without a frame
//     pointer makes up): the cut drops it and all after it. Further up,
//     when bad says it lies in a mapping that holds no code (the stack,
//     the heap), it goes too, with all after it. Otherwise it may be real
//     code that the symbolizer's copy of the maps does not show yet (a
//     library mapped after the maps were read): it stays, and the cut
//     drops what follows;
//   - when the leaf itself lies in no mapping, what follows it goes.
//
// Kernel frames stay as they are. The cut leaves no marker: the stack
// ends at the last frame kept. trimJunk returns st itself when there is
// nothing to cut, else a trimmed copy that shares st's frames. bad may be
// nil.
func trimJunk(st *symbolize.Stack, bad junkCheck) *symbolize.Stack {
	frames := st.Frames
	leaf := -1 // the index of the user leaf's first frame
	for i := 0; i < len(frames); i = locEnd(frames, i) {
		f := &frames[i]
		switch {
		case f.Kernel:
			continue
		case leaf < 0:
			leaf = i
			if f.Reason == symbolize.ReasonNoMapping && locEnd(frames, i) < len(frames) {
				return cut(frames, locEnd(frames, i))
			}
		case f.Reason == symbolize.ReasonNoMapping:
			if frames[i-1].Address == frames[leaf].Address {
				return cut(frames, i) // right after the leaf
			}
			if bad != nil && bad(f.Address) {
				return cut(frames, i) // in the stack or heap: junk
			}
			if end := locEnd(frames, i); end < len(frames) {
				return cut(frames, end)
			}
		case f.Mapping != nil && bad != nil && !enteredWithoutCall(&frames[i-1]) && bad(f.Address):
			return cut(frames, i)
		}
	}
	return st
}

// locEnd returns the end of the location that starts at frames[i]: its
// inlined frames and the physical frame, which share one address.
func locEnd(frames []symbolize.Frame, i int) int {
	for i+1 < len(frames) && frames[i].Inlined && frames[i+1].Address == frames[i].Address {
		i++
	}
	return i + 1
}

// cut returns a stack of frames[:n], sharing frames.
func cut(frames []symbolize.Frame, n int) *symbolize.Stack {
	return &symbolize.Stack{Frames: frames[:n:n]}
}

// enteredWithoutCall reports whether f is a function that the Go runtime
// enters by pushing the interrupted pc as its return address rather than
// by a call: the frame after it is real, yet follows no call.
func enteredWithoutCall(f *symbolize.Frame) bool {
	switch f.Function {
	case "runtime.asyncPreempt", "runtime.sigpanic", "runtime.sigpanic0":
		return true
	}
	return false
}
