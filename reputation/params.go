package reputation

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrBadParams is wrapped by every error Params.Validate and New return.
var ErrBadParams = errors.New("reputation: bad params")

// Verdict is one observation about a peer.
type Verdict uint8

// The verdicts, from the one that earns credit to the ones that cost it.
const (
	Accepted            Verdict = iota // a merge of its model was applied
	Clipped                            // applied, but its update was clipped to the radius
	Rejected                           // a frame/message refused: malformed, checksum, size, truncated
	FingerprintMismatch                // sent a model of another architecture/dataset/network
	NonFinite                          // NaN or Inf in a model
	Outlier                            // update norm far beyond the recent population: refused
	LossJump                           // candidate merge failed validation on the local holdout: refused
	Timeout                            // an exchange with it timed out
	ProtocolViolation                  // floods, wrong dimensions, protocol errors
	NumVerdicts                        // count, not a verdict
)

var verdictNames = [NumVerdicts]string{
	"accepted", "clipped", "rejected", "fingerprint_mismatch", "non_finite",
	"outlier", "loss_jump", "timeout", "protocol_violation",
}

// String returns the snake_case name used in metrics and JSON.
func (v Verdict) String() string {
	if v < NumVerdicts {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// State is what the node should do with a peer.
type State uint8

// The states, from harmless to shut out. Each includes the ones before it:
// a disconnected peer is also ignored.
const (
	OK           State = iota
	Ignored            // score below IgnoreBelow: not chosen as partner, its models not merged
	Disconnected       // below DisconnectBelow: also close connections to it
	Banned             // below BanBelow (or restored ban): refuse connections until BannedUntil
)

var stateNames = [...]string{"ok", "ignored", "disconnected", "banned"}

// String returns "ok", "ignored", "disconnected" or "banned".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Params sets how verdicts move a peer's score and where the score changes
// what the node does. See the package documentation for why the defaults
// are what they are.
type Params struct {
	// Weights[v] is added to the score on each verdict v. Accepted must be
	// >= 0; every other verdict must be <= 0 (Clipped may be 0).
	Weights [NumVerdicts]float64
	// MaxScore caps the score from above (credit a long honest history can
	// bank), > 0.
	MaxScore float64
	// HalfLife: the score decays exponentially towards 0 with this half
	// life, > 0.
	HalfLife time.Duration
	// Thresholds, all < 0 and 0 > IgnoreBelow > DisconnectBelow > BanBelow.
	// A score strictly below a threshold takes the peer to that state.
	IgnoreBelow, DisconnectBelow, BanBelow float64
	// BanFor is how long a ban lasts, > 0. When it expires the peer starts
	// over at score 0.
	BanFor time.Duration
	// MaxPeers bounds the peers tracked (memory bound against Sybil churn),
	// > 0. When full, the entry with the oldest last verdict that is not
	// banned is evicted; if every entry is banned, the ban that ends first.
	MaxPeers int
}

// DefaultParams returns the parameters the package documentation argues
// for: an honest peer is never banned, a peer sending only bad models is
// banned within a handful of exchanges.
func DefaultParams() Params {
	var w [NumVerdicts]float64
	w[Accepted] = 1
	w[Clipped] = 0
	w[Rejected] = -1.5
	w[FingerprintMismatch] = -5
	w[NonFinite] = -20
	w[Outlier] = -5
	w[LossJump] = -5
	w[Timeout] = -0.5
	w[ProtocolViolation] = -10
	return Params{
		Weights:         w,
		MaxScore:        20,
		HalfLife:        5 * time.Minute,
		IgnoreBelow:     -10,
		DisconnectBelow: -20,
		BanBelow:        -40,
		BanFor:          time.Hour,
		MaxPeers:        4096,
	}
}

// Validate reports every bad field at once, each error wrapping
// ErrBadParams and naming the field.
func (p Params) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadParams}, args...)...))
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	for v := range NumVerdicts {
		w := p.Weights[v]
		switch {
		case !finite(w):
			bad("Weights[%v] = %v: must be finite", v, w)
		case v == Accepted && w < 0:
			bad("Weights[%v] = %v: must be >= 0", v, w)
		case v != Accepted && w > 0:
			bad("Weights[%v] = %v: a penalty must be <= 0", v, w)
		}
	}
	if !finite(p.MaxScore) || p.MaxScore <= 0 {
		bad("MaxScore = %v: must be finite and > 0", p.MaxScore)
	}
	if p.HalfLife <= 0 {
		bad("HalfLife = %v: must be > 0", p.HalfLife)
	}
	thresholds := []struct {
		name       string
		v, above   float64
		aboveField string
	}{
		{"IgnoreBelow", p.IgnoreBelow, 0, "0"},
		{"DisconnectBelow", p.DisconnectBelow, p.IgnoreBelow, "IgnoreBelow"},
		{"BanBelow", p.BanBelow, p.DisconnectBelow, "DisconnectBelow"},
	}
	for _, t := range thresholds {
		switch {
		case !finite(t.v):
			bad("%s = %v: must be finite", t.name, t.v)
		case !(t.v < t.above):
			bad("%s = %v: must be < %s (%v)", t.name, t.v, t.aboveField, t.above)
		}
	}
	if p.BanFor <= 0 {
		bad("BanFor = %v: must be > 0", p.BanFor)
	}
	if p.MaxPeers <= 0 {
		bad("MaxPeers = %d: must be > 0", p.MaxPeers)
	}
	return errors.Join(errs...)
}

// floor is the lowest score kept, and what AppScore reports for a banned
// peer: far enough below BanBelow that a banned peer ranks under every
// unbanned one, finite even for extreme weights.
func (p *Params) floor() float64 {
	return max(p.BanBelow*10, -math.MaxFloat64)
}

// stateOf classifies a score of a peer that is not banned.
func (p *Params) stateOf(score float64) State {
	switch {
	case score < p.DisconnectBelow:
		return Disconnected
	case score < p.IgnoreBelow:
		return Ignored
	default:
		return OK
	}
}
