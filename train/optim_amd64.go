//go:build amd64 && !purego

package train

import "golang.org/x/sys/cpu"

// useSGDAVX: the CPU has AVX, so Update runs the AVX loop.
var useSGDAVX = cpu.X86.HasAVX

// sgdUpdateVec updates the longest prefix of a multiple of 8 values with
// the AVX loop, if in use, and returns its length.
func sgdUpdateVec(w, mom, grad []float32, mu, wd, eta float32) int {
	n := len(grad) &^ 7
	if !useSGDAVX || n == 0 {
		return 0
	}
	// The assembly trusts its pointers.
	_, _ = w[n-1], mom[n-1]
	sgdUpdateAVX(&w[0], &mom[0], &grad[0], n, mu, wd, eta)
	return n
}

// sgdUpdateAVX is sgdUpdateScalar on n values, n a positive multiple of 8.
//
//go:noescape
func sgdUpdateAVX(w, mom, grad *float32, n int, mu, wd, eta float32)
