package averaging

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAddMatchesScalar: Add (the vector loop where there is one, the
// scalar loop for the tail) gives Go's float32 sums bit for bit, at every length and alignment (the tails and odd starts the
// all-reduce's segments have), on normal, subnormal, signed zero and
// infinite values, and leaves what lies past dst alone.
func TestAddMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	special := []float32{0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		1e-40, -3e-39, math.MaxFloat32, -math.MaxFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), 1, -1}
	val := func() float32 {
		if rng.IntN(4) == 0 {
			return special[rng.IntN(len(special))]
		}
		return float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(9)-4)))
	}
	for n := 0; n <= 70; n++ {
		for start := range 3 {
			dst := make([]float32, start+n+1)
			src := make([]float32, start+n+1)
			for i := range dst {
				dst[i], src[i] = val(), val()
			}
			want := append([]float32(nil), dst...)
			addScalar(want[start:start+n], src[start:start+n])
			got := append([]float32(nil), dst...)
			Add(got[start:start+n], src[start:start+n])
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n %d, start %d, index %d: %v + %v = %v, Go says %v", n, start, i, dst[i], src[i], got[i], want[i])
				}
			}
		}
	}
	// Both sides of an overflow: the largest finite values sum to +Inf.
	a, b := []float32{math.MaxFloat32, 1, 2, 3, 4, 5, 6, 7}, []float32{math.MaxFloat32, 1, 1, 1, 1, 1, 1, 1}
	Add(a, b)
	if !math.IsInf(float64(a[0]), 1) || a[7] != 8 {
		t.Errorf("overflow: got %v", a)
	}
}

// BenchmarkAdd: one member's share of a default model's scatter (a
// quarter of 235,146 values) added in.
func BenchmarkAdd(b *testing.B) {
	const n = 235146 / 4
	dst, src := make([]float32, n), make([]float32, n)
	for i := range src {
		src[i] = float32(i) * 1e-6
	}
	for _, impl := range []struct {
		name string
		f    func(dst, src []float32)
	}{{"vector", Add}, {"scalar", addScalar}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				impl.f(dst, src)
			}
		})
	}
}
