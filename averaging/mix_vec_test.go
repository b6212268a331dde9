package averaging

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMixVecMatchesScalar: mix (the vector loop where there is one, the
// scalar loop for the tail) gives mixScalar's bits for every length
// around the vector width and weights at and between the ends.
func TestMixVecMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, a := range []float32{0.5, 1, 0.0371, 0.999, float32(r.Float64())} {
		for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 235146} {
			dst, src := make([]float32, n), make([]float32, n)
			for i := range n {
				dst[i] = float32(r.NormFloat64())
				src[i] = float32(r.NormFloat64() * 3)
			}
			want := append([]float32(nil), dst...)
			mix(dst, src, a)
			mixScalar(want, src, a)
			for i := range n {
				if math.Float32bits(dst[i]) != math.Float32bits(want[i]) {
					t.Fatalf("a=%v n=%d: value %d: %v, scalar loop %v", a, n, i, dst[i], want[i])
				}
			}
		}
	}
}

// BenchmarkMixScalar is BenchmarkMix's loop without the vector loop: the
// two side by side give the vector loop's gain.
func BenchmarkMixScalar(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	dst, src := randVec(r, benchN, 1), randVec(r, benchN, 1)
	b.SetBytes(3 * 4 * benchN)
	for b.Loop() {
		mixScalar(dst, src, 0.5)
	}
}
