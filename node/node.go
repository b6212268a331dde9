package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/reputation"
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
	trainer *train.Trainer
	test    *train.Dataset
	fp      params.Fingerprint

	key  crypto.PrivKey
	id   peer.ID
	host *Host
	ps   *pubsub.PubSub
	ann  *gossip.Announcer
	svc  *gossip.Service
	sync *syncer // sync mode only; see sync.go
	// trust scores peers and vets their models (nil when disabled or
	// offline); see trust.go.
	trust *trust
	// stopPS ends pubsub's goroutines, which otherwise live as long as the
	// context New was given rather than as long as the mesh.
	stopPS context.CancelFunc

	counters gossip.Counters
	inbound  chan inboundModel

	started     time.Time
	merges      atomic.Int64
	catchups    atomic.Int64
	timeouts    atomic.Int64
	exchFailed  atomic.Int64
	inDropped   atomic.Int64
	networkWait atomic.Int64 // ns the trainer loop waited on the network
	lastLoss    atomic.Uint64
	lastAcc     atomic.Uint64
	lastMerge   atomic.Pointer[MergeInfo]
	lastCkpt    atomic.Pointer[store.Info]
	reached     atomic.Bool                     // UntilAccuracy reached
	reachedSnap atomic.Pointer[params.Snapshot] // the snapshot that reached it

	closeOnce sync.Once

	histMu sync.Mutex
	hist   []store.Point
	histQ  chan store.Point

	peerMu     sync.Mutex
	peerMerges map[peer.ID]int64 // merges per partner, both directions

	snaps SnapshotConfig // set before Run; see snapshots.go

	// The run: its length on the run clock (0: no end) and the clock; see
	// runclock.go. trainStart and busyAtStart mark when the trainer loop
	// began (after a start file), for the busy fraction.
	runTotal    float64
	clock       *runClock
	trainStart  atomic.Pointer[time.Time]
	busyAtStart atomic.Int64
	lastLR      atomic.Uint64
	// alone is the lone-node diagnosis (nil while the node has a partner);
	// otherFP the peers heard announcing another fingerprint. See alone.go.
	alone   atomic.Pointer[Alone]
	otherFP otherRuns

	adv *attacker // nil unless cfg.Adversary makes this a hostile test node; see adversary.go
}

// MergeInfo describes the latest merge.
type MergeInfo struct {
	Partner   string    `json:"partner"`
	Staleness float64   `json:"staleness"`
	Weight    float64   `json:"weight"`
	Inbound   bool      `json:"inbound"`
	Time      time.Time `json:"time"`
}

type inboundModel struct {
	from peer.ID
	snap params.Snapshot
}

// New loads the data, builds the trainer, resumes from st (which may be
// nil: no checkpoints, a throwaway identity) and, unless cfg.Offline,
// starts the host and the gossip protocols.
func New(ctx context.Context, cfg Config, st store.Store, log *slog.Logger, emit func(Event)) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if emit == nil {
		emit = func(Event) {}
	}
	trainSet, testSet, err := LoadData(cfg.Dataset, cfg.DataPath, cfg.Train.Seed)
	if err != nil {
		return nil, err
	}
	tc := cfg.Train
	tc.Logger = log
	total := cfg.Epochs * float64(trainSet.N)
	tc.RunSamples, tc.Run = total, RunSpec(total, cfg.Train.Schedule)
	t, err := train.New(tc, trainSet)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: log.With("component", "node"), baseLog: log, st: st, trainer: t, test: testSet, fp: t.Fingerprint(),
		inbound: make(chan inboundModel, 4), histQ: make(chan store.Point, 16), started: time.Now(),
		runTotal: total, clock: newRunClock(0)}
	setF64(&n.lastLR, t.LR())
	if st != nil {
		base, err := resume(ctx, cfg, st, t, log, emit)
		if err != nil {
			return nil, err
		}
		n.clock = newRunClock(base)
		if h, err := st.History(historyLimit); err == nil {
			n.hist = h
		}
	} else {
		emit(Event{Event: "start", Fingerprint: n.fp.String(), Message: "no data dir: training without checkpoints"})
	}
	if cfg.Offline {
		return n, nil
	}
	// Trust vets what gossip merges. The sync baseline merges nothing from
	// single peers, and its members are a controlled group.
	if cfg.Trust.Enabled && cfg.Mode == ModeGossip {
		if n.trust, err = newTrust(cfg.Trust, cfg.Merger, cfg.Train.Batch, t, trainSet, cfg.Train.Seed); err != nil {
			return nil, err
		}
		n.restoreBans()
	}
	if err := n.startMesh(ctx); err != nil {
		n.closeMesh()
		return nil, err
	}
	return n, nil
}

func (n *Node) startMesh(ctx context.Context) error {
	var err error
	if n.st != nil {
		n.key, n.id, _, err = Identity(n.st)
	} else {
		n.key, _, err = crypto.GenerateKeyPair(crypto.Ed25519, -1)
		if err == nil {
			n.id, err = peer.IDFromPrivateKey(n.key)
		}
	}
	if err != nil {
		return err
	}
	ex := n.cfg.Exchange
	ex.Fingerprint, ex.Elements = n.fp, n.trainer.Model().Size()
	ex.Counters, ex.Logger = &n.counters, n.baseLog
	ex.OnReceive = n.receive
	n.armAdversary(&ex)
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
	if n.cfg.Mode == ModeSync {
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
func (n *Node) serveSnapshot() (params.Snapshot, bool) { return n.outgoing(n.trainer.Snapshot()), true }

// receive is called by the gossip service with the initiator's model after
// an inbound exchange; the averager merges it. A full queue drops it: the
// initiator merged our model already, and the next exchange will come.
func (n *Node) receive(p peer.ID, s params.Snapshot) {
	select {
	case n.inbound <- inboundModel{from: p, snap: s}:
	default:
		n.inDropped.Add(1)
	}
}

func (n *Node) announcement() gossip.Announcement {
	s := n.trainer.Stats()
	return gossip.Announcement{Step: s.Steps, Progress: float64(s.Progress), Loss: f64(&n.lastLoss),
		Accuracy: f64(&n.lastAcc), SamplesPerSec: s.SamplesPerSec, Mode: string(n.cfg.Mode),
		Samples: float64(s.Samples), RunSamples: n.runPosition(time.Now(), float64(s.Samples))}
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

// Trainer is the node's trainer.
func (n *Node) Trainer() *train.Trainer { return n.trainer }

// Host is the libp2p host (nil when offline).
func (n *Node) Host() *Host { return n.host }

// Run trains until the run ends, another stop condition holds or ctx ends,
// then writes a final checkpoint and stops the mesh. emit is called one
// event at a time.
func (n *Node) Run(ctx context.Context, emit func(Event)) (*Result, error) {
	defer n.closeMesh()
	var emitMu sync.Mutex
	send := func(e Event) {
		e.Elapsed = time.Since(n.started).Seconds()
		emitMu.Lock()
		defer emitMu.Unlock()
		if emit != nil {
			emit(e)
		}
	}
	t := n.trainer
	meta := map[string]string{
		MetaModel: t.Model().Spec(), MetaDataset: n.cfg.Dataset, MetaNetwork: n.cfg.Train.Network,
		MetaFingerprint: n.fp.String(), MetaSeed: strconv.FormatUint(n.cfg.Train.Seed, 10),
		MetaRun: RunSpec(n.runTotal, n.cfg.Train.Schedule),
	}
	ck := newCheckpointer(n.st, meta, n.log, send, func(info store.Info) { n.lastCkpt.Store(&info) })
	defer ck.close()
	state := func() checkpointState {
		s := t.State()
		return checkpointState{State: s, clock: n.runPosition(time.Now(), float64(s.Samples))}
	}
	if n.st != nil && n.cfg.Fresh {
		// A fresh run's first checkpoint supersedes the old run at once, so a
		// crash before the next one cannot resume the run we meant to drop.
		if err := ck.saveNow(context.WithoutCancel(ctx), state(), false); err != nil {
			return nil, err
		}
	}
	if n.host != nil {
		send(Event{Event: "listening", PeerID: n.id.String(), Addrs: n.Addrs(), Fingerprint: n.fp.String(),
			Message: fmt.Sprintf("peer %s, mode %s, profile %s, network %q", n.id, n.cfg.Mode, n.cfg.Host.Profile, n.cfg.Host.Network)})
	}

	runCtx, stopLoops := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if n.ann != nil {
		// The run clock listens while the node waits for a start file too,
		// so training starts at the swarm's point of the run.
		wg.Add(1)
		go func() { defer wg.Done(); n.watcher(runCtx) }()
	}
	stopAll := func() { stopLoops(); wg.Wait() }
	defer stopAll()

	n.awaitStart(ctx)
	began := time.Now()
	n.busyAtStart.Store(int64(t.Stats().Busy))
	n.trainStart.Store(&began)

	evals := make(chan evalRequest, 1)
	wg.Add(3)
	go func() { defer wg.Done(); n.evaluator(runCtx, evals, send) }()
	go func() { defer wg.Done(); n.historian(runCtx) }()
	go func() { defer wg.Done(); n.snapshotter(runCtx) }()
	if n.host != nil && n.cfg.Mode == ModeGossip {
		wg.Add(1)
		go func() { defer wg.Done(); n.averager(runCtx, send) }()
	}

	res := &Result{Trainer: t, Test: n.test}
	startStats := t.Stats()
	own := float64(startStats.Samples)
	startClock := n.runPosition(began, own)
	lastReport, lastCkpt, lastEval := began, began, began
	var lossEMA float64
	var seen int
	// stop is why the run ended ("" while it goes on).
	stop := func(clock float64) string {
		switch {
		case n.runTotal > 0 && clock >= n.runTotal:
			return StopRunComplete
		case n.reached.Load():
			return StopAccuracy
		case n.cfg.MaxSteps > 0 && t.Stats().Steps >= n.cfg.MaxSteps:
			return StopMaxSteps
		case n.cfg.Duration > 0 && time.Since(n.started) >= n.cfg.Duration:
			return StopDuration
		}
		return ""
	}
	reason := ""
	for {
		clock := n.runPosition(time.Now(), own)
		if reason = stop(clock); reason != "" {
			break
		}
		t.SetClock(clock)
		stats, err := t.Step(ctx)
		if ctx.Err() != nil {
			reason = StopInterrupted
			break
		}
		if err != nil {
			return nil, err
		}
		own += float64(stats.Batch)
		setF64(&n.lastLR, stats.LR)
		if n.sync != nil {
			// Sync mode: the group's average replaces our step's result
			// before the next step; all of it is the trainer waiting on
			// the network.
			began := time.Now()
			err := n.sync.step(ctx)
			n.networkWait.Add(int64(time.Since(began)))
			if err != nil {
				reason = StopInterrupted
				break
			}
		}
		// Yield between steps: with --threads 1 the trainer would otherwise
		// hold the only P until preempted, and every network round trip of
		// an exchange would wait for that (about 10 ms each). A step that
		// slept (--slowdown) has already left the P to them; yielding again
		// would idle the trainer behind their work.
		if stats.Busy <= stats.Compute {
			runtime.Gosched()
		}
		if seen++; seen == 1 {
			lossEMA = stats.Loss
		} else {
			lossEMA = 0.98*lossEMA + 0.02*stats.Loss
		}
		setF64(&n.lastLoss, lossEMA)
		now := time.Now()
		if n.cfg.CheckpointEvery > 0 && now.Sub(lastCkpt) >= n.cfg.CheckpointEvery {
			ck.offer(state())
			lastCkpt = now
		}
		epochEnd := t.Stats().Epoch != stats.Epoch
		if !n.snaps.NoEval && (epochEnd || (n.cfg.EvalEvery > 0 && now.Sub(lastEval) >= n.cfg.EvalEvery)) {
			// Offer the evaluator a snapshot; if it is still busy with the
			// previous one, skip this one rather than wait.
			kind := "eval"
			if epochEnd {
				kind = "epoch"
			}
			select {
			case evals <- evalRequest{kind: kind, snap: t.Snapshot(), epoch: t.Stats().Epoch}:
				lastEval = now
			default:
			}
		}
		if now.Sub(lastReport) >= n.cfg.ReportEvery {
			s := t.Stats()
			clock := n.runPosition(now, own)
			e := Event{Event: "progress", Step: s.Steps, Epoch: s.Epoch, Progress: float64(s.Progress), Loss: lossEMA,
				Merges: n.merges.Load(), LR: stats.LR, RunSamples: clock, RunTotal: n.runTotal}
			if n.ann != nil {
				e.Peers = len(n.partners())
			}
			if el := now.Sub(began).Seconds(); el > 0 {
				e.SamplesPerSec = float64(s.Samples-startStats.Samples) / el
				if rate := (clock - startClock) / el; n.runTotal > clock && rate > 0 {
					e.ETA = (n.runTotal - clock) / rate
				}
			}
			send(e)
			n.record(store.Point{Time: now, Step: s.Steps, Progress: s.Progress, Loss: lossEMA,
				Accuracy: f64(&n.lastAcc), SamplesPerSec: s.SamplesPerSec})
			lastReport = now
		}
	}
	res.Finished = reason != StopInterrupted
	res.StopReason = reason
	stopAll()
	if snap := n.reachedSnap.Load(); snap != nil {
		// Steps and merges after the snapshot that reached the target may
		// have drifted below it; the run ends with the model that reached
		// it, so the final event, checkpoint and --save agree with the
		// reason the run stopped.
		if err := t.Apply(func(w, _ []float32, p *params.Progress) error {
			copy(w, snap.Params)
			*p = snap.Progress
			return nil
		}); err != nil {
			return nil, err
		}
	}
	r, err := t.Evaluate(n.test)
	if err != nil {
		return nil, err
	}
	res.TestAccuracy = r.Accuracy
	// The final checkpoint is written even when interrupted (not marked
	// final then), so a stopped node resumes where it stopped.
	if err := ck.saveNow(context.WithoutCancel(ctx), state(), res.Finished); err != nil {
		return nil, err
	}
	s := t.Stats()
	setF64(&n.lastAcc, r.Accuracy)
	status := n.Status()
	send(Event{Event: "final", Step: s.Steps, Epoch: s.Epoch, Progress: float64(s.Progress), Loss: lossEMA,
		TestAccuracy: &r.Accuracy, TestLoss: r.Loss, SamplesPerSec: s.SamplesPerSec, Fingerprint: n.fp.String(),
		Merges: n.merges.Load(), RunSamples: status.Run.Samples, RunTotal: n.runTotal, Status: &status,
		Message: stopMessage(reason, status.Run, n.st != nil)})
	return res, nil
}

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

type evalRequest struct {
	kind  string
	snap  params.Snapshot
	epoch int
}

// evaluator scores snapshots on the test set, off the trainer loop.
func (n *Node) evaluator(ctx context.Context, in <-chan evalRequest, send func(Event)) {
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-in:
			r, err := train.Evaluate(n.trainer.Model(), req.snap.Params, n.test, 0, 1)
			if err != nil {
				n.log.Error("evaluation failed", "err", err)
				continue
			}
			setF64(&n.lastAcc, r.Accuracy)
			e := Event{Event: req.kind, Step: req.snap.Step, Epoch: req.epoch, Progress: float64(req.snap.Progress),
				Loss: f64(&n.lastLoss), TestAccuracy: &r.Accuracy, TestLoss: r.Loss, Merges: n.merges.Load()}
			if n.ann != nil {
				e.Peers = len(n.partners())
			}
			send(e)
			if n.cfg.UntilAccuracy > 0 && r.Accuracy >= n.cfg.UntilAccuracy {
				if n.reachedSnap.CompareAndSwap(nil, &req.snap) {
					n.reached.Store(true)
				}
			}
		}
	}
}

// averager starts an exchange every AvgInterval (with jitter) and merges
// what comes back, and merges the models peers send when they start one.
// It owns partner choice and is the only goroutine that merges.
func (n *Node) averager(ctx context.Context, send func(Event)) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	next := func() time.Duration {
		return time.Duration(float64(n.cfg.AvgInterval) * (0.8 + 0.4*rng.Float64()))
	}
	timer := time.NewTimer(next())
	defer timer.Stop()
	var last peer.ID
	for {
		select {
		case <-ctx.Done():
			return
		case in := <-n.inbound:
			n.merge(in.from, in.snap, true)
		case <-timer.C:
			last = n.round(ctx, rng, last, send)
			timer.Reset(next())
		}
	}
}

// round runs one averaging round: catch up with a far-ahead peer, or
// exchange with one partner and merge. It returns the partner.
func (n *Node) round(ctx context.Context, rng *rand.Rand, last peer.ID, send func(Event)) peer.ID {
	peers := n.partners()
	if len(peers) == 0 {
		return last
	}
	own := n.trainer.Stats().Progress
	best := peers[0]
	for _, p := range peers[1:] {
		if p.Progress > best.Progress {
			best = p
		}
	}
	if n.cfg.CatchUp > 0 && best.Progress-float64(own) > n.cfg.CatchUp {
		n.catchUp(ctx, best, send)
		return best.Peer
	}
	// A peer that far behind will pull a model itself (a node that just
	// joined or restarted): exchanging with it now would only bring us its
	// untrained model, which the trust checks would hold against it.
	if n.cfg.CatchUp > 0 {
		peers = slices.DeleteFunc(peers, func(p gossip.PeerInfo) bool { return float64(own)-p.Progress > n.cfg.CatchUp })
		if len(peers) == 0 {
			return last
		}
	}
	// Partner policy: uniform among fresh peers training the same model,
	// avoiding the previous partner when there is a choice, so models mix
	// across the whole swarm instead of ping-ponging in pairs.
	p := peers[rng.IntN(len(peers))]
	if p.Peer == last && len(peers) > 1 {
		for p.Peer == last {
			p = peers[rng.IntN(len(peers))]
		}
	}
	ectx, cancel := context.WithTimeout(ctx, n.cfg.ExchangeTimeout)
	remote, err := n.svc.Exchange(ectx, p.Peer, n.outgoing(n.trainer.Snapshot()))
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			n.exchangeFailed(p.Peer, err)
		}
		return p.Peer
	}
	n.merge(p.Peer, remote, false)
	return p.Peer
}

// partners are the fresh peers announcing our fingerprint in a mode that
// merges.
func (n *Node) partners() []gossip.PeerInfo {
	var out []gossip.PeerInfo
	for _, p := range n.ann.Fresh() {
		if p.Peer != n.id && p.Fingerprint == n.fp && p.Mode == string(ModeGossip) && n.standing(p.Peer) == reputation.OK {
			out = append(out, p)
		}
	}
	return out
}

func (n *Node) exchangeFailed(p peer.ID, err error) {
	n.exchFailed.Add(1)
	if errors.Is(err, context.DeadlineExceeded) || gossip.ReasonOf(err).String() == "timeout" {
		n.timeouts.Add(1)
	}
	n.log.Debug("exchange failed", "peer", p, "err", err)
}

// catchUp replaces our model with the most advanced peer's: a node that
// joins late or restarts far behind starts from the swarm's model instead
// of dragging everyone back with its own.
func (n *Node) catchUp(ctx context.Context, best gossip.PeerInfo, send func(Event)) {
	pctx, cancel := context.WithTimeout(ctx, n.cfg.ExchangeTimeout)
	remote, err := n.svc.Pull(pctx, best.Peer)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			n.exchangeFailed(best.Peer, err)
		}
		return
	}
	if !n.vetCatchUp(best.Peer, remote) {
		n.log.Warn("catch-up refused: the pulled model fails validation", "peer", best.Peer)
		return
	}
	var before params.Progress
	err = n.trainer.Apply(func(w, mom []float32, p *params.Progress) error {
		if len(remote.Params) != len(w) || remote.Fingerprint != n.fp || !remote.Progress.Valid() {
			return fmt.Errorf("node: catch-up model from %s does not fit", best.Peer)
		}
		before = *p
		copy(w, remote.Params)
		clear(mom) // the momentum belonged to the model we dropped
		*p = remote.Progress
		return nil
	})
	if err != nil {
		n.log.Warn("catch-up failed", "peer", best.Peer, "err", err)
		return
	}
	n.catchups.Add(1)
	s := n.trainer.Stats()
	send(Event{Event: "catchup", Step: s.Steps, Progress: float64(s.Progress),
		Message: fmt.Sprintf("pulled the model of %s (progress %.0f, ours was %.0f)", best.Peer, float64(remote.Progress), float64(before))})
}

// merge mixes a remote model into ours between two steps.
func (n *Node) merge(from peer.ID, remote params.Snapshot, inbound bool) {
	clipped := false
	if n.trust != nil {
		var ok bool
		if ok, clipped = n.vet(from, &remote); !ok {
			return
		}
	}
	var out averaging.Outcome
	err := n.trainer.Apply(func(w, mom []float32, p *params.Progress) error {
		var err error
		out, err = n.cfg.Merger.Merge(averaging.Local{Fingerprint: n.fp, Params: w, Momentum: mom, Progress: p,
			Batch: n.cfg.Train.Batch}, remote, nil)
		return err
	})
	if err != nil {
		n.log.Warn("merge refused", "peer", from, "err", err)
		return
	}
	if n.trust != nil {
		n.accept(from, clipped)
	}
	n.merges.Add(1)
	n.peerMu.Lock()
	if n.peerMerges == nil {
		n.peerMerges = make(map[peer.ID]int64)
	}
	n.peerMerges[from]++
	n.peerMu.Unlock()
	n.lastMerge.Store(&MergeInfo{Partner: from.String(), Staleness: out.Staleness, Weight: out.Weight, Inbound: inbound, Time: time.Now()})
}

// PeerMerges returns how many merges this node made with each peer, in
// either direction.
func (n *Node) PeerMerges() map[string]int64 {
	n.peerMu.Lock()
	defer n.peerMu.Unlock()
	out := make(map[string]int64, len(n.peerMerges))
	for p, c := range n.peerMerges {
		out[p.String()] = c
	}
	return out
}

// closeMesh stops the protocols, then the host. Safe to call twice.
func (n *Node) closeMesh() {
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
}
