package unwind

// Bounds of an Unwinder's stack memo: 1<<stackMemoBits slots, and the
// outermost stackMemoFrames frames of a stack remembered, whatever its
// depth (a record then holds at most that many frames: about 200 bytes
// each, so the memo holds a few MiB at the worst).
const (
	stackMemoBits   = 9
	stackMemoFrames = 32
)

// stackMemo remembers the outer frames of whole stacks, so that a sample
// whose walk reaches a frame seen before (the same registers at the
// same pc) takes the rest of its stack from the memo instead of
// stepping through it (BenchmarkUnwindStackMemo): a step's result depends
// only on the frame's registers, the process's objects and the window's
// bytes it reads, so the rest is the same once the words the recorded
// walk read from there on read the same. It is direct-mapped by pid, sp
// and pc; each Unwinder has its own (not synchronized).
type stackMemo struct {
	slots []stackSlot
	// The walk being recorded: the state entering each step, the
	// reads of each step (reads[readAt[i]:readAt[i+1]] are step i's).
	states []frameState
	readAt []int32
	reads  []memRead
}

// stackSlot points at frame i of a recorded stack of process pid.
type stackSlot struct {
	pid uint32
	i   int32
	rec *stackRecord
}

// frameState is what one step of a walk starts from: the registers, and
// whether the pc is exact (a leaf, or interrupted by a signal) rather
// than a return address.
type frameState struct {
	fr    frameRegs
	exact bool
}

// same reports whether s and t step alike: the same registers known,
// with the same values, and the same exactness.
func (s *frameState) same(t *frameState) bool {
	if s.exact != t.exact || s.fr.known != t.fr.known {
		return false
	}
	for k := s.fr.known; k != 0; k &= k - 1 {
		r := trailingZeros32(k)
		if s.fr.v[r] != t.fr.v[r] {
			return false
		}
	}
	return true
}

// trailingZeros32 is bits.TrailingZeros32 for a nonzero x.
func trailingZeros32(x uint32) int {
	n := 0
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
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
// none), and the walk's top (UnwindSwitch's).
type stackRecord struct {
	states []frameState
	readAt []int32
	reads  []memRead
	out    []uint64
	top    uint64
}

// newStackMemo returns an empty memo.
func newStackMemo() *stackMemo {
	return &stackMemo{slots: make([]stackSlot, 1<<stackMemoBits)}
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
	if s.rec == nil || s.pid != pid || !s.rec.states[s.i].same(st) {
		return nil, 0, false
	}
	for _, r := range s.rec.reads[s.rec.readAt[s.i]:] {
		v, stop := mem.readWindow(r.addr, uint64(r.size))
		if (stop == 0) != r.ok || (r.ok && v != r.v) {
			return nil, 0, false
		}
	}
	return s.rec, int(s.i), true
}

// begin starts recording a walk.
func (m *stackMemo) begin() {
	m.states, m.readAt, m.reads = m.states[:0], m.readAt[:0], m.reads[:0]
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
	n := len(m.states)
	if n == 0 || len(out) != n-1 {
		return
	}
	from := max(0, n-stackMemoFrames)
	base := m.readAt[from]
	rec := &stackRecord{
		states: append([]frameState(nil), m.states[from:]...),
		readAt: make([]int32, n-from),
		reads:  append([]memRead(nil), m.reads[base:]...),
		out:    append([]uint64(nil), out[from:]...),
		top:    top,
	}
	for i := range rec.readAt {
		rec.readAt[i] = m.readAt[from+i] - base
	}
	for i := range rec.states {
		*m.slot(pid, &rec.states[i].fr) = stackSlot{pid: pid, i: int32(i), rec: rec}
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
