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

// TestAddAVXUsed: on a CPU with AVX the vector loop runs (so
// TestAddMatchesScalar compares it with the scalar loop) and adds.
func TestAddAVXUsed(t *testing.T) {
	if !useMixAVX {
		t.Skip("this CPU has no AVX: only the scalar loop runs")
	}
	dst, src := []float32{1, 1, 1, 1, 1, 1, 1, 1, 1}, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if n := addVec(dst, src); n != 8 || dst[0] != 2 || dst[7] != 9 || dst[8] != 1 {
		t.Fatalf("vector loop did %d values: %v", n, dst)
	}
}
