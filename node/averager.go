package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/merge"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/reputation"
)

// averager is gossip mode's side of a node: partner choice and every merge.
// Its goroutine (run) owns the merge core, its scratch model and the
// inbound queue; the counters are atomics, read by the status. It uses the
// node's trainer (merges land through Trainer.Apply, between two steps),
// gossip service and trust, which it does not own.
type averager struct {
	n    *Node
	core *merge.Core
	pace merge.Pace      // owned by run
	prec merge.Precision // owned by run; used with Config.WireAuto
	wait atomic.Int64    // the latest wait between rounds, ns (status)
	// exchange and answer are pace's average exchange and its answer's
	// time, ns (status)
	exchange, answer atomic.Int64
	buf              []float32 // scratch: our model at a decision
	inbound          chan inboundModel
	// spare holds received vectors that were merged (or dropped), for
	// the gossip service to read the next models into (alloc): a model
	// is 0.94 MB at the default size, and a fresh one for every frame
	// cost about 5% of a node's CPU in zeroing and collection.
	spare chan []float32
	// judgedCatchUp: a model to catch up with was judged since the process
	// started (pulled, or sent while we were starting; taken or refused),
	// which ends the starting node's relative catch-up
	// (merge.ChoosePartner, takeWhole). Owned by run.
	judgedCatchUp bool
	// heard replaces the peers heard of (Node.partners) for round, claims
	// and takeWhole when set: tests set it on an offline node.
	heard func() []gossip.PeerInfo

	merges, catchups, claimsCut, timeouts, failed, dropped atomic.Int64
	last                                                   atomic.Pointer[MergeInfo]

	mu      sync.Mutex
	perPeer map[peer.ID]int64 // merges per partner, both directions

	// reach is which partners can be reached now, and the backoff of
	// those that could not (paths.go).
	reach *reachState
}

// spareVectors is how many received vectors the averager keeps for reuse:
// one for the exchange it starts and a few for inbound ones in flight.
const spareVectors = 4

// alloc supplies the vector the gossip service reads a model into: a
// spare one of that length if there is one, else a fresh one.
// Safe for concurrent use.
func (a *averager) alloc(n int) []float32 {
	select {
	case v := <-a.spare:
		if len(v) == n {
			return v
		}
	default:
	}
	return make([]float32, n)
}

// recycle hands back a received vector nothing refers to any more: the
// merge is done with it (it mixes the values in and keeps none).
func (a *averager) recycle(v []float32) {
	select {
	case a.spare <- v:
	default:
	}
}

type inboundModel struct {
	from peer.ID
	snap params.Snapshot
}

// MergeInfo describes the latest merge.
type MergeInfo struct {
	Partner   string    `json:"partner"`
	Staleness float64   `json:"staleness"`
	Weight    float64   `json:"weight"`
	Inbound   bool      `json:"inbound"`
	Time      time.Time `json:"time"`
}

func newAverager(n *Node, core *merge.Core) *averager {
	// The host that reach asks is set once it exists (startMesh).
	return &averager{n: n, core: core, pace: merge.Pace{Floor: n.cfg.AvgInterval}, prec: merge.Precision{Floor: n.cfg.AvgInterval}, inbound: make(chan inboundModel, 4), spare: make(chan []float32, spareVectors), perPeer: map[peer.ID]int64{}, reach: newReachState(nil)}
}

// receive is called by the gossip service with the initiator's model after
// an inbound exchange; the averager merges it. A full queue drops it: the
// initiator merged our model already, and the next exchange will come.
func (a *averager) receive(p peer.ID, s params.Snapshot) {
	select {
	case a.inbound <- inboundModel{from: p, snap: s}:
	default:
		a.dropped.Add(1)
		a.recycle(s.Params)
	}
}

// run starts an exchange every AvgInterval or longer (merge.Pace: at
// least the recent exchange time and one step, with jitter) and merges
// what comes back, and merges the models peers send when they start one.
func (a *averager) run(ctx context.Context, send func(Event)) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	next := func() time.Duration {
		var step time.Duration
		if sps := a.n.trainer.Stats().SamplesPerSec; sps > 0 {
			step = time.Duration(float64(a.n.cfg.Train.Batch) / sps * float64(time.Second))
		}
		w := a.pace.Wait(step, rng.Float64())
		a.wait.Store(int64(w))
		return w
	}
	timer := time.NewTimer(next())
	defer timer.Stop()
	var last peer.ID
	for {
		select {
		case <-ctx.Done():
			return
		case in := <-a.inbound:
			a.merge(in.from, in.snap, true, send)
			a.recycle(in.snap.Params)
		case r := <-a.reach.results:
			if wait := a.reach.reached(r, time.Now()); wait > 0 {
				a.n.log.Debug("peer not reached directly: backing off", "peer", r.p, "wait", wait, "err", r.err)
			}
		case <-timer.C:
			last = a.round(ctx, rng, last, send)
			timer.Reset(next())
		}
	}
}

// round runs one averaging round: catch up with a far-ahead peer, or
// exchange with one partner and merge (merge.ChoosePartner decides). It
// returns the partner.
func (a *averager) round(ctx context.Context, rng *rand.Rand, last peer.ID, send func(Event)) peer.ID {
	n := a.n
	partners := a.partners()
	heard := make([]merge.Candidate, len(partners))
	for i, q := range partners {
		heard[i] = merge.Candidate{Peer: q.Peer.String(), Progress: q.Progress}
	}
	cands := a.reach.candidates(partners, time.Now())
	c := merge.ChoosePartner(cands, heard, float64(n.trainer.Stats().Progress), last.String(), n.cfg.CatchUp, !a.judgedCatchUp, rng.IntN)
	if c.Peer == "" {
		return last
	}
	p, err := peer.Decode(c.Peer)
	if err != nil {
		return last
	}
	// exchangeFailed tells reach of a failure; end judges the attempt
	// (not one that our shutdown cut short).
	path := a.reach.begin(p)
	defer func() {
		if ctx.Err() == nil {
			a.reach.end(p, path, time.Now())
		}
	}()
	if c.CatchUp {
		a.catchUp(ctx, p, send)
		return p
	}
	ectx, cancel := context.WithTimeout(ctx, n.cfg.ExchangeTimeout)
	remote, tm, err := n.svc.ExchangeTimed(ectx, p, n.outgoing(n.snapshot()))
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			a.exchangeFailed(p, err)
		}
		return p
	}
	a.pace.Exchanged(tm.Total, tm.Answer)
	a.exchange.Store(int64(a.pace.Exchange()))
	a.answer.Store(int64(a.pace.Answer()))
	a.precision(tm, send)
	a.merge(p, remote, false, send)
	a.recycle(remote.Params)
	return p
}

// precision lets merge.Precision pick how our models travel, with
// Config.WireAuto: fp16, or int8 while that makes exchanges faster.
func (a *averager) precision(tm gossip.Timing, send func(Event)) {
	n := a.n
	if !n.cfg.WireAuto || n.cfg.Exchange.SendDType != gossip.FP16 {
		return
	}
	want := gossip.FP16
	if a.prec.Exchanged(max(tm.Total-tm.Answer, 0), a.pace.Exchange()-a.pace.Answer()) {
		want = gossip.INT8
	}
	if n.svc.SendDType() == want {
		return
	}
	if err := n.svc.SetSendDType(want); err != nil {
		n.log.Warn("cannot change the models' precision", "dtype", want, "err", err)
		return
	}
	s := n.trainer.Stats()
	send(Event{Event: "precision", Step: s.Steps, Progress: float64(s.Progress),
		Message: fmt.Sprintf("models now sent as %s: exchanges of %v whose answer took %v, floor %v",
			want, a.pace.Exchange().Round(100*time.Microsecond), a.pace.Answer().Round(100*time.Microsecond), n.cfg.AvgInterval)})
}

func (a *averager) exchangeFailed(p peer.ID, err error) {
	a.failed.Add(1)
	a.reach.failure = err
	if errors.Is(err, context.DeadlineExceeded) || gossip.ReasonOf(err) == gossip.ReasonTimeout {
		a.timeouts.Add(1)
	}
	a.n.log.Debug("exchange failed", "peer", p, "err", err)
}

// catchUp pulls the model of src (merge.CatchUpSource's choice) and
// takes it whole (adopt).
func (a *averager) catchUp(ctx context.Context, src peer.ID, send func(Event)) {
	n := a.n
	pctx, cancel := context.WithTimeout(ctx, n.cfg.ExchangeTimeout)
	remote, err := n.svc.Pull(pctx, src)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			a.exchangeFailed(src, err)
		}
		return
	}
	a.adopt(src, remote, "pulled", send)
}

// adopt replaces our model with a peer's, if the merge core's catch-up
// judgement allows: a node that joins late or restarts far behind starts
// from the swarm's model instead of dragging everyone back with its own.
// how says how the model came: pulled, or sent in an exchange while we
// were starting (takeWhole). Either way the judgement ends the starting
// node's relative catch-up.
func (a *averager) adopt(from peer.ID, remote params.Snapshot, how string, send func(Event)) {
	n := a.n
	d := a.core.DecideCatchUp(a.input(from, &remote))
	a.judged(from, d)
	a.judgedCatchUp = true
	if !d.Merge {
		n.log.Warn("catch-up refused: the model fails validation", "peer", from, "how", how, "reason", d.Reason.String())
		return
	}
	others := a.claims(from)
	var before, credited params.Progress
	err := n.trainer.Apply(func(w, mom []float32, p *params.Progress) error {
		before = *p
		credited = params.Progress(merge.Credit(float64(remote.Progress), float64(before), n.cfg.CatchUp, slices.Values(others)))
		copy(w, remote.Params)
		clear(mom) // the momentum belonged to the model we dropped
		*p = credited
		n.replaced.Add(1) // and so did the slow momentum
		return nil
	})
	if err != nil {
		n.log.Warn("catch-up failed", "peer", from, "err", err)
		return
	}
	n.resetAverage()
	n.tookIn(time.Now(), remote.Age, true)
	s := n.trainer.Stats()
	progress := fmt.Sprintf("progress %.0f", float64(credited))
	// A claim cut when we heard of no other peer is credited as a merge
	// would: no evidence of a lie (a swarm of two, a newcomer that has
	// heard of its bootstrap peer only), so neither counted nor warned of.
	cut := merge.ClaimCut(float64(remote.Progress), float64(credited), n.cfg.CatchUp)
	if cut {
		progress = fmt.Sprintf("progress %.0f of the %.0f it claims", float64(credited), float64(remote.Progress))
	}
	cut = cut && len(others) > 0
	if cut {
		n.log.Warn("catch-up: the model claims far more progress than any other peer: credited less",
			"peer", from, "claimed", float64(remote.Progress), "credited", float64(credited))
	}
	send(Event{Event: "catchup", Step: s.Steps, Progress: float64(s.Progress),
		Message: fmt.Sprintf("took the model of %s, %s (%s, ours was %.0f)", from, how, progress, float64(before))})
	// Counted once the event is out: whoever sees the count finds it.
	if cut {
		a.claimsCut.Add(1)
	}
	a.catchups.Add(1)
}

// partners are the peers we have heard of (Node.partners; none offline).
func (a *averager) partners() []gossip.PeerInfo {
	switch {
	case a.heard != nil:
		return a.heard()
	case a.n.ann == nil:
		return nil // offline: no peers
	}
	return a.n.partners()
}

// claims is the progress the peers we have heard of claim, but from's
// (merge.Credit's others).
func (a *averager) claims(from peer.ID) []float64 {
	var out []float64
	for _, q := range a.partners() {
		if q.Peer != from {
			out = append(out, q.Progress)
		}
	}
	return out
}

// takeWhole reports whether a model at progress p, arriving in an
// exchange before we judged a model to catch up with, is one we take whole
// instead of merging it (merge.TakeWhole, against the peers we have heard
// of).
func (a *averager) takeWhole(p params.Progress) bool {
	if a.judgedCatchUp {
		return false
	}
	known := func(yield func(float64) bool) {
		for _, q := range a.partners() {
			if !yield(q.Progress) {
				return
			}
		}
	}
	return merge.TakeWhole(float64(p), float64(a.n.trainer.Stats().Progress), a.n.cfg.CatchUp, known)
}

// input is what the merge core judges a remote model on: our model now,
// the sender's standing, the time and our holdout.
func (a *averager) input(from peer.ID, remote *params.Snapshot) merge.Input {
	own := a.n.trainer.SnapshotInto(a.buf)
	a.buf = own.Params
	return merge.Input{Peer: from.String(), Standing: a.n.standing(from), Local: own, Remote: remote, Now: time.Now(),
		Loss: a.n.trainer.HoldoutLoss}
}

// judged counts a decision and records a refusal's verdict about the
// sender; a merge's verdict is recorded once the merge has landed.
func (a *averager) judged(from peer.ID, d merge.Decision) {
	t := a.n.trust
	if t == nil {
		return
	}
	radius, median := a.core.Radius()
	t.count(d, radius, median)
	if d.HasVerdict && !d.Merge {
		a.n.verdict(from, d.Verdict)
	}
}

// merge mixes a remote model into ours between two steps, as the merge
// core decides: the weight is computed once, at the decision, and applied
// to the live model.
func (a *averager) merge(from peer.ID, remote params.Snapshot, inbound bool, send func(Event)) {
	n := a.n
	if a.takeWhole(remote.Progress) {
		// A peer that heard of us before we heard of it sent its model, or
		// announced less progress than its model has: merged at the base
		// weight, it would lift our progress past the catch-up rule with
		// ours, untrained, in the mix, and we would never pull.
		how := "sent to us"
		if !inbound {
			how = "in our exchange"
		}
		a.adopt(from, remote, how, send)
		return
	}
	in := a.input(from, &remote)
	d := a.core.Decide(in)
	a.judged(from, d)
	if !d.Merge {
		if d.HasVerdict {
			radius, median := a.core.Radius()
			n.log.Debug("model refused", "peer", from, "reason", d.Reason.String(), "distance", d.Distance,
				"radius", radius, "median_distance", median, "progress", float64(remote.Progress),
				"our_progress", float64(in.Local.Progress))
		}
		return
	}
	mix := func(w, mom []float32, p *params.Progress) error {
		// MergeAt checks everything before it writes, and a mix of finite
		// models stays finite: a trainer that can skip Apply's rollback
		// copies may.
		_, err := n.cfg.Merger.MergeAt(averaging.Local{Fingerprint: n.fp, Params: w, Momentum: mom, Progress: p,
			Batch: n.cfg.Train.Batch}, remote, nil, d.Weight)
		return err
	}
	var err error
	if c, ok := n.trainer.(CheckedApplier); ok {
		err = c.ApplyChecked(mix)
	} else {
		err = n.trainer.Apply(mix)
	}
	if err != nil {
		n.log.Warn("merge refused", "peer", from, "err", err)
		return
	}
	n.tookIn(time.Now(), remote.Age, false)
	if pa, ok := n.trainer.(ParamAverager); ok {
		// The model merged (clipped if the core clipped it) joins the
		// reported average at the merge's weight relative to a fresh one.
		if err := pa.AverageIn(remote.Params, d.Weight/n.cfg.Merger.Alpha); err != nil {
			n.log.Warn("average of the merged model refused", "peer", from, "err", err)
		}
	}
	a.core.Applied(from.String(), d)
	if n.trust != nil && d.HasVerdict {
		n.verdict(from, d.Verdict)
	}
	a.merges.Add(1)
	a.mu.Lock()
	a.perPeer[from]++
	a.mu.Unlock()
	a.last.Store(&MergeInfo{Partner: from.String(), Staleness: d.Staleness, Weight: d.Weight, Inbound: inbound, Time: time.Now()})
}

// peerMerges returns how many merges were made with each peer, in either
// direction.
func (a *averager) peerMerges() map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int64, len(a.perPeer))
	for p, c := range a.perPeer {
		out[p.String()] = c
	}
	return out
}

// partners are the fresh peers announcing our fingerprint in a mode that
// merges, in good standing.
func (n *Node) partners() []gossip.PeerInfo {
	var out []gossip.PeerInfo
	for _, p := range n.ann.Fresh() {
		if p.Peer != n.id && p.Fingerprint == n.fp && p.Mode == string(ModeGossip) && n.standing(p.Peer) == reputation.OK {
			out = append(out, p)
		}
	}
	return out
}

// Merges counts the merges this node made, in either direction.
func (n *Node) Merges() int64 {
	if n.avg == nil {
		return 0
	}
	return n.avg.merges.Load()
}

// PeerMerges returns how many merges this node made with each peer, in
// either direction.
func (n *Node) PeerMerges() map[string]int64 {
	if n.avg == nil {
		return map[string]int64{}
	}
	return n.avg.peerMerges()
}
