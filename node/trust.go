package node

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/merge"
	"github.com/meshtrain/meshtrain/reputation"
	"github.com/meshtrain/meshtrain/store"
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
	// PeerLossScale: where other peers' far models were scored too, a far
	// model is implausible only above this many times the median of their
	// losses (merge.Config.PeerLossScale; 0: off).
	PeerLossScale float64
	// OutlierGrace: how long a peer's models must keep being outliers
	// before refusing them counts against it (merge.Config.OutlierGrace).
	OutlierGrace time.Duration
}

// DefaultTrustConfig is on, tuned so that honest peers with label-skewed
// data and slow, stale models are clipped rather than punished: only a
// model 20 times farther than the median of the other peers' models is an
// outlier (sign-flipped, scaled and
// noise models lie far beyond that), an implausible model
// costs little (-2: the holdout is a sample of our own shard, so a peer
// trained on other labels scores worse on it), and a far
// model is implausible only at 10x our loss, above a guess's loss and
// above 3x what the other peers' far models score. A candidate merge that triples
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
		PeerLossScale:   3,
		OutlierGrace:    2 * time.Second,
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
	if c.PeerLossScale != 0 && !(c.PeerLossScale >= 1 && c.PeerLossScale < math.Inf(1)) {
		errs = append(errs, fmt.Errorf("peer loss scale %v: must be 0 (off) or finite and >= 1", c.PeerLossScale))
	}
	if !(c.LossTolerance >= 0 && c.LossTolerance < math.Inf(1)) || !(c.LossSlack >= 0 && c.LossSlack < math.Inf(1)) {
		errs = append(errs, fmt.Errorf("loss tolerance %v + %v: must be finite and >= 0", c.LossTolerance, c.LossSlack))
	}
	if c.OutlierGrace < 0 {
		errs = append(errs, fmt.Errorf("outlier grace %v: must be >= 0", c.OutlierGrace))
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
	// Holdout: the checks have a holdout to validate on. An external
	// trainer that scores nothing for the node runs without one: the loss
	// checks are skipped (the others still run).
	Holdout bool `json:"holdout"`
	// Radius is the current clipping radius (0 while warming up) and
	// MedianDistance the median distance of recent accepted merges.
	Radius         float64 `json:"radius"`
	MedianDistance float64 `json:"median_distance"`
	// Banned is how many peers are banned now; GateRefused counts refused
	// connections.
	Banned      int    `json:"banned"`
	GateRefused uint64 `json:"gate_refused"`
}

// trust is the node's defence state: the reputation book (safe for
// concurrent use) and the counters of the merge core's decisions (atomics,
// written by the averager goroutine). The decisions themselves are the
// merge package's.
type trust struct {
	cfg   TrustConfig
	book  *reputation.Book
	names peerNames

	refusedOutlier, refusedLoss, refusedNonFinite, refusedIgnored atomic.Int64
	clipped, validated                                            atomic.Int64
	radiusNow, median                                             atomic.Uint64

	wg sync.WaitGroup // act goroutines
}

// peerNames caches peer IDs' text form, the reputation book's key: the
// run clock asks for every fresh peer's standing ten times a second, and
// encoding a peer ID is a base58 conversion of about a microsecond, which
// at 100 peers cost a node more CPU than its merges. It forgets everything
// once it holds maxPeerNames IDs, so churn cannot grow it without bound.
type peerNames struct {
	mu sync.Mutex
	m  map[peer.ID]string
}

const maxPeerNames = 4096

func (c *peerNames) of(p peer.ID) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[p]; ok {
		return s
	}
	if c.m == nil || len(c.m) >= maxPeerNames {
		c.m = make(map[peer.ID]string)
	}
	s := p.String()
	c.m[p] = s
	return s
}

func newTrust(cfg TrustConfig) (*trust, error) {
	book, err := reputation.New(cfg.Reputation)
	if err != nil {
		return nil, fmt.Errorf("%w: reputation: %w", ErrBadConfig, err)
	}
	return &trust{cfg: cfg, book: book}, nil
}

// mergeConfig is the merge core's configuration for a node training with
// tr: the merge rule, and the checks when trust is on (those that need a
// holdout skipped when tr has none).
func mergeConfig(c Config, tr Trainer, trusting bool) merge.Config {
	t := c.Trust
	return merge.Config{Merger: c.Merger, Batch: c.Train.Batch, CatchUp: c.CatchUp, Trust: trusting, Radius: t.Radius,
		Probation: t.Probation, ValidateEvery: t.ValidateEvery, LossTolerance: t.LossTolerance, LossSlack: t.LossSlack,
		PlausibleFactor: t.PlausibleFactor, PeerLossScale: t.PeerLossScale, OutlierGrace: t.OutlierGrace, ChanceLoss: chanceLoss(tr), Seed: c.Train.Seed, NoHoldout: !hasHoldout(tr)}
}

// HoldoutReporter is implemented by a trainer that may have no holdout
// (an external one); a trainer without the method is taken to have one.
type HoldoutReporter interface {
	HasHoldout() bool
}

func hasHoldout(t Trainer) bool {
	h, ok := t.(HoldoutReporter)
	return !ok || h.HasHoldout()
}

// ChanceLossReporter is implemented by a trainer that knows the holdout
// loss of a model that has learnt nothing (ln K for K classes): the trust
// checks never call a model implausible below it (merge.Config.ChanceLoss).
type ChanceLossReporter interface {
	ChanceLoss() float64
}

func chanceLoss(t Trainer) float64 {
	if r, ok := t.(ChanceLossReporter); ok {
		if l := r.ChanceLoss(); l >= 0 && !math.IsInf(l, 0) {
			return l
		}
	}
	return 0
}

// count records a decision in the trust counters (the refusals by the
// names the status and /metrics use).
func (t *trust) count(d merge.Decision, radius, median float64) {
	if d.Validated {
		t.validated.Add(1)
	}
	switch d.Reason {
	case merge.MergedClipped:
		t.clipped.Add(1)
	case merge.RefusedOutlier:
		t.refusedOutlier.Add(1)
	case merge.RefusedImplausible, merge.RefusedBlend, merge.RefusedNoHoldout:
		t.refusedLoss.Add(1)
	case merge.RefusedNonFinite:
		t.refusedNonFinite.Add(1)
	case merge.RefusedIgnored, merge.RefusedBanned:
		t.refusedIgnored.Add(1)
	}
	setF64(&t.median, median)
	if !math.IsInf(radius, 0) {
		setF64(&t.radiusNow, radius)
	}
}

// reasonVerdict maps a refused input to a verdict; ok is false for refusals
// that say nothing about the peer (we were busy, it was merely behind).
func reasonVerdict(r gossip.Reason) (reputation.Verdict, bool) {
	switch r {
	case gossip.ReasonFingerprint:
		return reputation.FingerprintMismatch, true
	case gossip.ReasonNonFinite:
		return reputation.NonFinite, true
	case gossip.ReasonTimeout, gossip.ReasonShortRead:
		// A slow or departing honest peer does this too: mild.
		return reputation.Timeout, true
	case gossip.ReasonOversize, gossip.ReasonSizeMismatch, gossip.ReasonProtocol:
		return reputation.ProtocolViolation, true
	case gossip.ReasonBadMagic, gossip.ReasonBadVersion, gossip.ReasonChecksum, gossip.ReasonMalformed,
		gossip.ReasonInconsistent, gossip.ReasonFlood:
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
	before := n.trust.book.State(n.trust.names.of(p), now)
	after := n.trust.book.Record(n.trust.names.of(p), v, now)
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
		ps := t.book.Peer(t.names.of(p), time.Now())
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
	return n.trust.book.State(n.trust.names.of(p), time.Now())
}

// refuseConn is the connection gate's ban check.
func (n *Node) refuseConn(p peer.ID) bool {
	return n.trust != nil && n.trust.book.State(n.trust.names.of(p), time.Now()) == reputation.Banned
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
		Clipped: t.clipped.Load(), Validated: t.validated.Load(), Holdout: n.holdout,
		Radius: f64(&t.radiusNow), MedianDistance: f64(&t.median), Banned: banned, GateRefused: gate}
}

// Reputation lists every peer the node has scored.
func (n *Node) Reputation() []reputation.PeerScore {
	if n.trust == nil {
		return []reputation.PeerScore{}
	}
	return n.trust.book.Peers(time.Now())
}

// pubsubOptions count pubsub's bytes into the node's counters, bound its
// gossip to a fixed number of peers (gossip.PubsubParams), and hand
// the reputation to gossipsub as its application score, so a peer we ban
// is also graylisted on the announce topic. Only the application score
// counts: every peer of a testnet shares 127.0.0.1, so the IP colocation
// penalty is off.
func (n *Node) pubsubOptions() []pubsub.Option {
	meter := pubsub.WithRawTracer(gossip.NewPubsubMeter(&n.counters))
	params := pubsub.WithGossipSubParams(gossip.PubsubParams())
	if n.trust == nil {
		return []pubsub.Option{meter, params}
	}
	t := n.trust
	return []pubsub.Option{meter, params, pubsub.WithPeerScore(
		&pubsub.PeerScoreParams{
			AppSpecificScore:  func(p peer.ID) float64 { return t.book.AppScore(t.names.of(p), time.Now()) },
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
