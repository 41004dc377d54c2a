//go:build !purego

#include "go_asm.h"
#include "textflag.h"

// WORDNON finishes a chunk: AX holds its letter bits, CX its ASCII bytes
// up to the space, DX its ASCII bits.
#define WORDNON(off) \
	ORQ  CX, AX; \
	SHLQ $off, AX; \
	ORQ  AX, R12; \
	NOTQ DX; \
	SHLQ $off, DX; \
	ORQ  DX, R11

// ZERO clears the six mask accumulators before a block.
#define ZERO \
	XORQ R8, R8; \
	XORQ R9, R9; \
	XORQ R10, R10; \
	XORQ R11, R11; \
	XORQ R12, R12; \
	XORQ R13, R13

// STORE writes a block's masks to (DI) and moves SI and DI to the next one.
#define STORE \
	MOVQ R8, block_quote(DI); \
	MOVQ R9, block_backslash(DI); \
	MOVQ R10, block_control(DI); \
	MOVQ R11, block_nonASCII(DI); \
	MOVQ R12, block_word(DI); \
	MOVQ R13, block_short(DI); \
	ADDQ $64, SI; \
	ADDQ $block__size, DI

// CHUNK classifies the 16 bytes at off(SI) and ORs their bits, shifted
// left by off, into R8 (quote), R9 (backslash), R10 (control), R11
// (non-ASCII), R12 (word) and R13 (short escape). Plan 9 operand order:
// PCMPGTB a, b sets b = b > a, signed, so bytes >= 0x80 (negative) are
// below every ASCII bound and are masked out with the non-ASCII bits.
#define CHUNK(off) \
	MOVOU    off(SI), X0; \
	MOVOU    X0, X1; \
	PCMPEQB  X8, X1; \
	PMOVMSKB X1, AX; \
	SHLQ     $off, AX; \
	ORQ      AX, R8; \
	MOVOU    X0, X2; \
	PCMPEQB  X9, X2; \
	PMOVMSKB X2, AX; \
	SHLQ     $off, AX; \
	ORQ      AX, R9; \
	POR      X2, X1; \
	MOVOU    X0, X2; \
	PCMPEQB  X14, X2; \
	POR      X2, X1; \
	MOVOU    X0, X2; \
	PCMPEQB  X15, X2; \
	POR      X2, X1; \
	MOVOU    X0, X2; \
	PCMPEQB  X5, X2; \
	POR      X2, X1; \
	MOVOU    X0, X2; \
	PCMPEQB  X6, X2; \
	POR      X2, X1; \
	PMOVMSKB X1, AX; \
	SHLQ     $off, AX; \
	ORQ      AX, R13; \
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
	WORDNON(off)

#define BROADCAST(c, x) \
	MOVQ   $c, AX; \
	MOVQ   AX, x; \
	PSHUFL $0, x, x

// func classifySSE2(src *byte, dst *block, n int)
TEXT ·classifySSE2(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ dst+8(FP), DI
	MOVQ n+16(FP), BX
	BROADCAST(0x2222222222222222, X8)  // '"'
	BROADCAST(0x5c5c5c5c5c5c5c5c, X9)  // '\\'
	BROADCAST(0x2020202020202020, X10) // controls are below; letters fold case with it
	BROADCAST(0x2121212121212121, X11) // '!': the space and below
	BROADCAST(0x6060606060606060, X12) // 'a'-1
	BROADCAST(0x7b7b7b7b7b7b7b7b, X13) // 'z'+1
	BROADCAST(0x6e6e6e6e6e6e6e6e, X14) // 'n'
	BROADCAST(0x7474747474747474, X15) // 't'
	BROADCAST(0x7272727272727272, X5)  // 'r'
	BROADCAST(0x2f2f2f2f2f2f2f2f, X6)  // '/'
loopSSE2:
	ZERO
	CHUNK(0)
	CHUNK(16)
	CHUNK(32)
	CHUNK(48)
	STORE
	DECQ BX
	JNZ  loopSSE2
	RET

// CHUNK32 is CHUNK for 32 bytes with AVX2's three-operand forms; Plan 9
// order again: VPCMPGTB a, b, c sets c = b > a.
#define CHUNK32(off) \
	VMOVDQU   off(SI), Y0; \
	VPCMPEQB  Y8, Y0, Y1; \
	VPMOVMSKB Y1, AX; \
	SHLQ      $off, AX; \
	ORQ       AX, R8; \
	VPCMPEQB  Y9, Y0, Y2; \
	VPMOVMSKB Y2, AX; \
	SHLQ      $off, AX; \
	ORQ       AX, R9; \
	VPOR      Y2, Y1, Y1; \
	VPCMPEQB  Y14, Y0, Y2; \
	VPOR      Y2, Y1, Y1; \
	VPCMPEQB  Y15, Y0, Y2; \
	VPOR      Y2, Y1, Y1; \
	VPCMPEQB  Y5, Y0, Y2; \
	VPOR      Y2, Y1, Y1; \
	VPCMPEQB  Y6, Y0, Y2; \
	VPOR      Y2, Y1, Y1; \
	VPMOVMSKB Y1, AX; \
	SHLQ      $off, AX; \
	ORQ       AX, R13; \
	VPMOVMSKB Y0, DX; \
	NOTQ      DX; \
	VPCMPGTB  Y0, Y10, Y1; \
	VPMOVMSKB Y1, AX; \
	ANDQ      DX, AX; \
	SHLQ      $off, AX; \
	ORQ       AX, R10; \
	VPCMPGTB  Y0, Y11, Y1; \
	VPMOVMSKB Y1, CX; \
	ANDQ      DX, CX; \
	VPOR      Y10, Y0, Y2; \
	VPCMPGTB  Y12, Y2, Y3; \
	VPCMPGTB  Y2, Y13, Y4; \
	VPAND     Y4, Y3, Y3; \
	VPMOVMSKB Y3, AX; \
	WORDNON(off)

#define BROADCAST32(c, x, y) \
	MOVQ         $c, AX; \
	MOVQ         AX, x; \
	VPBROADCASTB x, y

// func classifyAVX2(src *byte, dst *block, n int)
TEXT ·classifyAVX2(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ dst+8(FP), DI
	MOVQ n+16(FP), BX
	BROADCAST32(0x22, X8, Y8)   // '"'
	BROADCAST32(0x5c, X9, Y9)   // '\\'
	BROADCAST32(0x20, X10, Y10)
	BROADCAST32(0x21, X11, Y11)
	BROADCAST32(0x60, X12, Y12)
	BROADCAST32(0x7b, X13, Y13)
	BROADCAST32(0x6e, X14, Y14) // 'n'
	BROADCAST32(0x74, X15, Y15) // 't'
	BROADCAST32(0x72, X5, Y5)   // 'r'
	BROADCAST32(0x2f, X6, Y6)   // '/'
loopAVX2:
	ZERO
	CHUNK32(0)
	CHUNK32(32)
	STORE
	DECQ BX
	JNZ  loopAVX2
	VZEROUPPER
	RET
