//go:build amd64 && !purego

#include "textflag.h"

// func mixAVX(dst, src *float32, n int, a float32)
// For each of n values (n a positive multiple of 8), in float32 and in
// this order, as mixScalar: t = src - dst; t = a*t; dst = dst + t. No
// fused multiply-add: the same bits as Go's.
TEXT ·mixAVX(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS a+24(FP), Y5
	SHRQ $3, CX
loop:
	VMOVUPS (DI), Y0
	VMOVUPS (SI), Y1
	VSUBPS Y0, Y1, Y1
	VMULPS Y5, Y1, Y1
	VADDPS Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

// func subAVX(dst, a, b *float32, n int)
// dst = a - b for n values (n a positive multiple of 8), in float32; dst
// may be a or b.
TEXT ·subAVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
subloop:
	VMOVUPS (SI), Y0
	VSUBPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	DECQ CX
	JNZ subloop
	VZEROUPPER
	RET

// func addAVX(dst, src *float32, n int)
// dst += src for n values (n a positive multiple of 8), in float32. Two
// vectors a pass while 16 or more are left, then one.
TEXT ·addAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	CMPQ CX, $2
	JLT addone
addpair:
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
	JGE addpair
	TESTQ CX, CX
	JZ adddone
addone:
	VMOVUPS (DI), Y0
	VADDPS (SI), Y0, Y0
	VMOVUPS Y0, (DI)
adddone:
	VZEROUPPER
	RET
