package train

import (
	"fmt"

	"github.com/meshtrain/meshtrain/averaging"
)

// Average is the moving average of a model's parameters that a node
// reports as its model (Config.EMA), which also takes in the peers'
// models the parameters merge (Config.EMAPeers). The Go trainer keeps one
// of its parameters, a node with an external trainer one of the models
// the trainer pushes. Its owner serializes the calls. A nil *Average is
// off: its methods do nothing and Values is nil.
type Average struct {
	ema, peers float64
	v          []float32
	n          int64 // updates since the last reset
}

// NewAverage returns an average of a model of size values at a decay of
// ema per step that takes in merged models at peers of an update's
// weight; nil (off) when ema is 0. The caller has validated ema and
// peers (Config.Validate's ranges) and resets it at the model.
func NewAverage(size int, ema, peers float64) *Average {
	if !(ema > 0) {
		return nil
	}
	return &Average{ema: ema, peers: peers, v: make([]float32, size)}
}

// Values is the average itself, nil when off: the owner's to read under
// its lock, not to keep.
func (a *Average) Values() []float32 {
	if a == nil {
		return nil
	}
	return a.v
}

// Updates counts the updates since the average was last reset.
func (a *Average) Updates() int64 {
	if a == nil {
		return 0
	}
	return a.n
}

// Reset restarts the average at w.
func (a *Average) Reset(w []float32) {
	if a == nil {
		return
	}
	copy(a.v, w)
	a.n = 0
}

// Restore sets the average to v, n updates after its last reset (a
// checkpoint's). The caller has checked v's length and values.
func (a *Average) Restore(v []float32, n int64) {
	if a == nil {
		return
	}
	copy(a.v, v)
	a.n = n
}

// Fold takes in the parameters w, steps steps after the last update, at a
// decay of AverageDecaySteps. A fold of no steps does nothing.
func (a *Average) Fold(w []float32, steps int64) {
	if a == nil || steps <= 0 {
		return
	}
	d := AverageDecaySteps(a.ema, steps, a.n)
	a.n++
	_ = averaging.Mix(a.v, w, 1-d) // same length, weight in [0, 1]
}

// In takes in v, a peer's model the parameters have just merged, as one
// of the average's updates at share (in [0, 1], the merge's weight over
// its base weight: less for a stale model) times the peers' weight of an
// update's weight (AverageInWeight). The average then spans the models
// the swarm holds rather than only this node's own path between merges.
// Without an average, or at a share of 0, it does nothing. v must be
// finite (the merge checked it) and as long as the model.
func (a *Average) In(v []float32, share float64) error {
	if a == nil {
		return nil
	}
	if len(v) != len(a.v) {
		return fmt.Errorf("train: average in %d values, want %d", len(v), len(a.v))
	}
	w := AverageInWeight(a.ema, a.peers, a.n, share)
	if !(w > 0) {
		return nil
	}
	a.n++
	return averaging.Mix(a.v, v, w)
}
