package averaging

import (
	"errors"
	"fmt"
	"math"

	"github.com/meshtrain/meshtrain/params"
)

// DefaultAlpha is the base merge weight a0: with a fresh remote model and
// a0 = 0.5 both sides of an exchange land on the pair's mean.
const DefaultAlpha = 0.5

// DefaultStaleness is the staleness spec DefaultMerger uses: FedAsync's
// polynomial decay with its suggested exponent, which halves the weight of
// a model three steps old and still gives a model 99 steps old a
// tenth of it, so slow peers keep contributing.
const DefaultStaleness = "poly:0.5"

// StalenessSteps returns how many of the receiver's steps a remote model is
// behind: s = max(0, local - remote) / batch, where batch is the receiver's
// local batch size in samples. A remote model ahead of the local one is not
// stale (s = 0).
func StalenessSteps(local, remote params.Progress, batch int) (float64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("%w: %d", ErrBadBatch, batch)
	}
	if !local.Valid() {
		return 0, fmt.Errorf("%w: local progress %v", ErrBadProgress, float64(local))
	}
	if !remote.Valid() {
		return 0, fmt.Errorf("%w: remote progress %v", ErrBadProgress, float64(remote))
	}
	return math.Max(0, float64(local-remote)) / float64(batch), nil
}

// checkWeight reports a weight outside [0, 1] (NaN included).
func checkWeight(a float64) error {
	if !(a >= 0 && a <= 1) {
		return fmt.Errorf("%w: %v", ErrBadWeight, a)
	}
	return nil
}

// Mix sets dst <- (1-a) dst + a src in place, for a in [0, 1]. It does not
// allocate and leaves dst untouched on error.
//
// It computes dst + a(src-dst) in float32, so a = 0 and src == dst are
// exact no-ops (merging a model with an identical one changes nothing) and
// a = 1 lands within rounding of src. NaN and Inf in src propagate: callers
// that take src from the network check it first (Merger.Merge does).
func Mix(dst, src []float32, a float64) error {
	if len(dst) != len(src) {
		return fmt.Errorf("%w: mix of %d into %d values", ErrLength, len(src), len(dst))
	}
	if err := checkWeight(a); err != nil {
		return err
	}
	if a == 0 {
		return nil
	}
	mix(dst, src, float32(a))
	return nil
}

// mix is the hot loop: eight values per instruction on amd64 with AVX
// (the same unfused float32 subtract, multiply and add as mixScalar, so
// the same bits), mixScalar for the rest.
func mix(dst, src []float32, a float32) {
	n := mixVec(dst, src[:len(dst)], a)
	mixScalar(dst[n:], src[n:], a)
}

// mixScalar is mix unrolled by four by hand (the compiler does not) so
// that one bounds check and one loop branch serve four elements. Each
// product is rounded to float32 before the add (the explicit conversion):
// Go fuses x*y + z into one multiply-add on arm64 and on amd64 built for
// GOAMD64=v3, which would give other bits than the AVX loop and than a
// build for another machine.
func mixScalar(dst, src []float32, a float32) {
	src = src[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d := dst[i : i+4 : i+4]
		s := src[i : i+4 : i+4]
		d[0] += float32(a * (s[0] - d[0]))
		d[1] += float32(a * (s[1] - d[1]))
		d[2] += float32(a * (s[2] - d[2]))
		d[3] += float32(a * (s[3] - d[3]))
	}
	for ; i < len(dst); i++ {
		dst[i] += float32(a * (src[i] - dst[i]))
	}
}

// scale sets v <- c v.
func scale(v []float32, c float32) {
	for i := range v {
		v[i] *= c
	}
}

// Merger is a merge rule: the base weight, how it decays with staleness,
// and what happens to the optimizer's momentum. The zero value is not
// usable; start from DefaultMerger.
type Merger struct {
	// Alpha is the base weight a0 in (0, 1] given to a fresh remote model.
	Alpha float64
	// Staleness decays the weight of older models: a = Alpha * f(s).
	Staleness Staleness
	// Lag is how s is measured from the two models' progress.
	Lag Lag
	// Momentum says what a merge does to the local momentum buffer.
	Momentum MomentumPolicy
	// Ahead is the weight of a remote model ahead of ours.
	Ahead Ahead
}

// DefaultMerger returns Alpha = DefaultAlpha, Staleness = DefaultStaleness,
// Lag = DefaultLag, Momentum = DefaultMomentumPolicy and Ahead =
// DefaultAhead.
func DefaultMerger() Merger {
	// Built directly so no error path exists; a test checks it equals
	// ParseStaleness(DefaultStaleness).
	return Merger{Alpha: DefaultAlpha, Staleness: polyStaleness{p: 0.5}, Lag: DefaultLag, Momentum: DefaultMomentumPolicy, Ahead: DefaultAhead}
}

// Validate reports every bad field at once.
func (m Merger) Validate() error {
	var errs []error
	if !(m.Alpha > 0 && m.Alpha <= 1) {
		errs = append(errs, fmt.Errorf("%w: alpha %v", ErrBadAlpha, m.Alpha))
	}
	if m.Staleness == nil {
		errs = append(errs, fmt.Errorf("%w: none set", ErrBadStaleness))
	}
	if !m.Lag.valid() {
		errs = append(errs, fmt.Errorf("%w: %d", ErrBadLag, int(m.Lag)))
	}
	if !m.Momentum.valid() {
		errs = append(errs, fmt.Errorf("%w: %d", ErrBadMomentumPolicy, int(m.Momentum)))
	}
	if !m.Ahead.valid() {
		errs = append(errs, fmt.Errorf("%w: %d", ErrBadAhead, int(m.Ahead)))
	} else if m.Ahead == AheadPull && m.Lag == LagAge {
		errs = append(errs, fmt.Errorf("%w: pull needs a staleness measured from progress (steps or relative), not age", ErrBadAhead))
	}
	return errors.Join(errs...)
}

// Weight returns the merge weight a = Alpha * f(s) for a model s local steps
// stale, or an error if the rule is invalid or its staleness function
// (possibly not one of ours) leaves [0, 1].
func (m Merger) Weight(s float64) (float64, error) {
	_, a, err := m.weight(s)
	return a, err
}

// weight returns the decay f(s) and the weight a = Alpha * f(s).
func (m Merger) weight(s float64) (f, a float64, err error) {
	if err := m.Validate(); err != nil {
		return 0, 0, err
	}
	f = m.Staleness.Weight(s)
	if !(f >= 0 && f <= 1) {
		return 0, 0, fmt.Errorf("%w: %s gave %v at s=%v", ErrBadStaleness, m.Staleness, f, s)
	}
	return f, m.Alpha * f, nil
}

// Local is the receiver's side of a merge. Params, Momentum and *Progress
// are updated in place; the field types match what a trainer hands to its
// merge hook between two steps.
type Local struct {
	// Fingerprint must equal the remote snapshot's.
	Fingerprint params.Fingerprint
	Params      []float32
	// Momentum is the optimizer's momentum buffer, the same length as
	// Params; nil when the optimizer keeps none.
	Momentum []float32
	Progress *params.Progress
	// Batch is the local batch size in samples: staleness (LagSteps) is
	// counted in local steps of this size.
	Batch int
}

// Outcome says what a merge did, for the caller to log and count.
type Outcome struct {
	// Staleness is s of the remote model, measured per Merger.Lag.
	Staleness float64
	// Decay is f(s).
	Decay float64
	// Weight is a = Alpha * f(s), the share of the remote model in the result.
	Weight float64
	// ProgressBefore and ProgressAfter are the local progress around the merge.
	ProgressBefore, ProgressAfter params.Progress
}

// Merge mixes the remote snapshot into local with weight a = Alpha * f(s):
// w <- (1-a) w + a w_remote, p <- (1-a) p + a p_remote, and the momentum
// per m.Momentum (remoteMomentum may be nil: see MomentumPolicy).
//
// Everything is checked before anything is written, so on error local is
// unchanged: the rule, lengths, fingerprints, batch, both progress values,
// and that the remote parameters and momentum are finite (one NaN merged in
// would spread through every later merge). Merge does not allocate.
func (m Merger) Merge(local Local, remote params.Snapshot, remoteMomentum []float32) (Outcome, error) {
	return m.merge(local, remote, remoteMomentum, -1)
}

// MergeAt is Merge with the weight a (in [0,1]) decided beforehand, from
// the staleness at the time of the decision: the merge core computes the
// staleness and the weight once and the node applies them to its live
// model with MergeAt. Outcome.Staleness and Decay are then 0.
func (m Merger) MergeAt(local Local, remote params.Snapshot, remoteMomentum []float32, a float64) (Outcome, error) {
	if err := checkWeight(a); err != nil {
		return Outcome{}, err
	}
	return m.merge(local, remote, remoteMomentum, a)
}

// merge is Merge (a < 0: the weight from the staleness) and MergeAt.
func (m Merger) merge(local Local, remote params.Snapshot, remoteMomentum []float32, a float64) (Outcome, error) {
	if err := m.Validate(); err != nil {
		return Outcome{}, err
	}
	if local.Fingerprint != remote.Fingerprint {
		return Outcome{}, fmt.Errorf("%w: local %s, remote %s", ErrFingerprint, local.Fingerprint.Short(), remote.Fingerprint.Short())
	}
	if local.Progress == nil {
		return Outcome{}, fmt.Errorf("%w: local progress missing", ErrBadProgress)
	}
	if len(remote.Params) != len(local.Params) {
		return Outcome{}, fmt.Errorf("%w: remote has %d params, local %d", ErrLength, len(remote.Params), len(local.Params))
	}
	if local.Momentum != nil && len(local.Momentum) != len(local.Params) {
		return Outcome{}, fmt.Errorf("%w: local momentum has %d values, params %d", ErrLength, len(local.Momentum), len(local.Params))
	}
	if remoteMomentum != nil && len(remoteMomentum) != len(local.Params) {
		return Outcome{}, fmt.Errorf("%w: remote momentum has %d values, params %d", ErrLength, len(remoteMomentum), len(local.Params))
	}
	var s, f float64
	if a < 0 {
		var err error
		if s, f, a, err = m.Weigh(*local.Progress, remote.Progress, remote.Age, local.Batch); err != nil {
			return Outcome{}, err
		}
	} else if !local.Progress.Valid() || !remote.Progress.Valid() {
		return Outcome{}, fmt.Errorf("%w: local %v, remote %v", ErrBadProgress, float64(*local.Progress), float64(remote.Progress))
	}
	if err := params.CheckFinite(remote.Params); err != nil {
		return Outcome{}, fmt.Errorf("averaging: remote params: %w", err)
	}
	if remoteMomentum != nil && m.Momentum == MomentumMix && local.Momentum != nil {
		if err := params.CheckFinite(remoteMomentum); err != nil {
			return Outcome{}, fmt.Errorf("averaging: remote momentum: %w", err)
		}
	}

	before := *local.Progress
	if a > 0 {
		mix(local.Params, remote.Params, float32(a))
	}
	if local.Momentum != nil {
		m.Momentum.apply(local.Momentum, remoteMomentum, a)
	}
	*local.Progress = before.Mix(remote.Progress, a)
	return Outcome{
		Staleness:      s,
		Decay:          f,
		Weight:         a,
		ProgressBefore: before,
		ProgressAfter:  *local.Progress,
	}, nil
}
