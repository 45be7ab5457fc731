package symbolize

// Frame is one function activation of a symbolized stack.
//
// Frames that share an Address come from one machine-code location: all
// but the last of them are inlined frames (Inlined is true), innermost
// first, and the last is the physical function that holds the code. This is
// the order of pprof's Location.Line.
type Frame struct {
	// Address is the instruction pointer as sampled: a kernel virtual
	// address, or a virtual address in the process's address space. For
	// every frame but the leaf it is a return address; the symbolizer looks
	// it up at Address-1 so that calls at the very end of a function resolve
	// to the caller.
	Address uint64
	// Function is the display name: demangled where the symbol was
	// mangled (C++ with its parameter list, which ShortName removes; Rust
	// legacy and v0 without hashes). It is "" when the frame could not be
	// named; Reason then says why.
	Function string
	// SystemName is the name as it stands in the symbol table (mangled for
	// C++ and Rust); equal to Function for C and Go.
	SystemName string
	// SymbolStart is the address of the function's first byte in the same
	// address space as Address (0 when unknown); Address-SymbolStart is the
	// offset that perf prints as sym+0x1a.
	SymbolStart uint64
	// File and Line locate the code in source, from DWARF line tables or
	// .gopclntab; "" and 0 when there is no line information.
	File string
	Line int
	// StartLine is the source line of the function's first instruction
	// (from the line table at SymbolStart), for pprof's Function.StartLine;
	// 0 when unknown and for inlined frames.
	StartLine int
	// Inlined reports that this frame's function was inlined into the next
	// frame of the slice (which has the same Address).
	Inlined bool
	// Kernel reports a kernel frame (from the kernel stack).
	Kernel bool
	// Mapping is the binary the address falls into. It is nil only when the
	// address lies in no known mapping of the process (Reason says so).
	Mapping *Mapping
	// Reason says why Function is "" (ReasonNone when it is named).
	Reason Reason
}

// Mapping is one executable mapping of a binary into an address space: a
// line of /proc/PID/maps, or the kernel image ([kernel.kallsyms]).
//
// Mappings are shared: every Frame in the same mapping of the same process
// points at the same *Mapping, which the symbolizer never changes after it
// hands it out.
type Mapping struct {
	// Start and Limit bound the mapped range [Start, Limit) in the address
	// space the addresses are in (bytes).
	Start, Limit uint64
	// Offset is the file offset of Start (bytes), from /proc/PID/maps.
	Offset uint64
	// Path is the path as the process sees it (in its mount namespace), as
	// written in /proc/PID/maps, or "[kernel.kallsyms]" for the kernel, or a
	// pseudo-path such as "[vdso]".
	Path string
	// BuildID is the hex GNU build ID from the ELF's NT_GNU_BUILD_ID note,
	// "" when the file has none or could not be read.
	BuildID string
	// Kernel reports the kernel image.
	Kernel bool
	// Device and Inode identify the file (from /proc/PID/maps); 0 for the
	// kernel and pseudo-paths.
	Device, Inode uint64

	// program: the file was read as an ELF binary (a memfd program
	// among them), so that JIT reports false for it.
	program bool
}

// Reason says why a frame has no function name.
type Reason uint8

// The reasons a frame stays unnamed. Their String forms are short words
// used in the end-of-run summary and in pprof locations.
const (
	ReasonNone         Reason = iota // named
	ReasonNoMapping                  // address in no mapping of /proc/PID/maps
	ReasonNoSymbol                   // the binary has no symbol covering it
	ReasonNoAccess                   // the binary could not be opened or read
	ReasonBadELF                     // the binary is not a valid ELF file
	ReasonProcessGone                // the process exited before it was seen
	ReasonKernelHidden               // kallsyms hidden by kptr_restrict
	numReasons
)

var reasonNames = [...]string{
	ReasonNone:         "named",
	ReasonNoMapping:    "no-mapping",
	ReasonNoSymbol:     "no-symbol",
	ReasonNoAccess:     "no-access",
	ReasonBadELF:       "bad-elf",
	ReasonProcessGone:  "process-gone",
	ReasonKernelHidden: "kernel-hidden",
}

// String returns the reason's short name, such as "no-symbol".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Stack is a symbolized callchain: kernel frames first, then user frames,
// each part leaf first (the order of bpf_get_stack), with inlined frames
// expanded in place.
type Stack struct {
	Frames []Frame
}
