//go:build amd64 && !purego

package train

import "testing"

// TestPixAVX2Used: on a CPU with AVX2 the vector loop runs (so
// TestScalePixMatchesGo compares it with the Go loop) and scales, leaving
// the tail to the Go loop.
func TestPixAVX2Used(t *testing.T) {
	if !usePixAVX2 {
		t.Skip("this CPU has no AVX2: only the Go loop runs")
	}
	pix := []uint8{0, 255, 51, 0, 0, 0, 0, 255, 255}
	dst := make([]float32, len(pix))
	if n := pixVec(dst, pix); n != 8 || dst[0] != 0 || dst[1] != 1 || dst[2] != 0.2 || dst[7] != 1 || dst[8] != 0 {
		t.Fatalf("vector loop did %d values: %v", n, dst)
	}
}
