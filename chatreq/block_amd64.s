//go:build !purego

#include "go_asm.h"
#include "textflag.h"

// CHUNK classifies the 16 bytes at off(SI) and ORs their bits, shifted
// left by off, into R8 (quote), R9 (backslash), R10 (control), R11
// (non-ASCII) and R12 (word). Plan 9 operand order: PCMPGTB a, b sets
// b = b > a, signed, so bytes >= 0x80 (negative) are below every ASCII
// bound and are masked out with the non-ASCII bits.
#define CHUNK(off) \
	MOVOU    off(SI), X0; \
	MOVOU    X0, X1; \
	PCMPEQB  X8, X1; \
	PMOVMSKB X1, AX; \
	SHLQ     $off, AX; \
	ORQ      AX, R8; \
	MOVOU    X0, X1; \
	PCMPEQB  X9, X1; \
	PMOVMSKB X1, AX; \
	SHLQ     $off, AX; \
	ORQ      AX, R9; \
	PMOVMSKB X0, DX; \
	NOTQ     DX; \
	MOVOU    X10, X1; \
	PCMPGTB  X0, X1; \
	PMOVMSKB X1, AX; \
	ANDQ     DX, AX; \
	SHLQ     $off, AX; \
	ORQ      AX, R10; \
	MOVOU    X11, X1; \
	PCMPGTB  X0, X1; \
	PMOVMSKB X1, CX; \
	ANDQ     DX, CX; \
	MOVOU    X0, X2; \
	POR      X10, X2; \
	MOVOU    X2, X3; \
	PCMPGTB  X12, X3; \
	MOVOU    X13, X4; \
	PCMPGTB  X2, X4; \
	PAND     X4, X3; \
	PMOVMSKB X3, AX; \
	ORQ      CX, AX; \
	SHLQ     $off, AX; \
	ORQ      AX, R12; \
	NOTQ     DX; \
	SHLQ     $off, DX; \
	ORQ      DX, R11

// func classifySSE2(p *[64]byte, bl *block)
TEXT ·classifySSE2(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ bl+8(FP), DI
	MOVQ $0x2222222222222222, AX // '"'
	MOVQ AX, X8
	PSHUFL $0, X8, X8
	MOVQ $0x5c5c5c5c5c5c5c5c, AX // '\\'
	MOVQ AX, X9
	PSHUFL $0, X9, X9
	MOVQ $0x2020202020202020, AX // controls are below; letters fold case with it
	MOVQ AX, X10
	PSHUFL $0, X10, X10
	MOVQ $0x2121212121212121, AX // '!': the space and below
	MOVQ AX, X11
	PSHUFL $0, X11, X11
	MOVQ $0x6060606060606060, AX // 'a'-1
	MOVQ AX, X12
	PSHUFL $0, X12, X12
	MOVQ $0x7b7b7b7b7b7b7b7b, AX // 'z'+1
	MOVQ AX, X13
	PSHUFL $0, X13, X13
	XORQ R8, R8
	XORQ R9, R9
	XORQ R10, R10
	XORQ R11, R11
	XORQ R12, R12
	CHUNK(0)
	CHUNK(16)
	CHUNK(32)
	CHUNK(48)
	MOVQ R8, block_quote(DI)
	MOVQ R9, block_backslash(DI)
	MOVQ R10, block_control(DI)
	MOVQ R11, block_nonASCII(DI)
	MOVQ R12, block_word(DI)
	RET
