package testnet

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// The benchmark's arithmetic, kept free of processes, files and clocks so
// it can be tested on made-up traces. Times are seconds since the run's
// common start; a run's nodes are released together (see --start-file).

// ErrBench is wrapped by every benchmark error.
var ErrBench = errors.New("testnet: bench")

// Point is one scored snapshot of one node.
type Point struct {
	T         float64 `json:"t_s"`        // seconds since the run started
	Accuracy  float64 `json:"accuracy"`   // test accuracy of the snapshot
	Samples   int64   `json:"samples"`    // training samples the node processed so far
	BusyS     float64 `json:"busy_s"`     // compute plus emulated slowness so far
	NetWaitS  float64 `json:"net_wait_s"` // trainer loop waiting on the network so far
	BytesSent uint64  `json:"bytes_sent"` // parameter bytes sent so far
	Merges    int64   `json:"merges"`
	Step      int64   `json:"step"`
	Progress  float64 `json:"progress"`
	// RunSamples is the node's run clock, the swarm's samples as the node
	// counted them; LR the rate of its latest step (0 when a snapshot
	// does not say: an older node).
	RunSamples float64 `json:"run_samples,omitempty"`
	LR         float64 `json:"lr,omitempty"`
}

// Trace is one node's scored snapshots, in time order.
type Trace struct {
	Node     int     `json:"node"`
	Slowdown float64 `json:"slowdown"`
	Points   []Point `json:"points"`
}

// Validate checks what the formulas rely on: points in time order,
// cumulative counters that never fall, accuracies in [0,1].
func (tr Trace) Validate() error {
	for i, p := range tr.Points {
		if !(p.Accuracy >= 0 && p.Accuracy <= 1) || math.IsNaN(p.T) || math.IsInf(p.T, 0) {
			return fmt.Errorf("%w: node %d point %d: accuracy %v at t=%v", ErrBench, tr.Node, i, p.Accuracy, p.T)
		}
		if i == 0 {
			continue
		}
		q := tr.Points[i-1]
		if p.T < q.T || p.Samples < q.Samples || p.BusyS < q.BusyS || p.BytesSent < q.BytesSent {
			return fmt.Errorf("%w: node %d point %d goes back in time or counters", ErrBench, tr.Node, i)
		}
	}
	return nil
}

// TimeToTarget is the time of the first point at or above target
// (ok=false if none is).
func TimeToTarget(pts []Point, target float64) (t float64, ok bool) {
	for _, p := range pts {
		if p.Accuracy >= target {
			return p.T, true
		}
	}
	return 0, false
}

// ClusterTimes are a run's times to target: every node (the primary
// figure: the last node's first time at target) and the first node. A node
// that never reached it leaves all=false.
type ClusterTimes struct {
	PerNode    []*float64
	All, First float64
	AllOK      bool
	FirstOK    bool
}

// TimesToTarget computes ClusterTimes over the traces.
func TimesToTarget(traces []Trace, target float64) ClusterTimes {
	c := ClusterTimes{PerNode: make([]*float64, len(traces)), AllOK: len(traces) > 0}
	for i, tr := range traces {
		t, ok := TimeToTarget(tr.Points, target)
		if !ok {
			c.AllOK = false
			continue
		}
		c.PerNode[i] = &t
		c.All = max(c.All, t)
		if !c.FirstOK || t < c.First {
			c.First, c.FirstOK = t, true
		}
	}
	if !c.AllOK {
		c.All = 0
	}
	return c
}

// interp returns f at time t from points, linear between neighbours and
// held flat outside them (a node has processed nothing before its first
// snapshot's count and nothing more after its last).
func interp(pts []Point, t float64, f func(Point) float64) float64 {
	if len(pts) == 0 {
		return 0
	}
	i, _ := slices.BinarySearchFunc(pts, t, func(p Point, t float64) int {
		switch {
		case p.T < t:
			return -1
		case p.T > t:
			return 1
		}
		return 0
	})
	switch {
	case i == 0:
		return f(pts[0])
	case i == len(pts):
		return f(pts[len(pts)-1])
	}
	a, b := pts[i-1], pts[i]
	if b.T == a.T {
		return f(b)
	}
	return f(a) + (f(b)-f(a))*(t-a.T)/(b.T-a.T)
}

// SamplesAt is the cluster's training samples processed by time t, summed
// over nodes, each interpolated between its snapshots.
func SamplesAt(traces []Trace, t float64) float64 {
	var s float64
	for _, tr := range traces {
		s += interp(tr.Points, t, func(p Point) float64 { return float64(p.Samples) })
	}
	return s
}

// AccuracyAt is the accuracy of the node's latest snapshot at or before t
// (its first one if t precedes them all).
func AccuracyAt(pts []Point, t float64) float64 {
	if len(pts) == 0 {
		return 0
	}
	acc := pts[0].Accuracy
	for _, p := range pts {
		if p.T > t {
			break
		}
		acc = p.Accuracy
	}
	return acc
}

// Span is the time between a trace's first and last points.
func Span(pts []Point) float64 {
	if len(pts) < 2 {
		return 0
	}
	return pts[len(pts)-1].T - pts[0].T
}

// delta is f's growth over the trace.
func delta(pts []Point, f func(Point) float64) float64 {
	if len(pts) < 2 {
		return 0
	}
	return f(pts[len(pts)-1]) - f(pts[0])
}

// BusyFraction is the share of the trace's span the node was busy
// (computing or emulating slower hardware), not waiting.
func BusyFraction(pts []Point) float64 {
	span := Span(pts)
	if span <= 0 {
		return 0
	}
	return min(1, delta(pts, func(p Point) float64 { return p.BusyS })/span)
}

// SoloRates are the nodes' solo samples/s: each node alone does one batch
// per slowdown x base step, by construction of the emulation.
func SoloRates(batch int, baseStepS float64, slowdowns []float64) []float64 {
	out := make([]float64, len(slowdowns))
	for i, s := range slowdowns {
		if baseStepS > 0 && s > 0 {
			out[i] = float64(batch) / (s * baseStepS)
		}
	}
	return out
}

// Sum adds xs.
func Sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// Efficiency is samples processed / (sum of solo rates x wall time): 1 when
// every node trains flat out, 1/k when a cluster runs at 1/k of its
// combined speed.
func Efficiency(samples, wallS float64, soloRates []float64) float64 {
	d := Sum(soloRates) * wallS
	if d <= 0 {
		return 0
	}
	return samples / d
}

// IdealTime is the time to target of a perfectly efficient cluster with
// sync's sample efficiency: sync's samples to target / sum of solo rates.
func IdealTime(syncSamplesToTarget float64, soloRates []float64) float64 {
	s := Sum(soloRates)
	if s <= 0 {
		return 0
	}
	return syncSamplesToTarget / s
}

// SyncPaceTime is the time to target of a synchronous cluster with no
// communication cost: every step waits for the slowest node only, so the
// cluster processes nodes x the slowest solo rate.
func SyncPaceTime(syncSamplesToTarget float64, soloRates []float64) float64 {
	if len(soloRates) == 0 {
		return 0
	}
	slowest := slices.Min(soloRates)
	if slowest <= 0 {
		return 0
	}
	return syncSamplesToTarget / (float64(len(soloRates)) * slowest)
}

// Median of xs (the mean of the middle two for an even count); NaN for
// none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// Ratio is a/b, or NaN when either is missing or b is 0.
func Ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}

// ClockShareTimes are the instants, in seconds since the common start, at
// which a run's ClockShare is read.
var ClockShareTimes = []float64{0.25, 0.5, 1, 2}

// ClockShare is, at each of times, the lowest over the nodes of a node's
// run clock (Point.RunSamples, as the node counted the swarm's samples, at
// its first snapshot at or after the instant) over the samples every node
// had processed by that snapshot's time. 1 is a node that counts the whole
// swarm; 1/N, in a swarm of N equal nodes, one that counts only itself. It
// is how soon a swarm that starts together reads the learning-rate
// schedule at one point. nil when a node has no snapshot that late, or its
// snapshots carry no clock (an older node).
func ClockShare(traces []Trace, times []float64) []float64 {
	if len(traces) == 0 {
		return nil
	}
	out := make([]float64, len(times))
	for k, at := range times {
		low := math.Inf(1)
		for _, tr := range traces {
			i := slices.IndexFunc(tr.Points, func(p Point) bool { return p.T >= at })
			if i < 0 || tr.Points[i].RunSamples <= 0 {
				return nil
			}
			p := tr.Points[i]
			truth := SamplesAt(traces, p.T)
			if truth <= 0 {
				return nil
			}
			low = min(low, p.RunSamples/truth)
		}
		out[k] = low
	}
	return out
}
