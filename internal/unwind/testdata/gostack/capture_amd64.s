#include "textflag.h"

// func capture(regs *[17]uint64, dst *byte, max uintptr) uintptr
// A leaf with no frame: 0(SP) is the return address. R14 holds the
// current g on amd64 (ABIInternal; the ABI0 wrapper leaves it), whose
// first two words are stack.lo and stack.hi.
TEXT ·capture(SB), NOSPLIT, $0-32
	MOVQ regs+0(FP), AX
	MOVQ 0(SP), BX
	MOVQ BX, 128(AX)      // rip: the caller's pc after the call
	LEAQ 8(SP), BX
	MOVQ BX, 56(AX)       // rsp: the caller's sp after the return
	MOVQ BP, 48(AX)       // rbp
	MOVQ 8(R14), DX       // g.stack.hi
	SUBQ BX, DX           // bytes from sp to the stack top
	MOVQ max+16(FP), CX
	CMPQ DX, CX
	JLE  fits
	MOVQ CX, DX
fits:
	ANDQ $~7, DX
	MOVQ dst+8(FP), DI
	MOVQ BX, SI
	MOVQ DX, CX
	SHRQ $3, CX
	CLD
	REP; MOVSQ
	MOVQ DX, ret+24(FP)
	RET
