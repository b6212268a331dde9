//go:build amd64 && !purego

package averaging

import "testing"

// TestMixAVXUsed: on a CPU with AVX the vector loop runs (so
// TestMixVecMatchesScalar compares it with the scalar loop) and mixes.
func TestMixAVXUsed(t *testing.T) {
	if !useMixAVX {
		t.Skip("this CPU has no AVX: only the scalar loop runs")
	}
	dst, src := make([]float32, 8), []float32{2, 2, 2, 2, 2, 2, 2, 4}
	if n := mixVec(dst, src, 0.5); n != 8 || dst[0] != 1 || dst[7] != 2 {
		t.Fatalf("vector loop did %d values: %v", n, dst)
	}
}
