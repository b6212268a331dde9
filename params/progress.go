package params

import (
	"errors"
	"math"
)

// Progress estimates how many training samples a model embodies. A local step
// adds its batch size; a merge with weight a mixes progress exactly as it
// mixes the parameters: p <- (1-a) p + a p_remote. It can therefore fall when
// a fast model mixes in an older one, which is the truth about the blend.
type Progress float64

// Step returns the progress after one local step on batch samples.
func (p Progress) Step(batch int) Progress { return p + Progress(batch) }

// Mix returns (1-a) p + a remote, the progress of the merged model.
func (p Progress) Mix(remote Progress, a float64) Progress {
	return Progress((1-a)*float64(p) + a*float64(remote))
}

// Valid reports whether p could describe a real model: finite and not negative.
func (p Progress) Valid() bool {
	f := float64(p)
	return !math.IsNaN(f) && !math.IsInf(f, 0) && f >= 0
}

// ErrNonFinite reports a NaN or Inf in a parameter vector.
var ErrNonFinite = errors.New("params: vector holds NaN or Inf")
