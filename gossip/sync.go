package gossip

// The synchronous rounds, /meshtrain/sync/2.0.0: the baseline that steps at
// the speed of the slowest member (DDP semantics), on the same hosts and
// limits as the parameter exchange so the two can be compared honestly.
//
// A group of members holds one model. Each round every member takes one
// local step from that model on its own batch and tells the round's leader
// (a few bytes: round, progress, the model it started from); the leader
// answers every member with the round's member list once all are in (or
// the round's deadline passed), and the members all-reduce their vectors
// among themselves (allreduce.go): the leader coordinates, it does not
// carry the data. A member starts that all-reduce among the members it
// expects as soon as it has contributed; the answer confirms them, or the
// round is reduced again among the answer's. With SGD + momentum + weight decay the update is linear
// in the gradient, so averaging the parameters after identical starts is
// exactly one step on the mean gradient; each member keeps its own momentum,
// whose mean is the DDP momentum (docs/protocol.md, "Sync mode").
//
// This file is the SyncService that plays the leader's side (collect,
// seal, answer, serve joins) and the member's (contribute, join, probe);
// its wire codec is synccodec.go and its stream plumbing, shared with the
// exchange, stream.go. Which peer leads, when to join and how to merge
// groups is the node's policy (node/sync.go); the service only enforces
// what keeps members in lockstep: one round at a time, numbered, each
// member once, every contribution from the group's current model.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/meshtrain/meshtrain/params"
)

// SyncProtocolID is the synchronous all-reduce protocol.
const SyncProtocolID protocol.ID = "/meshtrain/sync/2.0.0"

// SyncServiceName is the resource-manager service sync streams are
// attributed to.
const SyncServiceName = "meshtrain.sync"

// ErrNotLeading: Reduce was called for a round this service does not
// collect (it follows another leader, leads another round, or the round was
// given up).
var ErrNotLeading = errors.New("gossip: not leading this sync round")

// SyncConfig tunes a SyncService. Durations are wall-clock.
type SyncConfig struct {
	// Fingerprint of the model the group trains. Required.
	Fingerprint params.Fingerprint
	// Elements is the exact parameter count, or 0 if not known (then a
	// round's contributions must match the group's model).
	Elements int
	// MaxElements caps any frame we read, in elements. Default 1<<26.
	MaxElements int
	// ChunkSize is the payload unit we send, in bytes. Default 1 MiB.
	ChunkSize int
	// ChunkTimeout is how long a peer may take to move one header or chunk.
	// Default 10s.
	ChunkTimeout time.Duration
	// Timeout is how long a leader holds a round open for members that have
	// not contributed, counted from when the round opened (extended for a
	// member that joins during it); those still missing are dropped from
	// the group. A member waits up to twice this for the leader's answer
	// before it gives the leader up. It must exceed the slowest member's
	// step time. It also bounds a round's all-reduce. Default 10s.
	Timeout time.Duration
	// MaxMembers caps a group: contributions beyond it are answered busy.
	// Default 64, at most MaxSyncMembers.
	MaxMembers int
	// MaxJoins is how many joins are served at once (each sends the whole
	// model). Default 2.
	MaxJoins int
	// MaxPending is how many inbound streams may wait for their request
	// header; more are reset and counted busy. Default 16.
	MaxPending int
	// MaxProgressDelta is the most progress one member may add in a round
	// (its batch size). Default 65536.
	MaxProgressDelta float64
	// UploadLimiter, if set, paces every byte we send. A node passes its
	// exchange's (Service.UploadLimiter), so one cap covers both protocols.
	UploadLimiter Limiter
	// ReduceDType is the payload type of what we send in a round's
	// all-reduce (AllReduceConfig.DType): FP32 if zero. FP16 suits vectors
	// that are updates (the node's sync and diloco contribute those), not
	// parameters. Joins always carry fp32.
	ReduceDType DType
	// OnReject, Counters and Logger as in Config.
	OnReject RejectFunc
	Counters *Counters
	Logger   *slog.Logger
}

// DefaultSyncConfig returns the defaults documented on SyncConfig; the
// caller sets Fingerprint and usually Elements.
func DefaultSyncConfig() SyncConfig {
	return SyncConfig{
		MaxElements:      1 << 26,
		ChunkSize:        DefaultChunkSize,
		ChunkTimeout:     10 * time.Second,
		Timeout:          10 * time.Second,
		MaxMembers:       64,
		MaxJoins:         2,
		MaxPending:       16,
		MaxProgressDelta: 1 << 16,
	}
}

// Validate reports every bad field at once.
func (c SyncConfig) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...))
	}
	if c.Fingerprint.IsZero() {
		bad("Fingerprint is required")
	}
	if c.MaxElements <= 0 || c.MaxElements > params.MaxElements {
		bad("MaxElements %d not in [1, %d]", c.MaxElements, params.MaxElements)
	}
	if c.Elements < 0 || c.Elements > c.MaxElements {
		bad("Elements %d not in [0, MaxElements=%d]", c.Elements, c.MaxElements)
	}
	if !validChunkSize(int64(c.ChunkSize)) {
		bad("ChunkSize %d not a multiple of 4 in [%d, %d]", c.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	if c.ChunkTimeout <= 0 {
		bad("ChunkTimeout %v not positive", c.ChunkTimeout)
	}
	if c.Timeout <= 0 {
		bad("Timeout %v not positive", c.Timeout)
	}
	if c.MaxMembers < 1 || c.MaxMembers > MaxSyncMembers {
		bad("MaxMembers %d not in [1, %d]", c.MaxMembers, MaxSyncMembers)
	}
	if c.MaxJoins < 1 {
		bad("MaxJoins %d < 1", c.MaxJoins)
	}
	if c.MaxPending < 1 {
		bad("MaxPending %d < 1", c.MaxPending)
	}
	if !(c.MaxProgressDelta > 0) || math.IsInf(c.MaxProgressDelta, 0) {
		bad("MaxProgressDelta %v not finite and > 0", c.MaxProgressDelta)
	}
	if c.ReduceDType != 0 && c.ReduceDType != FP32 && c.ReduceDType != FP16 {
		bad("ReduceDType %v: want fp32 or fp16", c.ReduceDType)
	}
	return errors.Join(errs...)
}

// Contribution is one member's part in a round.
type Contribution struct {
	// Round is the round it belongs to: the member's step count after the
	// local step, which equals the group's last completed round plus one.
	Round int64
	// Progress after the local step: the group's progress plus the
	// member's batch.
	Progress params.Progress
	// Base is the Group of the model the local step started from.
	Base uint64
	// Params is the vector the round averages (the node's: its update,
	// the group's model minus its own after the local step; diloco's:
	// its pseudo-gradient); Contribute and Reduce overwrite it with the
	// mean.
	Params []float32
	// Members, if set, are the members the contributor expects in the
	// round: its group's last member list, sorted. If we are among them,
	// the all-reduce among them starts at once, while the leader collects
	// the round, and the leader's answer only confirms it; if the answer
	// names other members, that reduction is abandoned and the round is
	// reduced again among the answer's (Params is restored first).
	Members []peer.ID
}

// SyncState is a group's model at a round boundary: what every member holds
// after round Round. Its vectors are never written once made, so it may be
// shared.
type SyncState struct {
	Round int64
	// Progress is the group's: the previous round's plus every
	// contributor's batch, the samples the averaged model embodies.
	Progress params.Progress
	// Group names this model: a fresh nonce for every round's result and
	// every founded group. A contribution says which model it started
	// from, so a member holding another model is never averaged in.
	Group uint64
	// Params is the model; Momentum the optimizer state a joiner takes
	// (a round's result has no Momentum: each member keeps its own).
	Params   []float32
	Momentum []float32
	// Members is the group, sorted: the contributors of the round for a
	// result; for a join, the group the next round waits for (the joiner
	// not yet among them). The lowest leads the next round.
	Members []peer.ID
}

// GroupInfo is a probe's answer: the group a leader leads.
type GroupInfo struct {
	Leader   peer.ID
	Round    int64
	Progress params.Progress
	Members  []peer.ID
}

// SyncRefusal is a sync answer other than a model: what the peer said and,
// for SyncNotLeader, whom it follows. Callers branch on Code.
type SyncRefusal struct {
	Peer   peer.ID
	Code   SyncCode
	Reason Reason  // with SyncRejected
	Round  int64   // the responder's last completed round, with SyncStale and SyncAhead
	Leader peer.ID // with SyncNotLeader, if the responder follows someone
}

func (e *SyncRefusal) Error() string {
	switch e.Code {
	case SyncNotLeader:
		if e.Leader != "" {
			return fmt.Sprintf("gossip: sync with %s: not leading, follows %s", e.Peer, e.Leader)
		}
		return fmt.Sprintf("gossip: sync with %s: not leading", e.Peer)
	case SyncRejected:
		return fmt.Sprintf("gossip: sync with %s: rejected (%s)", e.Peer, e.Reason)
	case SyncStale, SyncAhead:
		return fmt.Sprintf("gossip: sync with %s: %s round (its last completed round is %d)", e.Peer, e.Code, e.Round)
	}
	return fmt.Sprintf("gossip: sync with %s: %s", e.Peer, e.Code)
}

// SyncStats counts sync traffic. Bytes and refused inputs are counted in the
// shared Counters.
type SyncStats struct {
	// RoundsLed counts rounds this service sealed as leader (answered with
	// their member list).
	RoundsLed uint64 `json:"rounds_led"`
	// RoundsDone counts our own contributions answered with a round's
	// average; JoinsDone our joins answered with a model.
	RoundsDone uint64 `json:"rounds_done"`
	JoinsDone  uint64 `json:"joins_done"`
	// ContributionsReceived counts members' contributions taken into a
	// round; JoinsServed the models sent to joiners.
	ContributionsReceived uint64 `json:"contributions_received"`
	JoinsServed           uint64 `json:"joins_served"`
	// MembersDropped counts expected members missing when a round closed
	// on its deadline.
	MembersDropped uint64 `json:"members_dropped"`
	// StaleRounds counts contributions refused for a closed or a future
	// round (also counted as rejected "stale"); Duplicates a second
	// contribution or stream from one peer in a round (rejected
	// "protocol").
	StaleRounds uint64 `json:"stale_rounds"`
	Duplicates  uint64 `json:"duplicates"`
	// EarlyReductions counts our rounds whose all-reduce started before
	// the leader's answer, among the members we expected, and that the
	// answer confirmed; EarlyMisses those whose answer named other members
	// (a member joined or was dropped), reduced again.
	EarlyReductions uint64 `json:"early_reductions"`
	EarlyMisses     uint64 `json:"early_misses"`
}

type syncCounters struct {
	roundsLed, roundsDone, joinsDone, received, joinsServed, dropped, stale, duplicates atomic.Uint64
	early, earlyMisses                                                                  atomic.Uint64
}

type syncRole uint8

const (
	roleUnsynced syncRole = iota
	roleFollower
	roleLeader
)

// syncBase is a model at a round boundary, encoded once, when the first
// joiner asks for it. A round's result is a syncBase without parameters
// (pending) until the leader's own all-reduce gives them (Lead).
type syncBase struct {
	state   SyncState
	members []byte

	once   sync.Once
	frames [2]*Frame
	err    error
}

// syncRound is the round a leader collects. Guarded by SyncService.mu,
// except done, notify and (once done is closed) result, end and hint.
type syncRound struct {
	number   int64
	base     *syncBase // the model every contribution started from
	expected map[peer.ID]struct{}
	contribs map[peer.ID]params.Progress
	deadline time.Time
	sealed   bool // being sealed: no contribution or join enters any more
	finished bool // done is closed
	notify   chan struct{}
	done     chan struct{}
	result   *syncBase // the average, or nil if the round was given up
	end      SyncCode  // what waiting members hear if it was given up
	hint     peer.ID
}

func (r *syncRound) ready(now time.Time, self peer.ID) bool {
	if _, ok := r.contribs[self]; !ok {
		return false
	}
	return len(r.contribs) == len(r.expected) || !now.Before(r.deadline)
}

// SyncService plays both sides of the sync protocol on one host.
//
// Ownership: cfg and the handles are immutable after NewSyncService. The
// stream base's mu guards the role, the leader hint, the open round and the
// in-flight bookkeeping, along with the base's closed, so a role change and
// Close exclude each other; a round's averaging runs outside mu on the
// goroutine that called Reduce (the node's trainer loop). The base
// (stream.go) owns the streams' lifecycle.
type SyncService struct {
	streamBase
	cfg    SyncConfig
	stats  syncCounters
	reduce *AllReducer
	saved  sync.Pool // *[]float32: contributions kept while an early all-reduce may be abandoned

	// Guarded by mu.
	role     syncRole
	hint     peer.ID // the leader we follow
	open     *syncRound
	inflight map[peer.ID]bool // peers with a join or contribution stream admitted
	uploads  int              // admitted contributions not yet in a round
	joins    int
}

// NewSyncService validates cfg and registers the protocol handler on h. It
// starts unsynced: it answers every request "unsynced" until Lead or Follow.
func NewSyncService(h host.Host, cfg SyncConfig) (*SyncService, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rc := DefaultAllReduceConfig()
	rc.MaxElements, rc.ChunkTimeout, rc.MaxMembers = cfg.MaxElements, cfg.ChunkTimeout, cfg.MaxMembers
	rc.AheadWait = 2*cfg.Timeout + cfg.ChunkTimeout
	rc.UploadLimiter, rc.Counters, rc.OnReject, rc.Logger = cfg.UploadLimiter, cfg.Counters, cfg.OnReject, cfg.Logger
	rc.DType = cfg.ReduceDType
	if rc.Counters == nil {
		rc.Counters = new(Counters)
		cfg.Counters = rc.Counters
	}
	red, err := NewAllReducer(h, rc)
	if err != nil {
		return nil, err
	}
	s := &SyncService{cfg: cfg, inflight: make(map[peer.ID]bool), reduce: red}
	// Frames are fp32 only, so every member gets the same bits; inbound
	// streams have no overall deadline (a member waits a whole round), and
	// answers left to write outlive Close (see handle).
	s.init(h, streamConfig{
		Protocol: SyncProtocolID, Service: SyncServiceName, Tag: "meshtrain-sync",
		Request: "sync request", Streams: "sync streams", RequestSize: SyncRequestSize,
		Fingerprint: cfg.Fingerprint, MaxElements: cfg.MaxElements, SendDType: FP32, ReadDType: FP32,
		ChunkSize: cfg.ChunkSize, ChunkTimeout: cfg.ChunkTimeout,
		MaxPending: cfg.MaxPending, UploadLimiter: cfg.UploadLimiter,
		Counters: cfg.Counters, OnReject: cfg.OnReject, Logger: cfg.Logger,
	}, s.handle)
	return s, nil
}

// Counters returns the counters the service counts into.
func (s *SyncService) Counters() *Counters { return s.counters }

// Stats returns the sync counters.
func (s *SyncService) Stats() SyncStats {
	c := &s.stats
	return SyncStats{
		RoundsLed: c.roundsLed.Load(), RoundsDone: c.roundsDone.Load(), JoinsDone: c.joinsDone.Load(),
		ContributionsReceived: c.received.Load(), JoinsServed: c.joinsServed.Load(),
		MembersDropped: c.dropped.Load(), StaleRounds: c.stale.Load(), Duplicates: c.duplicates.Load(),
		EarlyReductions: c.early.Load(), EarlyMisses: c.earlyMisses.Load(),
	}
}

// Close gives up the open round (waiting members are told "not leader"),
// stops accepting streams, aborts transfers still reading and our own
// requests, and waits for every goroutine. Answers already being written
// (a completed round's average) are finished first, within ChunkTimeout
// per chunk, so a leader that stops right after a round does not take the
// round's result away from its members. Safe to call more than once.
func (s *SyncService) Close() error {
	s.close(func() {
		s.giveUp(SyncNotLeader, "")
		s.role, s.hint = roleUnsynced, ""
	})
	return s.reduce.Close()
}

// giveUp ends the open round without a result. Called with mu held.
func (s *SyncService) giveUp(code SyncCode, hint peer.ID) {
	r := s.open
	s.open = nil
	if r == nil || r.finished {
		return
	}
	r.finished, r.end, r.hint = true, code, hint
	close(r.done)
}

// Lead makes this service collect round base.Round+1 from base.Members
// (which must include us), with base as the model joiners get. Members of
// a round it was collecting before are told to join again. Leading that
// round from the same model (base.Group) already is not an error: if the
// round was opened when the last one was sealed, before our own all-reduce
// gave us its model, the model is filled in for joiners now.
func (s *SyncService) Lead(base SyncState) error {
	self := s.h.ID()
	members := slices.Clone(base.Members)
	slices.Sort(members)
	members = slices.Compact(members)
	switch {
	case len(base.Params) == 0 || len(base.Momentum) != len(base.Params):
		return fmt.Errorf("%w: sync base of %d parameters and %d momentum values", ErrBadSnapshot, len(base.Params), len(base.Momentum))
	case s.cfg.Elements > 0 && len(base.Params) != s.cfg.Elements:
		return fmt.Errorf("%w: sync base of %d parameters, service expects %d", ErrBadSnapshot, len(base.Params), s.cfg.Elements)
	case len(base.Params) > s.cfg.MaxElements:
		return fmt.Errorf("%w: sync base of %d parameters", ErrBadSnapshot, len(base.Params))
	case base.Round < 0:
		return fmt.Errorf("%w: sync base at round %d", ErrBadSnapshot, base.Round)
	case len(members) > s.cfg.MaxMembers:
		return fmt.Errorf("%w: group of %d members, limit %d", ErrBadSnapshot, len(members), s.cfg.MaxMembers)
	case !slices.Contains(members, self):
		return fmt.Errorf("%w: a group we lead must include us", ErrBadSnapshot)
	}
	base.Members = members
	sb, err := s.newBase(base)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if r := s.open; s.role == roleLeader && r != nil && r.number == base.Round+1 && r.base.state.Group == base.Group {
		if r.base.state.Params == nil {
			r.base = sb
		}
		return nil
	}
	s.giveUp(SyncStale, "")
	s.role, s.hint = roleLeader, ""
	s.open = s.newRound(sb, members)
	return nil
}

// Follow makes this service answer that leader leads (a member between
// rounds). Members of a round it was collecting are sent there.
func (s *SyncService) Follow(leader peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.giveUp(SyncNotLeader, leader)
	s.role, s.hint = roleFollower, leader
}

// Unsync makes this service answer "unsynced" (it belongs to no group).
func (s *SyncService) Unsync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.giveUp(SyncStale, "")
	s.role, s.hint = roleUnsynced, ""
}

func (s *SyncService) newRound(base *syncBase, members []peer.ID) *syncRound {
	r := &syncRound{
		number: base.state.Round + 1, base: base,
		expected: make(map[peer.ID]struct{}, len(members)), contribs: make(map[peer.ID]params.Progress, len(members)),
		deadline: time.Now().Add(s.cfg.Timeout),
		notify:   make(chan struct{}, 1), done: make(chan struct{}),
	}
	for _, p := range members {
		r.expected[p] = struct{}{}
	}
	return r
}

// newBase checks a model at a round boundary; its frames are encoded when
// a joiner first asks.
func (s *SyncService) newBase(st SyncState) (*syncBase, error) {
	if !st.Progress.Valid() {
		return nil, fmt.Errorf("%w: sync progress %v", ErrBadSnapshot, float64(st.Progress))
	}
	return &syncBase{state: st, members: AppendMembers(nil, st.Members)}, nil
}

// encoded returns the base's frames, encoding them once.
func (sb *syncBase) encoded(s *SyncService) (*[2]*Frame, error) {
	sb.once.Do(func() {
		w := s.encoder()
		for i, v := range [2][]float32{sb.state.Params, sb.state.Momentum} {
			f, err := w.Encode(params.Snapshot{Fingerprint: s.cfg.Fingerprint, Step: sb.state.Round, Progress: sb.state.Progress, Params: v})
			if err != nil {
				sb.err = err
				return
			}
			sb.frames[i] = f
		}
	})
	return &sb.frames, sb.err
}

// NewGroup returns a fresh Group nonce for a model no round made (a
// founded group).
func NewGroup() uint64 { return rand.Uint64() | 1 }

// checkProgress checks a contribution's progress against the model it
// started from: at most MaxProgressDelta ahead.
func (s *SyncService) checkProgress(base *syncBase, progress params.Progress) error {
	d := float64(progress - base.state.Progress)
	if !(d >= 0 && d <= s.cfg.MaxProgressDelta) {
		return fmt.Errorf("%w: contribution adds %v progress to the group's %v (limit %v)",
			ErrProtocol, d, float64(base.state.Progress), s.cfg.MaxProgressDelta)
	}
	return nil
}

// checkOwn checks our own contribution's vector.
func (s *SyncService) checkOwn(c Contribution) error {
	n := len(c.Params)
	switch {
	case c.Round < 1:
		return fmt.Errorf("%w: contribution to round %d", ErrBadSnapshot, c.Round)
	case n == 0 || n > s.cfg.MaxElements || (s.cfg.Elements > 0 && n != s.cfg.Elements):
		return fmt.Errorf("%w: contribution of %d values", ErrBadSnapshot, n)
	case !c.Progress.Valid():
		return fmt.Errorf("%w: contribution progress %v", ErrBadSnapshot, float64(c.Progress))
	}
	return nil
}

// Reduce adds our own contribution to the round we lead, waits until every
// expected member has contributed or the round's deadline has passed,
// answers every contributor with the round's member list (members still
// missing are dropped from the group), and all-reduces own.Params among
// them (started at once among own.Members, if given: reduceRound). The
// next round opens as soon as the member list is out, expecting
// its members, with the model to be filled in by Lead. ctx ending leaves
// our contribution in the round. An all-reduce that fails returns an error
// wrapping ErrAllReduce: the caller then holds no group model.
func (s *SyncService) Reduce(ctx context.Context, own Contribution) (SyncState, error) {
	self := s.h.ID()
	if err := s.checkOwn(own); err != nil {
		return SyncState{}, err
	}
	s.mu.Lock()
	r := s.open
	switch {
	case s.closed:
		s.mu.Unlock()
		return SyncState{}, ErrClosed
	case s.role != roleLeader || r == nil || r.number != own.Round || r.sealed:
		s.mu.Unlock()
		return SyncState{}, fmt.Errorf("%w: round %d", ErrNotLeading, own.Round)
	}
	if _, dup := r.contribs[self]; dup {
		s.mu.Unlock()
		return SyncState{}, fmt.Errorf("%w: round %d already has our contribution", ErrNotLeading, own.Round)
	}
	if own.Base != r.base.state.Group {
		s.mu.Unlock()
		return SyncState{}, fmt.Errorf("%w: our contribution starts from another model than round %d's", ErrBadSnapshot, own.Round)
	}
	if err := s.checkProgress(r.base, own.Progress); err != nil {
		s.mu.Unlock()
		return SyncState{}, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	r.contribs[self] = own.Progress
	r.expected[self] = struct{}{}
	s.mu.Unlock()
	return s.reduceRound(ctx, own, func() (SyncState, error) { return s.collect(ctx, r) })
}

// collect waits until round r, which we lead and have contributed to, is
// ready, and seals it.
func (s *SyncService) collect(ctx context.Context, r *syncRound) (SyncState, error) {
	self := s.h.ID()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if s.open != r {
			s.mu.Unlock()
			if s.isClosed() {
				return SyncState{}, ErrClosed
			}
			return SyncState{}, fmt.Errorf("%w: round %d was given up", ErrNotLeading, r.number)
		}
		now := time.Now()
		if r.ready(now, self) {
			r.sealed = true
			s.mu.Unlock()
			return s.seal(r)
		}
		wait := r.deadline.Sub(now)
		s.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-r.notify:
		case <-timer.C:
		case <-ctx.Done():
			return SyncState{}, ctx.Err()
		}
	}
}

// reduceRound runs our part in a round once answer (the leader's, or our
// own sealing) gives its members: the all-reduce of c.Params among them.
// If c names the members it expects, that all-reduce starts at once and
// runs while we wait for the answer, which then only confirms it: after
// the slowest member's step, the round costs what its all-reduce has left
// to do, not a round trip to the leader and then the whole all-reduce.
func (s *SyncService) reduceRound(ctx context.Context, c Contribution, answer func() (SyncState, error)) (SyncState, error) {
	e := s.startEarly(ctx, c)
	if e != nil {
		defer s.saved.Put(&e.saved)
	}
	st, err := answer()
	if err != nil {
		if e != nil {
			e.abandon()
			copy(c.Params, e.saved) // to be sent again
		}
		return SyncState{}, err
	}
	id := ReduceID{Round: uint64(c.Round), Group: c.Base, List: ListHash(st.Members)}
	// Whoever guessed other members for this round sent us messages we
	// must not wait for.
	s.reduce.Settle(id)
	if e != nil {
		if e.id == id && slices.Equal(e.members, st.Members) {
			s.stats.early.Add(1)
			if err := e.wait(s.cfg.Timeout); err != nil {
				return SyncState{}, err
			}
			st.Params = c.Params
			return st, nil
		}
		s.stats.earlyMisses.Add(1)
		e.abandon()
		copy(c.Params, e.saved)
	}
	return s.allReduce(ctx, st, id, c.Params)
}

// earlyReduce is an all-reduce started among the members a contribution
// expects, before the round's answer.
type earlyReduce struct {
	r       *AllReducer
	id      ReduceID
	members []peer.ID
	saved   []float32 // the contribution, to start again from if the guess was wrong
	cancel  context.CancelFunc
	done    chan error
}

// startEarly starts the all-reduce of c.Params among c.Members, if c
// names members that include us and we are connected to every other; nil
// if not. A member we are not connected to has left the group or is
// gone: the round will have other members, and messages of a guessed
// all-reduce that no member runs would hold up the streams they went on
// until they are dropped.
func (s *SyncService) startEarly(ctx context.Context, c Contribution) *earlyReduce {
	if len(c.Members) < 2 || !slices.Contains(c.Members, s.h.ID()) {
		return nil
	}
	for _, p := range c.Members {
		if p != s.h.ID() && s.h.Network().Connectedness(p) != network.Connected {
			return nil // not a miss: no all-reduce was started
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var saved []float32
	if v, ok := s.saved.Get().(*[]float32); ok {
		saved = *v
	}
	e := &earlyReduce{r: s.reduce, members: slices.Clone(c.Members), saved: append(saved[:0], c.Params...),
		cancel: cancel, done: make(chan error, 1)}
	e.id = ReduceID{Round: uint64(c.Round), Group: c.Base, List: ListHash(e.members)}
	go func() { e.done <- e.r.AllReduce(ctx, e.id, e.members, c.Params) }()
	return e
}

// wait returns the early all-reduce's result, giving it up to timeout
// more.
func (e *earlyReduce) wait(timeout time.Duration) error {
	defer e.cancel()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-e.done:
		return err
	case <-t.C:
		e.cancel()
		return <-e.done
	}
}

// abandon ends the early all-reduce, if any, without resetting its
// streams, and waits for it.
func (e *earlyReduce) abandon() {
	if e == nil {
		return
	}
	e.r.Abandon(e.id)
	<-e.done
	e.cancel()
}

// seal ends a round's collection: its contributors are its members, its
// result is published to the members waiting for it, and the next round
// opens.
func (s *SyncService) seal(r *syncRound) (SyncState, error) {
	ids := make([]peer.ID, 0, len(r.contribs))
	for p := range r.contribs {
		ids = append(ids, p)
	}
	slices.Sort(ids)
	var dropped []peer.ID
	for p := range r.expected {
		if _, ok := r.contribs[p]; !ok {
			dropped = append(dropped, p)
		}
	}
	progress := r.base.state.Progress
	for _, p := range ids {
		progress += r.contribs[p] - r.base.state.Progress
	}
	res := SyncState{Round: r.number, Progress: progress, Group: NewGroup(), Members: ids}
	sb, err := s.newBase(res)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open != r {
		if s.closed {
			return SyncState{}, ErrClosed
		}
		return SyncState{}, fmt.Errorf("%w: round %d was given up", ErrNotLeading, r.number)
	}
	if err != nil {
		s.giveUp(SyncStale, "")
		s.role = roleUnsynced
		return SyncState{}, fmt.Errorf("gossip: sealing sync round %d: %w", r.number, err)
	}
	r.finished, r.result = true, sb
	close(r.done)
	s.open = s.newRound(sb, ids)
	s.stats.roundsLed.Add(1)
	if len(dropped) > 0 {
		s.stats.dropped.Add(uint64(len(dropped)))
		s.log.Info("sync round closed without members", "round", r.number, "dropped", dropped, "members", len(ids))
	}
	return res, nil
}

// allReduce replaces v with its mean among the round's members, within
// the round timeout.
func (s *SyncService) allReduce(ctx context.Context, st SyncState, id ReduceID, v []float32) (SyncState, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.reduce.AllReduce(ctx, id, st.Members, v); err != nil {
		return SyncState{}, err
	}
	st.Params = v
	return st, nil
}

// AllReduceStats returns the data path's counters.
func (s *SyncService) AllReduceStats() AllReduceStats { return s.reduce.Stats() }

// handle serves one inbound sync stream once its request header has
// arrived (streamBase.accept). Reads are aborted by Close; once a stream has
// only answers left to write, it is detached so that Close lets them finish.
func (s *SyncService) handle(in *inbound, qb []byte) {
	st, x, p := in.st, in.x, in.p
	q, err := ParseSyncRequest(qb)
	if err != nil {
		s.abort(in, fmt.Errorf("read sync request: %w", err))
		return
	}
	a, hint, sb, r, err := s.admit(p, q)
	if a.Code != SyncOK || q.Kind == SyncProbe {
		var members []byte
		switch {
		case hint != "":
			members = AppendMembers(nil, []peer.ID{hint})
			a.MemberCount = 1
		case sb != nil:
			members = sb.members
			a.MemberCount = len(sb.state.Members)
		}
		// Counted before the answer leaves, so a peer that has it can
		// rely on the count.
		s.rj.reject(p, err)
		s.finishStream(x, st, a, members, nil, nil)
		return
	}
	// The peer's slot is freed before our side ends, so a peer that reads
	// our answer and comes straight back is not refused as a duplicate.
	left := false
	leave := func() {
		if !left {
			left = true
			s.leave(p, q.Kind)
		}
	}
	defer leave()
	defer s.protect(p)()
	if !in.detach() {
		if q.Kind == SyncContribute {
			s.mu.Lock()
			s.uploads--
			s.mu.Unlock()
		}
		_ = st.Reset()
		return
	}
	if q.Kind == SyncContribute {
		s.serveContribution(x, st, p, q, r, leave)
		return
	}
	a.MemberCount, a.Group = len(sb.state.Members), sb.state.Group
	if s.finishStream(x, st, a, sb.members, sb, leave) {
		s.stats.joinsServed.Add(1)
	}
}

// admit decides on a request. For an admitted join or contribution it
// records p as in flight (leave undoes it). The error, if any, is what a
// refusal is counted as (nil: not the peer's fault).
func (s *SyncService) admit(p peer.ID, q SyncRequest) (a SyncAnswer, hint peer.ID, sb *syncBase, r *syncRound, err error) {
	reject := func(reason Reason, e error) (SyncAnswer, peer.ID, *syncBase, *syncRound, error) {
		return SyncAnswer{Code: SyncRejected, Reason: reason}, "", nil, nil, e
	}
	switch {
	case q.Fingerprint != s.cfg.Fingerprint:
		return reject(ReasonFingerprint, fmt.Errorf("%w: sync request for %s", ErrFingerprint, q.Fingerprint.Short()))
	case q.Elements > uint64(s.cfg.MaxElements):
		return reject(ReasonOversize, fmt.Errorf("%w: sync request for %d elements", ErrOversize, q.Elements))
	case q.Elements != 0 && s.cfg.Elements != 0 && q.Elements != uint64(s.cfg.Elements):
		return reject(ReasonSizeMismatch, fmt.Errorf("%w: sync request for %d elements, we have %d", ErrSizeMismatch, q.Elements, s.cfg.Elements))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.role {
	case roleUnsynced:
		return SyncAnswer{Code: SyncUnsynced}, "", nil, nil, nil
	case roleFollower:
		return SyncAnswer{Code: SyncNotLeader}, s.hint, nil, nil, nil
	}
	r = s.open
	sb = r.base
	if q.Elements != 0 && sb.state.Params != nil && q.Elements != uint64(len(sb.state.Params)) {
		return reject(ReasonSizeMismatch, fmt.Errorf("%w: sync request for %d elements, the group has %d", ErrSizeMismatch, q.Elements, len(sb.state.Params)))
	}
	last := SyncAnswer{Round: sb.state.Round, Progress: sb.state.Progress}
	if q.Kind == SyncProbe {
		return last, "", sb, r, nil
	}
	if s.inflight[p] {
		s.stats.duplicates.Add(1)
		return SyncAnswer{Code: SyncDuplicate}, "", nil, nil, fmt.Errorf("%w: a second sync stream while one is open", ErrProtocol)
	}
	if q.Kind == SyncJoin {
		switch {
		case r.sealed || sb.state.Params == nil:
			// Sealing is a moment, and so is our own all-reduce, which
			// gives the model a joiner takes; the joiner asks again.
			return SyncAnswer{Code: SyncBusy}, "", nil, nil, nil
		case s.joins >= s.cfg.MaxJoins:
			return SyncAnswer{Code: SyncBusy}, "", nil, nil, fmt.Errorf("%w: %d joins running", ErrBusy, s.joins)
		}
		s.joins++
		s.inflight[p] = true
		r.expected[p] = struct{}{}
		// The joiner still has its first step to take.
		r.deadline = later(r.deadline, time.Now().Add(s.cfg.Timeout))
		return last, "", sb, r, nil
	}
	_, dup := r.contribs[p]
	switch {
	case q.Round < r.number || (q.Round == r.number && r.sealed):
		s.stats.stale.Add(1)
		last.Code = SyncStale
		return last, "", nil, nil, fmt.Errorf("%w: contribution for round %d, collecting %d", ErrStale, q.Round, r.number)
	case q.Round > r.number:
		s.stats.stale.Add(1)
		last.Code = SyncAhead
		return last, "", nil, nil, fmt.Errorf("%w: contribution for round %d, collecting %d", ErrStale, q.Round, r.number)
	case q.Base != sb.state.Group:
		// Taken from another model of this round (one we gave up, or
		// another group's): not an offence, but it cannot be averaged.
		s.stats.stale.Add(1)
		last.Code = SyncStale
		return last, "", nil, nil, nil
	case dup:
		s.stats.duplicates.Add(1)
		return SyncAnswer{Code: SyncDuplicate}, "", nil, nil, fmt.Errorf("%w: second contribution to round %d", ErrProtocol, q.Round)
	case len(r.contribs)+s.uploads >= s.cfg.MaxMembers:
		return SyncAnswer{Code: SyncBusy}, "", nil, nil, fmt.Errorf("%w: round %d has %d members", ErrBusy, q.Round, s.cfg.MaxMembers)
	}
	if err := s.checkProgress(sb, q.Progress); err != nil {
		return reject(ReasonProtocol, err)
	}
	s.uploads++
	s.inflight[p] = true
	return SyncAnswer{Round: q.Round}, "", sb, r, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// leave undoes admit's bookkeeping when an admitted stream ends.
func (s *SyncService) leave(p peer.ID, k SyncKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, p)
	if k == SyncJoin {
		s.joins--
	}
}

// serveContribution enters an admitted contribution into its round, waits
// for the round to be sealed and answers with its member list.
func (s *SyncService) serveContribution(x *streamIO, st network.Stream, p peer.ID, q SyncRequest, r *syncRound, leave func()) {
	s.mu.Lock()
	s.uploads--
	in := s.open == r && !r.sealed
	last := r.base.state
	if r.sealed {
		last = SyncState{Round: r.number} // completed, or being completed, without us
	}
	if in {
		r.contribs[p] = q.Progress
		r.expected[p] = struct{}{}
		select {
		case r.notify <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	if !in {
		// The round closed while the contribution was on its way.
		s.finishStream(x, st, SyncAnswer{Code: SyncStale, Round: last.Round, Progress: last.Progress}, nil, nil, leave)
		return
	}
	s.stats.received.Add(1)
	// A leader always finishes or gives up its round; the bound is for a
	// leader whose trainer stopped calling Reduce without closing.
	wait := time.NewTimer(2*s.cfg.Timeout + s.cfg.ChunkTimeout)
	defer wait.Stop()
	select {
	case <-r.done:
	case <-wait.C:
		_ = st.Reset()
		return
	}
	if r.result == nil {
		var members []byte
		a := SyncAnswer{Code: r.end, Round: r.base.state.Round, Progress: r.base.state.Progress}
		if r.hint != "" {
			members, a.MemberCount = AppendMembers(nil, []peer.ID{r.hint}), 1
		}
		if a.Code != SyncStale && a.Code != SyncAhead {
			a.Round, a.Progress = 0, 0
		}
		s.finishStream(x, st, a, members, nil, leave)
		return
	}
	res := r.result
	s.finishStream(x, st, SyncAnswer{Round: res.state.Round, Progress: res.state.Progress,
		MemberCount: len(res.state.Members), Group: res.state.Group}, res.members, nil, leave)
}

// finishStream writes a final answer (header, member list and, for a join,
// sb's frames), calls release (if set) after the last byte, ends our side,
// waits for the member to end its side and closes; it resets the stream if
// any of that fails.
//
// The member ends its side only once it has read the whole answer: closing a
// stream does not guarantee delivery, and a leader that stops right after a
// round closes its connections next, which would take the round's result
// away from members still reading it.
func (s *SyncService) finishStream(x *streamIO, st network.Stream, a SyncAnswer, members []byte, sb *syncBase, release func()) bool {
	a.MembersSize = len(members)
	hb := a.Marshal()
	err := x.writeAll(append(hb[:], members...))
	if err == nil && sb != nil {
		var frames *[2]*Frame
		if frames, err = sb.encoded(s); err == nil {
			w := s.writer(x)
			for _, f := range frames {
				if err = w.Send(x, f); err != nil {
					break
				}
			}
		}
	}
	if release != nil {
		release()
	}
	if err == nil {
		err = st.CloseWrite()
	}
	if err == nil {
		if err = x.expectEOF(); err != nil {
			s.rj.reject(st.Conn().RemotePeer(), streamErr(s.ctx, fmt.Errorf("after the sync answer: %w", err)))
		}
	}
	if err != nil {
		_ = st.Reset()
		return false
	}
	_ = st.Close()
	return true
}

// Contribute tells the round's leader we have taken our step, waits for
// the round's member list and all-reduces c.Params among them (started at
// once among c.Members, if given: reduceRound); it returns
// the round's state with Params the mean (c.Params, overwritten). A
// refusal is a *SyncRefusal; an all-reduce that fails, an error wrapping
// ErrAllReduce. The leader's answer may take as long as the slowest
// member's step; we wait up to twice the Timeout for it.
func (s *SyncService) Contribute(ctx context.Context, leader peer.ID, c Contribution) (SyncState, error) {
	if err := s.checkOwn(c); err != nil {
		return SyncState{}, err
	}
	q := SyncRequest{Kind: SyncContribute, Fingerprint: s.cfg.Fingerprint, Elements: uint64(len(c.Params)),
		Round: c.Round, Progress: c.Progress, Base: c.Base}
	st, err := s.reduceRound(ctx, c, func() (SyncState, error) {
		st, _, err := s.request(ctx, leader, q)
		return st, err
	})
	if err != nil {
		return SyncState{}, err
	}
	s.stats.roundsDone.Add(1)
	s.takeLead(st)
	return st, nil
}

// takeLead opens the next round at once when the round a follower just
// completed names it the lowest member, the next leader by the node's rule:
// the other members, who may finish the round first, then find it open, as
// they find it open at a leader that led this round (seal). Its model is
// filled in by Lead; a node that picks another leader (one it gave up on
// is lower) calls Follow, which sends them there.
func (s *SyncService) takeLead(st SyncState) {
	if len(st.Members) < 2 || st.Members[0] != s.h.ID() {
		return
	}
	sb, err := s.newBase(SyncState{Round: st.Round, Progress: st.Progress, Group: st.Group, Members: st.Members})
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.role != roleFollower {
		return
	}
	s.role, s.hint = roleLeader, ""
	s.open = s.newRound(sb, st.Members)
}

// Join asks p, which should lead a group, for the group's model at the last
// round boundary. p then expects us in its next round: apply the model,
// take one step, and contribute to p. A refusal is a *SyncRefusal.
func (s *SyncService) Join(ctx context.Context, p peer.ID) (SyncState, error) {
	q := SyncRequest{Kind: SyncJoin, Fingerprint: s.cfg.Fingerprint, Elements: uint64(s.cfg.Elements)}
	st, _, err := s.request(ctx, p, q)
	if err == nil {
		s.stats.joinsDone.Add(1)
	}
	return st, err
}

// Probe asks p which group it leads, without joining. A refusal is a
// *SyncRefusal (SyncNotLeader names the leader p follows).
func (s *SyncService) Probe(ctx context.Context, p peer.ID) (GroupInfo, error) {
	q := SyncRequest{Kind: SyncProbe, Fingerprint: s.cfg.Fingerprint, Elements: uint64(s.cfg.Elements)}
	_, g, err := s.request(ctx, p, q)
	return g, err
}

// request runs the member's side of one sync stream:
//
//	contribute: -> request; <- answer (after the round is sealed), members, EOF;
//	            -> CloseWrite
//	join:       -> request; <- answer, members, frames, EOF; -> CloseWrite
//	probe:      -> request; <- answer, members, EOF; -> CloseWrite
//
// Our CloseWrite, once we have read everything, tells the responder its
// answer arrived (see finishStream).
func (s *SyncService) request(ctx context.Context, p peer.ID, q SyncRequest) (SyncState, GroupInfo, error) {
	if p == s.h.ID() {
		return SyncState{}, GroupInfo{}, fmt.Errorf("gossip: sync %s with ourselves", q.Kind)
	}
	what := "sync " + q.Kind.String()
	// A dead peer's address may take a dial timeout to give up on (QUIC
	// gets no answer from a closed port); a member cannot wait that long.
	ctx, x, end, err := s.dial(ctx, p, what, s.cfg.ChunkTimeout)
	if err != nil {
		return SyncState{}, GroupInfo{}, err
	}
	defer end()
	res, g, err := s.converse(x, x.st, p, q)
	if err != nil {
		var ref *SyncRefusal
		if !errors.As(err, &ref) {
			return SyncState{}, GroupInfo{}, s.fail(ctx, x, p, what, err)
		}
		// The peer's answer, not a verdict on its input.
		_ = x.st.Reset()
		if ref.Code == SyncBusy || ref.Code == SyncRejected {
			s.counters.refusedByPeer.Add(1)
		}
		return SyncState{}, GroupInfo{}, err
	}
	_ = x.st.Close()
	return res, g, nil
}

func (s *SyncService) converse(x *streamIO, st network.Stream, p peer.ID, q SyncRequest) (SyncState, GroupInfo, error) {
	qb := q.Marshal()
	if err := x.writeAll(qb[:]); err != nil {
		return SyncState{}, GroupInfo{}, fmt.Errorf("write sync request: %w", err)
	}
	if q.Kind == SyncContribute {
		// The answer comes when the slowest member has contributed.
		x.timeout = 2*s.cfg.Timeout + s.cfg.ChunkTimeout
	}
	a, members, err := s.readAnswer(x, st, p, true)
	x.timeout = s.cfg.ChunkTimeout
	if err != nil {
		return SyncState{}, GroupInfo{}, err
	}
	switch q.Kind {
	case SyncProbe:
		if len(members) == 0 {
			return SyncState{}, GroupInfo{}, fmt.Errorf("%w: probe answered without members", ErrProtocol)
		}
		if err := s.ack(x, st); err != nil {
			return SyncState{}, GroupInfo{}, err
		}
		return SyncState{}, GroupInfo{Leader: p, Round: a.Round, Progress: a.Progress, Members: members}, nil
	case SyncContribute:
		if a.Round != q.Round || !slices.Contains(members, s.h.ID()) || len(members) > s.cfg.MaxMembers {
			return SyncState{}, GroupInfo{}, fmt.Errorf("%w: member list of round %d with %d members, we contributed to %d",
				ErrProtocol, a.Round, len(members), q.Round)
		}
		if err := s.ack(x, st); err != nil {
			return SyncState{}, GroupInfo{}, err
		}
		return SyncState{Round: a.Round, Progress: a.Progress, Group: a.Group, Members: members}, GroupInfo{}, nil
	}
	if len(members) == 0 {
		return SyncState{}, GroupInfo{}, fmt.Errorf("%w: a group model without members", ErrProtocol)
	}
	want := s.cfg.Elements
	if want == 0 {
		want = int(q.Elements)
	}
	rd := s.reader(x, want)
	w, err := rd.ReadFrame(x)
	if err != nil {
		return SyncState{}, GroupInfo{}, err
	}
	m, err := rd.ReadFrame(x)
	if err != nil {
		return SyncState{}, GroupInfo{}, err
	}
	if len(w.Params) != len(m.Params) || w.Step != a.Round || m.Step != a.Round || w.Progress != a.Progress || m.Progress != a.Progress {
		return SyncState{}, GroupInfo{}, fmt.Errorf("%w: group model frames (%d and %d elements, steps %d and %d) do not match round %d",
			ErrProtocol, len(w.Params), len(m.Params), w.Step, m.Step, a.Round)
	}
	if err := s.ack(x, st); err != nil {
		return SyncState{}, GroupInfo{}, err
	}
	return SyncState{Round: a.Round, Progress: a.Progress, Group: a.Group, Params: w.Params, Momentum: m.Params, Members: members}, GroupInfo{}, nil
}

func (s *SyncService) ack(x *streamIO, st network.Stream) error {
	if err := x.expectEOF(); err != nil {
		return err
	}
	if err := st.CloseWrite(); err != nil {
		return fmt.Errorf("close write: %w", err)
	}
	return nil
}

// readAnswer reads an answer header and its member list; an answer other
// than SyncOK comes back as a *SyncRefusal, after its member list and our
// ack. first marks the answer to the request itself: a peer that hangs up
// before it says anything there is treated as overloaded, not hostile.
func (s *SyncService) readAnswer(x *streamIO, st network.Stream, p peer.ID, first bool) (SyncAnswer, []peer.ID, error) {
	var b [SyncAnswerSize]byte
	if err := x.beforeRead(len(b)); err != nil {
		return SyncAnswer{}, nil, err
	}
	n, err := io.ReadFull(x, b[:])
	if err != nil {
		if first && n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, ErrShortRead)) {
			return SyncAnswer{}, nil, fmt.Errorf("%w: %v", ErrHungUp, err)
		}
		return SyncAnswer{}, nil, fmt.Errorf("read sync answer: %w", readError(err))
	}
	a, err := ParseSyncAnswer(b[:])
	if err != nil {
		return a, nil, err
	}
	var members []peer.ID
	if a.MembersSize > 0 {
		mb := make([]byte, a.MembersSize)
		if err := x.readFull(mb); err != nil {
			return a, nil, fmt.Errorf("read sync members: %w", err)
		}
		if members, err = ParseMembers(mb, a.MemberCount); err != nil {
			return a, nil, err
		}
	}
	if a.Code != SyncOK {
		// The end of the stream says the responder has freed our slot: a
		// member acting on the refusal at once is not refused again as a
		// duplicate.
		if err := s.ack(x, st); ReasonOf(err) == ReasonProtocol {
			return a, nil, err
		}
		ref := &SyncRefusal{Peer: p, Code: a.Code, Reason: a.Reason, Round: a.Round}
		if len(members) == 1 {
			ref.Leader = members[0]
		}
		return a, nil, ref
	}
	return a, members, nil
}
