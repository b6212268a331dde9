package averaging

import "fmt"

// MomentumPolicy says what a merge does to the local optimizer's momentum
// buffer m, given the merge weight a the parameters were mixed with.
//
// A merge moves the parameters without a gradient step, so the velocity the
// optimizer carries no longer describes the trajectory of the blended model:
//
//   - keep: m is left alone. Cheapest; right when merges are small nudges
//     (low a, or peers that already agree), since the local descent
//     direction is still mostly valid.
//   - reset: m <- 0 whenever something was merged (a > 0). Discards a
//     direction that may point back along the pre-merge path; costs the
//     momentum warm-up (about 1/(1-beta) steps) after every merge.
//   - mix: m <- (1-a) m + a m_remote, the same blend as the parameters, so
//     the velocity keeps describing the blended model. When the peer did not
//     send its momentum (the usual case: snapshots carry parameters only),
//     m_remote is taken as 0, i.e. m <- (1-a) m. That is the only choice
//     that needs no invented direction: the local share (1-a) of the model
//     keeps its share of the velocity, the remote share contributes none. It
//     also sits between the two extremes: a -> 0 is keep, a -> 1 is reset.
//
// The zero value is MomentumKeep.
type MomentumPolicy uint8

// The policies, named "keep", "reset" and "mix" in configs and flags.
const (
	MomentumKeep MomentumPolicy = iota
	MomentumReset
	MomentumMix
)

// DefaultMomentumPolicy is keep: a merge leaves the momentum alone. A
// model that merges every few of its steps (the default pace) would lose
// most of its momentum to mix, which scales it by 1-a at every merge
// without the peer's momentum to mix in; measured, that needed more
// samples to reach the target (docs/benchmarks.md, ablation).
const DefaultMomentumPolicy = MomentumKeep

var momentumNames = [...]string{MomentumKeep: "keep", MomentumReset: "reset", MomentumMix: "mix"}

// ParseMomentumPolicy parses "keep", "reset" or "mix".
func ParseMomentumPolicy(s string) (MomentumPolicy, error) {
	for p, name := range momentumNames {
		if s == name {
			return MomentumPolicy(p), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want keep, reset or mix)", ErrBadMomentumPolicy, s)
}

// String returns the name ParseMomentumPolicy accepts.
func (p MomentumPolicy) String() string {
	if p.valid() {
		return momentumNames[p]
	}
	return fmt.Sprintf("MomentumPolicy(%d)", int(p))
}

// MarshalText lets a policy sit in a JSON or flag-backed config as its name.
func (p MomentumPolicy) MarshalText() ([]byte, error) {
	if !p.valid() {
		return nil, fmt.Errorf("%w: %d", ErrBadMomentumPolicy, int(p))
	}
	return []byte(momentumNames[p]), nil
}

// UnmarshalText is the inverse of MarshalText.
func (p *MomentumPolicy) UnmarshalText(b []byte) error {
	v, err := ParseMomentumPolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

func (p MomentumPolicy) valid() bool { return int(p) < len(momentumNames) }

// Apply updates the momentum buffer m for a merge of weight a in [0, 1].
// remote is the peer's momentum or nil when it is unknown; when given it
// must have m's length. Apply does not allocate and leaves m untouched on
// error. It does not check remote for NaN or Inf: Merger.Merge does.
func (p MomentumPolicy) Apply(m, remote []float32, a float64) error {
	if !p.valid() {
		return fmt.Errorf("%w: %d", ErrBadMomentumPolicy, int(p))
	}
	if err := checkWeight(a); err != nil {
		return err
	}
	if remote != nil && len(remote) != len(m) {
		return fmt.Errorf("%w: remote momentum has %d values, local %d", ErrLength, len(remote), len(m))
	}
	p.apply(m, remote, a)
	return nil
}

// apply is Apply without the checks.
func (p MomentumPolicy) apply(m, remote []float32, a float64) {
	if a == 0 {
		return // nothing was merged, so the velocity is still exact
	}
	switch p {
	case MomentumReset:
		clear(m)
	case MomentumMix:
		if remote != nil {
			mix(m, remote, float32(a))
		} else {
			scale(m, float32(1-a))
		}
	}
}
