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

// TestSubMatchesScalar: Sub (the vector loop where there is one, the
// scalar loop for the tail) gives subScalar's bits for every length around
// the vector width, into a third slice and in place over either operand,
// on normal, subnormal, signed zero and infinite values.
func TestSubMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -3e-39, math.MaxFloat32, -math.MaxFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1))}
	val := func() float32 {
		if r.IntN(5) == 0 {
			return special[r.IntN(len(special))]
		}
		return float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(7)-3)))
	}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 235146} {
		a, b := make([]float32, n), make([]float32, n)
		for i := range n {
			a[i], b[i] = val(), val()
		}
		want := make([]float32, n)
		subScalar(want, a, b)
		check := func(how string, got []float32) {
			t.Helper()
			for i := range n {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s, n=%d: value %d: %v - %v = %v, scalar loop %v", how, n, i, a[i], b[i], got[i], want[i])
				}
			}
		}
		dst := make([]float32, n)
		Sub(dst, a, b)
		check("into dst", dst)
		ca := append([]float32(nil), a...)
		Sub(ca, ca, b)
		check("over a", ca)
		cb := append([]float32(nil), b...)
		Sub(cb, a, cb)
		check("over b", cb)
	}
}

// BenchmarkSub against its scalar loop, on the default model's length.
func BenchmarkSub(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const n = 235146 // the default model
	x, y, dst := randVec(r, n, 1), randVec(r, n, 1), make([]float32, n)
	for _, impl := range []struct {
		name string
		f    func(dst, a, b []float32)
	}{{"vector", Sub}, {"scalar", subScalar}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(3 * 4 * n)
			for b.Loop() {
				impl.f(dst, x, y)
			}
		})
	}
}

// TestSumSqIsTheSumOfSquares: sumSq, whichever loop runs, is the sum of
// squares of the differences (or of the values, b nil) within float64
// rounding, for every length around the block of 16 and slices that start
// anywhere.
func TestSumSqIsTheSumOfSquares(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	for _, n := range []int{0, 1, 15, 16, 17, 33, 65, 1000, 235146} {
		for _, off := range []int{0, 1, 3} {
			a, b := sumSqInputs(r, n, off)
			for _, bb := range [][]float32{b, nil} {
				got := sumSq(a, bb)
				var plain float64
				for i := range a {
					d := float64(a[i])
					if bb != nil {
						d -= float64(bb[i])
					}
					plain += d * d
				}
				if math.Abs(got-plain) > 1e-12*plain || (n > 0 && got == 0) {
					t.Fatalf("n=%d off=%d b nil %v: %v, the plain sum %v", n, off, bb == nil, got, plain)
				}
			}
		}
	}
}

// sumSqInputs are n values of a (spanning nine orders of magnitude) and b,
// each a slice starting off values into its array.
func sumSqInputs(r *rand.Rand, n, off int) (a, b []float32) {
	a, b = make([]float32, n+off), make([]float32, n+off)
	for i := range a {
		a[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(9)-4)))
		b[i] = float32(r.NormFloat64())
	}
	return a[off:], b[off:]
}
