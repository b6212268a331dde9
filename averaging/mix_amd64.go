//go:build amd64 && !purego

package averaging

import "golang.org/x/sys/cpu"

// useMixAVX: the CPU has AVX, so mix runs the AVX loop.
var useMixAVX = cpu.X86.HasAVX

// mixVec mixes the longest prefix of a multiple of 8 values with the AVX
// loop, if in use, and returns its length. len(src) >= len(dst).
func mixVec(dst, src []float32, a float32) int {
	n := len(dst) &^ 7
	if !useMixAVX || n == 0 {
		return 0
	}
	_ = src[n-1] // the assembly trusts its pointers
	mixAVX(&dst[0], &src[0], n, a)
	return n
}

// mixAVX sets dst[i] += a*(src[i]-dst[i]) for n values, n a positive
// multiple of 8.
//
//go:noescape
func mixAVX(dst, src *float32, n int, a float32)

// subVec sets dst = a - b on the longest prefix of a multiple of 8 values
// with the AVX loop, if in use, and returns its length. len(a) and len(b)
// >= len(dst).
func subVec(dst, a, b []float32) int {
	n := len(dst) &^ 7
	if !useMixAVX || n == 0 {
		return 0
	}
	_, _ = a[n-1], b[n-1] // the assembly trusts its pointers
	subAVX(&dst[0], &a[0], &b[0], n)
	return n
}

// subAVX sets dst[i] = a[i] - b[i] for n values, n a positive multiple of
// 8; dst may be a or b.
//
//go:noescape
func subAVX(dst, a, b *float32, n int)

// addVec adds src into dst on the longest prefix of a multiple of 8 values
// with the AVX loop, if in use, and returns its length. len(src) >=
// len(dst).
func addVec(dst, src []float32) int {
	n := len(dst) &^ 7
	if !useMixAVX || n == 0 {
		return 0
	}
	_ = src[n-1] // the assembly trusts its pointers
	addAVX(&dst[0], &src[0], n)
	return n
}

// addAVX sets dst[i] += src[i] for n values, n a positive multiple of 8.
//
//go:noescape
func addAVX(dst, src *float32, n int)

// sumSqVec accumulates (a[i]-b[i])^2, or a[i]^2 when b is nil, into
// s[i%16] in float64 for the longest prefix of a multiple of 16 values
// with the AVX loop, if in use, and returns its length. len(b) >= len(a)
// when b is not nil.
func sumSqVec(s *[sumLanes]float64, a, b []float32) int {
	n := len(a) &^ (sumLanes - 1)
	if !useMixAVX || n == 0 {
		return 0
	}
	if b == nil {
		sqAVX(s, &a[0], n)
		return n
	}
	_ = b[n-1] // the assembly trusts its pointers
	diffSqAVX(s, &a[0], &b[0], n)
	return n
}

// sqAVX adds a[i]^2 into s[i%16] for n values, n a positive multiple of
// 16, in float64.
//
//go:noescape
func sqAVX(s *[sumLanes]float64, a *float32, n int)

// diffSqAVX adds (a[i]-b[i])^2 into s[i%16] for n values, n a positive
// multiple of 16, in float64.
//
//go:noescape
func diffSqAVX(s *[sumLanes]float64, a, b *float32, n int)
