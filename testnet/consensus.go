package testnet

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// ConsensusPoint is how far apart the nodes' models were at one instant:
// the consensus distance (1/n) sum_i ||x_i - xbar||^2, the mean squared
// Euclidean distance of the n models to their average xbar over every
// parameter, each node's model its latest snapshot at or before T.
//
// AverageAccuracy is the test accuracy of xbar itself, the swarm's average
// model, scored at every instant until it first reaches the run's target
// (absent after that, and in results from before it was measured).
type ConsensusPoint struct {
	T               float64  `json:"t_s"` // seconds since the run started
	Distance        float64  `json:"distance"`
	AverageAccuracy *float64 `json:"average_accuracy,omitempty"`
}

// consensusSet holds each node's latest model and the squared distances
// between every two of them, so a node's new model costs n-1 distances:
// (1/n) sum_i ||x_i - xbar||^2 = (1/n^2) sum_{i<j} ||x_i - x_j||^2, a sum of
// squares with no cancellation (identical models give exactly 0).
type consensusSet struct {
	cur  [][]float32
	d    [][]float64 // d[i][j] = d[j][i] = ||cur[i] - cur[j]||^2
	have int
}

func newConsensusSet(nodes int) *consensusSet {
	c := &consensusSet{cur: make([][]float32, nodes), d: make([][]float64, nodes)}
	for i := range c.d {
		c.d[i] = make([]float64, nodes)
	}
	return c
}

// set makes w node i's model from now on; c keeps w (the caller must not
// change it).
func (c *consensusSet) set(i int, w []float32) error {
	for j, v := range c.cur {
		if j != i && v != nil && len(v) != len(w) {
			return fmt.Errorf("%w: node %d's model has %d parameters, node %d's %d", ErrBench, i, len(w), j, len(v))
		}
	}
	for j, v := range c.cur {
		if j == i || v == nil {
			continue
		}
		d := sqDist(w, v)
		c.d[i][j], c.d[j][i] = d, d
	}
	if c.cur[i] == nil {
		c.have++
	}
	c.cur[i] = w
	return nil
}

// distance is the consensus distance of the models held; ok=false until
// every node has one.
func (c *consensusSet) distance() (float64, bool) {
	n := len(c.cur)
	if n == 0 || c.have < n {
		return 0, false
	}
	var s float64
	for i := range n {
		for j := i + 1; j < n; j++ {
			s += c.d[i][j]
		}
	}
	return s / float64(n*n), true
}

// average writes xbar, the mean of the models held, into dst (resized)
// and returns it; ok=false until every node has one.
func (c *consensusSet) average(dst []float32) ([]float32, bool) {
	if len(c.cur) == 0 || c.have < len(c.cur) {
		return dst, false
	}
	n := len(c.cur[0])
	dst = slices.Grow(dst[:0], n)[:n]
	inv := 1 / float64(len(c.cur))
	for k := range dst {
		var s float64
		for _, w := range c.cur {
			s += float64(w[k])
		}
		dst[k] = float32(s * inv)
	}
	return dst, true
}

// AverageTimeToTarget is the first time the swarm's average model was
// scored at or above target (ok=false: never, or not scored).
func AverageTimeToTarget(pts []ConsensusPoint, target float64) (float64, bool) {
	for _, p := range pts {
		if p.AverageAccuracy != nil && *p.AverageAccuracy >= target {
			return p.T, true
		}
	}
	return 0, false
}

// sqDist is ||a - b||^2 in float64 (the difference of two float32s is exact
// in it).
func sqDist(a, b []float32) float64 {
	var s float64
	for k, x := range a {
		d := float64(x) - float64(b[k])
		s += d * d
	}
	return s
}

// ConsensusAt is the consensus distance at t: the latest point's at or
// before t (held after the last: every node then holds its final model);
// ok=false before the first, when not every node had a snapshot yet.
func ConsensusAt(pts []ConsensusPoint, t float64) (float64, bool) {
	i := sort.Search(len(pts), func(k int) bool { return pts[k].T > t })
	if i == 0 {
		return 0, false
	}
	return pts[i-1].Distance, true
}

// ConsensusCurve samples a mode's consensus distance every step seconds
// from 0 to end (Curve's grid): at each time, the median over the runs
// that have one there.
func ConsensusCurve(runs []Run, mode string, end, step float64) (ts, ds []float64) {
	if step <= 0 || end <= 0 {
		return nil, nil
	}
	for t := 0.0; t <= end+1e-9; t += step {
		var at []float64
		for _, r := range runs {
			if r.Mode != mode || r.Error != "" {
				continue
			}
			if d, ok := ConsensusAt(r.Consensus, t); ok {
				at = append(at, d)
			}
		}
		if len(at) == 0 {
			continue
		}
		ts, ds = append(ts, t), append(ds, Median(at))
	}
	return ts, ds
}

// ConsensusAtTarget is the median over a mode's runs of the consensus
// distance at the time every node reached the target, or at the run's
// fixed wall time (W) for a run that did not reach it; n counts the runs
// with a distance there, atW those read at W. NaN when none has one.
func ConsensusAtTarget(runs []Run, mode string) (median float64, n, atW int) {
	var ds []float64
	for _, r := range runs {
		if r.Mode != mode || r.Error != "" || len(r.Consensus) == 0 {
			continue
		}
		t, w := r.FixedWallS, r.TimeToTargetS == nil
		if !w {
			t = *r.TimeToTargetS
		}
		d, ok := ConsensusAt(r.Consensus, t)
		if !ok {
			continue
		}
		ds = append(ds, d)
		if w {
			atW++
		}
	}
	return Median(ds), len(ds), atW
}

// validateConsensus checks a run's series: times finite and in order,
// distances finite and not negative.
func validateConsensus(pts []ConsensusPoint) error {
	for k, c := range pts {
		if math.IsNaN(c.T) || math.IsInf(c.T, 0) || (k > 0 && c.T < pts[k-1].T) {
			return fmt.Errorf("consensus point %d: time %v out of order or not finite", k, c.T)
		}
		if !(c.Distance >= 0) || math.IsInf(c.Distance, 0) {
			return fmt.Errorf("consensus point %d: distance %v at t=%v, want a finite value >= 0", k, c.Distance, c.T)
		}
	}
	return nil
}
