package unwind

import "math/bits"

// Bounds of an Unwinder's stack memo: 1<<stackMemoBits slots,
// stackMemoRecords records, and the outermost stackMemoFrames frames of
// a stack remembered, whatever its depth (a record then holds at most
// that many frames, about 200 bytes each with their reads: the memo
// holds about a MiB at the worst, allocated as records are first used).
const (
	stackMemoBits    = 9
	stackMemoRecords = 128
	stackMemoFrames  = 32
)

// A walk that ends in the stack memo is kept (keepJoined) when it took
// memoJoinSteps steps or more to get there, at most once every
// memoJoinEvery walks: a sample deeper in a call chain than those kept
// takes more, while the leaf and the caller or two that change from
// sample to sample in most programs take fewer; and a recursion whose
// depth changes all the time (a sort) would keep a record at nearly
// every sample (BenchmarkUnwindStackMemo).
const (
	memoJoinSteps = 4
	memoJoinEvery = 16
)

// stackMemo remembers the outer frames of whole stacks, so that a sample
// whose walk reaches a frame seen before (the same registers at the
// same pc) takes the rest of its stack from the memo instead of
// stepping through it (BenchmarkUnwindStackMemo): a step's result depends
// only on the frame's registers, the process's objects and the window's
// bytes it reads, so the rest is the same once the words the recorded
// walk read from there on read the same. It is direct-mapped by pid, sp
// and pc; each Unwinder has its own (not synchronized). Records are
// reused, not allocated (TestStackMemoReuse): a new one
// takes the place of the next record in turn that no walk took frames
// from since the hand last passed it (the clock algorithm), and a slot
// whose record was reused misses.
type stackMemo struct {
	slots []stackSlot
	recs  []stackRecord
	hand  int // the next record to reuse, when not used since
	// The walk being recorded: the state entering each step, the
	// reads of each step (reads[readAt[i]:readAt[i+1]] are step i's).
	states []frameState
	readAt []int32
	reads  []memRead
	// Walks since the last keepJoined (memoJoinEvery).
	sinceJoin int
	out       []uint64 // keepJoined's frames
}

// stackSlot points at frame i of a recorded stack of process pid: of
// rec while rec's gen is gen.
type stackSlot struct {
	pid uint32
	i   int32
	gen uint32
	rec *stackRecord
}

// record returns the slot's record, nil when it has none or its record
// was reused since.
func (s *stackSlot) record() *stackRecord {
	if s.rec == nil || s.rec.gen != s.gen {
		return nil
	}
	return s.rec
}

// frameState is what one step of a walk starts from: the registers, and
// whether the pc is exact (a leaf, or interrupted by a signal) rather
// than a return address. In a record, full says that a step from this
// one on applied a full row (stepComplex), which may read any register.
type frameState struct {
	fr    frameRegs
	exact bool
	full  bool
}

// same reports whether t steps as the recorded s does: the same
// exactness, and the same registers known, with the same values; where
// no step from s on applies a full row, only rsp, rip and rbp (known or
// not) count, which are all that compact rows and frame-pointer steps
// read (the other callee-saved registers hold whatever the leaf left
// there, and only their being known passes on).
func (s *frameState) same(t *frameState) bool {
	if s.exact != t.exact {
		return false
	}
	if !s.full {
		const bp = 1 << RegRBP
		return s.fr.v[RegRSP] == t.fr.v[RegRSP] && s.fr.v[RegRIP] == t.fr.v[RegRIP] &&
			s.fr.known&bp == t.fr.known&bp && (s.fr.known&bp == 0 || s.fr.v[RegRBP] == t.fr.v[RegRBP])
	}
	if s.fr.known != t.fr.known {
		return false
	}
	for k := s.fr.known; k != 0; k &= k - 1 {
		r := bits.TrailingZeros32(k)
		if s.fr.v[r] != t.fr.v[r] {
			return false
		}
	}
	return true
}

// memRead is one read of the window a walk made: size bytes at addr read
// v, or failed (!ok; a failed read that did not stop the walk).
type memRead struct {
	addr uint64
	v    uint64
	size uint8
	ok   bool
}

// stackRecord is the outer part of one whole stack: the state entering
// each of its steps, the window reads from each step on
// (reads[readAt[i]:]), the frames each step and those after it
// appended (out[i:]: the last step, which ended the walk, appended
// none), and the walk's top (UnwindSwitch's). gen counts its reuses;
// used says a walk took frames from it since the clock's hand passed.
type stackRecord struct {
	states []frameState
	readAt []int32
	reads  []memRead
	out    []uint64
	top    uint64
	gen    uint32
	used   bool
}

// newStackMemo returns an empty memo of records records (at least 2).
func newStackMemo(records int) *stackMemo {
	return &stackMemo{slots: make([]stackSlot, 1<<stackMemoBits), recs: make([]stackRecord, max(records, 2))}
}

// reuse returns a record to store a stack in, made anew (its slots
// miss), passing over those used since the hand last passed them and
// busy, the record a join copies from.
func (m *stackMemo) reuse(busy *stackRecord) *stackRecord {
	for {
		r := &m.recs[m.hand]
		m.hand = (m.hand + 1) % len(m.recs)
		if r == busy {
			continue
		}
		if r.used {
			r.used = false
			continue
		}
		r.gen++
		if r.states == nil { // first use: room for any stack kept
			r.states = make([]frameState, 0, stackMemoFrames)
			r.readAt = make([]int32, 0, stackMemoFrames)
			r.reads = make([]memRead, 0, 2*stackMemoFrames)
			r.out = make([]uint64, 0, stackMemoFrames)
		}
		return r
	}
}

// slot returns the slot of a frame of process pid whose registers are fr.
func (m *stackMemo) slot(pid uint32, fr *frameRegs) *stackSlot {
	h := fr.v[RegRSP]*0x9e3779b97f4a7c15 ^ fr.v[RegRIP]*0xc2b2ae3d27d4eb4f ^ uint64(pid)
	h = (h ^ h>>29) * 0xbf58476d1ce4e5b9
	return &m.slots[h>>(64-stackMemoBits)]
}

// rest returns the record and frame index of the frame st of process
// pid, when the memo has one whose reads from there on read the same in
// mem.
func (m *stackMemo) rest(pid uint32, st *frameState, mem *memory) (*stackRecord, int, bool) {
	s := m.slot(pid, &st.fr)
	rec := s.record()
	if rec == nil || s.pid != pid || !rec.states[s.i].same(st) {
		return nil, 0, false
	}
	for _, r := range rec.reads[rec.readAt[s.i]:] {
		v, stop := mem.readWindow(r.addr, uint64(r.size))
		if (stop == 0) != r.ok || (r.ok && v != r.v) {
			return nil, 0, false
		}
	}
	rec.used = true
	return rec, int(s.i), true
}

// begin starts recording a walk.
func (m *stackMemo) begin() {
	m.states, m.readAt, m.reads = m.states[:0], m.readAt[:0], m.reads[:0]
	m.sinceJoin++
}

// joinDue reports whether a walk that took steps steps to end in the
// memo is to be kept (keepJoined).
func (m *stackMemo) joinDue(steps int) bool {
	if steps < memoJoinSteps || m.sinceJoin < memoJoinEvery {
		return false
	}
	m.sinceJoin = 0
	return true
}

// complexStep marks the step entered last as one that applied a full row.
func (m *stackMemo) complexStep() {
	if n := len(m.states); n > 0 {
		m.states[n-1].full = true
	}
}

// enter records the state entering the next step.
func (m *stackMemo) enter(st *frameState) {
	m.states = append(m.states, *st)
	m.readAt = append(m.readAt, int32(len(m.reads)))
}

// keep stores the walk recorded, a whole stack of process pid whose
// frames after the leaf are out (one a step but the last, which ended
// the walk) and whose top is top: its outermost stackMemoFrames steps,
// one slot each.
func (m *stackMemo) keep(pid uint32, out []uint64, top uint64) {
	if n := len(m.states); n > 0 && len(out) == n-1 {
		m.store(pid, m.states, m.readAt, m.reads, out, top, nil)
	}
}

// keepJoined stores the walk recorded, which reached frame i of rec
// after its steps appended out (one a step), joined to rec's frames from
// there on, as keep does: so that a walk through frames no record holds
// yet (a sample deeper in a call chain than any kept before) is not
// walked again.
func (m *stackMemo) keepJoined(pid uint32, out []uint64, rec *stackRecord, i int) {
	n := len(m.states)
	if n == 0 || len(out) != n {
		return
	}
	states := append(m.states, rec.states[i:]...)
	readAt := m.readAt
	for _, at := range rec.readAt[i:] {
		readAt = append(readAt, int32(len(m.reads))+at-rec.readAt[i])
	}
	reads := append(m.reads, rec.reads[rec.readAt[i]:]...)
	all := append(append(m.out[:0], out[:n]...), rec.out[i:]...)
	m.store(pid, states, readAt, reads, all, rec.top, rec)
	// The scratch may have grown into new arrays: keep them.
	m.states, m.readAt, m.reads, m.out = states[:0], readAt[:0], reads[:0], all[:0]
}

// store keeps the outermost stackMemoFrames steps of a whole stack of
// process pid: the states entering its steps, where each step's reads
// start in reads, the frames appended after the leaf (one a step but the
// last) and its top; in a reused record other than busy (which the
// arguments may point into), one slot a step.
func (m *stackMemo) store(pid uint32, states []frameState, readAt []int32, reads []memRead, out []uint64, top uint64, busy *stackRecord) {
	n := len(states)
	from := max(0, n-stackMemoFrames)
	base := readAt[from]
	rec := m.reuse(busy)
	rec.states = append(rec.states[:0], states[from:]...)
	rec.readAt = rec.readAt[:0]
	for _, at := range readAt[from:] {
		rec.readAt = append(rec.readAt, at-base)
	}
	rec.reads = append(rec.reads[:0], reads[base:]...)
	rec.out = append(rec.out[:0], out[from:]...)
	rec.top = top
	for i := len(rec.states) - 2; i >= 0; i-- {
		rec.states[i].full = rec.states[i].full || rec.states[i+1].full
	}
	// One slot a step. Where two steps share a slot, the one nearer the
	// leaf wins (a walk meets it first, and takes more from it), but for
	// the leaf's own state, which only a sample with the same leaf state
	// meets: it is stored first, the others from the outermost in.
	put := func(i int) {
		*m.slot(pid, &rec.states[i].fr) = stackSlot{pid: pid, i: int32(i), gen: rec.gen, rec: rec}
	}
	inner := 0
	if from == 0 {
		put(0)
		inner = 1
	}
	for i := len(rec.states) - 1; i >= inner; i-- {
		put(i)
	}
}

// forget drops the records of process pid.
func (m *stackMemo) forget(pid uint32) {
	for i := range m.slots {
		if m.slots[i].pid == pid {
			m.slots[i] = stackSlot{}
		}
	}
}
