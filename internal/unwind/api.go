package unwind

import "fmt"

// Regs are the user registers of a sample, indexed by DWARF x86-64
// register number: 0 rax, 1 rdx, 2 rcx, 3 rbx, 4 rsi, 5 rdi, 6 rbp, 7 rsp,
// 8–15 r8–r15, 16 rip (the return address column). Values are addresses
// or raw register contents.
type Regs [17]uint64

// DWARF x86-64 register numbers used by the unwinder.
const (
	RegRBP = 6
	RegRSP = 7
	RegRIP = 16
)

// IP is the instruction pointer (Regs[16]).
func (r *Regs) IP() uint64 { return r[RegRIP] }

// SP is the stack pointer (Regs[7]); the stack window starts there.
func (r *Regs) SP() uint64 { return r[RegRSP] }

// BP is the frame pointer (Regs[6]).
func (r *Regs) BP() uint64 { return r[RegRBP] }

// ObjectKind says how frames in an object are unwound.
type ObjectKind uint8

const (
	// KindELF is an ELF file on disk: its .eh_frame/.debug_frame, else frame pointers.
	KindELF ObjectKind = iota
	// KindJIT is code named by a perf map (/tmp/perf-PID.map): frame pointers only.
	KindJIT
	// KindVDSO is the vDSO: its CFI is read from this process's own [vdso]
	// mapping (the same image for every 64-bit process of this kernel)
	// unless Object.Path names a file holding the image.
	KindVDSO
)

// Object is the mapped object that holds a pc of one process.
type Object struct {
	// Key identifies the file for the table cache: its build ID (hex)
	// when it has one, else "dev:inode" or any string unique to the file
	// content. Objects with equal keys share one table; an empty Key
	// falls back to Path.
	Key string
	// Bias is the load bias in bytes: runtime address - ELF virtual
	// address (0 for a non-PIE executable, the mapping base for most
	// shared objects).
	Bias uint64
	// Path opens the file (e.g. /proc/PID/root/usr/lib/...); read once,
	// when the table is first built.
	Path string
	// Kind says how to unwind the object's frames.
	Kind ObjectKind
	// Table, when not nil, is the object's table as Unwinder.Table
	// returned it: a Process that keeps it spares the walk a lookup in
	// the Unwinder's table cache on every frame. A table the cache has
	// since evicted still unwinds (tables are immutable); the Process
	// decides how long it holds one.
	Table *Table
}

// Process maps a pc of one process to the object that holds it.
// Object must be cheap (it is called once per frame) and must not retain
// nor allocate in the steady state.
type Process interface {
	// Object returns the object that maps pc, and false when no mapping
	// holds it (or the process is gone).
	Object(pc uint64) (Object, bool)
}

// Stop says why an unwind ended.
type Stop uint8

const (
	// stopNone (0) is internal: the walk goes on.
	stopNone Stop = iota
	// StopComplete: the outermost frame was reached (its return address
	// rule is DW_CFA_undefined, as in _start and clone3/start_thread, or a
	// return address or frame pointer of 0 ended the chain). The stack is whole.
	StopComplete
	// StopWindow: a read fell above the end of the copied stack window;
	// the stack goes on beyond what was copied.
	StopWindow
	// StopNoObject: no mapped object holds the pc.
	StopNoObject
	// StopNoCFI: the object has CFI but none covers the pc and the
	// frame-pointer step tried instead failed, or its file could not be
	// read.
	StopNoCFI
	// StopReadOutside: a rule read below the window start (sp) or wrapped.
	StopReadOutside
	// StopDepth: the frame limit (Options.MaxFrames) was reached.
	StopDepth
	// StopBadRule: a rule needs a register whose value is not known, an
	// expression failed, or the new sp did not grow (no progress).
	StopBadRule
	// StopNoStack: a read was needed and not a byte of the stack could
	// be copied at sp: a process that is exiting, whose memory is gone
	// (perf gets no more), or an sp in no mapping.
	StopNoStack
	// NumStops bounds the Stop values, for arrays of counters indexed
	// by Stop (index 0 is unused).
	NumStops
	// stopOutermost is internal: the frame's return address rule is
	// DW_CFA_undefined (the outermost frame), and the frame registers'
	// sp holds its CFA. Unwind reports it as StopComplete.
	stopOutermost
)

var stopNames = [NumStops]string{"none", "complete", "window", "no-object", "no-cfi", "read-outside", "depth", "bad-rule", "no-stack"}

// String names the stop reason in one word ("window"), for counters.
func (s Stop) String() string {
	if s < NumStops {
		return stopNames[s]
	}
	return fmt.Sprintf("stop(%d)", uint8(s))
}

// Truncated reports whether the stack was cut (anything but StopComplete).
func (s Stop) Truncated() bool { return s != StopComplete }
