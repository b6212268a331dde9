package averaging

import (
	"errors"
	"math"
	"math/rand/v2"
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

// At an inner rate of 1, StepInPlace is Step on the worker's own
// pseudo-gradient, anchor - w, with the result written to both w and
// anchor.
func TestOuterStepInPlaceIsStep(t *testing.T) {
	anchor := []float32{1, -2, 0.5, 3}
	ws := [][]float32{{0.8, -1.5, 0.5, 3.2}, {0.7, -1.4, 0.6, 3.1}, {0.75, -1.2, 0.2, 3.3}}
	fused := Outer{LR: 0.7, Momentum: 0.9}
	ref := Outer{LR: 0.7, Momentum: 0.9}
	fa, ra := slices.Clone(anchor), slices.Clone(anchor)
	for k, w := range ws {
		fw := slices.Clone(w)
		if err := fused.StepInPlace(fw, fa, 1); err != nil {
			t.Fatal(err)
		}
		d := make([]float32, len(w))
		if err := PseudoGradient(d, ra, w); err != nil {
			t.Fatal(err)
		}
		rw := make([]float32, len(w))
		if err := ref.Step(rw, ra, d); err != nil {
			t.Fatal(err)
		}
		copy(ra, rw)
		if !slices.Equal(fw, rw) || !slices.Equal(fa, rw) || !slices.Equal(fused.Buf, ref.Buf) {
			t.Fatalf("step %d: in place w %v anchor %v buffer %v; Step %v buffer %v", k, fw, fa, fused.Buf, rw, ref.Buf)
		}
	}
}

// The outer step is linear in the model, the anchor and the buffer, so
// when every node of a swarm takes it on its own pseudo-gradient, the mean
// of their models takes the outer step of the mean pseudo-gradient from
// the mean anchor with the mean buffer: the swarm's average moves as
// DiLoCo's model does, and no node's speed or position tilts it.
func TestOuterStepInPlacePreservesTheMean(t *testing.T) {
	const nodes, dim = 5, 7
	rng := rand.New(rand.NewPCG(1, 2))
	vec := func() []float32 {
		v := make([]float32, dim)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	mean := func(vs [][]float32) []float32 {
		m := make([]float32, dim)
		for _, v := range vs {
			for i := range m {
				m[i] += v[i] / nodes
			}
		}
		return m
	}
	var ws, anchors, bufs [][]float32
	outers := make([]Outer, nodes)
	for k := range outers {
		ws, anchors, bufs = append(ws, vec()), append(anchors, vec()), append(bufs, vec())
		outers[k] = Outer{LR: 0.7, Momentum: 0.9, Buf: bufs[k]}
	}
	mw, ma := mean(ws), mean(anchors)
	swarm := Outer{LR: 0.7, Momentum: 0.9, Buf: mean(bufs)}
	if err := swarm.StepInPlace(mw, ma, 0.05); err != nil {
		t.Fatal(err)
	}
	for k := range outers {
		if err := outers[k].StepInPlace(ws[k], anchors[k], 0.05); err != nil {
			t.Fatal(err)
		}
	}
	got, gotBuf := mean(ws), mean(bufs)
	for i := range got {
		if math.Abs(float64(got[i]-mw[i])) > 1e-5 || math.Abs(float64(gotBuf[i]-swarm.Buf[i])) > 1e-5 {
			t.Fatalf("mean of the nodes' steps %v (buffers %v), step of the means %v (%v)", got, gotBuf, mw, swarm.Buf)
		}
	}
}

func TestOuterStepInPlaceErrors(t *testing.T) {
	o := Outer{LR: 0.7, Momentum: 0.9}
	if err := o.StepInPlace(make([]float32, 2), make([]float32, 1), 1); !errors.Is(err, ErrLength) {
		t.Errorf("lengths: %v", err)
	}
	w, anchor := []float32{1, float32(math.Inf(1))}, []float32{2, 2}
	if err := o.StepInPlace(w, anchor, 1); !errors.Is(err, ErrBadOuter) || w[0] != 1 || anchor[0] != 2 || o.Buf != nil {
		t.Errorf("non-finite model: %v; w %v anchor %v buffer %v, want nothing written", err, w, anchor, o.Buf)
	}
	// Finite inputs whose step would overflow: an error, nothing written.
	w, anchor = []float32{1e38}, []float32{3e38}
	if err := o.StepInPlace(w, anchor, 1e-3); !errors.Is(err, ErrBadOuter) || w[0] != 1e38 || anchor[0] != 3e38 || o.Buf != nil {
		t.Errorf("overflowing step: %v; w %v anchor %v buffer %v, want nothing written", err, w, anchor, o.Buf)
	}
	bad := Outer{LR: 0, Momentum: 0.9}
	if err := bad.StepInPlace(make([]float32, 1), make([]float32, 1), 1); !errors.Is(err, ErrBadOuter) {
		t.Errorf("lr 0: %v", err)
	}
	o.Buf = make([]float32, 3)
	if err := o.StepInPlace(make([]float32, 2), make([]float32, 2), 1); !errors.Is(err, ErrLength) {
		t.Errorf("buffer of another length: %v", err)
	}
}

// SlowMo's scaling: the buffer holds pseudo-gradients over the inner rate
// gamma, and the momentum's part of the step is gamma times it, so as the
// rate decays the momentum fades; at a rate of 0 no step is taken.
func TestOuterStepInPlaceScalesByTheInnerRate(t *testing.T) {
	o := Outer{LR: 0.5, Momentum: 0.8}
	w, anchor := []float32{0.8}, []float32{1} // d = 0.2
	if err := o.StepInPlace(w, anchor, 0.1); err != nil {
		t.Fatal(err)
	}
	// b = 0.2/0.1 = 2; w = 1 - 0.5 (0.2 + 0.1*0.8*2) = 0.82.
	if math.Abs(float64(o.Buf[0])-2) > 1e-6 || math.Abs(float64(w[0])-0.82) > 1e-6 || anchor[0] != w[0] {
		t.Fatalf("first step: buffer %v, w %v, anchor %v; want 2, 0.82, 0.82", o.Buf, w, anchor)
	}
	// The rate halves, the model moves by 0.02: b = 0.8*2 + 0.02/0.05 = 2;
	// w = 0.82 - 0.5 (0.02 + 0.05*0.8*2) = 0.77.
	w[0] = 0.8
	if err := o.StepInPlace(w, anchor, 0.05); err != nil {
		t.Fatal(err)
	}
	if math.Abs(float64(o.Buf[0])-2) > 1e-6 || math.Abs(float64(w[0])-0.77) > 1e-6 {
		t.Fatalf("second step: buffer %v, w %v; want 2, 0.77", o.Buf, w)
	}
	// At a rate of 0 (a run's end) nothing moves: the model is anchored.
	for _, g := range []float64{0, math.NaN(), math.Inf(1), -1} {
		w[0] = 0.7
		buf := o.Buf[0]
		if err := o.StepInPlace(w, anchor, g); err != nil {
			t.Fatal(err)
		}
		if w[0] != 0.7 || anchor[0] != 0.7 || o.Buf[0] != buf {
			t.Fatalf("rate %v: w %v anchor %v buffer %v, want the model anchored and nothing else", g, w, anchor, o.Buf)
		}
	}
}
