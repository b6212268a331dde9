//go:build amd64 && !purego

#include "textflag.h"

// func pixAVX2(dst *float32, pix *uint8, n int)
// For each of n bytes (n a positive multiple of 8): zero-extend to int32
// (VPMOVZXBD), convert to float32 (exact below 2^24) and divide by 255.0
// (VDIVPS, correctly rounded, so the bits of float32(b) / PixScale; a
// multiply by the reciprocal would be off by an ulp for some bytes). The
// main loop does 32 bytes in four independent registers so the divisions
// overlap; a second loop does the last 8 to 24.
TEXT ·pixAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ pix+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL $0x437f0000, AX // 255.0 as float32
	VMOVD AX, X7
	VBROADCASTSS X7, Y7
	MOVQ CX, DX
	SHRQ $5, DX // blocks of 32
	JZ tail
loop32:
	VPMOVZXBD 0(SI), Y0
	VPMOVZXBD 8(SI), Y1
	VPMOVZXBD 16(SI), Y2
	VPMOVZXBD 24(SI), Y3
	VCVTDQ2PS Y0, Y0
	VCVTDQ2PS Y1, Y1
	VCVTDQ2PS Y2, Y2
	VCVTDQ2PS Y3, Y3
	VDIVPS Y7, Y0, Y0
	VDIVPS Y7, Y1, Y1
	VDIVPS Y7, Y2, Y2
	VDIVPS Y7, Y3, Y3
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $32, SI
	ADDQ $128, DI
	DECQ DX
	JNZ loop32
tail:
	ANDQ $31, CX
	SHRQ $3, CX // blocks of 8 left, 0 to 3
	JZ done
loop8:
	VPMOVZXBD (SI), Y0
	VCVTDQ2PS Y0, Y0
	VDIVPS Y7, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $8, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop8
done:
	VZEROUPPER
	RET
