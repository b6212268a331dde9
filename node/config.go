package node

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train"
)

// Mode is how a node averages with others.
type Mode string

const (
	// ModeGossip trains at its own pace and merges with one peer at a time,
	// weighting stale models down.
	ModeGossip Mode = "gossip"
	// ModeLocal never merges (it still announces and serves its model).
	ModeLocal Mode = "local"
	// ModeSync is the synchronous baseline (DDP semantics): every step all
	// members of a group average, so each step waits for the slowest.
	ModeSync Mode = "sync"
	// ModeDiloco is the baseline for training over the internet (DiLoCo):
	// InnerSteps local steps, then the group all-reduces the
	// pseudo-gradient and takes an outer Nesterov step; each round waits
	// for the slowest member.
	ModeDiloco Mode = "diloco"
)

// InnerScaling values: InnerScalingNone gives every diloco member
// InnerSteps per round; InnerScalingSpeed scales them by the member's speed
// over the group's fastest (DyLU), so all finish a round together.
const (
	InnerScalingNone  = "none"
	InnerScalingSpeed = "speed"
)

// DefaultInnerSteps is diloco's inner steps per round.
const DefaultInnerSteps = 50

// ParseMode validates a mode name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeGossip, ModeLocal, ModeSync, ModeDiloco:
		return m, nil
	}
	return "", fmt.Errorf("node: unknown mode %q (want gossip, sync, diloco or local)", s)
}

// Config is everything a node needs. DefaultConfig fills every field;
// Validate reports every bad field at once.
type Config struct {
	Train train.Config
	// Dataset is "mnist" or "synthetic"; DataPath an optional folder of IDX
	// files for MNIST (empty: the copy built into the binary).
	Dataset  string
	DataPath string

	// Offline runs without any network (meshtrain train): no host, no
	// announcements, no merges.
	Offline bool
	Mode    Mode
	Host    HostConfig
	// Exchange and Announce configure the gossip protocols; the node sets
	// their fingerprint, network, element count, counters and logger.
	Exchange gossip.Config
	Announce gossip.AnnounceConfig

	// AvgInterval is the wall time between two merges this node starts
	// (±20% jitter so peers do not synchronise). A fast node thus takes
	// more local steps between merges than a slow one.
	AvgInterval time.Duration
	// WireAuto: in gossip mode, a node whose Exchange.SendDType is fp16
	// sends its models as int8 while that makes its exchanges faster
	// (merge.Precision): on a link whose bandwidth sets their pace. The
	// all-reduce of sync and diloco stays at fp16. --wire-dtype auto.
	WireAuto bool
	// ExchangeTimeout bounds one exchange this node starts, end to end.
	ExchangeTimeout time.Duration
	// Merger is the merge rule: alpha, staleness function, momentum policy.
	Merger averaging.Merger
	// CatchUp: when the second most advanced fresh peer (a claim another
	// peer corroborates; merge.CatchUpSource) is ahead of us by more than
	// this many samples of progress, pull its model instead of merging (a
	// late joiner or a node restarted far behind). 0 disables.
	CatchUp float64
	// LRScaling: whether gossip scales the learning rate by how often the
	// node merges (the default) or by its speed (lrscale.go).
	LRScaling LRScaling
	// MaxUpload caps the bytes/s this node sends (0: no cap).
	MaxUpload int
	// Trust defends the model against broken and hostile peers (gossip
	// mode merges; bans and the connection gate in every mode).
	Trust TrustConfig
	// SyncTimeout (sync mode) is how long a round waits for a member that
	// has not contributed before the group drops it and goes on; members
	// give up on a leader that has not answered within twice this. It must
	// exceed the slowest member's step time.
	SyncTimeout time.Duration
	// SyncOverlap (sync mode) runs each round's all-reduce while the next
	// local step computes (delayed averaging): a member's step r+1 starts
	// from its own model after step r, and once round r's mean arrives the
	// member's own update of step r is swapped for it. Every member then
	// holds the group's model plus its one step since, so the next round's
	// contributions still start from one group model. Off, a round ends
	// before the next step begins (DDP's exact semantics). Off by default:
	// on label-skewed shards each member's own last update, momentum
	// included, pulls its model away from the group's, and the benchmark
	// needed 2.6x the samples (docs/benchmarks.md).
	SyncOverlap bool
	// InnerSteps (diloco mode) is the local steps between two outer
	// rounds, >= 1; InnerScaling is InnerScalingNone or InnerScalingSpeed.
	// SyncTimeout must then exceed InnerSteps x the slowest member's step.
	InnerSteps   int
	InnerScaling string
	// OuterLR and OuterMomentum (diloco mode, and gossip's slow momentum)
	// are the outer Nesterov step's learning rate, > 0, and momentum, in
	// [0, 1).
	OuterLR, OuterMomentum float64
	// OuterEvery (gossip mode, the built-in trainer) is the local steps
	// between two slow-momentum steps (0: none): the node takes an outer
	// Nesterov step, at OuterLR and OuterMomentum, on what its model moved
	// since the last one, merges included.
	OuterEvery int

	// CheckpointEvery is the wall time between checkpoints (0: only the
	// final one). Ignored without a store.
	CheckpointEvery time.Duration
	// EvalEvery is the wall time between test-set evaluations of a
	// snapshot, off the training goroutine (0: only at epoch ends).
	EvalEvery time.Duration
	// ReportEvery is the wall time between progress events.
	ReportEvery time.Duration
	// Fresh ignores existing checkpoints and starts over.
	Fresh bool

	// Epochs is the run's length, in passes over the whole training set
	// counted on the run clock: every node's samples added up (see
	// runclock.go). A swarm of N nodes thus ends a run about N times
	// sooner than one node, every node ends it at about the same moment,
	// and the learning-rate schedule spans it. It is part of the model
	// fingerprint, with the schedule: peers must agree on it. 0 means no
	// end (a cosine schedule then needs a total). Train.Epochs must be 0:
	// a node's run belongs to the swarm, not to its shard.
	Epochs float64
	// Stop conditions besides the run's end, per node; zero disables each.
	UntilAccuracy float64
	MaxSteps      int64
	Duration      time.Duration

	// testHooks is empty in a release build. The testhooks build (make
	// build-testhooks) adds Adversary, which makes a hostile test node; see
	// adversary.go.
	//lint:ignore U1000 empty in a release build; the testhooks build fills it
	testHooks
}

// The defaults of a mesh node, as measured on the reference profile (MNIST,
// 4 nodes at slowdowns 2,2,4,8 on 2 cores; docs/benchmarks.md): `meshtrain
// bench` runs gossip with exactly these unless told otherwise.
const (
	// DefaultEpochs is the default run: passes over MNIST's 60,000 training
	// samples by the whole swarm, about a minute for `meshtrain testnet up`
	// on 2 cores.
	DefaultEpochs = 40
	// DefaultAvgInterval is the shortest wall time between the merges a
	// node starts (merge.Pace waits longer on a slow link or with slow
	// steps): of 12.5, 25 and 50 ms, the quickest to target; merging more
	// often keeps the models closer together.
	DefaultAvgInterval = 12500 * time.Microsecond
	// DefaultOuterEvery is the local steps between two of gossip's
	// slow-momentum steps (Config.OuterEvery): none. Every 20 steps
	// brought every node to 97% with 0.65x the samples on iid shards and
	// 0.56x on label-skewed ones (docs/benchmarks.md, slow momentum), but
	// with it the hostile suite failed: an honest node merged a
	// sign-flipping attacker's models whole, and the honest nodes'
	// accuracy moved by more than 1 pp: a swarm that needs the trust
	// checks does not get it by default.
	DefaultOuterEvery = 0
	// DefaultAnnounceInterval is the wall time between announcements (the
	// shortest: DefaultAnnounceRate stretches it in a large swarm).
	DefaultAnnounceInterval = time.Second
	// DefaultAnnounceRate is the announcements per second a swarm's
	// announce topic carries (gossip.AnnounceConfig.TopicRate): up to 10
	// nodes each announces every second; in a larger swarm each waits
	// (peers + 1) / 10 s, so a node's announce traffic stays flat as the
	// swarm grows instead of growing with it (docs/scale.md).
	DefaultAnnounceRate = 10.0
	// DefaultLR is the base learning rate of a node (batch 64). With the
	// models kept close by frequent merges, 0.1 brought every node to 97%
	// with fewer samples than 0.05 and as few as 0.15 (docs/benchmarks.md).
	// A gossip node scales it by how often it merges (LRScalingMerges, the
	// default): up to 0.2 with a merge every few steps.
	DefaultLR = 0.1
	// DefaultSchedule is the learning-rate schedule over a node's run:
	// cosine decay from the start, with no warmup. A warmup of 0.4% of the
	// run (9,600 samples of the default 40 epochs), the default until
	// 2026-12-07, cost gossip 2-22% of its samples to 97% (a tenth in the
	// median) in each of five comparisons of three seeds that day, on iid
	// and Dirichlet 0.5 shards, with and without a run clock that counts
	// the peers from the start (docs/benchmarks.md); a 4% warmup held the
	// rate low for most of what the swarm needs to reach 97%. A model that
	// needs one: --schedule cosine:warmup=X%.
	DefaultSchedule = "cosine"
)

// DefaultConfig is a gossip node on the local profile training the default
// MLP on MNIST, with the settings the benchmark measured (see the
// constants above).
func DefaultConfig() Config {
	tc := train.DefaultConfig()
	tc.Epochs = 0
	tc.LR, tc.Schedule = DefaultLR, DefaultSchedule
	ex := gossip.DefaultConfig()
	ex.SendDType = gossip.FP16
	// Announcements every second, a peer fresh for 15 s after its latest
	// one (the announcer's default window, as the benchmark ran it): a peer
	// that stops hearing from us keeps trying us for that long, which is
	// how a cut-off attacker goes on to earn its ban.
	ac := gossip.DefaultAnnounceConfig()
	ac.Interval, ac.TopicRate = DefaultAnnounceInterval, DefaultAnnounceRate
	return Config{
		Train:           tc,
		Dataset:         train.DatasetMNIST,
		Mode:            ModeGossip,
		Host:            HostConfig{Profile: ProfileLocal, Network: "main"},
		Exchange:        ex,
		Announce:        ac,
		AvgInterval:     DefaultAvgInterval,
		WireAuto:        true,
		ExchangeTimeout: 30 * time.Second,
		Merger:          averaging.DefaultMerger(),
		CatchUp:         60000,
		LRScaling:       LRScalingMerges,
		Trust:           DefaultTrustConfig(),
		SyncTimeout:     10 * time.Second,
		InnerSteps:      DefaultInnerSteps,
		InnerScaling:    InnerScalingNone,
		OuterLR:         averaging.DefaultOuterLR,
		OuterMomentum:   averaging.DefaultOuterMomentum,
		OuterEvery:      DefaultOuterEvery,
		CheckpointEvery: 30 * time.Second,
		EvalEvery:       10 * time.Second,
		ReportEvery:     2 * time.Second,
		Epochs:          DefaultEpochs,
	}
}

// OfflineConfig is `meshtrain train`: one process, no network, the
// trainer's own defaults (3 epochs of MNIST reach about 98%), and a
// test-set evaluation at every epoch end.
func OfflineConfig() Config {
	c := DefaultConfig()
	c.Offline = true
	d := train.DefaultConfig()
	c.Epochs, c.Train.LR, c.EvalEvery = float64(d.Epochs), d.LR, 0
	return c
}

// ErrBadConfig is wrapped by every Validate error.
var ErrBadConfig = errors.New("node: bad config")

// configError is another package's config error, which also wraps
// ErrBadConfig; its message is the other package's.
type configError struct{ err error }

func (e configError) Error() string   { return e.err.Error() }
func (e configError) Unwrap() []error { return []error{ErrBadConfig, e.err} }

// Validate reports every bad field at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...))
	}
	// sub adds the errors of settings another package checks, one per bad
	// field, each wrapping ErrBadConfig too.
	sub := func(prefix string, err error) {
		list := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			list = j.Unwrap()
		}
		for _, e := range list {
			if e == nil {
				continue
			}
			if prefix != "" {
				e = fmt.Errorf("%s: %w", prefix, e)
			}
			errs = append(errs, configError{e})
		}
	}
	// The trainer's schedule spans the run, which the node sets (RunSamples)
	// once the dataset is loaded; a stand-in lets Validate check the rest.
	tc := c.Train
	if tc.RunSamples == 0 && c.Epochs > 0 {
		tc.RunSamples = c.Epochs
	}
	// "--shard auto" becomes a shard once the peer ID is known (New).
	if _, auto, err := train.ParseAutoShard(tc.Shard); auto {
		if err != nil {
			sub("shard", err)
		}
		tc.Shard = "all"
	}
	sub("", tc.Validate())
	if c.Train.Epochs != 0 {
		bad("train epochs %d: must be 0 (a node's run length is Config.Epochs, counted over the swarm)", c.Train.Epochs)
	}
	if !(c.Epochs >= 0 && c.Epochs <= 1e6) {
		bad("epochs %v not in [0,1000000]", c.Epochs)
	}
	if _, _, err := train.Shape(c.Dataset); err != nil {
		bad("dataset %q: want mnist or synthetic", c.Dataset)
	}
	if !c.Offline {
		if _, err := ParseMode(string(c.Mode)); err != nil {
			bad("mode %q: want gossip, sync, diloco or local", c.Mode)
		}
		if _, err := ParseProfile(string(c.Host.Profile)); err != nil {
			bad("profile %q: want local, lan or public", c.Host.Profile)
		}
		if _, err := ParseAnnounce(c.Host.Announce); err != nil {
			bad("%v", err)
		}
		if c.Host.Network != c.Train.Network {
			bad("host network %q differs from the trainer's %q", c.Host.Network, c.Train.Network)
		}
		if c.AvgInterval <= 0 {
			bad("avg-interval %v: must be > 0", c.AvgInterval)
		}
		if c.ExchangeTimeout <= 0 {
			bad("exchange timeout %v: must be > 0", c.ExchangeTimeout)
		}
		sub("", c.Merger.Validate())
		// The node fills in the fingerprint, size and network when it starts
		// the protocols; with stand-ins for those, the rest of the gossip
		// settings (and whether the network name fits the announce topic)
		// are checked now rather than after the host is up.
		ex, ac := c.Exchange, c.Announce
		ex.Fingerprint, ex.Elements = params.Fingerprint{1}, 0
		ac.Fingerprint, ac.Network = params.Fingerprint{1}, c.Host.Network
		sub("exchange settings", ex.Validate())
		sub("announce settings", ac.Validate())
		if _, err := ParseLRScaling(string(c.LRScaling)); err != nil && c.LRScaling != "" {
			bad("%v", err)
		}
		if c.CatchUp < 0 {
			bad("catch-up %v: must be >= 0", c.CatchUp)
		}
		if c.MaxUpload < 0 {
			bad("max-upload %d: must be >= 0", c.MaxUpload)
		}
		if c.SyncTimeout <= 0 {
			bad("sync-timeout %v: must be > 0", c.SyncTimeout)
		}
		if c.InnerSteps < 1 || c.InnerSteps > 1<<20 {
			bad("inner-steps %d: must be in [1, %d]", c.InnerSteps, 1<<20)
		}
		if c.InnerScaling != InnerScalingNone && c.InnerScaling != InnerScalingSpeed {
			bad("inner-steps-scaling %q: want none or speed", c.InnerScaling)
		}
		if c.OuterEvery < 0 || c.OuterEvery > 1<<20 {
			bad("outer-every %d: must be in [0, %d]", c.OuterEvery, 1<<20)
		}
		if o := (averaging.Outer{LR: c.OuterLR}); o.Validate() != nil {
			bad("outer-lr %v: must be finite and > 0", c.OuterLR)
		}
		if o := (averaging.Outer{LR: 1, Momentum: c.OuterMomentum}); o.Validate() != nil {
			bad("outer-momentum %v: must be in [0, 1)", c.OuterMomentum)
		}
		if c.Host.DiscoveryInterval < 0 {
			bad("discovery-interval %v: must be >= 0", c.Host.DiscoveryInterval)
		}
		if c.Host.RelayBootDelay < 0 {
			bad("relay-boot-delay %v: must be >= 0", c.Host.RelayBootDelay)
		}
		sub("trust", c.Trust.Validate())
	}
	if c.CheckpointEvery < 0 {
		bad("checkpoint-every %v: must be >= 0", c.CheckpointEvery)
	}
	if c.EvalEvery < 0 {
		bad("eval-every %v: must be >= 0", c.EvalEvery)
	}
	if c.ReportEvery <= 0 {
		bad("report-every %v: must be > 0", c.ReportEvery)
	}
	if !(c.UntilAccuracy >= 0 && c.UntilAccuracy <= 1) {
		bad("until-accuracy %v: must be in [0,1]", c.UntilAccuracy)
	}
	if c.MaxSteps < 0 {
		bad("max-steps %d: must be >= 0", c.MaxSteps)
	}
	if c.Duration < 0 {
		bad("duration %v: must be >= 0", c.Duration)
	}
	errs = append(errs, c.validateHooks()...)
	return errors.Join(errs...)
}

// ParseAnnounce parses HostConfig.Announce (--announce): multiaddrs
// without a /p2p/ part (the host adds its own ID), every bad one named.
func ParseAnnounce(addrs []string) ([]ma.Multiaddr, error) {
	var out []ma.Multiaddr
	var errs []error
	for _, s := range addrs {
		m, err := ma.NewMultiaddr(s)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("announce address %q: %w", s, err))
		case len(m) == 0:
			errs = append(errs, fmt.Errorf("announce address %q: empty", s))
		default:
			if _, err := m.ValueForProtocol(ma.P_P2P); err == nil {
				errs = append(errs, fmt.Errorf("announce address %q: leave out /p2p/ (the node adds its own ID)", s))
				continue
			}
			out = append(out, m)
		}
	}
	return out, errors.Join(errs...)
}

// announceOption makes the host tell peers the given addresses instead of
// the ones it listens on, everywhere libp2p announces them (identify, the
// signed peer record, the DHT): a node behind a port forward, or one whose
// traffic must cross an emulated network (the benchmark's WAN), listens on
// one address and is reached at another. It only changes what the node
// says; it dials from its listen sockets as before.
func announceOption(addrs []string) (libp2p.Option, error) {
	list, err := ParseAnnounce(addrs)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return libp2p.AddrsFactory(func([]ma.Multiaddr) []ma.Multiaddr { return slices.Clone(list) }), nil
}

// WireAuto is the --wire-dtype value of a node that picks its models'
// precision as it goes (Config.WireAuto): fp16, or int8 where that makes
// its exchanges faster.
const WireAuto = "auto"

// ParseWire reads --wire-dtype: auto (fp16, switching to int8 where that
// makes exchanges faster), or one precision kept throughout: fp32, fp16 or
// int8.
func ParseWire(s string) (d gossip.DType, auto bool, err error) {
	if s == WireAuto {
		return gossip.FP16, true, nil
	}
	d, err = gossip.ParseDType(s)
	if err != nil {
		return 0, false, fmt.Errorf("%w (or %s)", err, WireAuto)
	}
	return d, false, nil
}

// WireName is the --wire-dtype value of c: auto, or its precision.
func (c Config) WireName() string {
	if c.WireAuto && c.Exchange.SendDType == gossip.FP16 {
		return WireAuto
	}
	return c.Exchange.SendDType.String()
}
