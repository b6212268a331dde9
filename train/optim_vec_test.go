package train

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSGDUpdateVecMatchesScalar: Update (the vector loop where there is
// one, the scalar loop for the tail) gives the scalar loop's bits for
// every length around the vector width, with and without weight decay.
func TestSGDUpdateVecMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, o := range []SGD{{Momentum: 0.9}, {Momentum: 0.9, WeightDecay: 5e-4}, {Momentum: 0.37, WeightDecay: 0.1}} {
		for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 235146} {
			w, m, g := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range n {
				w[i] = float32(r.NormFloat64())
				m[i] = float32(r.NormFloat64() * 0.1)
				g[i] = float32(r.NormFloat64() * 0.01)
			}
			w2, m2 := append([]float32(nil), w...), append([]float32(nil), m...)
			for step := range 3 {
				lr := 0.1 / float64(step+1)
				o.Update(w, m, g, lr)
				sgdUpdateScalar(w2, m2, g, float32(o.Momentum), float32(o.WeightDecay), float32(lr))
			}
			for i := range n {
				if math.Float32bits(w[i]) != math.Float32bits(w2[i]) || math.Float32bits(m[i]) != math.Float32bits(m2[i]) {
					t.Fatalf("%+v, n=%d: value %d: w %v m %v, scalar loop w %v m %v", o, n, i, w[i], m[i], w2[i], m2[i])
				}
			}
		}
	}
}

// BenchmarkSGDUpdate times one optimizer step on the default model's
// 235,146 parameters: Update as built, and the scalar loop alone.
func BenchmarkSGDUpdate(b *testing.B) {
	n := 235146
	w, m, g := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range g {
		g[i] = float32(i%7) * 0.01
	}
	o := SGD{Momentum: 0.9}
	b.Run("update", func(b *testing.B) {
		b.SetBytes(int64(n * 4))
		for b.Loop() {
			o.Update(w, m, g, 0.1)
		}
	})
	b.Run("scalar", func(b *testing.B) {
		b.SetBytes(int64(n * 4))
		for b.Loop() {
			sgdUpdateScalar(w, m, g, 0.9, 0, 0.1)
		}
	})
}
