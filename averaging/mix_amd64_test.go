//go:build amd64 && !purego

package averaging

import (
	"math"
	"math/rand/v2"
	"testing"
)

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

// TestSumSqAVXUsed: on a CPU with AVX the vector loop runs (so
// TestSumSqVecMatchesGo compares it with the Go loop) and fills the lanes
// element i goes to.
func TestSumSqAVXUsed(t *testing.T) {
	if !useMixAVX {
		t.Skip("this CPU has no AVX: only the Go loop runs")
	}
	a, b := make([]float32, 17), make([]float32, 17)
	for i := range a {
		a[i], b[i] = float32(i), 1
	}
	var s, sq [sumLanes]float64
	if n := sumSqVec(&s, a, b); n != 16 {
		t.Fatalf("vector loop did %d values", n)
	}
	if n := sumSqVec(&sq, a, nil); n != 16 {
		t.Fatalf("vector loop did %d values of a square", n)
	}
	for i := range sumLanes {
		if d := float64(i - 1); s[i] != d*d || sq[i] != float64(i*i) {
			t.Fatalf("lane %d: %v and %v, want %v and %v", i, s[i], sq[i], d*d, i*i)
		}
	}
}

// TestSumSqVecMatchesGo: sumSq gives the same bits with the vector loop as
// with the Go loop alone, for every length around the block of 16, on
// slices that start anywhere, with and without b.
func TestSumSqVecMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	vec := useMixAVX
	t.Cleanup(func() { useMixAVX = vec })
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 235146} {
		for _, off := range []int{0, 1, 3} {
			a, b := sumSqInputs(r, n, off)
			for _, bb := range [][]float32{b, nil} {
				useMixAVX = vec
				got := sumSq(a, bb)
				useMixAVX = false
				want := sumSq(a, bb)
				if math.Float64bits(got) != math.Float64bits(want) {
					t.Fatalf("n=%d off=%d b nil %v: %v, Go loop %v", n, off, bb == nil, got, want)
				}
			}
		}
	}
}

// BenchmarkSumSq is the distance between two default-size models (235,146
// values) with the vector loop where there is one ("vec") and with the Go
// loop alone ("go").
func BenchmarkSumSq(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	x, y := randVec(r, 235146, 1), randVec(r, 235146, 1)
	vec := useMixAVX
	b.Cleanup(func() { useMixAVX = vec })
	for _, c := range []struct {
		name string
		on   bool
	}{{"vec", vec}, {"go", false}} {
		b.Run(c.name, func(b *testing.B) {
			useMixAVX = c.on
			b.SetBytes(2 * 4 * int64(len(x)))
			for b.Loop() {
				sumSq(x, y)
			}
		})
	}
}
