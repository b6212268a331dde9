//go:build amd64 && !purego

package gemm

import "golang.org/x/sys/cpu"

const (
	levelAVX2 = iota + 1
	levelAVX512
)

var kernels = [...]microKernel{
	levelGeneric: {genericMR, genericNR, kernelGeneric},
	levelAVX2:    {6, 16, avx2Kernel},
	levelAVX512:  {16, 16, avx512Kernel},
}

func detectLevel() int {
	switch {
	case cpu.X86.HasAVX512F:
		return levelAVX512
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return levelAVX2
	}
	return levelGeneric
}

// The assembly trusts its pointers; the index checks in these wrappers keep
// a driver bug a Go panic instead of a stray write.

func avx2Kernel(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	_ = a[kc*6-1]
	_ = b[kc*16-1]
	_ = c[5*ldc+15]
	kernel6x16AVX2(kc, &a[0], &b[0], &c[0], ldc, alpha, beta)
}

func avx512Kernel(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	_ = a[kc*16-1]
	_ = b[kc*16-1]
	_ = c[15*ldc+15]
	kernel16x16AVX512(kc, &a[0], &b[0], &c[0], ldc, alpha, beta)
}

// transpose16 sets dst[p*16+j] = src[j*ld+p] for p < kc, j < 16, and
// reports false when it cannot: no assembly kernel in use, or offsets too
// large for the gather's 32-bit indices. Whole squares are transposed in
// registers; the last kc mod 8 (or 16) rows are gathered.
func transpose16(src []float32, ld, kc int, dst []float32) bool {
	if level == levelGeneric || ld > (1<<31-1)/16 {
		return false
	}
	_ = src[15*ld+kc-1]
	_ = dst[kc*16-1]
	square := 8
	if level == levelAVX512 {
		square = 16
	}
	blocks := kc / square
	if blocks > 0 {
		if square == 16 {
			transposeBlocksAVX512(blocks, &src[0], ld, &dst[0])
		} else {
			transposeBlocksAVX2(blocks, &src[0], ld, &dst[0])
		}
	}
	done := blocks * square
	if done == kc {
		return true
	}
	var idx [16]int32
	for j := range idx {
		idx[j] = int32(j * ld)
	}
	if square == 16 {
		transpose16AVX512(kc-done, &src[done], &idx[0], &dst[done*16])
	} else {
		transpose16AVX2(kc-done, &src[done], &idx[0], &dst[done*16])
	}
	return true
}

// copy16 sets dst[p*16+j] = src[p*ld+j] for p < kc, j < 16, and reports
// false when no assembly kernel is in use. A 64-byte array copy in Go goes
// through memmove, which costs more than the copy itself here.
func copy16(src []float32, ld, kc int, dst []float32) bool {
	if level == levelGeneric {
		return false
	}
	_ = src[(kc-1)*ld+15]
	_ = dst[kc*16-1]
	copy16AVX2(kc, &src[0], ld, &dst[0])
	return true
}

//go:noescape
func kernel6x16AVX2(kc int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func kernel16x16AVX512(kc int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func transposeBlocksAVX2(blocks int, src *float32, ld int, dst *float32)

//go:noescape
func transposeBlocksAVX512(blocks int, src *float32, ld int, dst *float32)

//go:noescape
func transpose16AVX2(kc int, src *float32, idx *int32, dst *float32)

//go:noescape
func transpose16AVX512(kc int, src *float32, idx *int32, dst *float32)

//go:noescape
func copy16AVX2(kc int, src *float32, ld int, dst *float32)
