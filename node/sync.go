package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/params"
)

// Sync mode: the synchronous data-parallel baseline (DDP semantics). Every
// step, every member of the group averages, so all apply the same update and
// each step waits for the slowest member.
//
// Why averaging models is DDP: SGD with momentum and weight decay is linear
// in the gradient. From identical w, with member i's own momentum m_i,
// member i's step gives m_i' = mu m_i + g_i + wd w and w_i = w - lr m_i';
// the mean over k members is mean(m') = mu mean(m) + mean(g) + wd w and
// mean(w_i) = w - lr mean(m'). So if mean(m) is the momentum DDP would hold,
// mean(w_i) is exactly one DDP step on the mean gradient, with k x the
// batch, and mean(m') is again DDP's momentum. A round is therefore: a
// local Step, then an all-reduce of the parameters among the members (the
// leader only says who the members are: gossip.SyncService), and every
// member applies the mean. Momentum never travels: every member applies
// the same averaged update and keeps its own momentum, whose mean is DDP's.
// A joiner takes the leader's momentum along with the model. Progress grows
// by every member's batch.
//
// Policy (the protocol itself is gossip.SyncService):
//   - the group is the member list of the last round's result; the lowest
//     peer ID in it that we have not given up on leads the next round;
//   - a node that belongs to no group (it just started, or was dropped)
//     joins a group through a fresh peer announcing mode "sync" with our
//     fingerprint, adopting the group's (params, momentum, step, progress)
//     at a round boundary; if none leads a group, it founds one of its own;
//   - a leader that finds another group further along (more progress; on a
//     tie, a lower leader ID) joins it, so groups founded at the same time
//     merge into one and a restarted node never drags a group back to its
//     own older model;
//   - a leader that does not answer within twice the sync timeout, or whose
//     stream breaks, is given up on until it announces again, and the next
//     lowest member leads;
//   - the leader drops members that miss a round's deadline; they find out
//     when their late contribution is refused, and join again.

// SyncStatus is a node's view of its sync group, for the REST API, the CLI
// and tests.
type SyncStatus struct {
	// Synced: the node belongs to a group (it has applied a group model).
	Synced bool `json:"synced"`
	// Leader of the next round, as this node sees it.
	Leader string `json:"leader"`
	// Members of the group after the last round this node completed.
	Members []string `json:"members"`
	// Round is the last round this node completed (its step count then).
	Round int64 `json:"round"`
	// Joins counts the group models this node adopted by joining (at
	// start, after being dropped, or merging into a group further along);
	// Founded the groups it started on its own.
	Joins   int64 `json:"joins"`
	Founded int64 `json:"founded"`
	// LeadersLost counts leaders given up on (no answer in time, or a
	// broken stream).
	LeadersLost int64 `json:"leaders_lost"`
	// Protocol counters of this node's sync service, and of its all-reduce
	// data path (a failure: a member failed mid-round).
	Service   gossip.SyncStats      `json:"service"`
	AllReduce gossip.AllReduceStats `json:"all_reduce"`
}

// syncRetry is the pause before asking again after a refusal that says
// "not now" (busy, duplicate, not leader yet), so a handover is not a hot
// loop.
const syncRetry = 20 * time.Millisecond

// syncer runs sync mode's side of the trainer loop. Everything but view
// belongs to the trainer loop (Run's goroutine), the only caller of step;
// view is guarded by mu for Status readers.
type syncer struct {
	n          *Node
	svc        *gossip.SyncService
	log        *slog.Logger
	probeEvery time.Duration

	synced     bool
	state      gossip.SyncState      // the group model after the last round we completed; never written
	failed     map[peer.ID]time.Time // peers given up on, and when
	spared     map[peer.ID]time.Time // peers not given up on for a reset, and when (reduceFailed)
	probed     map[peer.ID]time.Time // last probe of a peer outside our group
	hint       peer.ID               // leader named by a peer that does not lead, asked next
	rejoin     peer.ID               // the leader that told us to join again, asked first
	forceLead  bool                  // the peer we follow says we lead
	deferSince time.Time             // since when we leave founding to a lower peer
	counts     struct{ joins, founded, lost int64 }

	// Diloco mode: the outer optimizer (nil in sync mode), the inner steps
	// taken this round and how many to take.
	outer         *averaging.Outer
	inner, target int

	// --sync-overlap: the round in flight while the trainer steps, and
	// (while its answer is handled) the one whose update adopt swaps for
	// the round's mean.
	overlap bool
	pending *inFlight
	ahead   *inFlight

	scratch []float32 // the parameters, read by current
	// awaiting is the next leader catchingUp waits for, since when.
	awaiting struct {
		peer  peer.ID
		round int64
		since time.Time
	}

	mu   sync.Mutex
	view SyncStatus
}

func (n *Node) newSyncer() (*syncer, error) {
	c := gossip.DefaultSyncConfig()
	c.Fingerprint, c.Elements = n.fp, n.trainer.Layout().Size()
	c.MaxElements, c.ChunkSize, c.ChunkTimeout = n.cfg.Exchange.MaxElements, n.cfg.Exchange.ChunkSize, n.cfg.Exchange.ChunkTimeout
	c.Timeout = n.cfg.SyncTimeout
	c.MaxProgressDelta = float64(n.cfg.Train.Batch)
	var outer *averaging.Outer
	if n.cfg.Mode == ModeDiloco {
		// A round adds up to InnerSteps batches per member.
		c.MaxProgressDelta *= float64(n.cfg.InnerSteps)
		outer = &averaging.Outer{LR: n.cfg.OuterLR, Momentum: n.cfg.OuterMomentum}
	}
	c.Counters, c.Logger, c.OnReject = &n.counters, n.baseLog, n.cfg.Exchange.OnReject
	// The exchange's limiter: MaxUpload caps both protocols together.
	c.UploadLimiter = n.svc.UploadLimiter()
	// Rounds all-reduce updates, so --wire-dtype fp16 halves their bytes
	// as it does gossip's.
	c.ReduceDType = n.cfg.Exchange.SendDType.Reduced()
	if n.trust != nil {
		c.OnReject = n.onReject
	}
	svc, err := gossip.NewSyncService(n.host, c)
	if err != nil {
		return nil, err
	}
	return &syncer{
		n: n, svc: svc, log: n.log.With("mode", string(n.cfg.Mode)), probeEvery: n.cfg.Announce.Interval,
		failed: make(map[peer.ID]time.Time), spared: make(map[peer.ID]time.Time), probed: make(map[peer.ID]time.Time), outer: outer,
		overlap: n.cfg.SyncOverlap && n.cfg.Mode == ModeSync,
	}, nil
}

func (s *syncer) close() { _ = s.svc.Close() }

// SyncStatus returns the node's sync view (zero unless in sync mode).
func (n *Node) SyncStatus() SyncStatus {
	if n.sync == nil {
		return SyncStatus{Members: []string{}}
	}
	s := n.sync
	s.mu.Lock()
	v := s.view
	v.Members = slices.Clone(v.Members)
	s.mu.Unlock()
	v.Service, v.AllReduce = s.svc.Stats(), s.svc.AllReduceStats()
	return v
}

// current is our contribution to a round, from the trainer's model between
// two steps (the all-reduce overwrites its Params with the round's mean).
// We contribute what our steps since the group's model moved it (the
// group's model minus ours): in sync mode our one step's update, to round =
// our step; in diloco mode our pseudo-gradient, to the next outer round. An
// update, not the parameters, so that it can travel as fp16 (--wire-dtype).
// It reads the parameters alone (into a buffer kept for it), not the whole
// state: in sync mode it runs every step.
func (s *syncer) current() gossip.Contribution {
	snap := s.n.trainer.SnapshotInto(s.scratch) // between two steps: nobody else steps
	s.scratch = snap.Params
	d := make([]float32, len(snap.Params))
	if s.synced && len(s.state.Params) == len(d) {
		_ = averaging.PseudoGradient(d, s.state.Params, snap.Params)
	}
	round := snap.Step
	if s.outer != nil {
		round = s.state.Round + 1
	}
	return gossip.Contribution{Round: round, Progress: snap.Progress, Base: s.state.Group, Params: d, Members: s.expected()}
}

// expected is the member list we expect in our group's next round: its
// last one, if we are in it (a joiner is not until its first round ends).
// The round's all-reduce starts among them as soon as we contribute
// (gossip.Contribution.Members); the leader's answer confirms them.
func (s *syncer) expected() []peer.ID {
	if !s.synced || len(s.state.Members) < 2 || !slices.Contains(s.state.Members, s.n.id) {
		return nil
	}
	return s.state.Members
}

// founding is the group we would found with our model, between two steps:
// in diloco mode with our outer momentum.
func (s *syncer) founding() gossip.SyncState {
	st := s.n.trainer.State()
	if s.outer == nil {
		return gossip.SyncState{Round: st.Step, Progress: st.Progress, Params: st.Params, Momentum: st.Opt}
	}
	buf := s.outer.Buf
	if buf == nil {
		buf = make([]float32, len(st.Params))
	}
	return gossip.SyncState{Round: s.state.Round, Progress: st.Progress, Params: st.Params, Momentum: slices.Clone(buf)}
}

// momentum is ours, for the model a leader serves joiners.
func (s *syncer) momentum() []float32 {
	if r, ok := s.n.trainer.(OptReader); ok {
		return r.Opt()
	}
	return s.n.trainer.State().Opt
}

// step runs after each local Step: it takes the trainer's model as our
// contribution to the round, and returns once the group's average is
// applied (or we joined or founded a group instead). With --sync-overlap it
// returns as soon as the round is under way, and applies it after the next
// step (stepAhead). It returns only ctx's error; every other failure is
// handled by asking someone else.
func (s *syncer) step(ctx context.Context) error {
	if s.outer != nil && s.synced {
		// Diloco: inner steps need nobody until this round's are done.
		if s.inner++; s.inner < s.target {
			return nil
		}
	}
	if s.overlap {
		return s.stepAhead(ctx)
	}
	return s.round(ctx, s.current())
}

// round contributes c to our group's next round until we hold a group
// model: the round's average, or a group's we joined or founded.
func (s *syncer) round(ctx context.Context, c gossip.Contribution) error {
	for ctx.Err() == nil {
		if !s.synced {
			// The round our last step was to be swapped into, if any, is
			// lost: we join with the model as it is now.
			s.ahead = nil
			// Our step was not taken from the group's model: it is
			// dropped, and the next one is our first in the group.
			if s.join(ctx); s.synced {
				return nil
			}
			continue
		}
		c.Base, c.Members = s.state.Group, s.expected()
		leader := s.leader()
		if leader == s.n.id {
			if s.lead(ctx, c) {
				return nil
			}
			continue
		}
		res, err := s.svc.Contribute(ctx, leader, c)
		if s.answered(ctx, leader, c.Round, res, err) {
			return nil
		}
	}
	return ctx.Err()
}

// lead runs a round we lead; false means the round could not be run here
// and the caller should look again at who leads.
func (s *syncer) lead(ctx context.Context, c gossip.Contribution) bool {
	if !s.openRound(ctx, c.Round) {
		return s.synced
	}
	res, err := s.svc.Reduce(ctx, c)
	return s.answered(ctx, s.n.id, c.Round, res, err)
}

// openRound readies the round we lead: false if we merged into a group
// further along instead (synced) or cannot lead (unsynced).
func (s *syncer) openRound(ctx context.Context, round int64) bool {
	if s.merge(ctx) {
		return false
	}
	if err := s.svc.Lead(s.leadBase()); err != nil {
		s.log.Warn("cannot lead the sync round", "round", round, "err", err)
		s.unsync("")
		return false
	}
	return true
}

// answered handles the end of our part in leader's round number round
// (we may lead it): true once we hold a group model.
func (s *syncer) answered(ctx context.Context, leader peer.ID, round int64, res gossip.SyncState, err error) bool {
	led := leader == s.n.id
	switch {
	case err == nil:
		s.adopt(res, false)
		return true
	case ctx.Err() != nil:
		return false
	case errors.Is(err, gossip.ErrAllReduce) && led:
		// A member failed mid-round. We found a group anew from our own
		// model (the members that did finish are refused by the new
		// group's nonce and join it, as do the others): within one
		// timeout the rest go on, and the failed member is not waited for.
		s.log.Info("sync all-reduce failed; founding the group anew", "round", round, "err", err)
		s.reduceFailed(err)
		s.svc.Unsync()
		s.ahead = nil
		s.found(ctx)
		return s.synced
	case errors.Is(err, gossip.ErrAllReduce):
		// The members that finished hold the round's model and the
		// leader (if it finished) serves it; we join again, and our
		// vector is a partial mean.
		s.log.Info("sync all-reduce failed", "round", round, "err", err)
		s.reduceFailed(err)
		s.unsync(leader)
		return false
	case led:
		s.log.Warn("sync round failed", "round", round, "err", err)
		s.unsync("")
		return false
	}
	s.refused(ctx, leader, err)
	return false
}

// inFlight is a round run while the next local step computes
// (--sync-overlap): our contribution, and the round's answer once done is
// closed.
type inFlight struct {
	c      gossip.Contribution
	sent   []float32 // our vector as sent (the all-reduce overwrites c.Params)
	base   []float32 // the group's model our step started from
	leader peer.ID
	done   chan struct{}
	res    gossip.SyncState
	err    error
}

// stepAhead is step with --sync-overlap. The round of our previous step
// ran during this one: its answer is handled as round's would be (on
// success adopt swaps our previous update for the round's mean and keeps
// this step's), and this step's round is set going.
func (s *syncer) stepAhead(ctx context.Context) error {
	p := s.pending
	s.pending = nil
	if p == nil && !s.synced {
		return s.round(ctx, s.current())
	}
	if p != nil {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if p.err != nil {
			copy(p.c.Params, p.sent) // to be sent again
		}
		s.ahead = p
		var err error
		if !s.answered(ctx, p.leader, p.c.Round, p.res, p.err) {
			err = s.round(ctx, p.c)
		}
		s.ahead = nil
		if err != nil {
			return err
		}
	}
	// Joined or founded, our model is the group's and the next step is
	// the first to contribute; otherwise this step's round starts now.
	if s.synced && s.n.trainer.Stats().Steps == s.state.Round+1 {
		s.launch(ctx)
	}
	return ctx.Err()
}

// launch sets our last step's round going in the background.
func (s *syncer) launch(ctx context.Context) {
	c := s.current()
	leader := s.leader()
	if leader == s.n.id && !s.openRound(ctx, c.Round) {
		return // merged (our step is dropped) or unsynced (the next step joins)
	}
	p := &inFlight{c: c, sent: slices.Clone(c.Params), base: s.state.Params, leader: leader, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		if leader == s.n.id {
			p.res, p.err = s.svc.Reduce(ctx, c)
		} else {
			p.res, p.err = s.svc.Contribute(ctx, leader, c)
		}
	}()
	s.pending = p
}

// drain ends the round in flight when the run stops, applying its average
// if it completes (the trainer takes no step after the one it carries).
func (s *syncer) drain(ctx context.Context) {
	p := s.pending
	if p == nil {
		return
	}
	s.pending = nil
	select {
	case <-p.done:
	case <-ctx.Done():
		return
	}
	if p.err == nil {
		s.adopt(p.res, false)
	}
}

// reduceFailed gives up on the member an all-reduce failed on, if known,
// until it announces again: neither a join nor the next group asks it.
// Not on a member that said it left the reduction, or reset its stream to
// us, while its connection stays up: it gave up on the round itself,
// having seen another member fail first, and leads or joins the next
// group, which wants it. Giving up on
// it would make us found a group of our own beside that one, and the two
// merge only seconds later. Such a member is spared once per
// spareWindow: one that resets its streams round after round is given up
// on as before, and costs at most one more failed round per window.
func (s *syncer) reduceFailed(err error) {
	var re *gossip.AllReduceError
	if !errors.As(err, &re) || re.Peer == "" || re.Peer == s.n.id {
		return
	}
	now := time.Now()
	var reset *network.StreamError
	left := errors.Is(re.Err, gossip.ErrMemberLeft) || errors.As(re.Err, &reset) && reset.Remote
	if left && s.n.host.Network().Connectedness(re.Peer) == network.Connected {
		if last, ok := s.spared[re.Peer]; !ok || now.Sub(last) > spareWindow {
			if len(s.spared) >= maxSpared {
				clear(s.spared)
			}
			s.spared[re.Peer] = now
			return
		}
	}
	s.failed[re.Peer] = now
}

// spareWindow is how often reduceFailed spares one member that reset its
// stream; maxSpared bounds the peers it remembers (a group has few).
const (
	spareWindow = 10 * time.Second
	maxSpared   = 256
)

// refused handles a failed contribution to leader.
func (s *syncer) refused(ctx context.Context, leader peer.ID, err error) {
	s.log.Debug("sync contribution refused", "leader", leader, "err", err)
	var ref *gossip.SyncRefusal
	if !errors.As(err, &ref) {
		s.lose(leader, err)
		return
	}
	switch ref.Code {
	case gossip.SyncNotLeader:
		switch {
		case ref.Leader == "":
			s.lose(leader, err)
		case ref.Leader == s.n.id && s.catchingUp(leader):
			// The group's next leader still follows us: it has not yet
			// completed the round that made it lead (it takes the lead
			// when it does; with --sync-overlap we may get there first).
		case ref.Leader == s.n.id:
			s.forceLead = true
		case s.failed[ref.Leader].IsZero():
			s.hint = ref.Leader
		}
		if !s.forceLead {
			sleep(ctx, syncRetry)
		}
	case gossip.SyncStale, gossip.SyncAhead:
		// Dropped from the round, or holding another group's model.
		s.unsync(leader)
	case gossip.SyncBusy, gossip.SyncDuplicate:
		sleep(ctx, syncRetry)
	default: // unsynced (it restarted) or rejected
		s.lose(leader, err)
	}
}

// catchingUp reports whether p, a member of our group that says it follows
// us, is still to be waited for: for up to one sync timeout per round, after
// which we lead in its place.
func (s *syncer) catchingUp(p peer.ID) bool {
	if !slices.Contains(s.state.Members, p) {
		return false
	}
	w := &s.awaiting
	if w.peer != p || w.round != s.state.Round {
		w.peer, w.round, w.since = p, s.state.Round, time.Now()
	}
	return time.Since(w.since) < s.n.cfg.SyncTimeout
}

// leader is the peer that leads the next round as we see it: the lowest
// member of the last round's group we have not given up on.
func (s *syncer) leader() peer.ID {
	if s.forceLead {
		return s.n.id
	}
	if h := s.hint; h != "" {
		s.hint = ""
		return h
	}
	s.forgive()
	for _, p := range s.state.Members { // sorted
		if p == s.n.id || s.failed[p].IsZero() {
			return p
		}
	}
	return s.n.id
}

// leadBase is the model and group of the round we lead: the last round's,
// without the members we gave up on.
func (s *syncer) leadBase() gossip.SyncState {
	if s.state.Momentum == nil {
		// A round's result: joiners take our momentum, read once per
		// round we lead.
		s.state.Momentum = s.momentum()
	}
	b := s.state
	b.Members = []peer.ID{s.n.id}
	for _, p := range s.state.Members {
		if p != s.n.id && s.failed[p].IsZero() {
			b.Members = append(b.Members, p)
		}
	}
	slices.Sort(b.Members)
	return b
}

// lose gives up on a peer until it announces again.
func (s *syncer) lose(p peer.ID, err error) {
	if _, ok := s.failed[p]; !ok && slices.Contains(s.state.Members, p) {
		s.counts.lost++
		s.log.Info("sync leader lost", "peer", p, "err", err)
	}
	s.failed[p] = time.Now()
	s.setView()
}

// forgive takes back the peers that announced since we gave up on them, and
// forgets those no longer announcing at all. An announcement counts only if
// it was made after we gave up, by its own clock as well as ours: one sent
// just before a peer left may still be arriving.
func (s *syncer) forgive() {
	if len(s.failed) == 0 {
		return
	}
	seen := make(map[peer.ID]gossip.PeerInfo)
	for _, p := range s.n.ann.Fresh() {
		seen[p.Peer] = p
	}
	for p, at := range s.failed {
		pi, ok := seen[p]
		if !ok && time.Since(at) > s.n.cfg.Announce.FreshWindow+s.n.cfg.SyncTimeout ||
			ok && pi.SeenAt.After(at) && pi.Time().After(at) {
			delete(s.failed, p)
		}
	}
}

// candidates are the fresh peers training our model in sync mode, not given
// up on, sorted by ID.
func (s *syncer) candidates() []peer.ID {
	s.forgive()
	var out []peer.ID
	for _, p := range s.n.ann.Fresh() { // sorted by ID
		if p.Peer != s.n.id && p.Fingerprint == s.n.fp && p.Mode == string(s.n.cfg.Mode) && s.failed[p.Peer].IsZero() {
			out = append(out, p.Peer)
		}
	}
	return out
}

// join adopts the model of a group some fresh sync peer belongs to, or, if
// none answers with one, founds a group of our own with ours.
func (s *syncer) join(ctx context.Context) {
	tried := map[peer.ID]bool{s.n.id: true}
	cands := s.candidates()
	// The leader that sent us here is asked first, unless its connection
	// is gone: then it is likely the member whose failure ended our round,
	// and a dial to a dead peer can take a whole timeout.
	connected := func(p peer.ID) bool { return s.n.host.Network().Connectedness(p) == network.Connected }
	if s.rejoin != "" && connected(s.rejoin) && s.failed[s.rejoin].IsZero() {
		cands = append([]peer.ID{s.rejoin}, cands...)
	}
	s.rejoin = ""
	// Peers we are connected to first, for the same reason; the order
	// among them (and among the others) stays.
	slices.SortStableFunc(cands, func(a, b peer.ID) int {
		ca, cb := connected(a), connected(b)
		switch {
		case ca && !cb:
			return -1
		case cb && !ca:
			return 1
		}
		return 0
	})
	busy := false
	for _, p := range cands {
		for p != "" && !tried[p] && s.failed[p].IsZero() {
			tried[p] = true
			res, err := s.svc.Join(ctx, p)
			if err == nil {
				s.deferSince = time.Time{}
				s.counts.joins++
				s.log.Info("joined a sync group", "via", p, "round", res.Round, "members", len(res.Members))
				s.adopt(res, true)
				return
			}
			if ctx.Err() != nil {
				return
			}
			var next peer.ID
			var ref *gossip.SyncRefusal
			switch {
			case !errors.As(err, &ref):
				s.lose(p, err)
			case ref.Code == gossip.SyncNotLeader:
				next = ref.Leader // ask the leader it follows
			case ref.Code == gossip.SyncBusy:
				busy = true
			}
			p = next
		}
	}
	if busy {
		// Someone leads a group but cannot take us this instant.
		sleep(ctx, syncRetry)
		return
	}
	// Nobody leads a group we can join. At a common start that is true of
	// every node, and if each founded a group of its own the groups would
	// then merge one by one, a member dropped after a round timeout at a
	// time. So only the node with the lowest ID among the candidates
	// founds; the others ask again shortly and join its group. A lower node
	// that does not found within twice the sync timeout is not waited for.
	if lower := slices.ContainsFunc(cands, func(p peer.ID) bool { return p < s.n.id && s.failed[p].IsZero() }); lower {
		if s.deferSince.IsZero() {
			s.deferSince = time.Now()
		}
		if time.Since(s.deferSince) < 2*s.n.cfg.SyncTimeout {
			sleep(ctx, syncRetry)
			return
		}
	}
	s.deferSince = time.Time{}
	s.found(ctx)
}

// found starts a group of our own from our model.
func (s *syncer) found(ctx context.Context) {
	st := s.founding()
	st.Group, st.Members = gossip.NewGroup(), []peer.ID{s.n.id}
	if err := s.svc.Lead(st); err != nil {
		// Our own model cannot be sent (it diverged): nothing to lead with.
		s.log.Error("cannot found a sync group", "err", err)
		sleep(ctx, syncRetry)
		return
	}
	s.counts.founded++
	s.log.Info("founded a sync group", "round", st.Round)
	s.state, s.synced, s.forceLead = st, true, false
	s.startRound()
	s.setView()
}

// merge, run by a leader between rounds, looks for a group further along
// than ours among the fresh sync peers outside our group (at most one probe
// per peer per announce interval) and joins it. It reports whether we did.
func (s *syncer) merge(ctx context.Context) bool {
	now := time.Now()
	for _, p := range s.candidates() {
		// A peer we have no connection to is not probed: the probe runs
		// inside our round, and a dial to a peer that just died (a member
		// we dropped, still announced) can take a whole timeout. Live
		// groups' members are connected by discovery and found then.
		if slices.Contains(s.state.Members, p) || now.Sub(s.probed[p]) < s.probeEvery ||
			s.n.host.Network().Connectedness(p) != network.Connected {
			continue
		}
		s.probed[p] = now
		g, err := s.svc.Probe(ctx, p)
		var ref *gossip.SyncRefusal
		if errors.As(err, &ref) && ref.Code == gossip.SyncNotLeader && ref.Leader != "" && ref.Leader != s.n.id &&
			!slices.Contains(s.state.Members, ref.Leader) {
			s.probed[ref.Leader] = now
			g, err = s.svc.Probe(ctx, ref.Leader)
		}
		if err != nil || !preferGroup(g.Progress, g.Leader, s.state.Progress, s.n.id) {
			break // one probe per round keeps the wait short
		}
		res, err := s.svc.Join(ctx, g.Leader)
		if err != nil {
			break
		}
		s.counts.joins++
		s.log.Info("merged into a sync group further along", "leader", g.Leader, "round", res.Round,
			"progress", float64(res.Progress), "ours", float64(s.state.Progress))
		s.adopt(res, true)
		return true
	}
	for p, at := range s.probed {
		if now.Sub(at) > 10*s.probeEvery {
			delete(s.probed, p)
		}
	}
	return false
}

// preferGroup decides between two groups: the one whose model embodies more
// samples, and on a tie the one with the lower leader ID, so every pair of
// groups agrees which joins which.
func preferGroup(theirs params.Progress, theirLeader peer.ID, ours params.Progress, ourLeader peer.ID) bool {
	return theirs > ours || theirs == ours && theirLeader < ourLeader
}

// adopt applies a group model and makes it the base of our next round. In
// sync mode a round's result is the members' mean update: the group's model
// minus it replaces the parameters, the same bits on every member, and we
// keep our momentum; a join's (joined) result is the model, which replaces
// the momentum too. In diloco mode see adoptOuter.
func (s *syncer) adopt(res gossip.SyncState, joined bool) {
	if s.outer != nil {
		s.adoptOuter(res, joined)
		return
	}
	t := s.n.trainer
	if !joined {
		// No momentum: leadBase takes ours if we come to lead.
		res.Momentum = nil
		if len(res.Params) != len(s.state.Params) {
			s.log.Warn("sync update not applied", "round", res.Round, "values", len(res.Params), "model", len(s.state.Params))
			s.unsync("")
			return
		}
		// The group's model: the one the round started from less the
		// mean update.
		averaging.Sub(res.Params, s.state.Params, res.Params)
	}
	// Every change below checks what it writes before writing it, so a
	// trainer that can skip Apply's rollback copies does (they cost a
	// sync round two passes over the model).
	apply := t.Apply
	if c, ok := t.(CheckedApplier); ok {
		apply = c.ApplyChecked
	}
	var err error
	steps := t.Stats().Steps
	switch a := s.ahead; {
	case a != nil && !joined && steps == res.Round+1:
		// Overlapped: we took a step from our own model since this
		// round's contribution. Our model becomes the group's plus that
		// step: our sent update (a.base - a.sent) swapped for the mean.
		err = apply(func(w, _ []float32, p *params.Progress) error {
			if err := swapUpdate(a.sent, w, res.Params, a.base, a.sent); err != nil {
				return err
			}
			if err := params.CheckFinite(a.sent); err != nil {
				return err
			}
			copy(w, a.sent)
			*p = res.Progress + (*p - a.c.Progress)
			return nil
		})
	case steps == res.Round:
		err = apply(func(w, m []float32, p *params.Progress) error {
			if len(res.Params) != len(w) || joined && len(res.Momentum) != len(m) {
				return fmt.Errorf("node: sync model of %d values, ours has %d", len(res.Params), len(w))
			}
			if err := params.CheckFinite(res.Params); err != nil {
				return err
			}
			if joined {
				if err := params.CheckFinite(res.Momentum); err != nil {
					return err
				}
				copy(m, res.Momentum)
			}
			copy(w, res.Params)
			*p = res.Progress
			return nil
		})
	default:
		// A join: the group's step count too, so members stay in lockstep
		// by step (round r is every member's step r).
		st := t.State()
		st.Params, st.Step, st.Progress = res.Params, res.Round, res.Progress
		if joined {
			st.Opt = res.Momentum
		}
		err = t.Restore(st)
	}
	if err != nil {
		s.log.Warn("sync model not applied", "round", res.Round, "err", err)
		s.unsync("")
		return
	}
	s.settle(res)
}

// swapUpdate swaps an update sent to a round for the round's result: w is
// our model some steps after our model at the round (base - sent, where
// base is the group's model the round started from and sent our update),
// group the round's model. dst (which may be sent) becomes group plus the
// steps since.
func swapUpdate(dst, w, group, base, sent []float32) error {
	n := len(w)
	if len(dst) != n || len(group) != n || len(base) != n || len(sent) != n {
		return fmt.Errorf("node: sync model of %d values, ours has %d", len(group), n)
	}
	for i := range w {
		dst[i] = w[i] + group[i] - (base[i] - sent[i])
	}
	return nil
}

// adoptOuter is diloco's adopt. A round's result is the mean
// pseudo-gradient: the outer optimizer steps the group's model with it,
// and the trainer takes the new model (its inner momentum stays). A join's
// is the group's model and outer momentum, which the trainer and our outer
// optimizer take. Either way the model and the outer momentum become the
// base a joiner gets.
func (s *syncer) adoptOuter(res gossip.SyncState, joined bool) {
	next := *s.outer
	theta := res.Params
	if joined {
		next.Buf = nil
		if len(res.Momentum) == len(res.Params) {
			next.Buf = slices.Clone(res.Momentum)
		}
	} else {
		theta = make([]float32, len(res.Params))
		next.Buf = slices.Clone(next.Buf)
		if err := next.Step(theta, s.state.Params, res.Params); err != nil {
			s.log.Warn("outer step failed", "round", res.Round, "err", err)
			s.unsync("")
			return
		}
	}
	err := s.n.trainer.Apply(func(w, _ []float32, p *params.Progress) error {
		if len(theta) != len(w) {
			return fmt.Errorf("node: diloco model of %d values, ours has %d", len(theta), len(w))
		}
		copy(w, theta)
		*p = res.Progress
		return nil
	})
	if err != nil {
		s.log.Warn("diloco model not applied", "round", res.Round, "err", err)
		s.unsync("")
		return
	}
	*s.outer = next
	res.Params = theta
	if res.Momentum = slices.Clone(next.Buf); res.Momentum == nil {
		res.Momentum = make([]float32, len(theta))
	}
	s.settle(res)
}

// settle makes res our group's model at a round boundary: the base of our
// next round, which we lead or follow.
func (s *syncer) settle(res gossip.SyncState) {
	s.state, s.synced, s.forceLead, s.hint = res, true, false, ""
	// The model now holds every member's: its information is fresh.
	s.n.tookIn(time.Now(), 0, true)
	s.startRound()
	for _, p := range res.Members {
		delete(s.failed, p) // alive as of this round
	}
	if l := s.leader(); l == s.n.id {
		if err := s.svc.Lead(s.leadBase()); err != nil {
			s.log.Warn("cannot lead the next sync round", "err", err)
		}
	} else {
		s.svc.Follow(l)
	}
	s.setView()
}

// startRound starts counting a round's inner steps (diloco) and publishes
// the group's progress, which is diloco's run clock.
func (s *syncer) startRound() {
	setF64(&s.n.groupProgress, float64(s.state.Progress))
	if s.outer == nil {
		return
	}
	s.inner, s.target = 0, s.n.cfg.InnerSteps
	if s.n.cfg.InnerScaling == InnerScalingSpeed {
		own := s.n.trainer.Stats().SamplesPerSec
		fastest := own
		for _, p := range s.n.ann.Fresh() {
			if slices.Contains(s.state.Members, p.Peer) && p.SamplesPerSec > fastest {
				fastest = p.SamplesPerSec
			}
		}
		s.target = averaging.ScaledInnerSteps(s.target, own, fastest)
	}
}

// unsync leaves the group; the next step joins one again, asking via first.
func (s *syncer) unsync(via peer.ID) {
	s.synced, s.forceLead, s.hint, s.rejoin = false, false, "", via
	s.svc.Unsync()
	s.setView()
}

func (s *syncer) setView() {
	v := SyncStatus{Synced: s.synced, Round: s.state.Round, Joins: s.counts.joins, Founded: s.counts.founded,
		LeadersLost: s.counts.lost, Members: make([]string, 0, len(s.state.Members))}
	for _, p := range s.state.Members {
		v.Members = append(v.Members, p.String())
	}
	if s.synced {
		l := s.n.id
		for _, p := range s.state.Members {
			if p == s.n.id || s.failed[p].IsZero() {
				l = p
				break
			}
		}
		if s.forceLead {
			l = s.n.id
		}
		v.Leader = l.String()
	}
	s.mu.Lock()
	s.view = v
	s.mu.Unlock()
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
