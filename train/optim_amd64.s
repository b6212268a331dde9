//go:build amd64 && !purego

#include "textflag.h"

// func sgdUpdateAVX(w, mom, grad *float32, n int, mu, wd, eta float32)
// For each of n values (n a positive multiple of 8), in float32 and in
// this order, as the scalar loop: g = grad + wd*w; m = mu*mom + g;
// mom = m; w = w - eta*m. No fused multiply-add: the same bits as Go's.
TEXT ·sgdUpdateAVX(SB), NOSPLIT, $0-44
	MOVQ w+0(FP), DI
	MOVQ mom+8(FP), SI
	MOVQ grad+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS mu+32(FP), Y5
	VBROADCASTSS wd+36(FP), Y6
	VBROADCASTSS eta+40(FP), Y7
	SHRQ $3, CX
loop:
	VMOVUPS (DI), Y0
	VMULPS Y6, Y0, Y1
	VADDPS (DX), Y1, Y1
	VMULPS (SI), Y5, Y2
	VADDPS Y1, Y2, Y2
	VMOVUPS Y2, (SI)
	VMULPS Y7, Y2, Y3
	VSUBPS Y3, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET
