package unwind

import (
	"errors"
	"io/fs"
	"strings"
	"sync/atomic"
	"syscall"
)

// Defaults of Options.
const (
	// DefaultMaxFrames bounds a stack: 4096 frames (32 KiB of dst), four
	// times the 1024 deep stacks gprofile must keep whole.
	DefaultMaxFrames = 4096
	// DefaultCacheBytes bounds the tables held: 64 MiB, many times a
	// libc's or node's table (BenchmarkBuildLibc reports its bytes).
	DefaultCacheBytes = 64 << 20
)

// Options configure an Unwinder. Zero values take the defaults.
type Options struct {
	// MaxFrames is the most frames Unwind returns (StopDepth past it).
	MaxFrames int
	// CacheBytes bounds the memory of the cached tables, in bytes.
	CacheBytes int
}

// Unwinder turns registers and a stack window into return addresses.
// It caches one Table per binary, shared with its Siblings, and keeps a
// rule memo of its own: one goroutine at a time unwinds with an
// Unwinder, others with its Siblings. Stats, Table and HasTable are safe
// from any goroutine.
type Unwinder struct {
	maxFrames int
	cache     *tableCache
	memo      *ruleMemo
	stacks    *stackMemo // UnwindMemo's, made at its first use
	counts    *loadCounts
}

// loadCounts are the table builds of an Unwinder and its Siblings.
type loadCounts struct {
	loads, loadErrs atomic.Int64
}

// New returns an Unwinder with an empty table cache.
func New(opts Options) *Unwinder {
	if opts.MaxFrames <= 0 {
		opts.MaxFrames = DefaultMaxFrames
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	return &Unwinder{maxFrames: opts.MaxFrames, cache: newTableCache(opts.CacheBytes), memo: newRuleMemo(ruleMemoBits), counts: new(loadCounts)}
}

// Sibling returns an Unwinder for another goroutine: it shares u's
// tables, options and counters, and has a rule memo of its own, an
// unsynchronized array of 1<<memoBits slots of 24 bytes (1<<ruleMemoBits
// when memoBits is 0), counted in RSS as its pages are touched: a
// goroutine that unwinds few stacks needs fewer.
func (u *Unwinder) Sibling(memoBits int) *Unwinder {
	if memoBits <= 0 {
		memoBits = ruleMemoBits
	}
	return &Unwinder{maxFrames: u.maxFrames, cache: u.cache, memo: newRuleMemo(memoBits), counts: u.counts}
}

// Stats are an Unwinder's table counters.
type Stats struct {
	// Tables and TableBytes are the tables cached now and their bytes.
	Tables, TableBytes int
	// Loads counts tables built; LoadErrors those whose file could not
	// be read or parsed at all (their pcs stop with StopNoCFI).
	Loads, LoadErrors int64
}

// Stats returns the table counters.
func (u *Unwinder) Stats() Stats {
	n, b := u.cache.stats()
	return Stats{Tables: n, TableBytes: b, Loads: u.counts.loads.Load(), LoadErrors: u.counts.loadErrs.Load()}
}

// Table returns the cached table of obj, building it on first use (nil
// for KindJIT objects, which have none). A table whose file did not
// read or parse is kept too (its pcs stop with StopNoCFI), but for one
// whose /proc path went with its process (goneWithProcess): the next
// object of that Key builds it again.
func (u *Unwinder) Table(obj Object) *Table {
	if obj.Kind == KindJIT {
		return nil
	}
	key := cacheKey(obj)
	t := u.cache.get(key, func() *Table {
		u.counts.loads.Add(1)
		var t *Table
		var err error
		if obj.Kind == KindVDSO {
			t, err = loadVDSOTable(obj.Path)
		} else {
			t, err = loadTable(obj.Path, procRoot(obj.Path))
		}
		if err != nil {
			u.counts.loadErrs.Add(1)
			return &Table{stats: TableStats{Err: err}}
		}
		return t
	})
	if goneWithProcess(obj.Path, t.stats.Err) {
		// The path was one process's view of the file (its root, its
		// map_files), and the process is gone: another process of the
		// same file (the same Key) has a view of its own.
		u.cache.forget(key, t)
	}
	return t
}

// goneWithProcess reports whether err is a table load's failure to open
// path because a process in /proc (the one whose view path was) has
// exited: the file still exists elsewhere, unlike a file that does not
// read or parse, whose failure is kept so that it is read once.
func goneWithProcess(path string, err error) bool {
	return err != nil && strings.HasPrefix(path, "/proc/") &&
		(errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH))
}

// HasTable reports whether Unwind can step through obj's frames without
// building a table first: obj's table is built and cached, or obj needs
// none (KindJIT). It never builds nor waits (so a goroutine that must not
// block, such as a ring buffer reader, can hand a sample whose objects
// lack tables to one that may), and it allocates nothing.
func (u *Unwinder) HasTable(obj Object) bool {
	return obj.Kind == KindJIT || u.cache.ready(cacheKey(obj))
}

// cacheKey is obj.Key, or its path when the key is empty (so two
// objects without keys never share a table).
func cacheKey(obj Object) string {
	switch {
	case obj.Key != "":
		return obj.Key
	case obj.Path == "" && obj.Kind == KindVDSO:
		return "[vdso]"
	}
	return obj.Path
}

// procRoot returns "/proc/PID/root" when path is under it or under
// /proc/PID/map_files, so separate debug files are looked up in the
// process's own file system.
func procRoot(path string) string {
	if !strings.HasPrefix(path, "/proc/") {
		return ""
	}
	rest := path[len("/proc/"):]
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return ""
	}
	switch {
	case strings.HasPrefix(rest[i:], "/root/"):
		return path[:len("/proc/")+i+len("/root")]
	case strings.HasPrefix(rest[i:], "/map_files/"):
		return path[:len("/proc/")+i] + "/root"
	}
	return ""
}

const allRegs = 1<<numRegs - 1

// Unwind appends the user frames of one sample to dst, leaf first: the
// first is regs.IP(), the rest are return addresses (call site + the
// call's length), so every frame but the leaf symbolizes at address-1. A
// frame interrupted by a signal (the one above __restore_rt) has no return
// address: it is given as its exact pc + 1, so that address-1 is right for
// it too. Unwind says why the walk stopped. stack holds the bytes of user stack from
// address regs.SP() upward. regs and stack are only read. In the steady
// state (tables cached) it allocates nothing but dst's growth.
func (u *Unwinder) Unwind(dst []uint64, p Process, regs *Regs, stack []byte) ([]uint64, Stop) {
	dst, s, _ := u.UnwindExtent(dst, p, regs, stack)
	return dst, s
}

// UnwindExtent is Unwind that also returns the stack's extent in bytes:
// when the walk reached a frame whose return address rule is
// DW_CFA_undefined (_start, start_thread, clone3, Go's goexit and
// mstart), the distance from regs.SP() to that frame's CFA, the top of
// the thread's stack as far as any unwind reads it; else 0 (a stack cut,
// or ended by a return address or frame pointer of 0, which proves no
// top). A copy of [sp, sp+extent) unwinds the same stack whole.
func (u *Unwinder) UnwindExtent(dst []uint64, p Process, regs *Regs, stack []byte) ([]uint64, Stop, uint64) {
	dst, s, top := u.UnwindSwitch(dst, p, regs, stack, StackSwitch{})
	if top != 0 {
		return dst, s, top - regs.SP()
	}
	return dst, s, 0
}

// StackSwitch says that a window holds two stacks (attach.FlagStackSwitch):
// its first Off bytes are from regs.SP() up, the rest from SP up. The
// walk may move once from the first to the second, whatever their
// order in memory: a Go function that switched to the g0 stack to call
// the vDSO (time.now, runtime.nanotime1) or C code (cgo's
// runtime.asmcgocall) has its frame, and its callers', on the
// goroutine's stack at SP. The zero StackSwitch is a window of one
// stack.
type StackSwitch struct {
	Off int    // bytes of the window from regs.SP(); 0 for no switch
	SP  uint64 // the address of the window's byte Off
}

// UnwindSwitch is UnwindExtent for a window that may hold two stacks
// (sw), which returns, instead of the extent, the top of the stack the
// walk ended on (the outermost frame's CFA, an address; 0 when the
// extent would be 0).
func (u *Unwinder) UnwindSwitch(dst []uint64, p Process, regs *Regs, stack []byte, sw StackSwitch) ([]uint64, Stop, uint64) {
	return u.unwind(dst, p, regs, stack, sw, nil, 0)
}

// UnwindMemo is UnwindSwitch for a sample of process pid, with the
// Unwinder's stack memo: a walk that reaches a frame of a whole stack
// unwound before (the same registers at the same pc, and the same
// words of the window read from there on) takes the rest from the memo,
// with the same result (BenchmarkUnwindStackMemo). Windows with a stack
// switch are walked as UnwindSwitch walks them. ForgetStacks drops a
// process's part of the memo; call it when the process execs or exits.
func (u *Unwinder) UnwindMemo(pid uint32, dst []uint64, p Process, regs *Regs, stack []byte, sw StackSwitch) ([]uint64, Stop, uint64) {
	if sw.Off > 0 {
		return u.unwind(dst, p, regs, stack, sw, nil, 0)
	}
	if u.stacks == nil {
		u.stacks = newStackMemo(stackMemoRecords)
	}
	return u.unwind(dst, p, regs, stack, sw, u.stacks, pid)
}

// ForgetStacks drops what the stack memo holds of process pid.
func (u *Unwinder) ForgetStacks(pid uint32) {
	if u.stacks != nil {
		u.stacks.forget(pid)
	}
}

// unwind is UnwindSwitch, with the stack memo sm (nil: none) for a
// sample of process pid.
func (u *Unwinder) unwind(dst []uint64, p Process, regs *Regs, stack []byte, sw StackSwitch, sm *stackMemo, pid uint32) ([]uint64, Stop, uint64) {
	fr := frameRegs{v: *regs, known: allRegs}
	mem := memory{base: regs.SP(), b: stack}
	if sw.Off > 0 && sw.Off <= len(stack) {
		mem.b, mem.base2, mem.b2 = stack[:sw.Off], sw.SP, stack[sw.Off:]
	}
	switched := false
	pc := regs.IP()
	first := len(dst) // where this stack's frames start in dst
	dst = append(dst, pc)
	exact := true // pc is where execution is (leaf, or interrupted by a signal), not a return address
	var lastKey string
	var lastTab *Table
	if sm != nil {
		sm.begin()
		mem.log = &sm.reads
	}
	for n := 1; ; n++ {
		if n >= u.maxFrames {
			return dst, StopDepth, 0
		}
		if sm != nil {
			st := frameState{fr: fr, exact: exact}
			if rec, i, ok := sm.rest(pid, &st, &mem); ok && n+len(rec.out)-i < u.maxFrames {
				if sm.joinDue(n - 1) {
					sm.keepJoined(pid, dst[first+1:], rec, i)
				}
				return append(dst, rec.out[i:]...), StopComplete, rec.top
			}
			sm.enter(&st)
			mem.complex = false
		}
		lookup := pc
		if !exact {
			lookup-- // the call instruction, which may be the last of its function
		}
		obj, ok := p.Object(lookup)
		if !ok {
			return dst, StopNoObject, 0
		}
		tab := obj.Table
		if tab == nil && obj.Kind != KindJIT {
			if key := cacheKey(obj); lastTab == nil || key != lastKey {
				lastTab, lastKey = u.Table(obj), key
			}
			tab = lastTab
		}
		sp := fr.v[RegRSP]
		var s Stop
		s, exact = stepIn(u.memo, tab, lookup-obj.Bias, &fr, &mem)
		if sm != nil && mem.complex {
			sm.complexStep()
		}
		if s != stopNone {
			if s == stopOutermost {
				if sm != nil {
					sm.keep(pid, dst[first+1:], fr.v[RegRSP])
				}
				return dst, StopComplete, fr.v[RegRSP]
			}
			if s == StopComplete && sm != nil { // a frame pointer of 0
				sm.keep(pid, dst[first+1:], 0)
			}
			return dst, s, 0
		}
		// Stacks grow down, so every step moves sp up, but the one move
		// onto the second stack may go anywhere.
		move := !switched && mem.inSecond(fr.v[RegRSP]) && !mem.inSecond(sp)
		if fr.v[RegRSP] <= sp && !move {
			return dst, StopBadRule, 0
		}
		switched = switched || move
		pc = fr.v[RegRIP]
		if pc == 0 {
			if sm != nil {
				sm.keep(pid, dst[first+1:], 0)
			}
			return dst, StopComplete, 0
		}
		if exact {
			dst = append(dst, pc+1) // see the doc: address-1 is pc
		} else {
			dst = append(dst, pc)
		}
	}
}

// stepIn steps from a frame at pc (an ELF address of the object whose
// table is tab, nil for JIT code) to its caller: with the CFI row for pc
// (through memo); with frame pointers when the object has no CFI; and,
// when it has some but none for pc (code without CFI inside a binary that
// has some, such as node's embedded builtins), with frame pointers as perf
// does, StopNoCFI if they do not hold (rbp 0 included: in code without
// frame pointers it is no proof of the outermost frame). A pc without CFI
// in the stub at the binary's entry point (the dynamic loader's _start)
// is the process's outermost frame.
func stepIn(memo *ruleMemo, tab *Table, pc uint64, fr *frameRegs, mem *memory) (s Stop, exact bool) {
	if tab == nil || tab.noCFI {
		return stepFP(fr, mem), false
	}
	if r, sub, ok := memo.lookup(tab, pc); ok {
		return step(sub, r, fr, mem)
	}
	if tab.inEntryStub(pc) {
		return stopOutermost, false // the process's first frame, as CFI's undefined return address says elsewhere
	}
	if s = stepFP(fr, mem); s != stopNone {
		s = StopNoCFI
	}
	return s, false
}

// stepFP steps with the frame-pointer convention: the caller's rbp at
// [rbp], the return address at [rbp+8], the caller's sp at rbp+16.
func stepFP(fr *frameRegs, mem *memory) Stop {
	bp, ok := fr.get(RegRBP)
	if !ok {
		return StopBadRule
	}
	if bp == 0 {
		return StopComplete
	}
	if bp < fr.v[RegRSP] {
		return StopBadRule
	}
	ra, s := mem.read(bp+8, 8)
	if s != 0 {
		return s
	}
	next, s := mem.read(bp, 8)
	if s != 0 {
		return s
	}
	fr.v[RegRSP], fr.v[RegRIP], fr.v[RegRBP] = bp+16, ra, next
	fr.known = 1<<RegRSP | 1<<RegRIP | 1<<RegRBP
	return 0
}

// calleeSavedMask has the bits of rbx and r12–r15.
const calleeSavedMask = 1<<3 | 1<<12 | 1<<13 | 1<<14 | 1<<15

// step applies rule r to fr, leaving the caller's registers there. exact
// reports that the caller's pc is exact (the frame was a signal frame).
func step(tab *Table, r rule, fr *frameRegs, mem *memory) (s Stop, exact bool) {
	if r.cfaKind == cfaComplex {
		mem.complex = true
		return stepComplex(&tab.complex[r.cfaOff], fr, mem)
	}
	base := uint64(RegRSP)
	if r.cfaKind == cfaRBP {
		base = RegRBP
	}
	b, ok := fr.get(base)
	if !ok {
		return StopBadRule, false
	}
	cfa := b + uint64(int64(r.cfaOff))
	if r.raKind == raUndef {
		fr.v[RegRSP] = cfa
		return stopOutermost, false
	}
	ra, s := mem.read(cfa+uint64(int64(r.raOff)), 8)
	if s != 0 {
		return s, false
	}
	keep := uint32(calleeSavedMask)
	for i, reg := range calleeSaved {
		if r.clobber&(1<<i) != 0 {
			keep &^= 1 << reg
		}
	}
	switch r.rbpKind {
	case rbpSame:
		keep |= 1 << RegRBP
	case rbpOffset:
		at := cfa + uint64(int64(r.rbpOff))
		if popped(at, fr) {
			keep |= 1 << RegRBP // the pop restored it: rbp is the caller's
			break
		}
		v, s := mem.read(at, 8)
		if s == 0 {
			fr.v[RegRBP] = v
			keep |= 1 << RegRBP
		} else {
			fr.known &^= 1 << RegRBP
		}
	}
	fr.known &= keep
	fr.set(RegRSP, cfa)
	fr.set(RegRIP, ra)
	return 0, false
}

// redZone is the x86-64 ABI's red zone below sp (bytes).
const redZone = 128

// popped reports whether addr, where a rule says a register of the
// caller is saved, lies in the red zone below the frame's sp: a slot an
// epilogue has popped already. GCC's CFI keeps rbp "saved at CFA-16"
// from the pop %rbp down to the ret (the CFA moves back to rsp+8, the
// rule stays), so a leaf sampled there has the caller's rbp in the
// register, and the slot lies below the window, which starts at sp.
// (Code that saves a register in the red zone without moving sp would
// be misread so; compilers save callee-saved registers above sp.)
func popped(addr uint64, fr *frameRegs) bool {
	sp, ok := fr.get(RegRSP)
	return ok && addr < sp && sp-addr <= redZone
}

// stepComplex applies a full row: any CFA rule, DWARF expressions, and
// every register (signal frames restore them all from the ucontext).
func stepComplex(c *complexRule, fr *frameRegs, mem *memory) (Stop, bool) {
	var cfa uint64
	if c.cfa.expr != nil {
		v, s := evalExpr(c.cfa.expr, fr, mem, 0, false)
		if s != 0 {
			return s, false
		}
		cfa = v
	} else {
		b, ok := fr.get(c.cfa.reg)
		if !ok {
			return StopBadRule, false
		}
		cfa = b + uint64(c.cfa.off)
	}
	var next frameRegs
	for reg := range numRegs {
		v, ok, s := regValue(&c.regs[reg], reg, cfa, fr, mem)
		if s != 0 && (reg == RegRIP || reg == RegRSP) {
			return s, false
		}
		if ok {
			next.set(reg, v)
		}
	}
	if c.regs[RegRIP].kind == rUndefined {
		fr.v[RegRSP] = cfa
		return stopOutermost, false
	}
	if next.known&(1<<RegRIP) == 0 {
		return StopBadRule, false
	}
	if c.regs[RegRSP].kind == rUnset {
		next.set(RegRSP, cfa)
	}
	*fr = next
	return 0, c.signal
}

// regValue recovers one register of the caller with rule r. ok is false
// when the value is not known; s says why a read failed.
func regValue(r *regRule, reg int, cfa uint64, fr *frameRegs, mem *memory) (v uint64, ok bool, s Stop) {
	switch r.kind {
	case rUnset, rSame:
		if reg == RegRSP || reg == RegRIP || (r.kind == rUnset && (calleeSavedMask|1<<RegRBP)&(1<<reg) == 0) {
			return 0, false, 0
		}
		v, ok = fr.get(uint64(reg))
		return v, ok, 0
	case rOffset:
		at := cfa + uint64(r.off)
		if reg != RegRIP && popped(at, fr) {
			v, ok = fr.get(uint64(reg)) // the pop restored it
			return v, ok, 0
		}
		v, s = mem.read(at, 8)
	case rValOffset:
		v = cfa + uint64(r.off)
	case rRegister:
		v, ok = fr.get(uint64(r.reg))
		return v, ok, 0
	case rExpr:
		var addr uint64
		if addr, s = evalExpr(r.expr, fr, mem, cfa, true); s == 0 {
			v, s = mem.read(addr, 8)
		}
	case rValExpr:
		v, s = evalExpr(r.expr, fr, mem, cfa, true)
	default:
		return 0, false, 0
	}
	return v, s == 0, s
}
