package unwind

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/gprofile/gprofile/internal/testutil"
)

// countingProcess counts the Object lookups of a walk.
type countingProcess struct {
	p Process
	n int
}

func (c *countingProcess) Object(pc uint64) (Object, bool) {
	c.n++
	return c.p.Object(pc)
}

// memoDumps returns the stackdump test binary's whole stacks the memo
// tests walk: qsort24 (libc's qsort, a frameless comparator), signal
// (a signal frame's full rows), thread (clone3's outermost frame) and
// recurse (deeper than stackMemoFrames).
func memoDumps(t testing.TB) map[string]*dump {
	bin := testutil.BuildC(t, "testdata/stackdump.c", "-O2", "-fomit-frame-pointer", "-pthread")
	ds := map[string]*dump{}
	for _, mode := range []string{"qsort24", "signal", "thread", "recurse"} {
		ds[mode] = stackDump(t, bin, mode)
	}
	return ds
}

// TestUnwindMemo checks that UnwindMemo gives what UnwindSwitch gives: on
// a stack walked before (from the memo: no object looked up past the
// leaf's), on the same stack with a word the walk reads changed (walked
// again, to the changed result), for another process, and after
// ForgetStacks.
func TestUnwindMemo(t *testing.T) {
	for mode, d := range memoDumps(t) {
		t.Run(mode, func(t *testing.T) {
			u := New(Options{})
			want, wstop, wtop := u.UnwindSwitch(nil, d, &d.regs, d.stack, StackSwitch{})
			if wstop != StopComplete {
				t.Fatalf("stack stops with %v", wstop)
			}
			memo := func(pid uint32, stack []byte) ([]uint64, int) {
				t.Helper()
				c := &countingProcess{p: d}
				got, stop, top := u.UnwindMemo(pid, nil, c, &d.regs, stack, StackSwitch{})
				w, ws, wt := u.UnwindSwitch(nil, d, &d.regs, stack, StackSwitch{})
				if !slices.Equal(got, w) || stop != ws || top != wt {
					t.Fatalf("UnwindMemo = %d frames, %v, top %#x; UnwindSwitch = %d frames, %v, top %#x\n%x\n%x", len(got), stop, top, len(w), ws, wt, got, w)
				}
				return got, c.n
			}
			_, first := memo(1, d.stack)
			if first < len(want)-1 {
				t.Fatalf("first walk looked up %d objects for %d frames", first, len(want))
			}
			// From the memo: all but the leaf's, or, past
			// stackMemoFrames, the outermost stackMemoFrames.
			got, again := memo(1, d.stack)
			if limit := max(1, len(want)-stackMemoFrames); !slices.Equal(got, want) || again > limit {
				t.Errorf("second walk of %d frames looked up %d objects, want at most %d", len(want), again, limit)
			}
			if _, n := memo(2, d.stack); n < len(want)-1 {
				t.Errorf("another process's walk looked up %d objects, want %d: it took process 1's memo", n, len(want)-1)
			}
			// Every return address the walk read, changed: walked again.
			for i, ra := range want[1:] {
				off := slices.IndexFunc(offsets(len(d.stack)), func(o int) bool {
					return binary.LittleEndian.Uint64(d.stack[o:]) == ra
				})
				if off < 0 {
					continue // a signal frame's pc + 1
				}
				changed := slices.Clone(d.stack)
				binary.LittleEndian.PutUint64(changed[off:], ra^0x40)
				memo(1, changed) // compared with UnwindSwitch inside
				memo(1, d.stack)
				if i > 4 {
					break
				}
			}
			u.ForgetStacks(1)
			if _, n := memo(1, d.stack); n < len(want)-1 {
				t.Errorf("after ForgetStacks the walk looked up %d objects, want %d", n, len(want)-1)
			}
			_ = wtop
		})
	}
}

// offsets returns the 8-byte aligned offsets of a window of n bytes.
func offsets(n int) []int {
	var out []int
	for o := 0; o+8 <= n; o += 8 {
		out = append(out, o)
	}
	return out
}

// FuzzUnwindMemo walks whole stacks of the stackdump binary with changed
// bytes (a byte anywhere in the window, the leaf's rsp and rip moved, and
// another register of the leaf changed) after the memo holds their
// originals, in a memo of two records, which the walks' stacks take
// turns in: UnwindMemo must give what UnwindSwitch gives.
func FuzzUnwindMemo(f *testing.F) {
	ds := memoDumps(f)
	modes := []string{"qsort24", "signal", "thread", "recurse"}
	f.Add(uint8(0), uint16(8), uint8(1), int8(0), int8(0), uint8(3), uint64(1))
	f.Add(uint8(1), uint16(200), uint8(0x80), int8(8), int8(1), uint8(6), uint64(0x10))
	f.Fuzz(func(t *testing.T, mode uint8, at uint16, xor uint8, dsp, dip int8, reg uint8, rxor uint64) {
		d := ds[modes[int(mode)%len(modes)]]
		u := New(Options{})
		u.stacks = newStackMemo(2) // records reused within the walks below
		u.UnwindMemo(1, nil, d, &d.regs, d.stack, StackSwitch{})
		stack := slices.Clone(d.stack)
		if len(stack) > 0 {
			stack[int(at)%len(stack)] ^= xor
		}
		regs := d.regs
		regs[RegRSP] += uint64(int64(dsp) * 8)
		regs[RegRIP] += uint64(int64(dip))
		regs[int(reg)%len(regs)] ^= rxor
		check := func(regs *Regs, stack []byte) {
			got, stop, top := u.UnwindMemo(1, nil, d, regs, stack, StackSwitch{})
			want, wstop, wtop := u.UnwindSwitch(nil, d, regs, stack, StackSwitch{})
			if !slices.Equal(got, want) || stop != wstop || top != wtop {
				t.Fatalf("UnwindMemo = %x, %v, %#x; UnwindSwitch = %x, %v, %#x", got, stop, top, want, wstop, wtop)
			}
		}
		// The changed walk, which may join the memo's frames and be
		// kept; again; then the original, and the changed once more.
		check(&regs, stack)
		check(&regs, stack)
		check(&d.regs, d.stack)
		check(&regs, stack)
	})
}

// BenchmarkUnwindStackMemo unwinds the qsort24 stack as BenchmarkUnwind24
// does, with the stack memo (UnwindMemo), as samples of one loop come:
// each with another value in rax, which no compact row reads, so that
// each walk checks the kept frames' reads and takes its frames from the
// memo (from the leaf's own state, or past the leaf's step where a full
// row follows).
func BenchmarkUnwindStackMemo(b *testing.B) {
	u, d := qsort24(b)
	dst := make([]uint64, 0, 64)
	var n int
	regs := d.regs
	b.ReportAllocs()
	for b.Loop() {
		regs[0]++ // rax: no rule reads it
		dst, _, _ = u.UnwindMemo(1, dst[:0], d, &regs, d.stack, StackSwitch{})
		n += len(dst)
	}
	b.ReportMetric(float64(len(dst)), "frames")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/frame")
}

// TestUnwindMemoJoined checks that a walk which reaches a kept frame
// after more than its leaf's step is kept too, joined to the frames it
// took from the memo: a sample deeper in the same call chain than any
// kept before is then walked from the memo at once, with the frames
// UnwindSwitch gives.
func TestUnwindMemoJoined(t *testing.T) {
	u0, d := qsort24(t)
	u0.UnwindMemo(1, nil, d, &d.regs, d.stack, StackSwitch{})
	var rec *stackRecord
	for _, s := range u0.stacks.slots {
		if r := s.record(); r != nil {
			rec = r
		}
	}
	if rec == nil || len(rec.states) < 12 {
		t.Fatalf("no record of the qsort24 stack kept")
	}
	// The registers of frame k of the stack, as a leaf's at its call
	// instruction (the return address - 1: a leaf's pc is looked up as
	// it is).
	at := func(k int) *Regs {
		r := Regs(rec.states[k].fr.v)
		r[RegRIP]--
		return &r
	}
	// The window from a frame's sp.
	from := func(r *Regs) []byte { return d.stack[r.SP()-d.regs.SP():] }
	u := New(Options{})
	walk := func(r *Regs) int {
		t.Helper()
		c := &countingProcess{p: d}
		got, stop, top := u.UnwindMemo(1, nil, c, r, from(r), StackSwitch{})
		want, wstop, wtop := u.UnwindSwitch(nil, d, r, from(r), StackSwitch{})
		if !slices.Equal(got, want) || stop != wstop || top != wtop || stop != StopComplete {
			t.Fatalf("UnwindMemo = %x, %v, %#x; UnwindSwitch = %x, %v, %#x", got, stop, top, want, wstop, wtop)
		}
		return c.n
	}
	// Frames whose registers start a walk to the same whole stack (not
	// those whose rbp the walk no longer knew: it holds a stale value).
	var whole []int
	for k := 1; k < len(rec.states); k++ {
		got, stop := u0.Unwind(nil, d, at(k), from(at(k)))
		if stop == StopComplete && slices.Equal(got[1:], rec.out[k:]) {
			whole = append(whole, k)
		}
	}
	// A walk from shallow is kept from its leaf's state on; the walk from
	// deep meets it at the frame after that leaf (a leaf's state, exact
	// and with every register known, is met only by a leaf).
	deep, shallow := -1, -1
	for _, k := range whole {
		switch {
		case deep < 0:
			deep = k
		case k-deep >= memoJoinSteps && k+2 < len(rec.states):
			shallow = k
		}
	}
	if shallow < 0 {
		t.Fatalf("frames that start a whole walk: %v of %d, want two memoJoinSteps apart below the last two", whole, len(rec.states))
	}
	walk(at(shallow))
	// The walk after: at most one in memoJoinEvery is kept so.
	u.stacks.sinceJoin = memoJoinEvery - 1
	if n := walk(at(deep)); n != shallow+1-deep {
		t.Fatalf("a walk from frame %d to the kept frame %d looked up %d objects, want %d (of %d frames)", deep, shallow+1, n, shallow+1-deep, len(rec.states))
	}
	if n := walk(at(deep)); n > 1 {
		t.Errorf("the same walk again looked up %d objects, want at most the leaf's: it was not kept", n)
	}
}

// TestJoinDue: a walk that ends in the memo is kept when it took
// memoJoinSteps steps or more, once every memoJoinEvery walks at most.
func TestJoinDue(t *testing.T) {
	m := newStackMemo(stackMemoRecords)
	kept := 0
	for range 3 * memoJoinEvery {
		m.begin()
		if m.joinDue(memoJoinSteps - 1) {
			t.Fatalf("a walk of %d steps kept", memoJoinSteps-1)
		}
		if m.joinDue(memoJoinSteps) {
			kept++
		}
	}
	if kept != 3 {
		t.Errorf("%d of %d walks kept, want 3", kept, 3*memoJoinEvery)
	}
}

// TestStackMemoReuse checks the memo's records are reused in clock order:
// a record no walk took frames from since the hand last passed it is the
// next one reused, and its slots then miss; one a walk took frames from
// stays for one more turn; the record a join copies from is never the
// one it is stored in.
func TestStackMemoReuse(t *testing.T) {
	m := newStackMemo(2)
	state := func(sp uint64) frameState {
		var st frameState
		st.fr.v[RegRSP], st.fr.v[RegRIP], st.fr.known = sp, 0x1000+sp, 1<<RegRSP|1<<RegRIP
		return st
	}
	keep := func(sp uint64) {
		m.begin()
		for k := range uint64(3) {
			st := state(sp + 16*k)
			m.enter(&st)
		}
		m.keep(1, []uint64{sp, sp + 1}, 0)
	}
	hit := func(sp uint64) bool {
		st := state(sp)
		_, _, ok := m.rest(1, &st, &memory{})
		return ok
	}
	keep(0x100) // record 0
	keep(0x200) // record 1
	if !hit(0x100) || !hit(0x200) {
		t.Fatal("kept stacks miss")
	}
	// Both were used: the hand clears them and comes back to record 0.
	keep(0x300)
	if hit(0x110) || !hit(0x210) || !hit(0x300) {
		t.Fatalf("after a third stack: first %v, second %v, third %v; want the first reused", hit(0x110), hit(0x210), hit(0x300))
	}
	// With the hand at record 0 and neither used, a join from record 0
	// is stored in record 1.
	m.hand, m.recs[0].used, m.recs[1].used = 0, false, false
	if r := m.reuse(&m.recs[0]); r != &m.recs[1] {
		t.Fatal("reuse returned the record being joined from")
	}
	// Once every record has been used, keeping a stack allocates nothing.
	sp := uint64(0x1000)
	if n := testing.AllocsPerRun(100, func() { sp += 0x100; keep(sp) }); n != 0 {
		t.Errorf("keeping a stack in reused records: %v allocations, want 0", n)
	}
}
