package averaging

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestOuterStep(t *testing.T) {
	// Two steps by hand: lr 0.5, mu 0.9.
	o := Outer{LR: 0.5, Momentum: 0.9}
	start := []float32{1, -2}
	dst := make([]float32, 2)
	if err := o.Step(dst, start, []float32{0.2, -0.4}); err != nil {
		t.Fatal(err)
	}
	// b = d; update = d + 0.9 d = 1.9 d.
	want := []float32{1 - 0.5*1.9*0.2, -2 + 0.5*1.9*0.4}
	for i := range want {
		if math.Abs(float64(dst[i]-want[i])) > 1e-6 {
			t.Fatalf("first step: %v, want %v", dst, want)
		}
	}
	if !slices.Equal(o.Buf, []float32{0.2, -0.4}) {
		t.Fatalf("buffer %v", o.Buf)
	}
	// In place, second step: b = 0.9*0.2 + 0.1 = 0.28; update = 0.1 + 0.9*0.28.
	start2 := slices.Clone(dst)
	if err := o.Step(dst, dst, []float32{0.1, 0}); err != nil {
		t.Fatal(err)
	}
	if w := start2[0] - 0.5*(0.1+0.9*0.28); math.Abs(float64(dst[0]-w)) > 1e-6 {
		t.Fatalf("second step: %g, want %g", dst[0], w)
	}
	if w := start2[1] - 0.5*(0.9*(0.9*-0.4)); math.Abs(float64(dst[1]-w)) > 1e-6 {
		t.Fatalf("second step, momentum only: %g, want %g", dst[1], w)
	}
}

// With lr 1 and no momentum the outer step is plain model averaging.
func TestOuterStepIsAveraging(t *testing.T) {
	start := []float32{1, 2, 3}
	workers := [][]float32{{0.5, 2, 4}, {1.5, 1, 2}, {1, 3, 3.5}}
	d := make([]float32, 3)
	mean := make([]float32, 3)
	for _, w := range workers {
		pg := make([]float32, 3)
		if err := PseudoGradient(pg, start, w); err != nil {
			t.Fatal(err)
		}
		for i := range d {
			d[i] += pg[i] / 3
			mean[i] += w[i] / 3
		}
	}
	o := Outer{LR: 1}
	dst := make([]float32, 3)
	if err := o.Step(dst, start, d); err != nil {
		t.Fatal(err)
	}
	for i := range dst {
		if math.Abs(float64(dst[i]-mean[i])) > 1e-6 {
			t.Fatalf("outer step %v, mean %v", dst, mean)
		}
	}
}

func TestOuterErrors(t *testing.T) {
	for _, o := range []Outer{{LR: 0, Momentum: 0.9}, {LR: math.Inf(1)}, {LR: 0.7, Momentum: 1}, {LR: 0.7, Momentum: -0.1}, {LR: math.NaN()}} {
		if err := o.Step(make([]float32, 1), make([]float32, 1), make([]float32, 1)); !errors.Is(err, ErrBadOuter) {
			t.Errorf("%+v: %v, want ErrBadOuter", o, err)
		}
	}
	o := Outer{LR: 0.7, Momentum: 0.9}
	if err := o.Step(make([]float32, 2), make([]float32, 1), make([]float32, 1)); !errors.Is(err, ErrLength) {
		t.Errorf("lengths: %v", err)
	}
	dst := []float32{5}
	if err := o.Step(dst, []float32{1}, []float32{float32(math.NaN())}); !errors.Is(err, ErrBadOuter) || dst[0] != 5 || o.Buf != nil {
		t.Errorf("NaN pseudo-gradient: %v, dst %v, buffer %v", err, dst, o.Buf)
	}
	if err := PseudoGradient(make([]float32, 1), make([]float32, 2), make([]float32, 2)); !errors.Is(err, ErrLength) {
		t.Errorf("pseudo-gradient lengths: %v", err)
	}
}

func TestScaledInnerSteps(t *testing.T) {
	for _, c := range []struct {
		h       int
		v, vmax float64
		want    int
	}{
		{50, 100, 100, 50},
		{50, 50, 100, 25},
		{50, 25, 100, 13}, // 12.5 rounds half away from zero
		{50, 1, 1000, 1},  // at least one
		{50, 0, 100, 50},  // unknown speed: the full count
		{50, math.NaN(), 100, 50},
		{50, 200, 100, 50}, // faster than the fastest seen: the full count
		{0, 10, 10, 1},
	} {
		if got := ScaledInnerSteps(c.h, c.v, c.vmax); got != c.want {
			t.Errorf("ScaledInnerSteps(%d, %v, %v) = %d, want %d", c.h, c.v, c.vmax, got, c.want)
		}
	}
}
