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

// func kernel6x16AVX2(kc int, a, b, c *float32, ldc int, alpha, beta float32)
TEXT ·kernel6x16AVX2(SB), NOSPLIT, $0-48
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

// One step of p for the 16×16 AVX-512 tile: one B panel row against the
// sixteen A values of the same p, each broadcast straight from memory.
#define STEP16(aoff, boff) \
	VMOVUPS          boff(DI), Z16       \
	VFMADD231PS.BCST aoff(SI), Z16, Z0   \
	VFMADD231PS.BCST aoff+4(SI), Z16, Z1   \
	VFMADD231PS.BCST aoff+8(SI), Z16, Z2   \
	VFMADD231PS.BCST aoff+12(SI), Z16, Z3  \
	VFMADD231PS.BCST aoff+16(SI), Z16, Z4  \
	VFMADD231PS.BCST aoff+20(SI), Z16, Z5  \
	VFMADD231PS.BCST aoff+24(SI), Z16, Z6  \
	VFMADD231PS.BCST aoff+28(SI), Z16, Z7  \
	VFMADD231PS.BCST aoff+32(SI), Z16, Z8  \
	VFMADD231PS.BCST aoff+36(SI), Z16, Z9  \
	VFMADD231PS.BCST aoff+40(SI), Z16, Z10 \
	VFMADD231PS.BCST aoff+44(SI), Z16, Z11 \
	VFMADD231PS.BCST aoff+48(SI), Z16, Z12 \
	VFMADD231PS.BCST aoff+52(SI), Z16, Z13 \
	VFMADD231PS.BCST aoff+56(SI), Z16, Z14 \
	VFMADD231PS.BCST aoff+60(SI), Z16, Z15

// C row = alpha*acc + beta*C row, with alpha in Z17 and beta in Z18.
#define UPDATE16(acc) \
	VMULPS      (DX), Z18, Z19 \
	VFMADD231PS acc, Z17, Z19  \
	VMOVUPS     Z19, (DX)      \
	ADDQ        R8, DX

#define STORE16(acc) \
	VMULPS  acc, Z17, acc \
	VMOVUPS acc, (DX)     \
	ADDQ    R8, DX

// func kernel16x16AVX512(kc int, a, b, c *float32, ldc int, alpha, beta float32)
TEXT ·kernel16x16AVX512(SB), NOSPLIT, $0-48
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15

	MOVQ  CX, BX
	SHRQ  $2, BX
	ANDQ  $3, CX
	TESTQ BX, BX
	JZ    tail16

loop16x4:
	STEP16(0, 0)
	STEP16(64, 64)
	STEP16(128, 128)
	STEP16(192, 192)
	ADDQ $256, SI
	ADDQ $256, DI
	DECQ BX
	JNZ  loop16x4

tail16:
	TESTQ CX, CX
	JZ    update16

loop16x1:
	STEP16(0, 0)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop16x1

update16:
	VBROADCASTSS alpha+40(FP), Z17
	MOVL         beta+44(FP), AX
	SHLL         $1, AX            // drop the sign: -0 counts as 0
	JZ           store16
	VBROADCASTSS beta+44(FP), Z18
	UPDATE16(Z0)
	UPDATE16(Z1)
	UPDATE16(Z2)
	UPDATE16(Z3)
	UPDATE16(Z4)
	UPDATE16(Z5)
	UPDATE16(Z6)
	UPDATE16(Z7)
	UPDATE16(Z8)
	UPDATE16(Z9)
	UPDATE16(Z10)
	UPDATE16(Z11)
	UPDATE16(Z12)
	UPDATE16(Z13)
	UPDATE16(Z14)
	UPDATE16(Z15)
	VZEROUPPER
	RET

store16:
	STORE16(Z0)
	STORE16(Z1)
	STORE16(Z2)
	STORE16(Z3)
	STORE16(Z4)
	STORE16(Z5)
	STORE16(Z6)
	STORE16(Z7)
	STORE16(Z8)
	STORE16(Z9)
	STORE16(Z10)
	STORE16(Z11)
	STORE16(Z12)
	STORE16(Z13)
	STORE16(Z14)
	STORE16(Z15)
	VZEROUPPER
	RET

// func transpose16AVX512(kc int, src *float32, idx *int32, dst *float32)
//
// dst[p*16+j] = src[idx[j]+p] for p < kc, j < 16: sixteen strided rows
// become kc packed rows of sixteen.
TEXT ·transpose16AVX512(SB), NOSPLIT, $0-32
	MOVQ    kc+0(FP), CX
	MOVQ    src+8(FP), SI
	MOVQ    idx+16(FP), AX
	MOVQ    dst+24(FP), DI
	VMOVDQU32 (AX), Z1

loopT16:
	KXNORW     K1, K1, K1
	VGATHERDPS (SI)(Z1*4), K1, Z0
	VMOVUPS    Z0, (DI)
	ADDQ       $4, SI
	ADDQ       $64, DI
	DECQ       CX
	JNZ        loopT16
	VZEROUPPER
	RET

// func transpose16AVX2(kc int, src *float32, idx *int32, dst *float32)
//
// transpose16AVX512 with two eight-lane gathers per packed row.
TEXT ·transpose16AVX2(SB), NOSPLIT, $0-32
	MOVQ    kc+0(FP), CX
	MOVQ    src+8(FP), SI
	MOVQ    idx+16(FP), AX
	MOVQ    dst+24(FP), DI
	VMOVDQU (AX), Y2
	VMOVDQU 32(AX), Y3
	VPCMPEQD Y4, Y4, Y4

loopT8:
	VMOVDQA    Y4, Y5
	VGATHERDPS Y5, (SI)(Y2*4), Y0
	VMOVDQA    Y4, Y6
	VGATHERDPS Y6, (SI)(Y3*4), Y1
	VMOVUPS    Y0, (DI)
	VMOVUPS    Y1, 32(DI)
	ADDQ       $4, SI
	ADDQ       $64, DI
	DECQ       CX
	JNZ        loopT8
	VZEROUPPER
	RET

// func copy16AVX2(kc int, src *float32, ld int, dst *float32)
//
// dst[p*16+j] = src[p*ld+j] for p < kc, j < 16: sixteen-float runs of kc
// strided rows, packed back to back.
TEXT ·copy16AVX2(SB), NOSPLIT, $0-32
	MOVQ kc+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	MOVQ dst+24(FP), DI
	SHLQ $2, R8

loopC16:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    R8, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     loopC16
	VZEROUPPER
	RET

// func transposeBlocksAVX512(blocks int, src *float32, ld int, dst *float32)
//
// transpose16AVX512 for kc = 16*blocks, in registers: each block loads
// sixteen floats from each of the sixteen rows, transposes the 16×16 square
// in four rounds of shuffles and stores sixteen packed rows. It moves about
// twice as many floats per cycle as the gather.
TEXT ·transposeBlocksAVX512(SB), NOSPLIT, $0-32
	MOVQ blocks+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	MOVQ dst+24(FP), DI
	SHLQ $2, R8

loopTB:
	MOVQ SI, AX
	VMOVUPS (AX), Z0
	ADDQ    R8, AX
	VMOVUPS (AX), Z1
	ADDQ    R8, AX
	VMOVUPS (AX), Z2
	ADDQ    R8, AX
	VMOVUPS (AX), Z3
	ADDQ    R8, AX
	VMOVUPS (AX), Z4
	ADDQ    R8, AX
	VMOVUPS (AX), Z5
	ADDQ    R8, AX
	VMOVUPS (AX), Z6
	ADDQ    R8, AX
	VMOVUPS (AX), Z7
	ADDQ    R8, AX
	VMOVUPS (AX), Z8
	ADDQ    R8, AX
	VMOVUPS (AX), Z9
	ADDQ    R8, AX
	VMOVUPS (AX), Z10
	ADDQ    R8, AX
	VMOVUPS (AX), Z11
	ADDQ    R8, AX
	VMOVUPS (AX), Z12
	ADDQ    R8, AX
	VMOVUPS (AX), Z13
	ADDQ    R8, AX
	VMOVUPS (AX), Z14
	ADDQ    R8, AX
	VMOVUPS (AX), Z15

	// Pairs of rows: interleave single floats.
	VUNPCKLPS Z1, Z0, Z16
	VUNPCKHPS Z1, Z0, Z17
	VUNPCKLPS Z3, Z2, Z18
	VUNPCKHPS Z3, Z2, Z19
	VUNPCKLPS Z5, Z4, Z20
	VUNPCKHPS Z5, Z4, Z21
	VUNPCKLPS Z7, Z6, Z22
	VUNPCKHPS Z7, Z6, Z23
	VUNPCKLPS Z9, Z8, Z24
	VUNPCKHPS Z9, Z8, Z25
	VUNPCKLPS Z11, Z10, Z26
	VUNPCKHPS Z11, Z10, Z27
	VUNPCKLPS Z13, Z12, Z28
	VUNPCKHPS Z13, Z12, Z29
	VUNPCKLPS Z15, Z14, Z30
	VUNPCKHPS Z15, Z14, Z31
	// Pairs of pairs: interleave float pairs.
	VUNPCKLPD Z18, Z16, Z0
	VUNPCKHPD Z18, Z16, Z1
	VUNPCKLPD Z19, Z17, Z2
	VUNPCKHPD Z19, Z17, Z3
	VUNPCKLPD Z22, Z20, Z4
	VUNPCKHPD Z22, Z20, Z5
	VUNPCKLPD Z23, Z21, Z6
	VUNPCKHPD Z23, Z21, Z7
	VUNPCKLPD Z26, Z24, Z8
	VUNPCKHPD Z26, Z24, Z9
	VUNPCKLPD Z27, Z25, Z10
	VUNPCKHPD Z27, Z25, Z11
	VUNPCKLPD Z30, Z28, Z12
	VUNPCKHPD Z30, Z28, Z13
	VUNPCKLPD Z31, Z29, Z14
	VUNPCKHPD Z31, Z29, Z15
	// Then 128-bit lanes, twice.
	VSHUFF32X4 $0x88, Z4, Z0, Z16
	VSHUFF32X4 $0x88, Z5, Z1, Z17
	VSHUFF32X4 $0x88, Z6, Z2, Z18
	VSHUFF32X4 $0x88, Z7, Z3, Z19
	VSHUFF32X4 $0xdd, Z4, Z0, Z20
	VSHUFF32X4 $0xdd, Z5, Z1, Z21
	VSHUFF32X4 $0xdd, Z6, Z2, Z22
	VSHUFF32X4 $0xdd, Z7, Z3, Z23
	VSHUFF32X4 $0x88, Z12, Z8, Z24
	VSHUFF32X4 $0x88, Z13, Z9, Z25
	VSHUFF32X4 $0x88, Z14, Z10, Z26
	VSHUFF32X4 $0x88, Z15, Z11, Z27
	VSHUFF32X4 $0xdd, Z12, Z8, Z28
	VSHUFF32X4 $0xdd, Z13, Z9, Z29
	VSHUFF32X4 $0xdd, Z14, Z10, Z30
	VSHUFF32X4 $0xdd, Z15, Z11, Z31
	VSHUFF32X4 $0x88, Z24, Z16, Z0
	VSHUFF32X4 $0x88, Z25, Z17, Z1
	VSHUFF32X4 $0x88, Z26, Z18, Z2
	VSHUFF32X4 $0x88, Z27, Z19, Z3
	VSHUFF32X4 $0x88, Z28, Z20, Z4
	VSHUFF32X4 $0x88, Z29, Z21, Z5
	VSHUFF32X4 $0x88, Z30, Z22, Z6
	VSHUFF32X4 $0x88, Z31, Z23, Z7
	VSHUFF32X4 $0xdd, Z24, Z16, Z8
	VSHUFF32X4 $0xdd, Z25, Z17, Z9
	VSHUFF32X4 $0xdd, Z26, Z18, Z10
	VSHUFF32X4 $0xdd, Z27, Z19, Z11
	VSHUFF32X4 $0xdd, Z28, Z20, Z12
	VSHUFF32X4 $0xdd, Z29, Z21, Z13
	VSHUFF32X4 $0xdd, Z30, Z22, Z14
	VSHUFF32X4 $0xdd, Z31, Z23, Z15

	VMOVUPS Z0, 0(DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VMOVUPS Z4, 256(DI)
	VMOVUPS Z5, 320(DI)
	VMOVUPS Z6, 384(DI)
	VMOVUPS Z7, 448(DI)
	VMOVUPS Z8, 512(DI)
	VMOVUPS Z9, 576(DI)
	VMOVUPS Z10, 640(DI)
	VMOVUPS Z11, 704(DI)
	VMOVUPS Z12, 768(DI)
	VMOVUPS Z13, 832(DI)
	VMOVUPS Z14, 896(DI)
	VMOVUPS Z15, 960(DI)
	ADDQ    $64, SI
	ADDQ    $1024, DI
	DECQ    CX
	JNZ     loopTB
	VZEROUPPER
	RET

// func transposeBlocksAVX2(blocks int, src *float32, ld int, dst *float32)
//
// transpose16AVX2 for kc = 8*blocks, in registers: each block transposes two
// 8×8 squares (rows 0-7, then rows 8-15, eight floats each) with three rounds
// of shuffles. Gathers are slow on many AVX2 CPUs; shuffles are not.
TEXT ·transposeBlocksAVX2(SB), NOSPLIT, $0-32
	MOVQ blocks+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	MOVQ dst+24(FP), DI
	SHLQ $2, R8

loopTB8:
	MOVQ SI, AX
	VMOVUPS (AX), Y0
	ADDQ    R8, AX
	VMOVUPS (AX), Y1
	ADDQ    R8, AX
	VMOVUPS (AX), Y2
	ADDQ    R8, AX
	VMOVUPS (AX), Y3
	ADDQ    R8, AX
	VMOVUPS (AX), Y4
	ADDQ    R8, AX
	VMOVUPS (AX), Y5
	ADDQ    R8, AX
	VMOVUPS (AX), Y6
	ADDQ    R8, AX
	VMOVUPS (AX), Y7
	ADDQ    R8, AX
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xee, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xee, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xee, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xee, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	VMOVUPS Y8, 0(DI)
	VMOVUPS Y9, 64(DI)
	VMOVUPS Y10, 128(DI)
	VMOVUPS Y11, 192(DI)
	VMOVUPS Y12, 256(DI)
	VMOVUPS Y13, 320(DI)
	VMOVUPS Y14, 384(DI)
	VMOVUPS Y15, 448(DI)
	VMOVUPS (AX), Y0
	ADDQ    R8, AX
	VMOVUPS (AX), Y1
	ADDQ    R8, AX
	VMOVUPS (AX), Y2
	ADDQ    R8, AX
	VMOVUPS (AX), Y3
	ADDQ    R8, AX
	VMOVUPS (AX), Y4
	ADDQ    R8, AX
	VMOVUPS (AX), Y5
	ADDQ    R8, AX
	VMOVUPS (AX), Y6
	ADDQ    R8, AX
	VMOVUPS (AX), Y7
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xee, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xee, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xee, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xee, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	VMOVUPS Y8, 32(DI)
	VMOVUPS Y9, 96(DI)
	VMOVUPS Y10, 160(DI)
	VMOVUPS Y11, 224(DI)
	VMOVUPS Y12, 288(DI)
	VMOVUPS Y13, 352(DI)
	VMOVUPS Y14, 416(DI)
	VMOVUPS Y15, 480(DI)
	ADDQ    $32, SI
	ADDQ    $512, DI
	DECQ    CX
	JNZ     loopTB8
	VZEROUPPER
	RET
