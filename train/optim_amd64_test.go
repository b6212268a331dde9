//go:build amd64 && !purego

package train

import "testing"

// TestSGDUpdateAVXUsed: on a CPU with AVX the vector loop runs (so
// TestSGDUpdateVecMatchesScalar compares it with the scalar loop) and
// computes the update.
func TestSGDUpdateAVXUsed(t *testing.T) {
	if !useSGDAVX {
		t.Skip("this CPU has no AVX: only the scalar loop runs")
	}
	w, m, g := make([]float32, 8), make([]float32, 8), []float32{1, 1, 1, 1, 1, 1, 1, 1}
	if n := sgdUpdateVec(w, m, g, 0.9, 0, 0.5); n != 8 || w[7] != -0.5 || m[0] != 1 {
		t.Fatalf("vector loop did %d values: w %v m %v", n, w, m)
	}
}
