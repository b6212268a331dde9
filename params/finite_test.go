package params

import (
	"errors"
	"math"
	"testing"
)

// AllFinite's word trick must agree with the obvious check for every
// position, alignment and special value, and CheckFinite with it.
func TestAllFinite(t *testing.T) {
	specials := []float32{
		float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00000),
	}
	finite := []float32{0, float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32,
		math.SmallestNonzeroFloat32, math.Float32frombits(0x7f7fffff), math.Float32frombits(0x807fffff), 1, -1}
	base := make([]float32, 41)
	for i := range base {
		base[i] = finite[i%len(finite)]
	}
	for start := range 3 { // alignment of the slice start
		for n := range len(base) - start + 1 {
			v := base[start : start+n]
			if !AllFinite(v) || CheckFinite(v) != nil {
				t.Fatalf("finite slice [%d:%d] reported non-finite", start, start+n)
			}
			for i := range v {
				for _, x := range specials {
					old := v[i]
					v[i] = x
					if AllFinite(v) {
						t.Fatalf("%v at %d of [%d:%d] missed", x, i, start, start+n)
					}
					if !errors.Is(CheckFinite(v), ErrNonFinite) {
						t.Fatalf("CheckFinite: %v at %d of [%d:%d] missed", x, i, start, start+n)
					}
					v[i] = old
				}
			}
		}
	}
}

// checkFiniteScalar is the compare per element that AllFinite replaces,
// for the benchmark's ratio.
func checkFiniteScalar(v []float32) bool {
	for _, x := range v {
		if x-x != 0 {
			return false
		}
	}
	return true
}

// BenchmarkCheckFinite scans a model of the default size (235,146 values:
// mlp:256,128 on MNIST), as every merge does several times; /scalar is a
// compare per element.
func BenchmarkCheckFinite(b *testing.B) {
	v := make([]float32, 235146)
	for i := range v {
		v[i] = float32(i%97) * 0.01
	}
	b.Run("words", func(b *testing.B) {
		b.SetBytes(int64(4 * len(v)))
		for b.Loop() {
			if CheckFinite(v) != nil {
				b.Fatal("non-finite")
			}
		}
	})
	b.Run("scalar", func(b *testing.B) {
		b.SetBytes(int64(4 * len(v)))
		for b.Loop() {
			if !checkFiniteScalar(v) {
				b.Fatal("non-finite")
			}
		}
	})
}
