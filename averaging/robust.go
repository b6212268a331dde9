package averaging

import (
	"fmt"
	"math"
	"slices"

	"github.com/meshtrain/meshtrain/params"
)

// L2 returns the Euclidean norm of v, accumulated in float64 so that no
// float32 input can overflow it.
func L2(v []float32) float64 {
	return math.Sqrt(sumSq(v, nil))
}

// Distance returns the Euclidean distance ||a - b||.
func Distance(a, b []float32) (float64, error) {
	if len(a) != len(b) {
		return 0, fmt.Errorf("%w: distance between %d and %d values", ErrLength, len(a), len(b))
	}
	return math.Sqrt(sumSq(a, b)), nil
}

// sumLanes is how many float64 accumulators sumSq keeps: element i goes
// to lane i%sumLanes. Sixteen lanes are four AVX registers of four
// float64s each, enough to hide the add's latency; the Go loop keeps the
// same lanes so that both give the same bits.
const sumLanes = 16

// sumSq returns the sum of (a[i] - b[i])^2 in float64, or of a[i]^2 when b
// is nil. The vector loop (sumSqVec) and the Go loop accumulate the same
// products in the same lanes and add the lanes in the same order, so the
// result does not depend on which ran.
func sumSq(a, b []float32) float64 {
	if b != nil {
		b = b[:len(a)]
	}
	var s [sumLanes]float64
	i := sumSqVec(&s, a, b)
	// Whole blocks first: a block of constant length drops the bounds
	// checks. float64(x*x) is rounded before the add: no fused
	// multiply-add, which Go may use on some architectures.
	if b == nil {
		for ; i+sumLanes <= len(a); i += sumLanes {
			for k, v := range a[i : i+sumLanes : i+sumLanes] {
				x := float64(v)
				s[k] += float64(x * x)
			}
		}
		for ; i < len(a); i++ {
			x := float64(a[i])
			s[i&(sumLanes-1)] += float64(x * x)
		}
	} else {
		for ; i+sumLanes <= len(a); i += sumLanes {
			y := b[i : i+sumLanes : i+sumLanes]
			for k, v := range a[i : i+sumLanes : i+sumLanes] {
				d := float64(v) - float64(y[k])
				s[k] += float64(d * d)
			}
		}
		for ; i < len(a); i++ {
			d := float64(a[i]) - float64(b[i])
			s[i&(sumLanes-1)] += float64(d * d)
		}
	}
	for w := sumLanes / 2; w > 0; w /= 2 {
		for k := range w {
			s[k] += s[k+w]
		}
	}
	return s[0]
}

// ClipDelta limits how far a remote model may pull the local one: it writes
// local + c (remote - local) into dst, with c = min(1, radius/||remote -
// local||), and returns c. A remote model within the radius is copied as is
// (c = 1), so a clipped merge of an honest peer is the plain merge; one
// beyond it is pulled back onto the sphere (up to the float32 rounding of
// dst), so a single poisoned or diverged peer moves the model by at most
// a*radius whatever it sends.
//
// dst may be remote (clip in place) or local. radius must be >= 0; +Inf
// disables clipping. A non-finite remote or local vector is an error
// (wrapping params.ErrNonFinite), and dst is left untouched on every error.
func ClipDelta(dst, local, remote []float32, radius float64) (float64, error) {
	if len(local) != len(remote) || len(dst) != len(local) {
		return 0, fmt.Errorf("%w: clip with dst %d, local %d, remote %d values", ErrLength, len(dst), len(local), len(remote))
	}
	if !(radius >= 0) {
		return 0, fmt.Errorf("%w: %v", ErrBadRadius, radius)
	}
	norm, _ := Distance(local, remote)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return 0, fmt.Errorf("averaging: clip: %w", params.ErrNonFinite)
	}
	if norm <= radius {
		copy(dst, remote)
		return 1, nil
	}
	c := radius / norm
	local, remote = local[:len(dst)], remote[:len(dst)]
	for i := range dst {
		// In float64, so the only error is the final rounding of each
		// coordinate: with c in float32 the clipped norm could miss the
		// radius by a relative 6e-8.
		l := float64(local[i])
		dst[i] = float32(l + c*(float64(remote[i])-l))
	}
	return c, nil
}

// Mean writes the coordinate-wise mean of vs into dst (accumulated in
// float64). All vectors must have dst's length; dst may be one of them.
func Mean(dst []float32, vs [][]float32) error {
	if err := checkVectors(dst, vs); err != nil {
		return err
	}
	inv := 1 / float64(len(vs))
	for i := range dst {
		var s float64
		for _, v := range vs {
			s += float64(v[i])
		}
		dst[i] = float32(s * inv)
	}
	return nil
}

// TrimmedMean writes the coordinate-wise trimmed mean of vs into dst: for
// each coordinate, the t smallest and t largest of the k = len(vs) values
// are dropped and the other k-2t averaged. As long as at most t of the
// vectors are faulty, each coordinate of the result lies between the
// smallest and largest honest values, however large the faulty ones are
// (NaN sorts below every number, so up to t of them are trimmed too).
// t = 0 is the plain mean. It needs 0 <= t and 2t < k; dst may be one of vs.
// It needs one scratch slice of k values per call.
func TrimmedMean(dst []float32, vs [][]float32, t int) error {
	if err := checkVectors(dst, vs); err != nil {
		return err
	}
	k := len(vs)
	if t < 0 || 2*t >= k {
		return fmt.Errorf("%w: trim %d from each end of %d vectors (need 0 <= t and 2t < k)", ErrBadTrim, t, k)
	}
	if t == 0 {
		return Mean(dst, vs)
	}
	col := make([]float32, k)
	inv := 1 / float64(k-2*t)
	for i := range dst {
		for j, v := range vs {
			col[j] = v[i]
		}
		slices.Sort(col)
		var s float64
		for _, x := range col[t : k-t] {
			s += float64(x)
		}
		dst[i] = float32(s * inv)
	}
	return nil
}

// checkVectors validates an aggregation's inputs.
func checkVectors(dst []float32, vs [][]float32) error {
	if len(vs) == 0 {
		return ErrEmpty
	}
	for j, v := range vs {
		if len(v) != len(dst) {
			return fmt.Errorf("%w: vector %d has %d values, dst %d", ErrLength, j, len(v), len(dst))
		}
	}
	return nil
}
