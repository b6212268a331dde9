package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"regexp"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/params"
)

var networkPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// AnnounceTopic is the announce topic of a network. The network name is in
// the topic so separate meshes sharing peers never hear each other.
func AnnounceTopic(network string) string { return "/meshtrain/" + network + "/announce/1" }

// AnnounceConfig tunes an Announcer.
type AnnounceConfig struct {
	// Network is the network name: 1-64 of [A-Za-z0-9._-]. Required.
	Network string
	// Fingerprint of the model this node trains. Required: announcements
	// for any other fingerprint are ignored.
	Fingerprint params.Fingerprint
	// Interval between our announcements (the shortest, when TopicRate
	// stretches it), and the window the flood limit counts in. Default 5s.
	Interval time.Duration
	// TopicRate, if positive, is the announcements per second the whole
	// topic should carry: knowing n fresh peers, we announce every
	// max(Interval, (n+1)/TopicRate), up to MaxInterval, and say so in
	// the announcement (IntervalMs) so receivers keep us fresh for three
	// such intervals. Every node then receives about TopicRate
	// announcements per second, plus the mesh's duplicates, however large
	// the swarm. 0: announce every Interval.
	TopicRate float64
	// MaxInterval caps the interval TopicRate stretches ours to, and the
	// fresh window an announced interval widens. 0 means 5 min; it is
	// never below Interval. At most an hour.
	MaxInterval time.Duration
	// FreshWindow: a peer stays in Fresh this long after its latest
	// announcement. 0 means 3*Interval, so one or two lost messages do not
	// drop a live peer.
	FreshWindow time.Duration
	// MaxAge: an announcement whose timestamp is older is ignored as stale.
	// 0 means FreshWindow: an older one could not make its peer fresh
	// anyway, and while this stays below pubsub's seen-message TTL (2 min)
	// a replay of an old message that pubsub no longer remembers is still
	// refused.
	MaxAge time.Duration
	// MaxSkew: how far in the future a timestamp may be (clock skew).
	// Default 30s.
	MaxSkew time.Duration
	// MaxPerInterval: announcements accepted per peer per Interval; more
	// are ignored and counted as "flood". Default 3.
	MaxPerInterval int
	// MaxPeers caps the peers tracked at once. Default 4096.
	MaxPeers int
	// OnReject, Counters and Logger as in Config.
	OnReject RejectFunc
	// OnForeign, if set, is told of every announcement for another
	// fingerprint: a peer of our network training another model or run.
	// Such a peer is not faulty, so it is counted (ReasonFingerprint) but
	// not passed to OnReject.
	OnForeign func(peer.ID)
	Counters  *Counters
	Logger    *slog.Logger
	// Now is the clock; time.Now if nil.
	Now func() time.Time
}

// DefaultAnnounceConfig returns the defaults documented on AnnounceConfig,
// with the derived windows spelled out (15s for the 5s interval); the
// caller sets Network and Fingerprint, and should set FreshWindow and
// MaxAge to 0 (or their own values) when it changes Interval.
func DefaultAnnounceConfig() AnnounceConfig {
	return AnnounceConfig{
		Interval:       5 * time.Second,
		FreshWindow:    15 * time.Second,
		MaxAge:         15 * time.Second,
		MaxSkew:        30 * time.Second,
		MaxPerInterval: 3,
		MaxPeers:       4096,
		MaxInterval:    5 * time.Minute,
	}
}

// withDerived fills the fields whose zero value means "derived from
// Interval".
func (c AnnounceConfig) withDerived() AnnounceConfig {
	if c.FreshWindow == 0 {
		c.FreshWindow = 3 * c.Interval
	}
	if c.MaxAge == 0 {
		c.MaxAge = c.FreshWindow
	}
	if c.MaxInterval == 0 {
		c.MaxInterval = 5 * time.Minute
	}
	c.MaxInterval = max(c.MaxInterval, c.Interval)
	return c
}

// Validate reports every bad field at once.
func (c AnnounceConfig) Validate() error {
	c = c.withDerived()
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...))
	}
	if !networkPattern.MatchString(c.Network) {
		bad("Network %q is not 1-64 of [A-Za-z0-9._-]", c.Network)
	}
	if c.Fingerprint.IsZero() {
		bad("Fingerprint is required")
	}
	if c.Interval <= 0 {
		bad("Interval %v not positive", c.Interval)
	}
	if c.FreshWindow < c.Interval {
		bad("FreshWindow %v shorter than Interval %v", c.FreshWindow, c.Interval)
	}
	if c.MaxAge <= 0 {
		bad("MaxAge %v not positive", c.MaxAge)
	}
	if c.MaxSkew < 0 {
		bad("MaxSkew %v negative", c.MaxSkew)
	}
	if !(c.TopicRate >= 0) || math.IsInf(c.TopicRate, 0) {
		bad("TopicRate %v not a finite rate >= 0", c.TopicRate)
	}
	if c.MaxInterval < 0 || c.MaxInterval > maxIntervalMs*time.Millisecond {
		bad("MaxInterval %v (or Interval %v) not within an hour", c.MaxInterval, c.Interval)
	}
	if c.MaxPerInterval < 1 {
		bad("MaxPerInterval %d < 1", c.MaxPerInterval)
	}
	if c.MaxPeers < 1 {
		bad("MaxPeers %d < 1", c.MaxPeers)
	}
	return errors.Join(errs...)
}

// LocalFunc returns what this node wants to announce now. The Announcer
// fills in Peer, Fingerprint, TimeMs and (if empty) Addrs.
type LocalFunc func() Announcement

// Announcer publishes this node's announcements on the announce topic,
// validates everyone else's and keeps the table of fresh peers.
//
// Goroutines: a reader loop (drains the subscription into the table) and a
// tick loop (publishes, if a LocalFunc was given, and prunes the table). pubsub runs validate on its
// own goroutines. The table has its own mutex (see peerTable).
type Announcer struct {
	h        host.Host
	ps       *pubsub.PubSub
	cfg      AnnounceConfig
	local    LocalFunc
	topic    *pubsub.Topic
	sub      *pubsub.Subscription
	table    *peerTable
	counters *Counters
	rj       *rejecter
	log      *slog.Logger
	now      func() time.Time
	pubLog   *logLimiter
	kick     chan struct{} // Kick's request to the tick loop

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// NewAnnouncer registers the validator, joins and subscribes to the
// network's announce topic on ps (which the node creates, gossipsub with
// the default strict signing) and starts the loops. local may be nil to
// listen without announcing.
func NewAnnouncer(h host.Host, ps *pubsub.PubSub, cfg AnnounceConfig, local LocalFunc) (*Announcer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDerived()
	if cfg.Counters == nil {
		cfg.Counters = new(Counters)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	name := AnnounceTopic(cfg.Network)
	log := cfg.Logger.With("component", "gossip", "topic", name)
	a := &Announcer{
		h: h, ps: ps, cfg: cfg, local: local,
		table:    newPeerTable(cfg.FreshWindow, 3*cfg.MaxInterval, cfg.Interval, cfg.MaxPerInterval, cfg.MaxPeers),
		counters: cfg.Counters,
		rj:       newRejecter(cfg.Counters, cfg.OnReject, log),
		log:      log,
		now:      cfg.Now,
		pubLog:   &logLimiter{every: time.Minute},
		kick:     make(chan struct{}, 1),
	}
	if err := ps.RegisterTopicValidator(name, a.validate); err != nil {
		return nil, fmt.Errorf("gossip: register validator for %s: %w", name, err)
	}
	topic, err := ps.Join(name)
	if err != nil {
		_ = ps.UnregisterTopicValidator(name)
		return nil, fmt.Errorf("gossip: join %s: %w", name, err)
	}
	sub, err := topic.Subscribe()
	if err != nil {
		_ = topic.Close()
		_ = ps.UnregisterTopicValidator(name)
		return nil, fmt.Errorf("gossip: subscribe %s: %w", name, err)
	}
	a.topic, a.sub = topic, sub
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.wg.Add(2)
	go a.readLoop(ctx)
	go a.tickLoop(ctx)
	return a, nil
}

// Counters returns the counters the announcer counts into.
func (a *Announcer) Counters() *Counters { return a.counters }

// Fresh returns a copy of the peers (other than us) whose latest accepted
// announcement arrived within FreshWindow, ordered by peer ID: the
// candidates for partner choice.
func (a *Announcer) Fresh() []PeerInfo { return a.table.freshPeers(a.now(), false) }

// FreshShared is Fresh without a copy of each peer's Addrs: they are the
// table's own, and the caller must not modify them. It is for callers that
// read only the progress fields many times a second (the run clock): a
// copy per peer per call is garbage that grows with the swarm.
func (a *Announcer) FreshShared() []PeerInfo { return a.table.freshPeers(a.now(), true) }

// Interval is the wait between our announcements now: Interval, stretched
// by TopicRate to (fresh peers + 1) / TopicRate, at most MaxInterval.
func (a *Announcer) Interval() time.Duration {
	return announceInterval(a.cfg, a.table.count(a.now()))
}

// announceInterval is the interval of cfg with peers fresh peers known.
func announceInterval(cfg AnnounceConfig, peers int) time.Duration {
	if cfg.TopicRate <= 0 {
		return cfg.Interval
	}
	d := time.Duration(float64(peers+1) / cfg.TopicRate * float64(time.Second))
	return min(max(cfg.Interval, d), cfg.MaxInterval)
}

// Publish announces once, now, in addition to the loop's schedule.
func (a *Announcer) Publish(ctx context.Context) error {
	if a.local == nil {
		return fmt.Errorf("%w: announcer has no LocalFunc", ErrBadConfig)
	}
	msg := a.local()
	msg.Peer = a.h.ID()
	msg.Fingerprint = a.cfg.Fingerprint
	msg.TimeMs = a.now().UnixMilli()
	msg.IntervalMs = a.Interval().Milliseconds()
	if len(msg.Addrs) == 0 {
		for _, addr := range a.h.Addrs() {
			if len(msg.Addrs) == maxAnnounceAddrs {
				break
			}
			msg.Addrs = append(msg.Addrs, addr.String())
		}
	}
	b, err := EncodeAnnouncement(msg)
	if err != nil {
		return fmt.Errorf("gossip: encode announcement: %w", err)
	}
	if err := a.topic.Publish(ctx, b); err != nil {
		return fmt.Errorf("gossip: publish announcement: %w", err)
	}
	a.counters.announcesSent.Add(1)
	return nil
}

// Close stops both loops, leaves the topic and removes the validator. Safe
// to call more than once.
func (a *Announcer) Close() error {
	var err error
	a.closeOnce.Do(func() {
		a.cancel()
		a.sub.Cancel()
		a.wg.Wait()
		err = errors.Join(a.topic.Close(), a.ps.UnregisterTopicValidator(a.topic.String()))
	})
	return err
}

// validate is the topic validator (a pubsub.ValidatorEx). It decodes once
// and hands the result to the reader loop in ValidatorData. See Verdict
// for why each failure is a Reject or an Ignore.
func (a *Announcer) validate(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	signer := msg.GetFrom()
	ann, err := DecodeAnnouncement(msg.Data)
	if err == nil {
		err = checkAnnouncement(ann, signer, a.cfg.Fingerprint, a.now(), a.cfg.MaxAge, a.cfg.MaxSkew)
	}
	// Our own messages are validated too (pubsub does so on Publish), but
	// never charged to the flood budget: we pace them ourselves.
	if err == nil && signer != a.h.ID() {
		err = a.table.admit(signer, a.now())
	}
	if err != nil {
		switch {
		case signer == a.h.ID():
		case errors.Is(err, ErrFingerprint):
			a.counters.Reject(ReasonFingerprint)
			if a.cfg.OnForeign != nil {
				a.cfg.OnForeign(signer)
			}
		default:
			a.rj.reject(signer, err)
		}
		if VerdictOf(err) == Ignore {
			return pubsub.ValidationIgnore
		}
		return pubsub.ValidationReject
	}
	msg.ValidatorData = ann
	return pubsub.ValidationAccept
}

func (a *Announcer) readLoop(ctx context.Context) {
	defer a.wg.Done()
	for {
		msg, err := a.sub.Next(ctx)
		if err != nil {
			return // cancelled by Close
		}
		ann, ok := msg.ValidatorData.(Announcement)
		if !ok || ann.Peer == a.h.ID() {
			continue
		}
		a.table.observe(ann, a.now())
		a.counters.announcesSeen.Add(1)
	}
}

// Kick asks for one announcement now, besides the schedule, which it
// leaves as it was. A node kicks when what it announces has just changed
// in a way its peers should not wait up to an interval to hear: when it
// has begun to train, and its samples and rate have left zero, which the
// peers' run clocks then begin to count. It does not wait; kicks before
// the tick loop has taken the last one are one request. A kick adds at
// most one announcement per interval to the two that jitter can put in a
// receiver's window, within MaxPerInterval's default of 3.
func (a *Announcer) Kick() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// tickLoop publishes at once and then every Interval(), with jitter of
// up to a tenth either way so a swarm's announcements spread out instead
// of bunching, and prunes the table as often; and publishes once more at
// each Kick.
func (a *Announcer) tickLoop(ctx context.Context) {
	defer a.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
			a.publishNow(ctx)
			continue
		case <-t.C:
		}
		a.publishNow(ctx)
		a.table.prune(a.now())
		d := a.Interval()
		if d > a.cfg.Interval {
			d = time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
		}
		t.Reset(d)
	}
}

// publishNow publishes if we announce (a LocalFunc was given), and logs a
// failure, at most once a minute.
func (a *Announcer) publishNow(ctx context.Context) {
	if a.local == nil {
		return
	}
	if err := a.Publish(ctx); err != nil && ctx.Err() == nil {
		// Only a local fault makes publishing fail; say so, but not
		// every interval.
		if ok, n := a.pubLog.allow(ReasonNone, a.now()); ok {
			a.log.Warn("announce failed", "err", err, "suppressed", n)
		}
	}
}
