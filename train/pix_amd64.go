//go:build amd64 && !purego

package train

import "golang.org/x/sys/cpu"

// usePixAVX2: the CPU has AVX2 (for VPMOVZXBD on 256-bit registers), so
// scalePix runs the AVX2 loop.
var usePixAVX2 = cpu.X86.HasAVX2

// pixVec scales the longest prefix of a multiple of 8 bytes of pix into dst
// with the AVX2 loop, if in use, and returns its length. len(dst) >=
// len(pix).
func pixVec(dst []float32, pix []uint8) int {
	n := len(pix) &^ 7
	if !usePixAVX2 || n == 0 {
		return 0
	}
	_ = dst[n-1] // the assembly trusts its pointers
	pixAVX2(&dst[0], &pix[0], n)
	return n
}

// pixAVX2 sets dst[i] = float32(pix[i]) / PixScale for n values, n a
// positive multiple of 8. It divides rather than multiplying by a
// reciprocal: a division is correctly rounded, so it gives pixFloat's bits.
//
//go:noescape
func pixAVX2(dst *float32, pix *uint8, n int)
