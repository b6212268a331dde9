package node

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/reputation"
	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/train"
)

// TrustConfig is how a node defends its model against broken and hostile
// peers: it scores every peer from what it sends (reputation), clips each
// remote model to an adaptive radius around its own, refuses outliers,
// validates some candidate merges on a small holdout, and ignores,
// disconnects and bans peers whose score falls. See docs/security.md.
type TrustConfig struct {
	// Enabled turns all of it on (the default). Off, every well-formed
	// finite model of the right fingerprint is merged as is.
	Enabled bool
	// Reputation are the scoring parameters and thresholds.
	Reputation reputation.Params
	// Radius tunes the adaptive clipping radius. Its OutlierScale sets the
	// outlier test, which compares a model's distance with the latest
	// distances of the other peers' models (see spread.go), not with the
	// radius's window.
	Radius averaging.RadiusConfig
	// Holdout is how many samples of the local shard candidate merges are
	// validated on (in-sample: they stay in the training shard).
	Holdout int
	// Probation is how many merges of a new peer are validated on the
	// holdout before it is trusted; after that, only clipped ones and one
	// in ValidateEvery are.
	Probation     int
	ValidateEvery int
	// LossTolerance: a candidate merge is refused when its holdout loss
	// exceeds the current model's by more than this fraction plus
	// LossSlack (absolute). Generous on purpose: an honest peer trained on
	// other labels may raise our loss a little; an attack raises it a lot.
	LossTolerance, LossSlack float64
	// PlausibleFactor: a model that must be clipped (it lies beyond the
	// radius) is refused when its own holdout loss exceeds this many times
	// ours plus LossSlack.
	PlausibleFactor float64
}

// DefaultTrustConfig is on, tuned so that honest peers with label-skewed
// data and slow, stale models are clipped rather than punished: only a
// model 20 times farther than the median of the other peers' models is an
// outlier (sign-flipped, scaled and
// noise models lie far beyond that), an implausible model
// costs little (-2: the holdout is a sample of our own shard, so a peer
// trained on other labels scores worse on it), and a far
// model is implausible only at 10x our loss. A candidate merge that triples
// our holdout loss is refused, without a verdict.
func DefaultTrustConfig() TrustConfig {
	rep := reputation.DefaultParams()
	rep.Weights[reputation.LossJump] = -2
	rad := averaging.DefaultRadiusConfig()
	rad.OutlierScale = 20
	return TrustConfig{
		Enabled:         true,
		Reputation:      rep,
		Radius:          rad,
		Holdout:         256,
		Probation:       5,
		ValidateEvery:   16,
		LossTolerance:   2,
		LossSlack:       0.05,
		PlausibleFactor: 10,
	}
}

// Validate reports every bad field at once.
func (c TrustConfig) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	if err := c.Reputation.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Radius.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Holdout < 16 || c.Holdout > 10000 {
		errs = append(errs, fmt.Errorf("holdout %d: must be in [16,10000]", c.Holdout))
	}
	if c.Probation < 0 {
		errs = append(errs, fmt.Errorf("probation %d: must be >= 0", c.Probation))
	}
	if c.ValidateEvery < 1 {
		errs = append(errs, fmt.Errorf("validate-every %d: must be >= 1", c.ValidateEvery))
	}
	if !(c.PlausibleFactor >= 1 && c.PlausibleFactor < math.Inf(1)) {
		errs = append(errs, fmt.Errorf("plausible factor %v: must be finite and >= 1", c.PlausibleFactor))
	}
	if !(c.LossTolerance >= 0 && c.LossTolerance < math.Inf(1)) || !(c.LossSlack >= 0 && c.LossSlack < math.Inf(1)) {
		errs = append(errs, fmt.Errorf("loss tolerance %v + %v: must be finite and >= 0", c.LossTolerance, c.LossSlack))
	}
	return errors.Join(errs...)
}

// TrustStats counts what the defences did.
type TrustStats struct {
	Enabled bool `json:"enabled"`
	// Refused merges by reason: outlier, loss_jump, non_finite, ignored
	// (the sender's score is below the ignore threshold).
	Refused map[string]int64 `json:"refused"`
	// Clipped merges were applied after pulling the remote model onto the
	// clipping sphere.
	Clipped int64 `json:"clipped"`
	// Validated candidate merges were checked on the holdout.
	Validated int64 `json:"validated"`
	// Radius is the current clipping radius (0 while warming up) and
	// MedianDistance the median distance of recent accepted merges.
	Radius         float64 `json:"radius"`
	MedianDistance float64 `json:"median_distance"`
	// Banned is how many peers are banned now; GateRefused counts refused
	// connections.
	Banned      int    `json:"banned"`
	GateRefused uint64 `json:"gate_refused"`
}

// trust is the node's defence state. book is safe for concurrent use; the
// rest belongs to the averager goroutine, except the counters.
type trust struct {
	cfg     TrustConfig
	book    *reputation.Book
	radius  *averaging.Radius
	merger  averaging.Merger
	batch   int
	model   *train.Model
	holdout *train.Dataset
	rng     *rand.Rand

	local, cand []float32         // scratch: our model, a candidate merge
	accepted    map[peer.ID]int64 // merges accepted per peer
	spread      peerSpread        // the outlier test; see spread.go

	refusedOutlier, refusedLoss, refusedNonFinite, refusedIgnored atomic.Int64
	clipped, validated                                            atomic.Int64
	radiusNow, median                                             atomic.Uint64

	wg sync.WaitGroup // act goroutines
}

func newTrust(cfg TrustConfig, merger averaging.Merger, batch int, t *train.Trainer, trainSet *train.Dataset, seed uint64) (*trust, error) {
	book, err := reputation.New(cfg.Reputation)
	if err != nil {
		return nil, fmt.Errorf("%w: reputation: %w", ErrBadConfig, err)
	}
	r, err := averaging.NewRadius(cfg.Radius)
	if err != nil {
		return nil, fmt.Errorf("%w: clipping radius: %w", ErrBadConfig, err)
	}
	idx, err := train.ShardIndices(trainSet, t.Shard(), t.Config().Seed, t.Config().Alpha)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x7275737421))
	rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	hold, err := trainSet.Subset(idx[:min(cfg.Holdout, len(idx))])
	if err != nil {
		return nil, err
	}
	n := t.Model().Size()
	return &trust{cfg: cfg, book: book, radius: r, merger: merger, batch: batch, model: t.Model(), holdout: hold,
		rng: rng, local: make([]float32, n), cand: make([]float32, n), accepted: map[peer.ID]int64{}}, nil
}

// reasonVerdict maps a refused input to a verdict; ok is false for refusals
// that say nothing about the peer (we were busy, it was merely behind).
func reasonVerdict(r gossip.Reason) (reputation.Verdict, bool) {
	switch r.String() {
	case "fingerprint":
		return reputation.FingerprintMismatch, true
	case "non_finite":
		return reputation.NonFinite, true
	case "timeout", "short_read":
		// A slow or departing honest peer does this too: mild.
		return reputation.Timeout, true
	case "oversize", "size_mismatch", "protocol":
		return reputation.ProtocolViolation, true
	case "bad_magic", "bad_version", "checksum", "malformed", "inconsistent", "flood":
		// An honest peer's announcements can bunch up in transit and trip
		// the flood limit now and then; a flooder trips it hundreds of
		// times a second.
		return reputation.Rejected, true
	}
	return 0, false
}

// onReject is the gossip protocols' RejectFunc.
func (n *Node) onReject(p peer.ID, r gossip.Reason) {
	if v, ok := reasonVerdict(r); ok && p != "" && p != n.id {
		n.verdict(p, v)
	}
}

// verdict records v about p and acts when p's standing falls.
func (n *Node) verdict(p peer.ID, v reputation.Verdict) {
	if n.trust == nil {
		return
	}
	now := time.Now()
	before := n.trust.book.State(p.String(), now)
	after := n.trust.book.Record(p.String(), v, now)
	if after > before && after >= reputation.Disconnected {
		n.act(p, after)
	}
}

// act disconnects a peer whose score fell below the disconnect threshold
// and, for a ban, persists it. It runs off the caller's goroutine (a stream
// handler or the averager); it is called only when a peer's state gets
// worse, so at most twice per peer and ban.
func (n *Node) act(p peer.ID, s reputation.State) {
	t := n.trust
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		ps := t.book.Peer(p.String(), time.Now())
		n.log.Warn("peer "+s.String(), "peer", p, "score", ps.Score, "verdicts", ps.Counts)
		if n.host != nil {
			_ = n.host.Network().ClosePeer(p)
		}
		if s == reputation.Banned && n.st != nil {
			rec, err := n.st.Peer(p.String())
			if err != nil {
				rec = store.Peer{ID: p.String()}
			}
			rec.Score, rec.BannedUntil = ps.Score, ps.BannedUntil
			rec.Notes = fmt.Sprintf("banned: %v", ps.Counts)
			if err := n.st.PutPeer(rec); err != nil && !errors.Is(err, store.ErrClosed) {
				n.log.Warn("could not persist a ban", "peer", p, "err", err)
			}
		}
	}()
}

// restoreBans loads unexpired bans from the store.
func (n *Node) restoreBans() {
	if n.trust == nil || n.st == nil {
		return
	}
	peers, err := n.st.Peers()
	if err != nil {
		n.log.Warn("could not read the peer table", "err", err)
		return
	}
	now := time.Now()
	for _, p := range peers {
		if p.BannedUntil.After(now) {
			n.trust.book.Ban(p.ID, p.BannedUntil)
			n.log.Info("ban restored", "peer", p.ID, "until", p.BannedUntil)
		}
	}
}

// standing is p's state; OK when trust is off.
func (n *Node) standing(p peer.ID) reputation.State {
	if n.trust == nil {
		return reputation.OK
	}
	return n.trust.book.State(p.String(), time.Now())
}

// refuseConn is the connection gate's ban check.
func (n *Node) refuseConn(p peer.ID) bool {
	return n.trust != nil && n.trust.book.State(p.String(), time.Now()) == reputation.Banned
}

// vet decides whether a remote model may be merged, and makes it safe to:
// it clamps the progress the sender claims, clips the model to the radius
// around ours (in place), refuses outliers and, for peers on probation,
// clipped models and a random share of the rest, refuses a candidate merge
// that makes our holdout loss jump. It records the verdict and returns
// whether to merge and whether the model was clipped.
func (n *Node) vet(from peer.ID, remote *params.Snapshot) (ok, clipped bool) {
	t := n.trust
	// A peer below the ignore threshold is never merged, but what it sends
	// is still judged, so an attacker that keeps attacking goes on to a ban
	// instead of idling at "ignored" until its score decays back.
	st := n.standing(from)
	if st == reputation.Banned {
		t.refusedIgnored.Add(1)
		return false, false
	}
	if remote.Fingerprint != n.fp || len(remote.Params) != len(t.local) {
		n.verdict(from, reputation.FingerprintMismatch)
		return false, false
	}
	own := n.trainer.SnapshotInto(t.local)
	// A peer may not claim more progress than the catch-up threshold above
	// ours: a model further ahead is pulled whole (after validation), never
	// blended, so an inflated claim cannot drag every schedule to its end.
	if lead := n.cfg.CatchUp; lead > 0 && float64(remote.Progress) > float64(own.Progress)+lead {
		remote.Progress = params.Progress(float64(own.Progress) + lead)
	}
	v, err := t.radius.Check(own.Params, remote.Params)
	if err != nil {
		t.refusedNonFinite.Add(1)
		n.verdict(from, reputation.NonFinite)
		return false, false
	}
	// An outlier by both measures: far beyond what the other peers send now
	// (spread.go), and beyond the outlier factor of recent accepted merges
	// (once the radius has enough of them). Either alone misjudges honest
	// models: the radius's window when every distance grows at once (a
	// warmup), the peers' latest distances when most of them happen to be
	// tiny (peers that just merged with us).
	if t.spread.outlier(from, v.Distance, t.cfg.Radius.OutlierScale, time.Now()) && (v.Outlier || math.IsInf(v.Radius, 1)) {
		t.refusedOutlier.Add(1)
		n.verdict(from, reputation.Outlier)
		n.log.Debug("merge refused: outlier", "peer", from, "distance", v.Distance)
		return false, false
	}
	ownLoss := math.NaN() // computed once, if a check needs it
	if v.Clip < 1 {
		// Far from us: before it is clipped (which alone would let a
		// model pointing the wrong way pull us a little every time), the
		// model itself must be plausible: an honest peer's model, however
		// different its data, scores on our holdout within a few times
		// our own loss; a sign-flipped one does not.
		t.validated.Add(1)
		var ok bool
		if ok, ownLoss = n.plausible(own.Params, remote.Params); !ok {
			t.refusedLoss.Add(1)
			n.verdict(from, reputation.LossJump)
			return false, false
		}
		if st == reputation.OK {
			if _, err := averaging.ClipDelta(remote.Params, own.Params, remote.Params, v.Radius); err != nil {
				return false, false
			}
			clipped = true
		}
	}
	if st != reputation.OK {
		t.refusedIgnored.Add(1)
		return false, false
	}
	if t.accepted[from] < int64(t.cfg.Probation) || clipped || t.rng.IntN(t.cfg.ValidateEvery) == 0 {
		t.validated.Add(1)
		if !n.validate(own, *remote, ownLoss) {
			// Refused, but not held against the peer: the holdout is a
			// sample of our own shard, so an honest peer trained on other
			// labels can fail this too. Only the gross checks (outlier,
			// implausible, non-finite) are evidence.
			t.refusedLoss.Add(1)
			return false, clipped
		}
	}
	t.radius.Observe(v.Distance)
	setF64(&t.median, t.radius.Median())
	if r := t.radius.Radius(); !math.IsInf(r, 0) {
		setF64(&t.radiusNow, r)
	}
	return true, clipped
}

// plausible compares the holdout loss of a remote model with ours: it
// passes within PlausibleFactor times ours plus LossSlack. It returns our
// loss for reuse.
func (n *Node) plausible(own, remote []float32) (bool, float64) {
	t := n.trust
	before, err1 := train.Evaluate(t.model, own, t.holdout, 0, 1)
	theirs, err2 := train.Evaluate(t.model, remote, t.holdout, 0, 1)
	if err1 != nil || err2 != nil {
		return false, math.NaN()
	}
	return theirs.Loss <= before.Loss*t.cfg.PlausibleFactor+t.cfg.LossSlack, before.Loss
}

// validate compares the holdout loss of our model (ownLoss, or NaN to
// compute it) with that of the candidate merge.
func (n *Node) validate(own, remote params.Snapshot, ownLoss float64) bool {
	t := n.trust
	s, err := averaging.StalenessSteps(own.Progress, remote.Progress, t.batch)
	if err != nil {
		return false
	}
	a, err := t.merger.Weight(s)
	if err != nil {
		return false
	}
	copy(t.cand, own.Params)
	if err := averaging.Mix(t.cand, remote.Params, a); err != nil {
		return false
	}
	if math.IsNaN(ownLoss) {
		before, err := train.Evaluate(t.model, own.Params, t.holdout, 0, 1)
		if err != nil {
			return false
		}
		ownLoss = before.Loss
	}
	after, err := train.Evaluate(t.model, t.cand, t.holdout, 0, 1)
	if err != nil {
		return false
	}
	return after.Loss <= ownLoss*(1+t.cfg.LossTolerance)+t.cfg.LossSlack
}

// accept records a merge that was applied.
func (n *Node) accept(from peer.ID, clipped bool) {
	t := n.trust
	t.accepted[from]++
	if clipped {
		t.clipped.Add(1)
		n.verdict(from, reputation.Clipped)
		return
	}
	n.verdict(from, reputation.Accepted)
}

// vetCatchUp checks a model pulled to replace ours: it must come from a
// peer in good standing and be at least as good as ours on the holdout
// (it claims to be far ahead of us).
func (n *Node) vetCatchUp(from peer.ID, remote params.Snapshot) bool {
	t := n.trust
	if t == nil {
		return true
	}
	if n.standing(from) != reputation.OK {
		return false
	}
	if len(remote.Params) != len(t.local) {
		n.verdict(from, reputation.FingerprintMismatch)
		return false
	}
	if err := params.CheckFinite(remote.Params); err != nil {
		n.verdict(from, reputation.NonFinite)
		return false
	}
	own := n.trainer.SnapshotInto(t.local)
	before, err1 := train.Evaluate(t.model, own.Params, t.holdout, 0, 1)
	after, err2 := train.Evaluate(t.model, remote.Params, t.holdout, 0, 1)
	// Stricter than a blend: a model that claims to be far ahead of ours
	// and replaces it whole must be no worse on our holdout (+LossSlack).
	if err1 != nil || err2 != nil || after.Loss > before.Loss+t.cfg.LossSlack {
		n.verdict(from, reputation.LossJump)
		return false
	}
	return true
}

// TrustStats reports the defences' counters.
func (n *Node) TrustStats() TrustStats {
	t := n.trust
	if t == nil {
		return TrustStats{Refused: map[string]int64{}}
	}
	now := time.Now()
	banned := 0
	for _, p := range t.book.Peers(now) {
		if p.State == reputation.Banned {
			banned++
		}
	}
	var gate uint64
	if n.host != nil {
		gate = n.host.GateRefused()
	}
	return TrustStats{Enabled: true,
		Refused: map[string]int64{"outlier": t.refusedOutlier.Load(), "loss_jump": t.refusedLoss.Load(),
			"non_finite": t.refusedNonFinite.Load(), "ignored": t.refusedIgnored.Load()},
		Clipped: t.clipped.Load(), Validated: t.validated.Load(),
		Radius: f64(&t.radiusNow), MedianDistance: f64(&t.median), Banned: banned, GateRefused: gate}
}

// Reputation lists every peer the node has scored.
func (n *Node) Reputation() []reputation.PeerScore {
	if n.trust == nil {
		return []reputation.PeerScore{}
	}
	return n.trust.book.Peers(time.Now())
}

// pubsubOptions hand the reputation to gossipsub as its application score,
// so a peer we ban is also graylisted on the announce topic. Only the
// application score counts: every peer of a testnet shares 127.0.0.1, so
// the IP colocation penalty is off.
func (n *Node) pubsubOptions() []pubsub.Option {
	if n.trust == nil {
		return nil
	}
	book := n.trust.book
	return []pubsub.Option{pubsub.WithPeerScore(
		&pubsub.PeerScoreParams{
			AppSpecificScore:  func(p peer.ID) float64 { return book.AppScore(p.String(), time.Now()) },
			AppSpecificWeight: 1,
			DecayInterval:     time.Second,
			DecayToZero:       0.01,
			Topics:            map[string]*pubsub.TopicScoreParams{},
		},
		&pubsub.PeerScoreThresholds{
			// Ignored peers still gossip; disconnected ones get no gossip
			// and none of our publishes; banned ones (AppScore 10x the ban
			// threshold) are graylisted.
			GossipThreshold:   n.cfg.Trust.Reputation.DisconnectBelow,
			PublishThreshold:  n.cfg.Trust.Reputation.BanBelow,
			GraylistThreshold: 5 * n.cfg.Trust.Reputation.BanBelow,
		})}
}
