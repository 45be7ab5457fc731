package recorder

import (
	"slices"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// TestTrimJunk: the user part of a stack is cut at its first frame whose
// return address follows no call, or in no mapping right after the leaf
// (further up such a frame stays, and what follows goes); the leaf,
// kernel frames, inlined frames and the callers of Go's asyncPreempt
// stay.
func TestTrimJunk(t *testing.T) {
	m := &symbolize.Mapping{Start: 0x1000, Limit: 0x2000, Path: "/bin/x", Inode: 3}
	k := symbolize.Frame{Address: 0xffffffff81000000, Function: "k", Kernel: true, Mapping: &symbolize.Mapping{Kernel: true}}
	fn := func(addr uint64, name string) symbolize.Frame {
		return symbolize.Frame{Address: addr, Function: name, Mapping: m}
	}
	inlined := fn(0x1030, "inl")
	inlined.Inlined = true
	noMap := symbolize.Frame{Address: 0x99, Reason: symbolize.ReasonNoMapping}
	inStack := symbolize.Frame{Address: 0x7ff0, Reason: symbolize.ReasonNoMapping}
	junk := map[uint64]bool{0x1040: true, 0x1010: true, 0x1070: true, 0x7ff0: true}
	var asked []uint64
	bad := func(addr uint64) bool {
		asked = append(asked, addr)
		return junk[addr]
	}
	for _, tc := range []struct {
		name   string
		frames []symbolize.Frame
		keep   int
		asked  []uint64
	}{
		{"clean", []symbolize.Frame{k, fn(0x1010, "leaf"), inlined, fn(0x1030, "caller")}, 4, []uint64{0x1030}},
		{"no mapping after the leaf", []symbolize.Frame{k, fn(0x1020, "leaf"), noMap, fn(0x1030, "b")}, 2, nil},
		{"no mapping after the leaf's inlined frames", []symbolize.Frame{inlined, fn(0x1030, "leaf"), noMap, fn(0x1030, "b")}, 2, nil},
		{"no mapping further up", []symbolize.Frame{k, fn(0x1020, "leaf"), fn(0x1030, "a"), noMap, fn(0x1050, "b")}, 4, []uint64{0x1030, 0x99}},
		{"no mapping at the root", []symbolize.Frame{fn(0x1020, "leaf"), fn(0x1030, "a"), noMap}, 3, []uint64{0x1030, 0x99}},
		{"the stack further up", []symbolize.Frame{k, fn(0x1020, "leaf"), fn(0x1030, "a"), inStack, fn(0x1050, "b")}, 3, []uint64{0x1030, 0x7ff0}},
		{"bad return address", []symbolize.Frame{fn(0x1020, "leaf"), inlined, fn(0x1030, "caller"), fn(0x1040, "junk"), fn(0x1050, "x")}, 3, []uint64{0x1030, 0x1040}},
		{"leaf never checked", []symbolize.Frame{k, fn(0x1010, "leaf")}, 2, nil},
		{"leaf in no mapping", []symbolize.Frame{k, noMap, fn(0x1020, "a")}, 2, nil},
		{"after asyncPreempt", []symbolize.Frame{fn(0x1020, "runtime.asyncPreempt"), fn(0x1070, "interrupted"), fn(0x1040, "junk")}, 2, []uint64{0x1040}},
		{"kernel only", []symbolize.Frame{k, k}, 2, nil},
	} {
		asked = nil
		st := &symbolize.Stack{Frames: tc.frames}
		got := trimJunk(st, bad)
		if len(got.Frames) != tc.keep || !slices.Equal(got.Frames, tc.frames[:tc.keep]) {
			t.Errorf("%s: kept %d frames %+v, want %d", tc.name, len(got.Frames), got.Frames, tc.keep)
		}
		if !slices.Equal(asked, tc.asked) {
			t.Errorf("%s: checked %#x, want %#x", tc.name, asked, tc.asked)
		}
		if tc.keep == len(tc.frames) && got != st {
			t.Errorf("%s: a stack without junk was copied", tc.name)
		}
		if len(st.Frames) != len(tc.frames) {
			t.Errorf("%s: the original stack changed", tc.name)
		}
	}
	if got := trimJunk(&symbolize.Stack{Frames: []symbolize.Frame{fn(0x1010, "leaf"), fn(0x1040, "b"), noMap, fn(0x1050, "c")}}, nil); len(got.Frames) != 3 {
		t.Errorf("without a check: kept %d frames, want 3", len(got.Frames))
	}
}
