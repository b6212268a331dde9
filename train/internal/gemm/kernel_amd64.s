//go:build amd64 && !purego

#include "textflag.h"

// One step of p: two vectors of the B panel row against six broadcast values
// of the A panel row, into the 6×16 accumulators Y0-Y11.
#define STEP(aoff, boff) \
	VMOVUPS      boff(DI), Y12        \
	VMOVUPS      boff+32(DI), Y13     \
	VBROADCASTSS aoff(SI), Y14        \
	VFMADD231PS  Y12, Y14, Y0         \
	VFMADD231PS  Y13, Y14, Y1         \
	VBROADCASTSS aoff+4(SI), Y15      \
	VFMADD231PS  Y12, Y15, Y2         \
	VFMADD231PS  Y13, Y15, Y3         \
	VBROADCASTSS aoff+8(SI), Y14      \
	VFMADD231PS  Y12, Y14, Y4         \
	VFMADD231PS  Y13, Y14, Y5         \
	VBROADCASTSS aoff+12(SI), Y15     \
	VFMADD231PS  Y12, Y15, Y6         \
	VFMADD231PS  Y13, Y15, Y7         \
	VBROADCASTSS aoff+16(SI), Y14     \
	VFMADD231PS  Y12, Y14, Y8         \
	VFMADD231PS  Y13, Y14, Y9         \
	VBROADCASTSS aoff+20(SI), Y15     \
	VFMADD231PS  Y12, Y15, Y10        \
	VFMADD231PS  Y13, Y15, Y11

// C row = alpha*acc + beta*C row, with alpha in Y14 and beta in Y15.
#define UPDATE(lo, hi) \
	VMULPS      (DX), Y15, Y12    \
	VFMADD231PS lo, Y14, Y12      \
	VMOVUPS     Y12, (DX)         \
	VMULPS      32(DX), Y15, Y13  \
	VFMADD231PS hi, Y14, Y13      \
	VMOVUPS     Y13, 32(DX)       \
	ADDQ        R8, DX

// C row = alpha*acc, without reading C.
#define STORE(lo, hi) \
	VMULPS  lo, Y14, lo   \
	VMOVUPS lo, (DX)      \
	VMULPS  hi, Y14, hi   \
	VMOVUPS hi, 32(DX)    \
	ADDQ    R8, DX

// func kernelAVX2(kc int, a, b, c *float32, ldc int, alpha, beta float32)
TEXT ·kernelAVX2(SB), NOSPLIT, $0-48
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

	MOVQ CX, BX
	SHRQ $2, BX
	ANDQ $3, CX
	TESTQ BX, BX
	JZ   tail

loop4:
	STEP(0, 0)
	STEP(24, 64)
	STEP(48, 128)
	STEP(72, 192)
	ADDQ $96, SI
	ADDQ $256, DI
	DECQ BX
	JNZ  loop4

tail:
	TESTQ CX, CX
	JZ    update

loop1:
	STEP(0, 0)
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop1

update:
	VBROADCASTSS alpha+40(FP), Y14
	MOVL         beta+44(FP), AX
	SHLL         $1, AX            // drop the sign: -0 counts as 0
	JZ           store
	VBROADCASTSS beta+44(FP), Y15
	UPDATE(Y0, Y1)
	UPDATE(Y2, Y3)
	UPDATE(Y4, Y5)
	UPDATE(Y6, Y7)
	UPDATE(Y8, Y9)
	UPDATE(Y10, Y11)
	VZEROUPPER
	RET

store:
	STORE(Y0, Y1)
	STORE(Y2, Y3)
	STORE(Y4, Y5)
	STORE(Y6, Y7)
	STORE(Y8, Y9)
	STORE(Y10, Y11)
	VZEROUPPER
	RET
