//go:build !purego

package gossip

import "golang.org/x/sys/cpu"

// useF16C selects the F16C conversions (VCVTPS2PH, VCVTPH2PS), which every
// x86-64 CPU with AVX2 has; a variable so tests can run the portable path.
var useF16C = cpu.X86.HasF16C && cpu.X86.HasAVX

// encodeF16C converts src (a multiple of 8 values) to binary16 in dst with
// round-to-nearest-even and reports whether any result is ±Inf.
//
//go:noescape
func encodeF16C(dst []byte, src []float32) (inf bool)

// decodeF16C widens binary16 src into dst (a multiple of 8 values) and
// reports whether every value is finite.
//
//go:noescape
func decodeF16C(dst []float32, src []byte) (finite bool)
