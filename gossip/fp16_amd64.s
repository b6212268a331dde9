//go:build !purego

#include "textflag.h"

// func encodeF16C(dst []byte, src []float32) (inf bool)
// len(src) is a multiple of 8; dst holds 2*len(src) bytes.
TEXT ·encodeF16C(SB), NOSPLIT, $0-49
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	SHRQ $3, CX
	// X3: 0x7fff in every word (drops the sign); X4: 0x7c00 (±Inf);
	// X5 accumulates the lanes that came out as ±Inf.
	MOVL $0x7fff7fff, AX
	MOVQ AX, X3
	VPBROADCASTD X3, X3
	MOVL $0x7c007c00, AX
	MOVQ AX, X4
	VPBROADCASTD X4, X4
	VPXOR X5, X5, X5
loop:
	VMOVUPS (SI), Y0
	VCVTPS2PH $0, Y0, X1
	VMOVDQU X1, (DI)
	VPAND X3, X1, X2
	VPCMPEQW X4, X2, X2
	VPOR X2, X5, X5
	ADDQ $32, SI
	ADDQ $16, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	VPTEST X5, X5
	SETNE inf+48(FP)
	RET

// func decodeF16C(dst []float32, src []byte) (finite bool)
// len(dst) is a multiple of 8; src holds 2*len(dst) bytes. finite: no
// value has the all-ones exponent (±Inf, NaN).
TEXT ·decodeF16C(SB), NOSPLIT, $0-49
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
	SHRQ $3, CX
	// X4: 0x7c00 (the exponent) in every word; X5 accumulates the lanes
	// whose exponent is all ones.
	MOVL $0x7c007c00, AX
	MOVQ AX, X4
	VPBROADCASTD X4, X4
	VPXOR X5, X5, X5
loop:
	VMOVDQU (SI), X1
	VCVTPH2PS X1, Y0
	VMOVUPS Y0, (DI)
	VPAND X4, X1, X2
	VPCMPEQW X4, X2, X2
	VPOR X2, X5, X5
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	VPTEST X5, X5
	SETEQ finite+48(FP)
	RET
