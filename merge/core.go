package merge

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/reputation"
)

// maxAccepted bounds the peers whose accepted merges are counted.
const maxAccepted = 4096

// ErrBadConfig is wrapped by every Config.Validate error.
var ErrBadConfig = errors.New("merge: bad config")

// Config is the merge rule and the trust checks around it.
type Config struct {
	// Merger is the rule: base weight, staleness decay, momentum policy.
	Merger averaging.Merger
	// Batch is our batch size: staleness counts our steps.
	Batch int
	// CatchUp: a peer may not claim more progress than this many samples
	// above ours (a model further ahead is pulled whole, not blended), and
	// the catch-up source is pulled when it is that far ahead; 0
	// disables both.
	CatchUp float64
	// Trust turns the checks on; off, every finite model of our
	// fingerprint and size is merged.
	Trust bool
	// Radius tunes the clipping radius; its OutlierScale the outlier test.
	Radius averaging.RadiusConfig
	// Probation: a peer's first merges are validated on the holdout; then
	// only clipped ones and one in ValidateEvery.
	Probation, ValidateEvery int
	// LossTolerance, LossSlack: a candidate merge whose holdout loss
	// exceeds ours by more than this fraction plus slack is refused.
	LossTolerance, LossSlack float64
	// PlausibleFactor: a model beyond the radius whose own holdout loss
	// exceeds ours times this plus LossSlack is refused as implausible.
	PlausibleFactor float64
	// ChanceLoss is the holdout loss of a model that knows nothing (ln K
	// for a softmax over K classes; 0: unknown). A far model that scores
	// below it on our holdout is never implausible, however low our own
	// loss: on a label-skewed shard our own model's loss is far below
	// what any honest model trained on other labels scores there, and
	// judged against ours alone every honest peer looks like an attacker.
	ChanceLoss float64
	// PeerLossScale (0: off): where at least two other peers' far models
	// were scored on our holdout in the last 30 s, a far model is
	// implausible only if its loss also exceeds this many times the median
	// of their latest losses. On strongly label-skewed shards every honest
	// peer's model scores far above ours and above a guess on our holdout
	// (it never saw our labels); one that points the wrong way scores far
	// above the honest ones.
	PeerLossScale float64
	// OutlierGrace (0: none): a peer's models must keep being outliers
	// this long before refusing one is held against the peer. Early in a
	// run every distance is tiny and a peer whose step lands between two
	// merges is briefly many times farther than the others; an attacker's
	// models stay far. Refused meanwhile, without a verdict.
	OutlierGrace time.Duration
	// Seed seeds the choice of merges validated at random.
	Seed uint64
	// NoHoldout: the trainer has no holdout (an external trainer that
	// scores nothing for us). The checks that need a holdout score are
	// skipped rather than refusing every merge they would judge: models
	// are still fingerprint-, finiteness- and outlier-checked and clipped
	// to the radius, but never validated on a loss.
	NoHoldout bool
}

// Validate reports every bad field at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...))
	}
	if err := c.Merger.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Batch < 1 {
		bad("batch %d must be >= 1", c.Batch)
	}
	if !(c.CatchUp >= 0) || math.IsInf(c.CatchUp, 0) {
		bad("catch-up %v must be finite and >= 0", c.CatchUp)
	}
	if c.Trust {
		if err := c.Radius.Validate(); err != nil {
			errs = append(errs, err)
		}
		if c.Probation < 0 || c.ValidateEvery < 1 {
			bad("probation %d must be >= 0 and validate-every %d >= 1", c.Probation, c.ValidateEvery)
		}
		if !(c.ChanceLoss >= 0) || math.IsInf(c.ChanceLoss, 0) {
			bad("chance loss %v must be finite and >= 0", c.ChanceLoss)
		}
		if c.OutlierGrace < 0 {
			bad("outlier grace %v must be >= 0", c.OutlierGrace)
		}
		if !(c.PeerLossScale >= 0) || math.IsInf(c.PeerLossScale, 1) || (c.PeerLossScale > 0 && c.PeerLossScale < 1) {
			bad("peer loss scale %v must be 0 (off) or finite and >= 1", c.PeerLossScale)
		}
		if !(c.LossTolerance >= 0) || !(c.LossSlack >= 0) || !(c.PlausibleFactor >= 1) {
			bad("loss tolerance %v and slack %v must be >= 0, plausible factor %v >= 1", c.LossTolerance, c.LossSlack, c.PlausibleFactor)
		}
	}
	return errors.Join(errs...)
}

// Reason is why a model was merged or refused.
type Reason uint8

// The reasons. Only the refusals marked "evidence" carry a verdict
// against the peer.
const (
	// Merged: merged as sent.
	Merged Reason = iota
	// MergedClipped: pulled onto the clipping sphere around ours first.
	MergedClipped
	// RefusedBanned: the peer is banned; nothing it sends is looked at.
	RefusedBanned
	// RefusedFingerprint: another model or size (evidence).
	RefusedFingerprint
	// RefusedNonFinite: NaN or Inf in the model (evidence).
	RefusedNonFinite
	// RefusedOutlier: far beyond what the other peers send and beyond the
	// recent accepted merges (evidence).
	RefusedOutlier
	// RefusedImplausible: beyond the radius and its own holdout loss too
	// high (evidence).
	RefusedImplausible
	// RefusedIgnored: the peer's score is below the ignore threshold (what
	// it sent was still judged by the checks above).
	RefusedIgnored
	// RefusedBlend: the candidate merge fails the holdout check. Not held
	// against the peer: the holdout is a sample of our own shard.
	RefusedBlend
	// RefusedNoHoldout: a check needed a holdout score and there is none.
	RefusedNoHoldout
)

var reasonNames = [...]string{"merged", "merged_clipped", "banned", "fingerprint", "non_finite", "outlier",
	"loss_jump", "ignored", "blend_failed", "no_holdout"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", r)
}

// Decision is what to do with one remote model, and what it says about the
// peer.
type Decision struct {
	Merge  bool
	Reason Reason
	// Verdict is the evidence about the peer, when HasVerdict.
	Verdict    reputation.Verdict
	HasVerdict bool
	// Staleness (per Merger.Lag) and Weight (of the remote model) are the
	// merge's, computed once; Distance is ||remote - ours|| before any
	// clipping (0 when not computed).
	Staleness, Weight, Distance float64
	// Validated: the holdout was consulted.
	Validated bool
	// at is the time of the decision, for Applied.
	at time.Time
}

// Input is one remote model to decide on.
type Input struct {
	Peer     string
	Standing reputation.State
	// Local is our model at the decision (a snapshot); Remote the peer's.
	// Decide may clip Remote.Params in place and clamp Remote.Progress.
	Local  params.Snapshot
	Remote *params.Snapshot
	Now    time.Time
	// Loss scores a parameter vector on our holdout; ok false when there
	// is none (then a check that needs it refuses).
	Loss func(w []float32) (loss float64, ok bool, err error)
}

// Core decides merges. It is pure: no goroutines, clock, network or disk;
// the caller passes the time and the holdout score and performs what the
// decision says. One goroutine owns it (the node's averager).
type Core struct {
	cfg    Config
	radius *averaging.Radius
	spread peerSpread
	// near holds each peer's latest distance among the merges applied
	// (before clipping): the clipping radius's second median.
	near     peerSpread
	farLoss  peerSpread // the latest holdout loss of each peer's far model
	accepted map[string]int64
	// outlierSince: when each peer's models began to be outliers (while
	// they still are).
	outlierSince map[string]time.Time
	rng          *rand.Rand
	cand         []float32
}

// New returns a core, or the Validate error of cfg.
func New(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Core{cfg: cfg, accepted: map[string]int64{}, outlierSince: map[string]time.Time{}, rng: rand.New(rand.NewPCG(cfg.Seed, 0x7275737421))}
	if cfg.Trust {
		r, err := averaging.NewRadius(cfg.Radius)
		if err != nil {
			return nil, err
		}
		c.radius = r
	}
	return c, nil
}

// Decide judges a remote model against ours.
func (c *Core) Decide(in Input) Decision {
	remote := in.Remote
	if in.Standing == reputation.Banned {
		return Decision{Reason: RefusedBanned}
	}
	if !in.Local.Progress.Valid() {
		// Our own model is broken: nothing to judge the peer by.
		return Decision{Reason: RefusedNonFinite}
	}
	if remote.Fingerprint != in.Local.Fingerprint || len(remote.Params) != len(in.Local.Params) {
		return refuse(RefusedFingerprint, reputation.FingerprintMismatch)
	}
	if !remote.Progress.Valid() {
		return refuse(RefusedNonFinite, reputation.NonFinite)
	}
	// A peer may not claim more progress than the catch-up threshold above
	// ours: a model further ahead is pulled whole (after validation), never
	// blended, so an inflated claim cannot drag every schedule to its end.
	if lead := c.cfg.CatchUp; lead > 0 && float64(remote.Progress) > float64(in.Local.Progress)+lead {
		remote.Progress = params.Progress(float64(in.Local.Progress) + lead)
	}
	if !c.cfg.Trust {
		if err := params.CheckFinite(remote.Params); err != nil {
			return refuse(RefusedNonFinite, reputation.NonFinite)
		}
		if in.Standing != reputation.OK {
			return Decision{Reason: RefusedIgnored}
		}
		return c.weigh(in, Decision{Merge: true, Reason: Merged})
	}
	v, err := c.radius.Check(in.Local.Params, remote.Params)
	if err != nil {
		return refuse(RefusedNonFinite, reputation.NonFinite)
	}
	// An outlier by both measures: far beyond what the other peers send now
	// (peerSpread), and beyond the outlier factor of recent accepted merges
	// (once the radius has enough of them). Either alone misjudges honest
	// models: the radius's window when every distance grows at once (a
	// warmup), the peers' latest distances when most of them happen to be
	// tiny (peers that just merged with us).
	rc := c.radius.Config()
	d := Decision{Distance: v.Distance, at: in.Now}
	outlier := c.spread.outlier(in.Peer, v.Distance, rc.OutlierScale, in.Now) && (v.Outlier || math.IsInf(v.Radius, 1))
	// The clipping radius is Scale times the larger of two medians: of the
	// recent merges' distances (the radius's window), and of the other
	// peers' distances at their latest merges. The window alone lags when
	// distances grow (it stores them capped at the radius) and, in a
	// mixed-speed swarm, is drawn mostly from the many merges with the
	// peers closest to us, so every merge with a peer further away would
	// be clipped and barely count. One vote per peer, and only merges
	// that passed the checks: a peer cannot widen the radius it is
	// clipped to, nor can models that were refused.
	radius := v.Radius
	if med, enough := c.near.median(in.Peer, in.Now); enough {
		radius = math.Max(radius, rc.Scale*med)
	}
	// Both measures misjudge a peer well ahead of us in a mixed-speed
	// swarm: the slow peers' models sit close to ours (they merge with
	// each other and have moved little), while the fast peer's has moved
	// much further. Its model is judged by our holdout instead (ahead).
	ahead := aheadOf(float64(remote.Progress), float64(in.Local.Progress), c.cfg.CatchUp)
	if !outlier {
		delete(c.outlierSince, in.Peer)
	}
	if outlier && !ahead {
		if startingOver(float64(remote.Progress), float64(in.Local.Progress), c.cfg.CatchUp) {
			// A node that just joined or restarted sends its untrained
			// model until it has pulled one: refused, not held against it.
			return with(d, Decision{Reason: RefusedOutlier})
		}
		if c.outlierLasted(in.Peer, in.Now) {
			return with(d, refuse(RefusedOutlier, reputation.Outlier))
		}
		// Within the grace: judged by the holdout below like a model
		// from a peer ahead of us, but never merged.
	}
	if outlier && c.cfg.NoHoldout {
		// Nothing to judge it by: refused, not held against the peer.
		return with(d, Decision{Reason: RefusedOutlier})
	}
	ownLoss := math.NaN() // computed once, if a check needs it
	clipped, whole := false, false
	if v.Distance > radius || outlier {
		// Far from us: before it is clipped (which alone would let a
		// model pointing the wrong way pull us a little every time), the
		// model itself must be plausible: an honest peer's model, however
		// different its data, scores on our holdout within a few times our
		// own loss; a sign-flipped one does not. Without a holdout the
		// clipping alone bounds its pull.
		if !c.cfg.NoHoldout {
			d.Validated = true
			before, theirs, ok := c.losses(in, in.Local.Params, remote.Params)
			if !ok {
				return with(d, Decision{Reason: RefusedNoHoldout})
			}
			if c.implausible(in, before, theirs) {
				return with(d, refuse(RefusedImplausible, reputation.LossJump))
			}
			ownLoss = before
			// A far model from a peer ahead of us that does better than
			// ours on our own holdout is what being ahead looks like: it
			// is merged whole (not clipped to a radius drawn from models
			// that are all behind it), and its blend must not be worse
			// than ours. One that does not do better is refused as an
			// outlier, but not held against the peer.
			whole = ahead && theirs <= before
			if outlier && !whole {
				return with(d, Decision{Reason: RefusedOutlier})
			}
		}
		if in.Standing == reputation.OK && !whole {
			if _, err := averaging.ClipDelta(remote.Params, in.Local.Params, remote.Params, radius); err != nil {
				return with(d, refuse(RefusedNonFinite, reputation.NonFinite))
			}
			clipped = true
		}
	}
	if in.Standing != reputation.OK {
		return with(d, Decision{Reason: RefusedIgnored})
	}
	d.Merge, d.Reason = true, Merged
	if clipped {
		d.Reason = MergedClipped
	}
	d = c.weigh(in, d)
	if !d.Merge {
		return d
	}
	if c.cfg.NoHoldout {
		return d
	}
	if c.accepted[in.Peer] < int64(c.cfg.Probation) || clipped || whole || c.rng.IntN(c.cfg.ValidateEvery) == 0 {
		d.Validated = true
		if len(c.cand) != len(in.Local.Params) {
			c.cand = make([]float32, len(in.Local.Params))
		}
		copy(c.cand, in.Local.Params)
		if err := averaging.Mix(c.cand, remote.Params, d.Weight); err != nil {
			return with(d, refuse(RefusedNonFinite, reputation.NonFinite))
		}
		if math.IsNaN(ownLoss) {
			l, ok := c.loss(in, in.Local.Params)
			if !ok {
				return with(d, Decision{Reason: RefusedNoHoldout})
			}
			ownLoss = l
		}
		after, ok := c.loss(in, c.cand)
		if !ok {
			return with(d, Decision{Reason: RefusedNoHoldout})
		}
		limit := ownLoss*(1+c.cfg.LossTolerance) + c.cfg.LossSlack
		if whole {
			limit = ownLoss + c.cfg.LossSlack
		}
		if after > limit {
			return with(d, Decision{Reason: RefusedBlend})
		}
	}
	return d
}

// outlierLasted reports whether p's models have been outliers for at least
// OutlierGrace, noting now as the start if they were not until now.
func (c *Core) outlierLasted(p string, now time.Time) bool {
	if c.cfg.OutlierGrace == 0 {
		return true
	}
	since, ok := c.outlierSince[p]
	if !ok {
		if len(c.outlierSince) >= maxAccepted {
			clear(c.outlierSince) // bounded: forgetting only delays verdicts
		}
		c.outlierSince[p], since = now, now
	}
	return now.Sub(since) >= c.cfg.OutlierGrace
}

// implausible is the verdict on a far model whose loss on our holdout is
// theirs, ours being before: above PlausibleFactor times ours (plus
// slack) and above a guess's loss, and, where enough other peers' far
// models were scored lately, above PeerLossScale times the median of
// theirs. Every far model's loss is recorded for that comparison.
func (c *Core) implausible(in Input, before, theirs float64) bool {
	absolute := theirs > math.Max(before*c.cfg.PlausibleFactor+c.cfg.LossSlack, c.cfg.ChanceLoss)
	if c.cfg.PeerLossScale == 0 {
		return absolute
	}
	relative, enough := c.farLoss.compare(in.Peer, theirs, c.cfg.PeerLossScale, in.Now)
	return absolute && (relative || !enough)
}

// weigh computes the staleness and the weight of a merge the checks
// passed: the only place they are computed.
func (c *Core) weigh(in Input, d Decision) Decision {
	s, _, a, err := c.cfg.Merger.Weigh(in.Local.Progress, in.Remote.Progress, in.Remote.Age, c.cfg.Batch)
	if err != nil {
		return with(d, refuse(RefusedNonFinite, reputation.NonFinite))
	}
	d.Staleness, d.Weight = s, a
	if d.Reason == MergedClipped {
		d.HasVerdict, d.Verdict = true, reputation.Clipped
	} else {
		d.HasVerdict, d.Verdict = true, reputation.Accepted
	}
	return d
}

// Applied tells the core a merge it allowed has landed: its distance
// joins the radius's window and the peer's record.
func (c *Core) Applied(peer string, d Decision) {
	if _, ok := c.accepted[peer]; !ok && len(c.accepted) >= maxAccepted {
		// Bounded: forgetting every record puts peers back on probation,
		// which costs only holdout checks.
		clear(c.accepted)
	}
	c.accepted[peer]++
	if c.radius != nil {
		c.radius.Observe(d.Distance)
		if d.Distance > 0 && !d.at.IsZero() {
			c.near.record(peer, d.Distance, d.at)
		}
	}
}

// DecideCatchUp judges a model pulled to replace ours whole: it must come
// from a peer in good standing, fit, be finite and, with the checks on, be
// no worse than ours on the holdout (plus LossSlack), since it claims to
// be far ahead of us.
func (c *Core) DecideCatchUp(in Input) Decision {
	remote := in.Remote
	switch {
	case in.Standing == reputation.Banned:
		return Decision{Reason: RefusedBanned}
	case in.Standing != reputation.OK:
		return Decision{Reason: RefusedIgnored}
	case remote.Fingerprint != in.Local.Fingerprint || len(remote.Params) != len(in.Local.Params):
		return refuse(RefusedFingerprint, reputation.FingerprintMismatch)
	case params.CheckFinite(remote.Params) != nil || !remote.Progress.Valid():
		return refuse(RefusedNonFinite, reputation.NonFinite)
	}
	if c.cfg.Trust && !c.cfg.NoHoldout {
		before, after, ok := c.losses(in, in.Local.Params, remote.Params)
		if !ok {
			return Decision{Reason: RefusedNoHoldout, Validated: true}
		}
		if after > before+c.cfg.LossSlack {
			d := refuse(RefusedImplausible, reputation.LossJump)
			d.Validated = true
			return d
		}
	}
	return Decision{Merge: true, Reason: Merged, Weight: 1, Validated: c.cfg.Trust && !c.cfg.NoHoldout}
}

// Radius returns the clipping radius (+Inf while warming up or without
// trust) and the median distance it is drawn from.
func (c *Core) Radius() (radius, median float64) {
	if c.radius == nil {
		return math.Inf(1), 0
	}
	return c.radius.Radius(), c.radius.Median()
}

func (c *Core) loss(in Input, w []float32) (float64, bool) {
	if in.Loss == nil {
		return 0, false
	}
	l, ok, err := in.Loss(w)
	return l, ok && err == nil && !math.IsNaN(l)
}

func (c *Core) losses(in Input, a, b []float32) (la, lb float64, ok bool) {
	la, ok1 := c.loss(in, a)
	lb, ok2 := c.loss(in, b)
	return la, lb, ok1 && ok2
}

func refuse(r Reason, v reputation.Verdict) Decision {
	return Decision{Reason: r, Verdict: v, HasVerdict: true}
}

// with keeps d's measurements (distance, validated) on a refusal.
func with(d, r Decision) Decision {
	r.Distance, r.Validated = d.Distance, d.Validated || r.Validated
	return r
}
