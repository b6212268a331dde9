package averaging

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/meshtrain/meshtrain/params"
)

// ErrBadRadiusConfig is wrapped by every RadiusConfig.Validate and
// NewRadius error.
var ErrBadRadiusConfig = errors.New("averaging: bad radius config")

// MaxRadiusWindow bounds RadiusConfig.Window: the window is sorted on every
// observation, which is negligible next to a merge at this size.
const MaxRadiusWindow = 4096

// RadiusConfig tunes a Radius. Zero fields take the defaults of
// DefaultRadiusConfig.
type RadiusConfig struct {
	// Window is how many accepted distances are remembered, in merges
	// (1..MaxRadiusWindow, default 64). A longer window reacts more slowly
	// to the distances shrinking as training converges, and an attacker
	// needs more merges to move it.
	Window int
	// MinSamples is how many distances must be remembered before the
	// radius and the outlier test apply (1..Window, default 8): before
	// that, Radius() is +Inf and Outlier() false, since a median of two or
	// three merges says little about the honest spread.
	MinSamples int
	// Scale sets radius = Scale * median of the window (> 1, default 2).
	// It must exceed 1: Observe stores distances capped at the radius, so
	// with Scale <= 1 the median could never grow and honest distances
	// that grow (a raised learning rate, peers drifting apart between
	// merges) would be clipped for ever.
	Scale float64
	// OutlierScale marks a distance above OutlierScale * median as an
	// outlier (>= Scale, default 6): such a model is not clipped and merged
	// but refused, and is evidence against the peer.
	OutlierScale float64
}

// DefaultRadiusConfig returns Window 64, MinSamples 8, Scale 2 and
// OutlierScale 6.
func DefaultRadiusConfig() RadiusConfig {
	return RadiusConfig{Window: 64, MinSamples: 8, Scale: 2, OutlierScale: 6}
}

// withDefaults fills the zero fields from DefaultRadiusConfig.
func (c RadiusConfig) withDefaults() RadiusConfig {
	d := DefaultRadiusConfig()
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.MinSamples == 0 {
		c.MinSamples = d.MinSamples
	}
	if c.Scale == 0 {
		c.Scale = d.Scale
	}
	if c.OutlierScale == 0 {
		c.OutlierScale = d.OutlierScale
	}
	return c
}

// Validate reports every bad field at once, after the zero fields have
// taken their defaults.
func (c RadiusConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Window < 1 || c.Window > MaxRadiusWindow {
		errs = append(errs, fmt.Errorf("%w: window %d not in [1, %d]", ErrBadRadiusConfig, c.Window, MaxRadiusWindow))
	}
	// Only a valid window bounds MinSamples, so one bad field is one error.
	if c.MinSamples < 1 || (c.MinSamples > c.Window && c.Window >= 1) {
		errs = append(errs, fmt.Errorf("%w: min samples %d not in [1, window %d]", ErrBadRadiusConfig, c.MinSamples, c.Window))
	}
	if !(c.Scale > 1) || math.IsInf(c.Scale, 1) {
		errs = append(errs, fmt.Errorf("%w: scale %v not finite and > 1", ErrBadRadiusConfig, c.Scale))
	}
	if !(c.OutlierScale >= c.Scale) || math.IsInf(c.OutlierScale, 1) {
		errs = append(errs, fmt.Errorf("%w: outlier scale %v not finite and >= scale %v", ErrBadRadiusConfig, c.OutlierScale, c.Scale))
	}
	return errors.Join(errs...)
}

// Radius is the state a node keeps for self-centred clipping (as in
// ClippedGossip): each node clips the delta remote - local of a merge to a
// ball around its own model, so a peer, however malicious, moves the model
// by at most a*radius per merge. The radius must be large enough that
// honest merges pass unclipped, and small enough that a poisoned model does
// little; it cannot be a constant, because the distance between honest
// models shrinks by orders of magnitude as training converges.
//
// Radius therefore follows the distances of recent accepted merges:
// radius = Scale * median of the last Window of them. A median rather than a
// mean or maximum, because one huge distance moves a mean without bound,
// while the median stays between the smallest and largest honest distances
// as long as fewer than half of the remembered ones come from attackers.
// The same median marks outliers: a distance many times the usual one is a
// diverged or malicious model rather than a peer a few steps apart.
//
// Radius is pure state: the caller decides which merges count as accepted
// and feeds their distances to Observe. It is not safe for concurrent use
// (the node's single averager goroutine owns it).
type Radius struct {
	cfg RadiusConfig
	// ring holds the last len(ring) observations; next is where the next
	// one goes once the ring is full.
	ring []float64
	next int
	// sorted is the scratch slice the median is taken from, so that no
	// call allocates.
	sorted []float64
	// median of ring, recomputed on every Observe so that Radius, Outlier
	// and Check are O(1).
	median float64
}

// NewRadius returns an empty Radius, or the Validate error of c.
func NewRadius(c RadiusConfig) (*Radius, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	return &Radius{
		cfg:    c,
		ring:   make([]float64, 0, c.Window),
		sorted: make([]float64, 0, c.Window),
	}, nil
}

// Config returns the configuration in effect, defaults filled in.
func (r *Radius) Config() RadiusConfig { return r.cfg }

// Len returns how many distances are remembered (at most Window).
func (r *Radius) Len() int { return len(r.ring) }

// warm reports whether enough distances are remembered to judge by.
func (r *Radius) warm() bool { return len(r.ring) >= r.cfg.MinSamples }

// Observe records the distance of a merge that was accepted. It stores
// min(d, current radius), so peers beyond the radius cannot inflate it:
// while fewer than half of the observations come from attackers, the median
// stays within the honest distances. Even an attacker with a majority of
// the window must first fill half of it with distances at the radius to
// lift the median, so the radius grows at most Scale-fold per half window
// of merges rather than jumping to whatever it is sent. Honest distances
// that grow climb the same way, which is why Scale must exceed 1.
//
// A d that is not a positive finite number is ignored: NaN, ±Inf and
// negative values are not distances (Check errors on those models), and
// a distance of exactly zero (a merge with an identical model, as between
// two untrained nodes started from one seed) says nothing about the spread.
// Storing zeros could make the median zero, and then, since stored
// distances are capped at the radius, it would stay zero for ever and
// every later merge would be clipped to nothing.
func (r *Radius) Observe(d float64) {
	if !(d > 0) || math.IsInf(d, 1) {
		return
	}
	d = math.Min(d, r.Radius())
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, d)
	} else {
		r.ring[r.next] = d
		r.next = (r.next + 1) % len(r.ring)
	}
	r.sorted = append(r.sorted[:0], r.ring...)
	slices.Sort(r.sorted)
	// The lower median: for an even count, the smaller of the two middle
	// values, so attackers that send huge distances need strictly more
	// than half of the window, not just half, to lift it.
	r.median = r.sorted[(len(r.sorted)-1)/2]
}

// Median returns the (lower) median of the remembered distances, 0 until
// any are.
func (r *Radius) Median() float64 { return r.median }

// Radius returns the clipping radius, Scale * Median(), or +Inf (clip
// nothing) until MinSamples distances are remembered.
func (r *Radius) Radius() float64 {
	if !r.warm() {
		return math.Inf(1)
	}
	return r.cfg.Scale * r.median
}

// Outlier reports whether a model at distance d from the local one should
// be refused: d > OutlierScale * Median() once MinSamples distances are
// remembered. A d that is not a distance (NaN, ±Inf, negative) is an
// outlier always, warm or not.
func (r *Radius) Outlier(d float64) bool {
	if !(d >= 0) || math.IsInf(d, 1) {
		return true
	}
	return r.warm() && d > r.cfg.OutlierScale*r.median
}

// Verdict is what Check found about a remote model.
type Verdict struct {
	// Distance is ||remote - local||.
	Distance float64
	// Radius is the clipping radius at the time of the check (+Inf before
	// warm-up).
	Radius float64
	// Clip is the factor c = min(1, Radius/Distance) that clipping would
	// scale the delta by: 1 when the model is within the radius.
	Clip float64
	// Outlier reports that the model should be refused rather than
	// clipped.
	Outlier bool
}

// Check classifies a remote model before a merge, without writing: distance
// to local, whether it is an outlier, and the clip factor c = min(1,
// radius/d). It neither observes the distance (the caller does, once the
// merge is accepted) nor allocates.
//
// A length mismatch is an error wrapping ErrLength, and a NaN or Inf in
// either vector an error wrapping params.ErrNonFinite (the distance sum is
// in float64, so finite float32 vectors always have a finite distance). On
// error the Verdict is zero.
func (r *Radius) Check(local, remote []float32) (Verdict, error) {
	d, err := Distance(local, remote)
	if err != nil {
		return Verdict{}, fmt.Errorf("averaging: check: %w", err)
	}
	if math.IsNaN(d) || math.IsInf(d, 0) {
		return Verdict{}, fmt.Errorf("averaging: check: %w", params.ErrNonFinite)
	}
	rad := r.Radius()
	c := 1.0
	if d > rad {
		c = rad / d
	}
	return Verdict{Distance: d, Radius: rad, Clip: c, Outlier: r.Outlier(d)}, nil
}
