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

// func diffSqAVX(s *[16]float64, a, b *float32, n int)
// s[i%16] += (a[i]-b[i])^2 for n values (n a positive multiple of 16), as
// sumSq's Go loop: each float32 widened to float64, subtracted, squared
// and added, no fused multiply-add. Y0-Y3 hold lanes 0-3, 4-7, 8-11 and
// 12-15.
TEXT ·diffSqAVX(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	VMOVUPD 0(DI), Y0
	VMOVUPD 32(DI), Y1
	VMOVUPD 64(DI), Y2
	VMOVUPD 96(DI), Y3
	SHRQ $4, CX
diffloop:
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 0(DX), Y8
	VCVTPS2PD 16(SI), Y5
	VCVTPS2PD 16(DX), Y9
	VCVTPS2PD 32(SI), Y6
	VCVTPS2PD 32(DX), Y10
	VCVTPS2PD 48(SI), Y7
	VCVTPS2PD 48(DX), Y11
	VSUBPD Y8, Y4, Y4
	VSUBPD Y9, Y5, Y5
	VSUBPD Y10, Y6, Y6
	VSUBPD Y11, Y7, Y7
	VMULPD Y4, Y4, Y4
	VMULPD Y5, Y5, Y5
	VMULPD Y6, Y6, Y6
	VMULPD Y7, Y7, Y7
	VADDPD Y4, Y0, Y0
	VADDPD Y5, Y1, Y1
	VADDPD Y6, Y2, Y2
	VADDPD Y7, Y3, Y3
	ADDQ $64, SI
	ADDQ $64, DX
	DECQ CX
	JNZ diffloop
	VMOVUPD Y0, 0(DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	VZEROUPPER
	RET

// func sqAVX(s *[16]float64, a *float32, n int)
// s[i%16] += a[i]^2 for n values (n a positive multiple of 16), as
// sumSq's Go loop with b nil.
TEXT ·sqAVX(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVUPD 0(DI), Y0
	VMOVUPD 32(DI), Y1
	VMOVUPD 64(DI), Y2
	VMOVUPD 96(DI), Y3
	SHRQ $4, CX
sqloop:
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 16(SI), Y5
	VCVTPS2PD 32(SI), Y6
	VCVTPS2PD 48(SI), Y7
	VMULPD Y4, Y4, Y4
	VMULPD Y5, Y5, Y5
	VMULPD Y6, Y6, Y6
	VMULPD Y7, Y7, Y7
	VADDPD Y4, Y0, Y0
	VADDPD Y5, Y1, Y1
	VADDPD Y6, Y2, Y2
	VADDPD Y7, Y3, Y3
	ADDQ $64, SI
	DECQ CX
	JNZ sqloop
	VMOVUPD Y0, 0(DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	VZEROUPPER
	RET
