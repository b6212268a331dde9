package node

import (
	"fmt"
	"math"
	"slices"
)

// LRScaling says whether and how a gossip node scales its learning rate:
// by how often it merges (the default), by its speed, or not at all.
//
// Merges (LRScalingMerges): a node multiplies its learning rate by
// sqrt(merge.LRScaleRef / H), within [1, merge.LRScaleMax], where H is the
// local steps it takes per merge (merge.MergeRate: moving averages over
// the last seconds). With merges every few steps the four models of the
// reference profile stay close and the swarm's average model moves like
// one model taking every node's steps, so it takes the rate a synchronous
// run of the same batches wants: twice the configured one, the rate sync
// mode is tuned to. With rarer merges the models drift apart between
// merges by about lr^2 * H (each step's noise adds up), so the rate falls
// as 1/sqrt(H), back to the configured rate at merge.LRScaleRef steps a
// merge. Measured on the
// reference profile (docs/benchmarks.md, the learning rate that follows
// the merges): lr 0.2 brought every node to 97% sooner than 0.1 on
// loopback (11 steps a merge on a fast node), later on the emulated WAN
// (about 50).
//
// Speed (LRScalingSpeed):
// A merge averages models, so every local step moves the swarm's average
// model by 1/N of its size; a node that steps k times as often moves it k
// times as much. Left alone, a swarm of mixed speeds trains towards the
// fast nodes' data (asynchronous gossip converges to the speed-weighted
// objective, not the plain sum) and the fast nodes' own models carry the
// most noise. With speed scaling, each node multiplies its learning rate
// by m/r, where r is its own samples/s and m the median of the rates it
// hears (its own included): every node's data then moves the average
// model alike per second, and the swarm's average moves as fast as if
// every node ran at the median speed (the step-size scaling of Asynchronous
// Gradient Push, arXiv 1803.08950). The median, not the mean, so that a
// peer announcing an absurd rate cannot raise everyone's rate.
type LRScaling string

// The scalings.
const (
	LRScalingNone   LRScaling = "none"
	LRScalingSpeed  LRScaling = "speed"
	LRScalingMerges LRScaling = "merges"
)

// maxSpeedScale bounds the factor speed scaling applies, both ways: a node
// more than this many times slower or faster than the median keeps the
// factor of one that is exactly so.
const maxSpeedScale = 8.0

// ParseLRScaling parses "merges", "speed" or "none".
func ParseLRScaling(s string) (LRScaling, error) {
	switch v := LRScaling(s); v {
	case LRScalingNone, LRScalingSpeed, LRScalingMerges:
		return v, nil
	}
	return "", fmt.Errorf("lr-scaling %q: want merges, speed or none", s)
}

// lrScaler is a trainer whose learning rate the node can scale.
type lrScaler interface{ SetLRScale(x float64) }

// speedScale is the factor for a node at own samples/s among peers at
// rates: the median of all of them over own, within [1/maxSpeedScale,
// maxSpeedScale] (the median of an even count is the mean of the two
// middle ones); 1 while our rate is unknown or no peer's is.
func speedScale(own float64, rates []float64) float64 {
	if !(own > 0) || math.IsInf(own, 0) {
		return 1
	}
	all := []float64{own}
	for _, r := range rates {
		if r > 0 && !math.IsInf(r, 0) {
			all = append(all, min(r, clockMaxRate))
		}
	}
	if len(all) < 2 {
		return 1
	}
	slices.Sort(all)
	m := (all[(len(all)-1)/2] + all[len(all)/2]) / 2
	return min(max(m/own, 1/maxSpeedScale), maxSpeedScale)
}

// scaleLR sets the learning-rate factor, in gossip mode, from the
// announced rates (speed scaling) or from the node's own steps per merge
// (merge scaling); the trainer loop hands it to the trainer before its next
// step (applyLRScale). Only the watcher calls it.
func (n *Node) scaleLR(obs []clockObservation) {
	if _, ok := n.trainer.(lrScaler); !ok || n.cfg.Mode != ModeGossip {
		return
	}
	// The status's lr is the rate applied, the factor included; its
	// lr_scale the factor.
	var x float64
	switch n.cfg.LRScaling {
	case LRScalingSpeed:
		rates := make([]float64, 0, len(obs))
		for _, o := range obs {
			rates = append(rates, o.Rate)
		}
		x = speedScale(n.trainer.Stats().SamplesPerSec, rates)
	case LRScalingMerges:
		x = n.mergeRate.Observe(n.trainer.Stats().Steps, n.Merges())
	default:
		return
	}
	setF64(&n.lrScale, x)
}

// applyLRScale hands the trainer the factor scaleLR set last, if it
// changed: called by the trainer loop before a step.
func (l *trainLoop) applyLRScale() {
	b := l.n.lrScale.Load()
	if b == 0 || b == l.lrScale {
		return
	}
	if s, ok := l.n.trainer.(lrScaler); ok {
		s.SetLRScale(math.Float64frombits(b))
		l.lrScale = b
	}
}
