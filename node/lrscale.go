package node

import (
	"fmt"
	"math"
	"slices"
)

// LRScaling says whether a node scales its learning rate by its speed.
//
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
	LRScalingNone  LRScaling = "none"
	LRScalingSpeed LRScaling = "speed"
)

// maxSpeedScale bounds the factor speed scaling applies, both ways: a node
// more than this many times slower or faster than the median keeps the
// factor of one that is exactly so.
const maxSpeedScale = 8.0

// ParseLRScaling parses "none" or "speed".
func ParseLRScaling(s string) (LRScaling, error) {
	switch v := LRScaling(s); v {
	case LRScalingNone, LRScalingSpeed:
		return v, nil
	}
	return "", fmt.Errorf("lr-scaling %q: want none or speed", s)
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

// scaleLR sets the trainer's learning-rate factor from the announced
// rates, when the node scales by speed.
func (n *Node) scaleLR(obs []clockObservation) {
	s, ok := n.trainer.(lrScaler)
	if !ok || n.cfg.LRScaling != LRScalingSpeed || n.cfg.Mode != ModeGossip {
		return
	}
	rates := make([]float64, 0, len(obs))
	for _, o := range obs {
		rates = append(rates, o.Rate)
	}
	// The status's lr is the rate applied, the factor included.
	s.SetLRScale(speedScale(n.trainer.Stats().SamplesPerSec, rates))
}
