package unwind

import "sync/atomic"

// ruleMemoBits sizes an Unwinder's rule memo: 1<<ruleMemoBits slots of
// 24 bytes. Beside the bench's neighbours (a Python interpreter, a Go
// and a C++ server) a quarter of the slots missed half as often again,
// by conflicts (BENCHMARKS.md, issue 16 session 16).
const ruleMemoBits = 14

// ruleMemo remembers the CFI rule of recently unwound pcs, so that a
// stack seen again costs a hash and a load per frame instead of a search
// of the binary's unwind table (and of its FDE index, for a table built
// an FDE at a time): BenchmarkUnwindMemo. It is direct-mapped, one rule
// per slot, the last one looked up winning. The slots hold the entries
// themselves, one load away, and are not synchronized: each Unwinder
// has a memo of its own (Sibling). Only rules that step alone are kept:
// a rule with a DWARF expression (cfaComplex) needs its table, and an
// entry names its table by Table.memoID, not by pointer, so that it
// keeps no table alive past the table cache's eviction.
type ruleMemo struct {
	slots []memoRule // 1<<bits of them
	shift uint       // 64 - bits
}

// newRuleMemo returns an empty memo of 1<<bits slots (1 ≤ bits ≤ 24).
func newRuleMemo(bits int) *ruleMemo {
	bits = min(max(bits, 1), 24)
	return &ruleMemo{slots: make([]memoRule, 1<<bits), shift: uint(64 - bits)}
}

// memoRule is the rule r of the pc pc (an ELF address) in the table whose
// memoID is tab; tab 0 is an empty slot.
type memoRule struct {
	pc  uint64
	tab uint32
	r   rule
}

// memoIDs hands out Table.memoID values; 0 is none yet.
var memoIDs atomic.Uint32

// memoID returns t's number for the rule memo, given on first use: unique
// for the process's life (a table takes far longer to build than 2^32
// of them could be), unlike t's address, which a later table may reuse.
func (t *Table) memoID() uint32 {
	if id := t.id.Load(); id != 0 {
		return id
	}
	t.id.CompareAndSwap(0, memoIDs.Add(1))
	return t.id.Load()
}

// slot returns the slot of the pc pc of table id.
func (m *ruleMemo) slot(id uint32, pc uint64) *memoRule {
	h := pc*0x9e3779b97f4a7c15 ^ uint64(id)*0xc2b2ae3d27d4eb4f
	h = (h ^ h>>29) * 0xbf58476d1ce4e5b9
	return &m.slots[h>>m.shift]
}

// lookup returns the rule of pc in tab, from the memo or, on a miss, from
// tab (remembering it when it steps alone), the table whose complex
// rules it indexes, and whether pc has CFI.
func (m *ruleMemo) lookup(tab *Table, pc uint64) (rule, *Table, bool) {
	id := tab.memoID()
	s := m.slot(id, pc)
	if s.pc == pc && s.tab == id {
		return s.r, tab, true
	}
	r, sub, ok := tab.lookup(pc)
	if ok && r.cfaKind != cfaComplex {
		*s = memoRule{pc: pc, tab: id, r: r}
	}
	return r, sub, ok
}
