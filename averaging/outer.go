package averaging

import (
	"fmt"
	"math"
)

// Outer is DiLoCo's outer optimizer (arXiv 2311.08105): SGD with Nesterov
// momentum applied to the pseudo-gradient, the mean over the workers of
// what their H inner steps moved the model, theta_start - theta_i. From the
// round's starting model theta_start and the mean pseudo-gradient d:
//
//	b <- mu b + d
//	theta <- theta_start - lr (d + mu b)
//
// (PyTorch's SGD with nesterov=True). With lr = 1 and mu = 0 it is plain
// model averaging (theta = mean theta_i). Every worker holds the same b and
// applies the same d, so every worker ends with the same theta; a joining
// worker takes b along with the model.
type Outer struct {
	// LR is the outer learning rate (DiLoCo's default 0.7); Momentum the
	// Nesterov momentum mu (0.9).
	LR, Momentum float64
	// Buf is the momentum buffer b, one value per parameter; nil until the
	// first step (then zeros).
	Buf []float32
}

// Default outer settings, from the DiLoCo paper.
const (
	DefaultOuterLR       = 0.7
	DefaultOuterMomentum = 0.9
)

// Validate checks the settings.
func (o *Outer) Validate() error {
	if !(o.LR > 0) || math.IsInf(o.LR, 0) {
		return fmt.Errorf("%w: outer learning rate %v, want finite and > 0", ErrBadOuter, o.LR)
	}
	if !(o.Momentum >= 0 && o.Momentum < 1) {
		return fmt.Errorf("%w: outer momentum %v, want in [0, 1)", ErrBadOuter, o.Momentum)
	}
	return nil
}

// Step writes into dst the model after an outer step from start with the
// mean pseudo-gradient d, and updates the momentum buffer. dst may alias
// start. On an error nothing is written, the buffer included.
func (o *Outer) Step(dst, start, d []float32) error {
	if err := o.Validate(); err != nil {
		return err
	}
	n := len(start)
	if len(dst) != n || len(d) != n || (o.Buf != nil && len(o.Buf) != n) {
		return fmt.Errorf("%w: outer step of %d, %d and %d values (buffer %d)", ErrLength, len(dst), len(start), len(d), len(o.Buf))
	}
	for _, v := range d {
		if v-v != 0 {
			return fmt.Errorf("%w: non-finite pseudo-gradient", ErrBadOuter)
		}
	}
	if o.Buf == nil {
		o.Buf = make([]float32, n)
	}
	lr, mu := float32(o.LR), float32(o.Momentum)
	for i, g := range d {
		b := mu*o.Buf[i] + g
		o.Buf[i] = b
		dst[i] = start[i] - lr*(g+mu*b)
	}
	return nil
}

// StepInPlace is Step for one worker on its own pseudo-gradient, fused into
// one pass, with SlowMo's scaling by the inner learning rate gamma (arXiv
// 1910.00643, Algorithm 1): with d = anchor - w,
//
//	b <- mu b + d / gamma
//	w <- anchor - lr (d + gamma mu b)
//
// written into both w and anchor. The buffer holds the pseudo-gradients in
// units of the inner rate, so as the inner schedule decays the momentum's
// part of the step decays with it, and a run that ends at a rate of 0 ends
// without a step carried on by momentum; at a constant gamma of 1 it is
// Step. A gamma that is not positive and finite takes no step: w is left
// as it is and becomes the anchor. On an error nothing is written; on
// success w, anchor and the buffer are finite (a result that would not be
// is an error), so a caller need not scan them.
func (o *Outer) StepInPlace(w, anchor []float32, gamma float64) error {
	if err := o.Validate(); err != nil {
		return err
	}
	n := len(w)
	if len(anchor) != n || (o.Buf != nil && len(o.Buf) != n) {
		return fmt.Errorf("%w: outer step of %d and %d values (buffer %d)", ErrLength, n, len(anchor), len(o.Buf))
	}
	step := gamma > 0 && !math.IsInf(gamma, 0)
	lr, mu, g, inv := float32(o.LR), float32(o.Momentum), float32(gamma), float32(1/gamma)
	// A first pass computes the result without writing it, so a
	// non-finite input or result leaves everything as it was.
	for i, v := range w {
		d := anchor[i] - v
		if !step {
			if d-d != 0 {
				return fmt.Errorf("%w: non-finite pseudo-gradient", ErrBadOuter)
			}
			continue
		}
		var b float32
		if o.Buf != nil {
			b = o.Buf[i]
		}
		b = mu*b + d*inv
		if r := anchor[i] - lr*(d+g*mu*b); r-r != 0 || b-b != 0 {
			return fmt.Errorf("%w: non-finite pseudo-gradient or outer step", ErrBadOuter)
		}
	}
	if !step {
		copy(anchor, w)
		return nil
	}
	if o.Buf == nil {
		o.Buf = make([]float32, n)
	}
	buf, anchor := o.Buf[:n], anchor[:n]
	for i, v := range w {
		a := anchor[i]
		d := a - v
		b := mu*buf[i] + d*inv
		buf[i] = b
		v = a - lr*(d+g*mu*b)
		w[i], anchor[i] = v, v
	}
	return nil
}

// PseudoGradient writes start - theta into dst: what the inner steps moved
// the model, the vector the workers average.
func PseudoGradient(dst, start, theta []float32) error {
	if len(dst) != len(start) || len(theta) != len(start) {
		return fmt.Errorf("%w: pseudo-gradient of %d, %d and %d values", ErrLength, len(dst), len(start), len(theta))
	}
	Sub(dst, start, theta)
	return nil
}

// Sub sets dst[i] = a[i] - b[i] for every i < len(dst), in float32 (on
// amd64 with AVX eight values per instruction, the same bits); dst may be
// a or b. len(a) and len(b) must be at least len(dst).
func Sub(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	n := subVec(dst, a, b)
	subScalar(dst[n:], a[n:], b[n:])
}

// Add sets dst[i] += src[i] for every i < len(dst), in float32 (on amd64
// with AVX eight values per instruction, the same bits): an all-reduce's
// summation. len(src) must be at least len(dst).
func Add(dst, src []float32) {
	src = src[:len(dst)]
	n := addVec(dst, src)
	addScalar(dst[n:], src[n:])
}

// addScalar is Add in Go.
func addScalar(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}

// subScalar is Sub in Go.
func subScalar(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] - b[i]
	}
}

// ScaledInnerSteps is the DyLU rule (arXiv 2401.09135) for workers of
// different speeds: a worker of speed v does h v / vmax inner steps, at
// least one, so the fastest does h and all finish a round at about the same
// time instead of every worker waiting for the slowest. Speeds are in any
// one unit (samples/s); a speed that is not positive or not finite counts
// as the fastest (h steps).
func ScaledInnerSteps(h int, v, vmax float64) int {
	if h < 1 {
		return 1
	}
	if !(v > 0) || !(vmax >= v) || math.IsInf(vmax, 0) {
		return h
	}
	return max(1, int(math.Round(float64(h)*v/vmax)))
}
