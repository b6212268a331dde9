//go:build !purego

package gossip

import "golang.org/x/sys/cpu"

// useAddAVX selects the AVX summation; a variable so tests can run the
// portable path.
var useAddAVX = cpu.X86.HasAVX

// addAVX sets dst[i] += src[i] for n values, n a positive multiple of 8.
//
//go:noescape
func addAVX(dst, src *float32, n int)
