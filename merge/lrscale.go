package merge

import "math"

// A gossip node's learning rate follows its merges (the node's
// --lr-scaling merges, the default): it multiplies the configured rate by
// sqrt(LRScaleRef / H), within [1, LRScaleMax], where H is its local steps
// per merge (either direction). With merges every few steps the swarm's
// models stay close and their average moves like one model taking every
// node's steps at the rate a synchronous run of the same batches wants;
// with rarer merges each model drifts from the others by about lr^2 * H
// between two merges, so the rate falls as 1/sqrt(H). docs/protocol.md
// says why the bounds are where they are.
const (
	// LRScaleRef is the steps per merge at and above which the factor is 1.
	LRScaleRef = 48.0
	// LRScaleMax is the largest factor, reached at LRScaleRef/LRScaleMax^2
	// steps per merge (12) or fewer.
	LRScaleMax = 2.0
)

// MergeRate follows a node's local steps per merge, as moving averages of
// the steps and the merges between two ticks. The zero value is ready.
type MergeRate struct {
	started       bool
	steps, merges int64   // the totals at the last tick
	ds, dm        float64 // moving averages of their increments
}

// rateKeep is the weight of the past in the moving averages, per tick
// (the node ticks every 0.5 s: about 1.5 s of memory).
const rateKeep = 0.7

// Observe takes the totals of steps and merges at a tick and returns the
// learning-rate factor they call for.
func (r *MergeRate) Observe(steps, merges int64) float64 {
	if !r.started || steps < r.steps || merges < r.merges {
		// The first tick, or counters that went back (a restored
		// checkpoint): start over from here.
		*r = MergeRate{started: true, steps: steps, merges: merges}
		return 1
	}
	r.ds = rateKeep*r.ds + (1-rateKeep)*float64(steps-r.steps)
	r.dm = rateKeep*r.dm + (1-rateKeep)*float64(merges-r.merges)
	r.steps, r.merges = steps, merges
	return LRScale(r.ds, r.dm)
}

// LRScale is the learning-rate factor for steps local steps against
// merges merges over the same time: sqrt(LRScaleRef / H) for H = steps /
// merges, within [1, LRScaleMax]; 1 with no merges.
func LRScale(steps, merges float64) float64 {
	if !(merges > 0) || !(steps >= 0) || math.IsInf(steps, 0) || math.IsInf(merges, 0) {
		return 1
	}
	h := steps / merges
	if h <= 0 {
		return LRScaleMax
	}
	return min(max(math.Sqrt(LRScaleRef/h), 1), LRScaleMax)
}
