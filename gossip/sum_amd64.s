//go:build !purego

#include "textflag.h"

// func addAVX(dst, src *float32, n int)
// n is a positive multiple of 8. Two vectors a pass while 16 or more are
// left, then one.
TEXT ·addAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	CMPQ CX, $2
	JLT one
pair:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VADDPS (SI), Y0, Y0
	VADDPS 32(SI), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, DI
	ADDQ $64, SI
	SUBQ $2, CX
	CMPQ CX, $2
	JGE pair
	TESTQ CX, CX
	JZ done
one:
	VMOVUPS (DI), Y0
	VADDPS (SI), Y0, Y0
	VMOVUPS Y0, (DI)
done:
	VZEROUPPER
	RET
