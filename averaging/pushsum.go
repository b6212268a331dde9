package averaging

import (
	"fmt"
	"math"
)

// PushSum is one node's state in push-sum gossip (Kempe, Dobra, Gehrke
// 2003): X is the weight-scaled sum and W the weight. Each round a node
// keeps half of (X, W) and sends the other half to a neighbour, and adds
// whatever it receives. No mass is created or lost, so the sum of X over all
// nodes and the sum of W stay what they were, and every node's estimate X/W
// tends to the weighted average of the initial vectors on any connected
// graph, even with directed or uneven communication, where plain pairwise
// averaging with a fixed weight would drift.
//
// The methods use a pointer receiver for the halves they update in place;
// the zero value has no weight and yields no estimate.
type PushSum struct {
	X []float32
	W float64
}

// NewPushSum starts a node holding vector v with weight w (1 for a plain
// average, a sample count for a weighted one): X = w v in a new slice.
func NewPushSum(v []float32, w float64) (PushSum, error) {
	if err := checkPushSumWeight(w); err != nil {
		return PushSum{}, err
	}
	x := make([]float32, len(v))
	for i, vi := range v {
		x[i] = float32(w * float64(vi))
	}
	return PushSum{X: x, W: w}, nil
}

func checkPushSumWeight(w float64) error {
	if !(w > 0) || math.IsInf(w, 0) {
		return fmt.Errorf("%w: %v", ErrBadPushSumWeight, w)
	}
	return nil
}

// Halve keeps half of p's mass and returns the other half to send. Halving
// is exact in floating point (short of subnormal underflow), so the two
// halves add back to the original bit for bit. The share's X is written into buf when it has the capacity
// (pass the previous share's X to avoid allocating), else into a new slice.
func (p *PushSum) Halve(buf []float32) PushSum {
	p.W /= 2
	scale(p.X, 0.5)
	if cap(buf) < len(p.X) {
		buf = make([]float32, len(p.X))
	}
	buf = buf[:len(p.X)]
	copy(buf, p.X)
	return PushSum{X: buf, W: p.W}
}

// Add receives a share: X += q.X, W += q.W. It rejects a share of another
// length or with a weight that is not positive and finite, and then leaves
// p unchanged.
func (p *PushSum) Add(q PushSum) error {
	if len(q.X) != len(p.X) {
		return fmt.Errorf("%w: push-sum share of %d values into %d", ErrLength, len(q.X), len(p.X))
	}
	if err := checkPushSumWeight(q.W); err != nil {
		return fmt.Errorf("received share: %w", err)
	}
	x := q.X[:len(p.X)]
	for i := range p.X {
		p.X[i] += x[i]
	}
	p.W += q.W
	return nil
}

// Estimate writes the de-biased estimate X/W into dst.
func (p PushSum) Estimate(dst []float32) error {
	if len(dst) != len(p.X) {
		return fmt.Errorf("%w: estimate of %d values into %d", ErrLength, len(p.X), len(dst))
	}
	if err := checkPushSumWeight(p.W); err != nil {
		return err
	}
	inv := 1 / p.W
	for i, x := range p.X {
		dst[i] = float32(float64(x) * inv)
	}
	return nil
}
