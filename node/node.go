package node

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/merge"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/train"
)

// Node is one meshtrain peer: the built-in trainer, its checkpoints, and
// (unless Offline) a libp2p host that announces, serves and merges models.
//
// Goroutines and what they own:
//   - Run's goroutine is the trainer loop: the only caller of Step. It
//     never touches the network or the disk.
//   - the averager goroutine owns partner choice and every merge; merges
//     reach the trainer through Trainer.Apply, between two steps;
//   - the checkpointer goroutine owns the store's write path;
//   - the evaluator goroutine scores snapshots on the test set;
//   - libp2p and the gossip service run their own goroutines and only read
//     snapshots (serve) or hand received models to the averager (inbound).
type Node struct {
	cfg     Config
	log     *slog.Logger // component=node
	baseLog *slog.Logger // for components that add their own
	st      store.Store
	trainer Trainer
	fp      params.Fingerprint
	started time.Time
	// supersede: --fresh passed over a checkpoint of this run, which Run
	// supersedes with a checkpoint of the new start before anything else.
	supersede bool

	key  crypto.PrivKey
	id   peer.ID
	host *Host
	ps   *pubsub.PubSub
	ann  *gossip.Announcer
	svc  *gossip.Service
	// stopPS ends pubsub's goroutines, which otherwise live as long as the
	// context New was given rather than as long as the mesh.
	stopPS   context.CancelFunc
	counters gossip.Counters

	// avg is the averager (nil offline; it runs in gossip mode only): see
	// averager.go. sync is sync mode's side of the trainer loop: sync.go.
	avg  *averager
	sync *syncer
	// groupProgress is the progress of the sync group's model at the last
	// round boundary (float64 bits): diloco's run clock, written by the
	// trainer loop (syncer), read by every goroutine.
	groupProgress atomic.Uint64
	// trust scores peers (nil when disabled or offline); see trust.go.
	// holdout: the trainer scores a holdout the trust checks validate on.
	trust   *trust
	holdout bool
	// rep is the reporter: the node's view of its own progress for
	// events, status and history; see reporter.go.
	rep *reporter

	networkWait atomic.Int64 // ns the trainer loop waited on the network
	// infoTime is when the model's information about the swarm was
	// current, Unix ns: the latest merge, or the node's start (see
	// params.Snapshot.Age, and modelAge).
	infoTime  atomic.Int64
	closeOnce sync.Once

	snaps SnapshotConfig // set before Run; see snapshots.go

	// The run: its length on the run clock (0: no end) and the clock; see
	// runclock.go. trainStart and busyAtStart mark when the trainer loop
	// began (after a start file), for the busy fraction.
	runTotal    float64
	clock       *runClock
	mergeRate   merge.MergeRate // the watcher's, for LRScalingMerges
	lrScale     atomic.Uint64   // float64 bits: the factor scaleLR set last, for the trainer loop (0: none)
	trainStart  atomic.Pointer[time.Time]
	busyAtStart atomic.Int64
	// outerBusy is the time spent in gossip's slow-momentum steps: training
	// compute outside the trainer's steps, so busy time. replaced counts
	// the times the model was replaced whole (a catch-up), inside the
	// trainer's Apply that replaced it, so the slow momentum starts over.
	outerBusy, replaced atomic.Int64
	// outerSteps is the slow-momentum steps taken (OuterSteps).
	outerSteps atomic.Int64
	// alone is the lone-node diagnosis (nil while the node has a partner);
	// otherFP the peers heard announcing another fingerprint. See alone.go.
	alone   atomic.Pointer[Alone]
	otherFP otherRuns

	// hooks is empty in a release build; in the testhooks build it holds
	// the attacker of a hostile test node (adversary.go).
	//lint:ignore U1000 empty in a release build; the testhooks build fills it
	hooks nodeHooks
}

// New loads the data, builds the built-in Go trainer, resumes from st
// (which may be nil: no checkpoints, a throwaway identity) and, unless
// cfg.Offline, starts the host and the gossip protocols.
func New(ctx context.Context, cfg Config, st store.Store, log *slog.Logger, emit func(Event)) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	holdout := 0
	if trusting(cfg) {
		holdout = cfg.Trust.Holdout
	}
	key, err := autoShard(&cfg, st, log)
	if err != nil {
		return nil, err
	}
	t, _, err := newGoTrainer(cfg, holdout, log)
	if err != nil {
		return nil, err
	}
	return newWith(ctx, cfg, t, st, log, emit, key)
}

// autoShard resolves "--shard auto[:N]": volunteers who join an open mesh
// with no coordination each take the shard their peer ID hashes to, and
// walk it in an order their peer ID also picks (unless --order-seed is
// given), so two peers on one shard do not take the same steps. The same
// data dir thus always trains the same shard. It returns the identity key
// it loaded (nil for any other shard), which the node then goes on with.
func autoShard(cfg *Config, st store.Store, log *slog.Logger) (crypto.PrivKey, error) {
	count, auto, err := train.ParseAutoShard(cfg.Train.Shard)
	if !auto || err != nil {
		return nil, err
	}
	key, id, err := nodeIdentity(st)
	if err != nil {
		return nil, err
	}
	sh, err := train.ShardFromKey([]byte(id), count)
	if err != nil {
		return nil, err
	}
	cfg.Train.Shard = sh.String()
	if cfg.Train.OrderSeed == 0 {
		cfg.Train.OrderSeed = train.OrderSeedFromKey([]byte(id))
	}
	if log != nil {
		log.Info("shard auto: training the shard this peer ID picks", "component", "node", "shard", cfg.Train.Shard,
			"order_seed", cfg.Train.OrderSeed)
	}
	return key, nil
}

// nodeIdentity is the node's key: the data dir's, or a new one without a
// store.
func nodeIdentity(st store.Store) (crypto.PrivKey, peer.ID, error) {
	if st != nil {
		key, id, _, err := Identity(st)
		return key, id, err
	}
	key, _, err := crypto.GenerateKeyPair(crypto.Ed25519, -1)
	if err != nil {
		return nil, "", fmt.Errorf("node: generate identity: %w", err)
	}
	id, err := peer.IDFromPrivateKey(key)
	return key, id, err
}

// trusting reports whether cfg runs the trust checks: in gossip mode, on
// a mesh. The sync baseline merges nothing from single peers, and its
// members are a controlled group.
func trusting(cfg Config) bool { return cfg.Trust.Enabled && cfg.Mode == ModeGossip && !cfg.Offline }

// NewWith is New around a trainer of the caller's: cfg's training settings
// (cfg.Train, the dataset) are the trainer's business then, and the run's
// length is cfg.Epochs passes over the trainer's training set
// (TrainerInfo.TrainSamples). The trainer's fingerprint must cover the run
// (its length and schedule) for peers that disagree on it never to merge.
func NewWith(ctx context.Context, cfg Config, t Trainer, st store.Store, log *slog.Logger, emit func(Event)) (*Node, error) {
	return newWith(ctx, cfg, t, st, log, emit, nil)
}

// newWith is NewWith with the identity key, if New loaded it already.
func newWith(ctx context.Context, cfg Config, t Trainer, st store.Store, log *slog.Logger, emit func(Event), key crypto.PrivKey) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if emit == nil {
		emit = func(Event) {}
	}
	total := cfg.Epochs * float64(t.Info().TrainSamples)
	n := &Node{cfg: cfg, log: log.With("component", "node"), baseLog: log, st: st, trainer: t, fp: t.Fingerprint(),
		started: time.Now(), runTotal: total, clock: newRunClock(0), rep: newReporter(), key: key}
	n.infoTime.Store(n.started.UnixNano())
	if st != nil {
		base, superseded, err := resume(ctx, cfg, st, t, log, emit)
		if err != nil {
			return nil, err
		}
		n.supersede = superseded
		n.clock = newRunClock(base)
		if h, err := st.History(historyLimit); err == nil {
			n.rep.hist = h
		}
	} else {
		emit(Event{Event: "start", Fingerprint: n.fp.String(), Message: "no data dir: training without checkpoints"})
	}
	if cfg.Offline {
		return n, nil
	}
	n.holdout = hasHoldout(t)
	core, err := merge.New(mergeConfig(cfg, t, trusting(cfg)))
	if err != nil {
		return nil, err
	}
	n.avg = newAverager(n, core)
	if trusting(cfg) {
		if !n.holdout {
			n.log.Warn("trust runs without holdout validation: the trainer scores no holdout, so candidate merges are " +
				"checked for fingerprint, finite values and outlier distance and clipped to the radius, never validated on a loss")
		}
		if n.trust, err = newTrust(cfg.Trust); err != nil {
			return nil, err
		}
		n.restoreBans()
	}
	if err := n.startMesh(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Node) startMesh(ctx context.Context) error {
	var err error
	if n.key != nil {
		n.id, err = peer.IDFromPrivateKey(n.key)
	} else {
		n.key, n.id, err = nodeIdentity(n.st)
	}
	if err != nil {
		return err
	}
	ex := n.cfg.Exchange
	ex.Fingerprint, ex.Elements = n.fp, n.trainer.Layout().Size()
	ex.Counters, ex.Logger = &n.counters, n.baseLog
	ex.OnReceive = n.avg.receive
	// The merges keep none of the models they receive (averager.recycle);
	// a catch-up copies the model it pulls and leaves its vector to the
	// collector (one vector a catch-up, which is rare).
	ex.Alloc = n.avg.alloc
	n.armHooks(&ex)
	if n.trust != nil {
		ex.OnReject = n.onReject
	}
	if n.cfg.MaxUpload > 0 {
		ex.UploadLimiter = gossip.NewUploadLimiter(n.cfg.MaxUpload)
	}
	hc := n.cfg.Host
	hc.Gossip = ex
	if n.trust != nil {
		hc.Refuse = n.refuseConn
	}
	if n.host, err = NewHost(n.key, hc, n.baseLog); err != nil {
		return err
	}
	n.avg.reach.host = n.host
	psCtx, stopPS := context.WithCancel(ctx)
	n.stopPS = stopPS
	if n.ps, err = pubsub.NewGossipSub(psCtx, n.host, n.pubsubOptions()...); err != nil {
		return fmt.Errorf("node: gossipsub: %w", err)
	}
	if n.svc, err = gossip.NewService(n.host, ex, n.serveSnapshot); err != nil {
		return err
	}
	ac := n.cfg.Announce
	ac.Network, ac.Fingerprint = n.cfg.Host.Network, n.fp
	ac.Counters, ac.Logger = &n.counters, n.baseLog
	if n.trust != nil {
		ac.OnReject = n.onReject
	}
	ac.OnForeign = func(p peer.ID) { n.otherFP.note(p, time.Now()) }
	if n.ann, err = gossip.NewAnnouncer(n.host, n.ps, ac, n.announcement); err != nil {
		return err
	}
	if n.cfg.Mode == ModeSync || n.cfg.Mode == ModeDiloco {
		if n.sync, err = n.newSyncer(); err != nil {
			return err
		}
	}
	n.stopPS = n.unleash(psCtx, n.stopPS)
	return nil
}

// serveSnapshot hands the gossip service a frozen copy of the model. It
// waits at most for the short parameter update of a step, never for its
// computation.
func (n *Node) serveSnapshot() (params.Snapshot, bool) {
	if r, ok := n.trainer.(ReadyReporter); ok && !r.Ready() {
		return params.Snapshot{}, false
	}
	return n.outgoing(n.snapshot()), true
}

// snapshot is a frozen copy of the model with its age.
func (n *Node) snapshot() params.Snapshot {
	s := n.trainer.SnapshotInto(nil)
	s.Age = n.modelAge(time.Now())
	return s
}

// reported is a frozen copy of the model the node reports (ParamAverager):
// the moving average of the parameters where the trainer keeps one, the
// parameters otherwise. dst's storage is reused when it is large enough.
func (n *Node) reported(dst []float32) params.Snapshot {
	if a, ok := n.trainer.(ParamAverager); ok {
		return a.AverageInto(dst)
	}
	return n.trainer.SnapshotInto(dst)
}

// resetAverage restarts the reported average at the live parameters, after
// the model was replaced.
func (n *Node) resetAverage() {
	if a, ok := n.trainer.(ParamAverager); ok {
		a.ResetAverage()
	}
}

// modelAge is how old the model's information about the swarm is at now:
// the time since it last took in a peer's model, or since the node
// started if it never has.
func (n *Node) modelAge(now time.Time) time.Duration {
	return max(0, now.Sub(time.Unix(0, n.infoTime.Load())))
}

// tookIn records that the model took in a model of age age at now: its
// information is now as fresh as that model's, if that is fresher than
// its own (a stale peer's model does not refresh ours). replace sets it
// whatever it was (our model was replaced whole).
func (n *Node) tookIn(now time.Time, age time.Duration, replace bool) {
	t := now.Add(-max(0, age)).UnixNano()
	for {
		old := n.infoTime.Load()
		if (!replace && t <= old) || n.infoTime.CompareAndSwap(old, t) {
			return
		}
	}
}

func (n *Node) announcement() gossip.Announcement {
	s := n.trainer.Stats()
	return n.announced(gossip.Announcement{Step: s.Steps, Progress: float64(s.Progress), Loss: f64(&n.rep.lastLoss),
		Accuracy: f64(&n.rep.lastAcc), SamplesPerSec: s.SamplesPerSec, Mode: string(n.cfg.Mode),
		Samples: float64(s.Samples), RunSamples: n.runPosition(time.Now(), float64(s.Samples)),
		AgeS: n.modelAge(time.Now()).Seconds()})
}

func f64(a *atomic.Uint64) float64       { return math.Float64frombits(a.Load()) }
func setF64(a *atomic.Uint64, v float64) { a.Store(math.Float64bits(v)) }

// ID is the node's peer ID ("" when offline).
func (n *Node) ID() peer.ID { return n.id }

// Addrs are the node's full listen multiaddrs (with /p2p/ID).
func (n *Node) Addrs() []string {
	if n.host == nil {
		return nil
	}
	return n.host.FullAddrs()
}

// ListenAddrs are the addresses the node listens on (without /p2p/):
// Addrs unless HostConfig.Announce replaces them.
func (n *Node) ListenAddrs() []string {
	if n.host == nil {
		return nil
	}
	var out []string
	for _, a := range n.host.Network().ListenAddresses() {
		out = append(out, a.String())
	}
	return out
}

// Host is the libp2p host (nil when offline).
func (n *Node) Host() *Host { return n.host }

// Why a run stopped (Result.StopReason, the final event's message).
const (
	StopRunComplete = "run_complete"
	StopAccuracy    = "until_accuracy"
	StopMaxSteps    = "max_steps"
	StopDuration    = "duration"
	StopInterrupted = "interrupted"
)

func stopMessage(reason string, r RunStatus, saved bool) string {
	switch reason {
	case StopRunComplete:
		return fmt.Sprintf("run complete: %.0f samples trained by the swarm (%g epochs)", r.Samples, r.Epochs)
	case StopAccuracy:
		return "stopped: --until-accuracy reached"
	case StopMaxSteps:
		return "stopped: --max-steps reached"
	case StopDuration:
		return "stopped: --duration reached"
	}
	if !saved {
		return "interrupted (no data dir: nothing is saved)"
	}
	return "interrupted: progress is saved; run the same command again to resume"
}

// Close stops the protocols, then the host, and waits for the goroutines
// trust started. Run calls it as it returns; call it instead of Run to drop
// a node that will not run. Safe to call twice, and from any goroutine once
// Run has returned (the store is the caller's to close).
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		if n.ann != nil {
			_ = n.ann.Close()
		}
		if n.sync != nil {
			n.sync.close()
		}
		if n.svc != nil {
			_ = n.svc.Close()
		}
		if n.stopPS != nil {
			n.stopPS()
		}
		if n.host != nil {
			_ = n.host.Close()
		}
		if n.trust != nil {
			n.trust.wg.Wait()
		}
	})
	return nil
}
