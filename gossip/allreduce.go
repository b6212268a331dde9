package gossip

// The all-reduce data path, /meshtrain/allreduce/2.1.0: the bulk transfer
// behind sync mode's rounds (and diloco's), with no member reducing for
// everyone. Which members take part in which reduction is decided
// elsewhere (the sync leader's roster, sync.go); this file only moves and
// sums one flat fp32 buffer among an agreed, sorted member list. Its
// payloads travel as fp32 or, for the sender that asks (AllReduceConfig's
// DType), as fp16, which halves the bytes: meant for updates and
// pseudo-gradients, whose rounding error is small next to the step, not
// for parameters.
//
// The scheme is the direct reduce-scatter + all-gather: of N members, member
// i owns segment i of the buffer. Every member sends segment j to member j;
// each owner sums the N copies of its segment, divides by N and sends the
// mean back to every member. Each member sends and receives 2 (N-1)/N of
// the buffer, as a ring does, but in 2 steps instead of 2 (N-1), which is
// what matters on loopback and on links with latency. Every member ends
// with the same bytes: each segment was computed once, by its owner, who
// keeps the values it sends (rounded to fp16 if it sends fp16).
//
// Each ordered pair of members uses one long-lived stream (opened by the
// sender on first use, kept across reductions), carrying messages of one
// 48-byte header and a bounded fp32 or fp16 payload:
//
//	0:4   magic "MTAR"          4     version (2)
//	5     kind: 1 scatter, 2 gather, 3 left  6     payload: 0 fp32, 2 fp16
//	7     reserved, zero
//	8:16  reduction round       16:24 reduction group (the model's nonce)
//	24:32 buffer length, elements
//	32:40 offset of the payload, elements    40:44 payload elements
//	44:48 member list (a hash of it)
//
// A receiver checks every header and payload before it uses them: sizes
// against MaxElements and the chunk limit, offsets against the segment the
// sender may send, every value finite; a peer that sends anything else is
// rejected, counted and cut off, and the reduction fails.
//
// A member may start a reduction before it knows its member list for sure
// (sync.go starts one among the members it expects while the leader
// collects the round). Two rules keep a wrong guess cheap: Abandon ends a
// reduction without resetting any stream (the messages under way are
// finished, the next are not sent), and Settle names the one reduction of
// a round and group, so that messages of any other member list for them
// are dropped instead of holding up the stream they came on.
//
// A member whose reduction fails tells the members still waiting on it
// (a "left" message: a header with no payload): they fail at once instead
// of at their deadline, and a member that already has everything it needs
// from the one that left finishes. Only a member we still need something
// from can fail our reduction by leaving, hanging up or breaking its
// stream; a gather we cannot deliver fails only its addressee.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/params"
)

// AllReduceProtocolID is the all-reduce data path.
const AllReduceProtocolID protocol.ID = "/meshtrain/allreduce/2.1.0"

// AllReduceServiceName is the resource-manager service its streams are
// attributed to.
const AllReduceServiceName = "meshtrain.allreduce"

// Wire sizes and limits of the all-reduce.
const (
	// ReduceHeaderSize is the size of a message header.
	ReduceHeaderSize = 48
	// MaxReduceChunk bounds one message's payload, in elements (4 MiB).
	MaxReduceChunk = 1 << 20
	// DefaultReduceChunk is the payload we send per message (1 MiB).
	DefaultReduceChunk = 1 << 18
)

var reduceMagic = [4]byte{'M', 'T', 'A', 'R'}

const reduceVersion = 2

// Message kinds.
const (
	reduceScatter byte = 1
	reduceGather  byte = 2
	reduceLeft    byte = 3 // the sender's reduction failed: it sends no more
)

// ErrAllReduce wraps every failed reduction: a member did not send its part
// in time, sent a bad one, or its stream broke. The buffer then holds a mix
// of our own values and partial results and must not be used.
var ErrAllReduce = errors.New("gossip: all-reduce failed")

// ErrMemberLeft is the cause of a reduction that failed because a member
// we still needed data from said it left it: its own reduction failed
// (another member failed it first, or its deadline passed). The member
// itself is alive.
var ErrMemberLeft = errors.New("gossip: a member left the all-reduce")

// AllReduceError is a failed reduction. It wraps ErrAllReduce and the
// cause; Peer is the member it failed on (whose stream broke, who sent a
// bad message, or to whom we could not send), or empty if it is not known
// (a deadline passed).
type AllReduceError struct {
	Round uint64
	Peer  peer.ID
	Err   error
}

func (e *AllReduceError) Error() string {
	if e.Peer != "" {
		return fmt.Sprintf("gossip: all-reduce failed: round %d, on %s: %v", e.Round, e.Peer, e.Err)
	}
	return fmt.Sprintf("gossip: all-reduce failed: round %d: %v", e.Round, e.Err)
}

func (e *AllReduceError) Unwrap() []error { return []error{ErrAllReduce, e.Err} }

// peerError attributes a failure inside a reduction to a member.
type peerError struct {
	p   peer.ID
	err error
}

func (e *peerError) Error() string { return e.err.Error() }
func (e *peerError) Unwrap() error { return e.err }

func onPeer(p peer.ID, err error) error { return &peerError{p: p, err: err} }

// ReduceID names one reduction: every member must call AllReduce with the
// same ID and member list, and no two reductions may share one. Round and
// Group name what is reduced (sync: the round, and the nonce of the model
// its members started from); List names the member list (ListHash), so
// that two guesses at a round's members are two reductions. A peer's
// messages for a reduction we have not started wait, up to AheadWait,
// until we do, or until Settle says another list is the round's.
type ReduceID struct {
	Round uint64
	Group uint64
	List  uint32
}

// ListHash names a sorted member list in a ReduceID: FNV-1a over the
// peer IDs, each ended by a length byte.
func ListHash(members []peer.ID) uint32 {
	h := uint32(2166136261)
	for _, p := range members {
		for i := 0; i < len(p); i++ {
			h = (h ^ uint32(p[i])) * 16777619
		}
		h = (h ^ uint32(len(p)&0xff)) * 16777619
	}
	return h
}

// AllReduceConfig tunes an AllReducer.
type AllReduceConfig struct {
	// MaxElements caps the buffer length we accept. Default 1<<26.
	MaxElements int
	// ChunkElements is the payload per message we send. Default 256Ki
	// (1 MiB), at most MaxReduceChunk.
	ChunkElements int
	// ChunkTimeout is how long a peer may take to move one message once it
	// has started it, and how long opening a stream may take. Default 10s.
	ChunkTimeout time.Duration
	// AheadWait is how long a peer's message for a reduction we have not
	// started may wait for it; then it is dropped, with the rest of that
	// reduction (our own would have ended first, or never starts: the
	// peer then gives up its own). Such messages are parked, and the
	// peer's stream read on, up to 1 MiB of payload from a peer and 8 MiB
	// in all; past that a message waits in its reader (the peer's stream
	// is not read meanwhile). Default 30s.
	AheadWait time.Duration
	// MaxMembers caps a reduction's member list. Default 64.
	MaxMembers int
	// DType is the payload type we send: FP32 (the default, also if zero)
	// or FP16, which halves the bytes and rounds every value we send
	// (each owner's mean too, on every member alike). A message that
	// would overflow fp16 goes as fp32. We read either from any member.
	DType DType
	// UploadLimiter, Counters, OnReject and Logger as in SyncConfig.
	UploadLimiter Limiter
	Counters      *Counters
	OnReject      RejectFunc
	Logger        *slog.Logger
}

// DefaultAllReduceConfig returns the defaults documented on AllReduceConfig.
func DefaultAllReduceConfig() AllReduceConfig {
	return AllReduceConfig{
		MaxElements: 1 << 26, ChunkElements: DefaultReduceChunk, ChunkTimeout: 10 * time.Second,
		AheadWait: 30 * time.Second, MaxMembers: 64,
	}
}

// Validate reports every bad field at once.
func (c AllReduceConfig) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...))
	}
	if c.MaxElements <= 0 || c.MaxElements > 1<<30 {
		bad("MaxElements %d not in [1, %d]", c.MaxElements, 1<<30)
	}
	if c.ChunkElements < 1 || c.ChunkElements > MaxReduceChunk {
		bad("ChunkElements %d not in [1, %d]", c.ChunkElements, MaxReduceChunk)
	}
	if c.ChunkTimeout <= 0 {
		bad("ChunkTimeout %v not positive", c.ChunkTimeout)
	}
	if c.AheadWait <= 0 {
		bad("AheadWait %v not positive", c.AheadWait)
	}
	if c.MaxMembers < 1 || c.MaxMembers > MaxSyncMembers {
		bad("MaxMembers %d not in [1, %d]", c.MaxMembers, MaxSyncMembers)
	}
	if c.DType != 0 && c.DType != FP32 && c.DType != FP16 {
		bad("DType %v: want fp32 or fp16", c.DType)
	}
	return errors.Join(errs...)
}

// reduceHeader is one message's header.
type reduceHeader struct {
	kind          byte
	dtype         DType // FP32 or FP16
	id            ReduceID
	total, offset uint64
	count         uint32
}

func (h reduceHeader) marshal() [ReduceHeaderSize]byte {
	var b [ReduceHeaderSize]byte
	copy(b[0:4], reduceMagic[:])
	b[4] = reduceVersion
	b[5] = h.kind
	if h.dtype == FP16 {
		b[6] = byte(FP16)
	}
	binary.LittleEndian.PutUint64(b[8:16], h.id.Round)
	binary.LittleEndian.PutUint64(b[16:24], h.id.Group)
	binary.LittleEndian.PutUint64(b[24:32], h.total)
	binary.LittleEndian.PutUint64(b[32:40], h.offset)
	binary.LittleEndian.PutUint32(b[40:44], h.count)
	binary.LittleEndian.PutUint32(b[44:48], h.id.List)
	return b
}

// parseReduceHeader decodes and checks a header on its own terms: what a
// given reduction expects is checked when the message reaches it.
func parseReduceHeader(b []byte, maxElements int) (reduceHeader, error) {
	if len(b) < ReduceHeaderSize {
		return reduceHeader{}, fmt.Errorf("%w: all-reduce header of %d bytes", ErrShortRead, len(b))
	}
	if [4]byte(b[0:4]) != reduceMagic {
		return reduceHeader{}, fmt.Errorf("%w: all-reduce header starts %q", ErrBadMagic, b[0:4])
	}
	if b[4] != reduceVersion {
		return reduceHeader{}, fmt.Errorf("%w: all-reduce version %d", ErrBadVersion, b[4])
	}
	h := reduceHeader{
		kind:  b[5],
		dtype: FP32,
		id: ReduceID{Round: binary.LittleEndian.Uint64(b[8:16]), Group: binary.LittleEndian.Uint64(b[16:24]),
			List: binary.LittleEndian.Uint32(b[44:48])},
		total:  binary.LittleEndian.Uint64(b[24:32]),
		offset: binary.LittleEndian.Uint64(b[32:40]),
		count:  binary.LittleEndian.Uint32(b[40:44]),
	}
	if b[6] == byte(FP16) {
		h.dtype = FP16
	}
	switch {
	case h.kind == reduceLeft:
		if b[6] != 0 || b[7] != 0 || h.total != 0 || h.offset != 0 || h.count != 0 {
			return h, fmt.Errorf("%w: all-reduce left message with a payload or reserved bytes set", ErrProtocol)
		}
		return h, nil
	case h.kind != reduceScatter && h.kind != reduceGather:
		return h, fmt.Errorf("%w: all-reduce message kind %d", ErrProtocol, h.kind)
	case b[6] != 0 && b[6] != byte(FP16):
		return h, fmt.Errorf("%w: all-reduce payload type %d", ErrProtocol, b[6])
	case b[7] != 0:
		return h, fmt.Errorf("%w: reserved all-reduce header bytes set", ErrProtocol)
	case h.total == 0 || h.total > uint64(maxElements):
		return h, fmt.Errorf("%w: all-reduce buffer of %d elements (limit %d)", ErrOversize, h.total, maxElements)
	case h.count == 0 || h.count > MaxReduceChunk:
		return h, fmt.Errorf("%w: all-reduce message of %d elements (limit %d)", ErrOversize, h.count, MaxReduceChunk)
	case h.offset >= h.total || h.total-h.offset < uint64(h.count):
		return h, fmt.Errorf("%w: all-reduce message [%d, +%d) outside a buffer of %d", ErrSizeMismatch, h.offset, h.count, h.total)
	}
	return h, nil
}

// segment is member i's part [lo, hi) of a buffer of n elements among k
// members.
func segment(n, k, i int) (lo, hi int) {
	return i * n / k, (i + 1) * n / k
}

// reduceMsg is a checked message handed from a stream's reader to the
// reduction it belongs to; err, if set, says the peer's stream failed.
type reduceMsg struct {
	from peer.ID
	h    reduceHeader
	data []float32
	err  error
	// other marks an err of a stream that carried no message of this
	// reduction: the peer reset it when an earlier one ended, and sends
	// this one's on a new stream; if this one ended for it too, it says
	// so (a left message), and if it is gone, our connection to it goes.
	other bool
}

// reduceOp is one reduction in progress. Immutable after start except
// done (closed once) and in (written by readers, read by the op).
type reduceOp struct {
	id      ReduceID
	members []peer.ID
	in      chan reduceMsg
	done    chan struct{}
	abandon chan struct{} // closed by Abandon
	// sent counts, per member, our sends to it that ended (its scatter
	// and its gather, delivered or not): a member with fewer than two
	// may still wait on us.
	sent []atomic.Int32
	// pre holds the messages parked for this reduction before it
	// started, in the order read: run takes them before op.in, which
	// carries only messages read later.
	pre []reduceMsg
}

// AllReducer runs all-reduces among the members of a group, one at a time.
//
// Ownership: mu guards cur, ended, settled, abandoned, changed, closed,
// the parked messages and the inbound and outbound stream tables. The
// goroutine inside AllReduce owns its buffer and the sums; each inbound stream has one reader
// goroutine, which hands checked messages to the current reduction through
// its channel; an outbound stream is written by one sender at a time (its
// link's mutex).
type AllReducer struct {
	h     host.Host
	cfg   AllReduceConfig
	log   *slog.Logger
	rj    *rejecter
	c     *Counters
	pool  sync.Pool
	runMu sync.Mutex // one reduction at a time
	own   []float32  // our segment's sum, kept across reductions (runMu)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	cur       *reduceOp
	ended     []ReduceID    // the last reductions run, newest last
	settled   []ReduceID    // the last reductions Settle named, newest last
	abandoned []ReduceID    // reductions abandoned before they started
	changed   chan struct{} // closed and replaced when a reduction starts or one is settled
	inbound   map[peer.ID]network.Stream
	links     map[peer.ID]*reduceLink
	broken    map[peer.ID]error // peers whose stream to us failed, until they open another
	left      []leftNote        // members that left a reduction before we started it
	parked    []parkedMsg       // messages for reductions we have not started, oldest first
	parkTimer *time.Timer       // drops parked messages AheadWait after they came; nil if none

	notifiee network.Notifiee // tells the reduction in progress a member is gone

	reductions, failures, abandons atomic.Uint64
}

// parkedMsg is a message for a reduction we had not started, read from st
// and kept until the reduction starts, ends or is given up (until).
type parkedMsg struct {
	m     reduceMsg
	st    network.Stream
	until time.Time
}

// Parking bounds, in payload elements; a message costs its payload and at
// least parkMinCost, so a peer has at most 64 messages parked. A message
// that does not fit waits in its reader instead.
const (
	// maxParkedPerPeer: one peer's share of a reduction of the default
	// model (its scatter to us, a segment) fits several times over.
	maxParkedPerPeer = DefaultReduceChunk
	// maxParked: 8 peers' worth, 8 MiB of float32s in all.
	maxParked   = 8 * maxParkedPerPeer
	parkMinCost = maxParkedPerPeer / 64
)

// parkCost is what m counts against the parking bounds.
func parkCost(m reduceMsg) int { return max(len(m.data), parkMinCost) }

// leftNote is a "left" message for a reduction we had not started.
type leftNote struct {
	id   ReduceID
	from peer.ID
}

// reduceLink is our outbound stream to one peer.
type reduceLink struct {
	mu      sync.Mutex
	st      network.Stream
	scratch []byte // a message's payload as sent, kept across messages (mu)
}

// NewAllReducer validates cfg and registers the protocol handler on h.
func NewAllReducer(h host.Host, cfg AllReduceConfig) (*AllReducer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Counters == nil {
		cfg.Counters = new(Counters)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &AllReducer{
		h: h, cfg: cfg, c: cfg.Counters,
		log:     cfg.Logger.With("component", "gossip", "protocol", string(AllReduceProtocolID)),
		changed: make(chan struct{}),
		inbound: make(map[peer.ID]network.Stream), links: make(map[peer.ID]*reduceLink),
		broken: make(map[peer.ID]error),
	}
	a.rj = newRejecter(cfg.Counters, cfg.OnReject, a.log)
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.notifiee = &network.NotifyBundle{DisconnectedF: a.disconnected}
	h.Network().Notify(a.notifiee)
	h.SetStreamHandler(AllReduceProtocolID, a.accept)
	return a, nil
}

// AllReduceStats counts reductions: completed, failed, and abandoned (a
// guess at the members that turned out wrong; not a failure).
type AllReduceStats struct {
	Reductions uint64 `json:"reductions"`
	Failures   uint64 `json:"failures"`
	Abandoned  uint64 `json:"abandoned"`
}

// Stats returns the reduction counters.
func (a *AllReducer) Stats() AllReduceStats {
	return AllReduceStats{Reductions: a.reductions.Load(), Failures: a.failures.Load(), Abandoned: a.abandons.Load()}
}

// ErrAbandoned is what AllReduce returns for a reduction Abandon ended.
var ErrAbandoned = errors.New("gossip: all-reduce abandoned")

// Abandon ends reduction id, running or yet to start, without resetting
// any stream: the messages under way are written to the end, no others
// are sent, and AllReduce returns ErrAbandoned. Late messages of it are
// dropped.
func (a *AllReducer) Abandon(id ReduceID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if op := a.cur; op != nil && op.id == id {
		select {
		case <-op.abandon:
		default:
			close(op.abandon)
		}
		return
	}
	if !slices.Contains(a.ended, id) && !slices.Contains(a.abandoned, id) {
		a.abandoned = appendBounded(a.abandoned, id)
		a.sweep(time.Now())
	}
}

// Settle says id is the one reduction of its round and group: messages
// for another member list of them, which a member that guessed the list
// wrong sent before it knew, are dropped from now on rather than waited
// for.
func (a *AllReducer) Settle(id ReduceID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(a.settled, id) {
		a.settled = appendBounded(a.settled, id)
		a.sweep(time.Now())
		close(a.changed)
		a.changed = make(chan struct{})
	}
}

// unsettled reports whether id names a member list other than the one
// Settle named for its round and group. a.mu held.
func (a *AllReducer) unsettled(id ReduceID) bool {
	for _, s := range a.settled {
		if s.Round == id.Round && s.Group == id.Group && s.List != id.List {
			return true
		}
	}
	return false
}

// appendBounded appends id, keeping the newest maxEnded.
func appendBounded(ids []ReduceID, id ReduceID) []ReduceID {
	ids = append(ids, id)
	if len(ids) > maxEnded {
		ids = slices.Delete(ids, 0, len(ids)-maxEnded)
	}
	return ids
}

// Close stops accepting streams, fails the reduction in progress, resets
// the streams peers send on, and ends ours gracefully: what a finished
// reduction sent is read by the peer before Close returns (within
// ChunkTimeout), so a member that stops right after a round does not take
// the round's last segments away from the others. Safe to call more than
// once.
func (a *AllReducer) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		a.wg.Wait()
		return nil
	}
	a.closed = true
	a.h.RemoveStreamHandler(AllReduceProtocolID)
	a.cancel()
	if a.parkTimer != nil {
		a.parkTimer.Stop()
		a.parkTimer = nil
	}
	for _, pm := range a.parked {
		a.free(pm.m.data)
	}
	a.parked = nil
	for _, st := range a.inbound {
		_ = st.Reset()
	}
	links := a.links
	a.links = map[peer.ID]*reduceLink{}
	a.mu.Unlock()
	// Not under a.mu: the network holds its notifiee lock while it calls
	// disconnected, which takes a.mu.
	a.h.Network().StopNotify(a.notifiee)
	var ends sync.WaitGroup
	for _, l := range links {
		ends.Go(func() {
			l.mu.Lock() // after the sender, which a.ctx stops
			defer l.mu.Unlock()
			if st := l.st; st != nil {
				l.st = nil
				_ = st.SetReadDeadline(time.Now().Add(a.cfg.ChunkTimeout))
				if st.CloseWrite() != nil {
					_ = st.Reset()
					return
				}
				if _, err := io.Copy(io.Discard, st); err != nil {
					_ = st.Reset()
					return
				}
				_ = st.Close()
			}
		})
	}
	ends.Wait()
	a.wg.Wait()
	return nil
}

// disconnected fails the reduction in progress at once if it waits on a
// member we lost our last connection to.
func (a *AllReducer) disconnected(n network.Network, c network.Conn) {
	p := c.RemotePeer()
	if n.Connectedness(p) == network.Connected {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.cur == nil || !slices.Contains(a.cur.members, p) {
		return
	}
	a.wg.Go(func() { a.deliverErr(p, fmt.Errorf("member %s is gone: disconnected", p), true, nil) })
}

// accept takes a peer's stream to us; a newer one replaces an older.
func (a *AllReducer) accept(st network.Stream) {
	p := st.Conn().RemotePeer()
	if err := st.Scope().SetService(AllReduceServiceName); err != nil {
		a.rj.reject(p, fmt.Errorf("%w: all-reduce stream: %v", ErrBusy, err))
		_ = st.Reset()
		return
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		_ = st.Reset()
		return
	}
	if old := a.inbound[p]; old != nil {
		_ = old.Reset()
		a.unparkStream(old)
	}
	a.inbound[p] = st
	delete(a.broken, p)
	a.wg.Add(1)
	a.mu.Unlock()
	defer a.wg.Done()
	var last *ReduceID // the reduction of the last message read
	err := a.read(st, p, &last)
	a.mu.Lock()
	current := a.inbound[p] == st
	if current {
		delete(a.inbound, p)
	}
	a.mu.Unlock()
	switch {
	case !current || errors.Is(err, errSuperseded):
		// The peer opened a newer stream, which carries what it sends
		// from now on: this one's end says nothing.
		_ = st.Reset()
	case err != nil:
		_ = st.Reset()
		if a.ctx.Err() == nil {
			a.rj.reject(p, err)
			a.mu.Lock()
			if _, ok := a.inbound[p]; !ok {
				a.broken[p] = err
			}
			a.mu.Unlock()
			// Only a reset by the peer may concern an earlier reduction
			// than ours; what we refused in its messages concerns us.
			var reset *network.StreamError
			remote := errors.As(err, &reset) && reset.Remote
			a.deliverErr(p, err, !remote, last)
		}
	default:
		// The peer ended its stream: it closed its all-reducer and sends
		// nothing more, on this stream or another.
		_ = st.Close()
		if a.ctx.Err() == nil {
			a.deliverErr(p, fmt.Errorf("ended: %w", io.EOF), true, nil)
		}
	}
}

// read reads messages from p until the stream ends; it returns nil at a
// clean end of stream. *last is set to the reduction of each message read.
func (a *AllReducer) read(st network.Stream, p peer.ID, last **ReduceID) error {
	x := &streamIO{ctx: a.ctx, st: st, c: a.c, timeout: a.cfg.ChunkTimeout}
	var hb [ReduceHeaderSize]byte
	var half []byte // fp16 payloads, before they are widened
	for {
		// Between reductions a stream idles as long as it likes.
		_ = st.SetReadDeadline(time.Time{})
		if _, err := io.ReadFull(x, hb[:1]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read all-reduce header: %w", readError(err))
		}
		if err := x.readFull(hb[1:]); err != nil {
			return fmt.Errorf("read all-reduce header: %w", err)
		}
		h, err := parseReduceHeader(hb[:], a.cfg.MaxElements)
		if err != nil {
			return err
		}
		*last = &h.id
		if h.kind == reduceLeft {
			if err := a.deliver(st, reduceMsg{from: p, h: h}); err != nil {
				return err
			}
			continue
		}
		data := a.alloc(int(h.count))
		var finite bool
		if h.dtype == FP16 {
			half = slices.Grow(half[:0], 2*len(data))[:2*len(data)]
			if err := x.readFull(half); err != nil {
				return fmt.Errorf("read all-reduce payload: %w", err)
			}
			finite = decodeFP16(data, half)
		} else if err := x.readFull(float32Bytes(data)); err != nil {
			return fmt.Errorf("read all-reduce payload: %w", err)
		} else {
			if !littleEndian {
				b := float32Bytes(data)
				for i := range data {
					data[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
				}
			}
			finite = params.AllFinite(data)
		}
		if !finite {
			return fmt.Errorf("%w: in an all-reduce message from round %d", ErrNonFinite, h.id.Round)
		}
		if err := a.deliver(st, reduceMsg{from: p, h: h, data: data}); err != nil {
			return err
		}
	}
}

func (a *AllReducer) alloc(n int) []float32 {
	if v, ok := a.pool.Get().(*[]float32); ok && cap(*v) >= n {
		return (*v)[:n]
	}
	return make([]float32, n, max(n, a.cfg.ChunkElements))
}

func (a *AllReducer) free(v []float32) {
	if v != nil {
		a.pool.Put(&v)
	}
}

// errSuperseded ends the reader of a stream the peer has replaced.
var errSuperseded = errors.New("gossip: all-reduce stream superseded")

// maxEnded is how many ended reductions we remember, to drop their late
// messages.
const maxEnded = 16

// deliver hands m, read from st, to its reduction: at once if it runs;
// if we have not started it, parked while the bounds allow, so that the
// stream goes on to the messages behind it (those of a reduction we run,
// if the peer guessed one we never start), else after a wait; a message
// of a reduction that ended is dropped.
func (a *AllReducer) deliver(st network.Stream, m reduceMsg) error {
	timer := time.NewTimer(a.cfg.AheadWait)
	defer timer.Stop()
	for {
		a.mu.Lock()
		op, changed := a.cur, a.changed
		ended := a.over(m.h.id)
		superseded := a.inbound[m.from] != st
		// A left message follows the peer's parked messages of its
		// reduction, if any: they may hold all we need from it.
		behind := m.h.kind == reduceLeft && a.hasParked(m.from, m.h.id)
		parked := !superseded && !ended && (op == nil || op.id != m.h.id) &&
			(m.h.kind != reduceLeft || behind) && a.park(st, m)
		a.mu.Unlock()
		switch {
		case parked:
			return nil
		case superseded:
			a.free(m.data)
			return errSuperseded
		case op != nil && op.id == m.h.id:
			if !slices.Contains(op.members, m.from) {
				return fmt.Errorf("%w: all-reduce message from a peer outside round %d", ErrProtocol, m.h.id.Round)
			}
			select {
			case op.in <- m:
			case <-op.done:
				a.free(m.data)
			case <-a.ctx.Done():
				return a.ctx.Err()
			}
			return nil
		case ended:
			// A reduction we finished, gave up or abandoned, or another
			// list's for a round we know the members of.
			a.free(m.data)
			return nil
		case m.h.kind == reduceLeft && !behind:
			// Noted for when we start it, without holding up the stream.
			a.mu.Lock()
			a.left = append(a.left, leftNote{id: m.h.id, from: m.from})
			if len(a.left) > maxEnded {
				a.left = slices.Delete(a.left, 0, len(a.left)-maxEnded)
			}
			a.mu.Unlock()
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			// Our reduction would have ended long before: the peer
			// guessed a member list that was not the round's, or we left
			// the group. Dropped, and so is the rest of that reduction.
			a.free(m.data)
			a.mu.Lock()
			a.expire(m.h.id)
			a.mu.Unlock()
			a.log.Debug("all-reduce message for a reduction we did not start, dropped", "peer", m.from, "round", m.h.id.Round)
			return nil
		case <-a.ctx.Done():
			return a.ctx.Err()
		}
	}
}

// over reports whether reduction id ended, was abandoned, or names a
// member list other than its round's. a.mu held.
func (a *AllReducer) over(id ReduceID) bool {
	return slices.Contains(a.ended, id) || slices.Contains(a.abandoned, id) || a.unsettled(id)
}

// expire marks id ended, as a reduction we wait for no longer, and drops
// what is parked for it. a.mu held.
func (a *AllReducer) expire(id ReduceID) {
	if !slices.Contains(a.ended, id) {
		a.ended = appendBounded(a.ended, id)
	}
	a.sweep(time.Now())
}

// hasParked reports whether a message of p's for reduction id is parked.
// a.mu held.
func (a *AllReducer) hasParked(p peer.ID, id ReduceID) bool {
	return slices.ContainsFunc(a.parked, func(pm parkedMsg) bool { return pm.m.from == p && pm.m.h.id == id })
}

// park keeps m, read from st, for a reduction not started, if it fits the
// bounds. a.mu held.
func (a *AllReducer) park(st network.Stream, m reduceMsg) bool {
	a.sweep(time.Now())
	cost := parkCost(m)
	total, ours := cost, cost
	for _, pm := range a.parked {
		c := parkCost(pm.m)
		total += c
		if pm.m.from == m.from {
			ours += c
		}
	}
	if a.closed || total > maxParked || ours > maxParkedPerPeer {
		return false
	}
	a.parked = append(a.parked, parkedMsg{m: m, st: st, until: time.Now().Add(a.cfg.AheadWait)})
	if a.parkTimer == nil {
		a.parkTimer = time.AfterFunc(a.cfg.AheadWait, a.sweepLater)
	}
	return true
}

// sweep drops the parked messages whose reduction is over, or that waited
// AheadWait for it: then the reduction is over, as for a message that
// waited in its reader. a.mu held.
func (a *AllReducer) sweep(now time.Time) {
	keep := a.parked[:0]
	for _, pm := range a.parked {
		switch {
		case a.over(pm.m.h.id):
			a.free(pm.m.data)
		case !now.Before(pm.until):
			a.free(pm.m.data)
			if !slices.Contains(a.ended, pm.m.h.id) {
				a.ended = appendBounded(a.ended, pm.m.h.id)
			}
			a.log.Debug("all-reduce message for a reduction we did not start, dropped", "peer", pm.m.from, "round", pm.m.h.id.Round)
		default:
			keep = append(keep, pm)
		}
	}
	clear(a.parked[len(keep):])
	a.parked = keep
}

// sweepLater is the parking timer: it sweeps, and waits for the next
// parked message's time if any is left.
func (a *AllReducer) sweepLater() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.parkTimer = nil
	if a.closed {
		return
	}
	now := time.Now()
	a.sweep(now)
	if len(a.parked) > 0 {
		a.parkTimer = time.AfterFunc(a.parked[0].until.Sub(now), a.sweepLater)
	}
}

// unpark hands the messages parked for op to it, and drops those of a
// peer outside its members, which it returns: the caller rejects them
// once it no longer holds a.mu (a rejection calls OnReject). a.mu held,
// op just made current.
func (a *AllReducer) unpark(op *reduceOp) (outsiders []peer.ID) {
	keep := a.parked[:0]
	for _, pm := range a.parked {
		switch {
		case pm.m.h.id != op.id:
			keep = append(keep, pm)
		case !slices.Contains(op.members, pm.m.from):
			a.free(pm.m.data)
			outsiders = append(outsiders, pm.m.from)
		default:
			op.pre = append(op.pre, pm.m)
		}
	}
	clear(a.parked[len(keep):])
	a.parked = keep
	return outsiders
}

// unparkStream drops what was parked from st, which its peer replaced:
// the new stream carries what it sends from now on. a.mu held.
func (a *AllReducer) unparkStream(st network.Stream) {
	keep := a.parked[:0]
	for _, pm := range a.parked {
		if pm.st == st {
			a.free(pm.m.data)
		} else {
			keep = append(keep, pm)
		}
	}
	clear(a.parked[len(keep):])
	a.parked = keep
}

// deliverErr tells the reduction in progress that p's stream failed or
// ended, if p is one of its members, after the messages p sent before.
// all says the failure concerns every reduction p takes part in (it sent
// something we refuse, closed its all-reducer, or we lost our connection
// to it); if not (p reset the stream), last is the reduction of the last
// message the stream carried, nil if none.
func (a *AllReducer) deliverErr(p peer.ID, err error, all bool, last *ReduceID) {
	a.mu.Lock()
	op := a.cur
	a.mu.Unlock()
	if op == nil || !slices.Contains(op.members, p) {
		return
	}
	m := reduceMsg{from: p, err: err, other: !all && (last == nil || *last != op.id)}
	select {
	case op.in <- m:
	case <-op.done:
	case <-a.ctx.Done():
	}
}

// AllReduce replaces buf with the element-wise mean of every member's buf.
// members is the sorted list of every member, us included; each calls
// AllReduce with the same id, members and buffer length. It returns when
// buf holds the mean, or with an error wrapping ErrAllReduce when ctx ends
// or a member fails first (then buf must not be used).
func (a *AllReducer) AllReduce(ctx context.Context, id ReduceID, members []peer.ID, buf []float32) error {
	self := a.h.ID()
	me := slices.Index(members, self)
	switch {
	case len(buf) == 0 || len(buf) > a.cfg.MaxElements:
		return fmt.Errorf("%w: all-reduce of %d elements (limit %d)", ErrBadSnapshot, len(buf), a.cfg.MaxElements)
	case me < 0:
		return fmt.Errorf("%w: all-reduce among members that exclude us", ErrBadSnapshot)
	case len(members) > a.cfg.MaxMembers:
		return fmt.Errorf("%w: all-reduce among %d members (limit %d)", ErrBadSnapshot, len(members), a.cfg.MaxMembers)
	case !slices.IsSorted(members) || len(slices.Compact(slices.Clone(members))) != len(members):
		return fmt.Errorf("%w: all-reduce members not sorted and distinct", ErrBadSnapshot)
	case len(members) > len(buf):
		return fmt.Errorf("%w: all-reduce of %d elements among %d members", ErrBadSnapshot, len(buf), len(members))
	}
	if len(members) == 1 {
		a.reductions.Add(1)
		return nil
	}
	a.runMu.Lock()
	defer a.runMu.Unlock()
	op := &reduceOp{id: id, members: members,
		in: make(chan reduceMsg, 4*len(members)), done: make(chan struct{}), abandon: make(chan struct{}),
		sent: make([]atomic.Int32, len(members))}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrAllReduce, ErrClosed)
	}
	if i := slices.Index(a.abandoned, id); i >= 0 {
		a.abandoned = slices.Delete(a.abandoned, i, i+1)
		a.ended = appendBounded(a.ended, id)
		a.mu.Unlock()
		a.abandons.Add(1)
		return ErrAbandoned
	}
	a.cur = op
	outsiders := a.unpark(op)
	close(a.changed)
	a.changed = make(chan struct{})
	// A member whose stream to us broke and that is no longer connected
	// is gone (a crashed process): fail now rather than at the deadline,
	// or after a dial to it times out.
	var err error
	for _, p := range members {
		if berr := a.broken[p]; berr != nil && a.h.Network().Connectedness(p) != network.Connected {
			err = onPeer(p, fmt.Errorf("member %s is gone: %w", p, berr))
			break
		}
	}
	for _, l := range a.left {
		if err == nil && l.id == id && slices.Contains(members, l.from) {
			err = onPeer(l.from, fmt.Errorf("%w: %s left round %d before we started it", ErrMemberLeft, l.from, id.Round))
		}
	}
	a.mu.Unlock()
	for _, p := range outsiders {
		a.rj.reject(p, fmt.Errorf("%w: all-reduce message from %s, outside round %d", ErrProtocol, p, id.Round))
	}
	if err == nil {
		err = a.run(ctx, op, me, buf)
	}
	a.mu.Lock()
	close(op.done)
	if a.cur == op {
		a.cur = nil
	}
	a.ended = appendBounded(a.ended, id)
	a.sweep(time.Now())
	a.mu.Unlock()
	// Drain what readers left in the channel, and what run did not take
	// of what was parked.
	for _, m := range op.pre {
		a.free(m.data)
	}
	op.pre = nil
	for drained := false; !drained; {
		select {
		case m := <-op.in:
			a.free(m.data)
		default:
			drained = true
		}
	}
	if errors.Is(err, ErrAbandoned) {
		a.abandons.Add(1)
		return ErrAbandoned
	}
	if err != nil {
		a.failures.Add(1)
		if a.ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, ErrClosed)
		} else {
			a.leave(op, me)
		}
		re := &AllReduceError{Round: id.Round, Err: err}
		var pe *peerError
		if errors.As(err, &pe) {
			re.Peer = pe.p
		}
		return re
	}
	a.reductions.Add(1)
	return nil
}

// run is one reduction: scatter our segments, sum and return ours, gather
// everyone's.
func (a *AllReducer) run(ctx context.Context, op *reduceOp, me int, buf []float32) error {
	// Senders stop when ctx is cancelled, which must come first; Close
	// cancels a.ctx.
	var senders sync.WaitGroup
	defer senders.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(a.ctx, cancel)
	defer stop()
	k := len(op.members)
	n := len(buf)
	lo, hi := segment(n, k, me)
	// The sum of our segment, ours first. Its buffer is kept across
	// reductions, which runMu serializes; only this goroutine touches it
	// (the senders send from buf).
	a.own = append(a.own[:0], buf[lo:hi]...)
	own := a.own

	// A scatter that fails fails the reduction: its owner cannot average
	// its segment, so nobody gets it.
	sendErr := make(chan error, k)
	scattered := make([]chan struct{}, k)
	for j, p := range op.members {
		if j == me {
			continue
		}
		scattered[j] = make(chan struct{})
		jlo, jhi := segment(n, k, j)
		senders.Go(func() {
			defer close(scattered[j])
			defer op.sent[j].Add(1)
			if err := a.send(ctx, op.abandon, p, reduceScatter, a.cfg.DType, op.id, n, jlo, buf[jlo:jhi]); err != nil {
				sendErr <- onPeer(p, err)
			}
		})
	}
	// Next offset expected from each peer, per kind.
	nextScatter := make([]int, k)
	nextGather := make([]int, k)
	for j := range op.members {
		nextScatter[j] = lo
		nextGather[j], _ = segment(n, k, j)
	}
	// needs reports whether member j still owes us part of its scatter or
	// of its gather: only then can its leaving fail our reduction.
	needs := func(j int) bool {
		_, jhi := segment(n, k, j)
		return nextScatter[j] < hi || nextGather[j] < jhi
	}
	scatterLeft := (k - 1) * (hi - lo)
	gatherLeft := n - (hi - lo)
	if scatterLeft == 0 {
		// Our segment is empty only if n < k, ruled out by AllReduce.
		return fmt.Errorf("%w: empty segment", ErrProtocol)
	}
	for scatterLeft > 0 || gatherLeft > 0 {
		var m reduceMsg
		if len(op.pre) > 0 {
			m, op.pre = op.pre[0], op.pre[1:]
		} else {
			select {
			case m = <-op.in:
			case err := <-sendErr:
				return err
			case <-op.abandon:
				// The senders stop between messages: none is cut short, so
				// no stream is reset under a peer that is not abandoning.
				senders.Wait()
				return ErrAbandoned
			case <-ctx.Done():
				return fmt.Errorf("%w: waiting for %d scattered and %d gathered elements: %w", ErrTimeout, scatterLeft, gatherLeft, ctx.Err())
			case <-a.ctx.Done():
				return ErrClosed
			}
		}
		j := slices.Index(op.members, m.from)
		switch {
		case m.err != nil && m.other && a.h.Network().Connectedness(m.from) == network.Connected:
			continue
		case (m.err != nil || m.h.kind == reduceLeft) && !needs(j):
			// It sent us all we need from it; what it misses of ours
			// fails only its own reduction.
			continue
		case m.err != nil:
			return onPeer(m.from, fmt.Errorf("stream from %s: %w", m.from, m.err))
		case m.h.kind == reduceLeft:
			return onPeer(m.from, fmt.Errorf("%w: %s left round %d", ErrMemberLeft, m.from, op.id.Round))
		}
		off, cnt := int(m.h.offset), int(m.h.count)
		var bad error
		switch {
		case m.h.total != uint64(n):
			bad = fmt.Errorf("%w: all-reduce buffer of %d elements, ours has %d", ErrSizeMismatch, m.h.total, n)
		case m.h.kind == reduceScatter:
			if off != nextScatter[j] || off+cnt > hi {
				bad = fmt.Errorf("%w: scattered [%d, +%d) from %s, expected from %d within [%d, %d)", ErrProtocol, off, cnt, m.from, nextScatter[j], lo, hi)
				break
			}
			averaging.Add(own[off-lo:off-lo+cnt], m.data)
			nextScatter[j] += cnt
			scatterLeft -= cnt
			if scatterLeft == 0 {
				if err := a.finishSegment(ctx, op, me, own, buf, lo, &senders); err != nil {
					return err
				}
			}
		default:
			_, jhi := segment(n, k, j)
			if off != nextGather[j] || off+cnt > jhi {
				bad = fmt.Errorf("%w: gathered [%d, +%d) from %s, expected from %d within its segment", ErrProtocol, off, cnt, m.from, nextGather[j])
				break
			}
			// Our scatter of this segment has been read out of buf
			// before we overwrite it.
			select {
			case <-scattered[j]:
			case <-op.abandon:
				a.free(m.data)
				senders.Wait()
				return ErrAbandoned
			case <-ctx.Done():
				return ctx.Err()
			}
			copy(buf[off:off+cnt], m.data)
			nextGather[j] += cnt
			gatherLeft -= cnt
		}
		a.free(m.data)
		if bad != nil {
			a.rj.reject(m.from, bad)
			a.cutOff(m.from)
			return onPeer(m.from, bad)
		}
	}
	// We hold the mean; what is left is sending ours, from buf.
	sent := make(chan struct{})
	go func() {
		senders.Wait()
		close(sent)
	}()
	select {
	case <-sent:
	case <-op.abandon:
		<-sent
		return ErrAbandoned
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// finishSegment turns our segment's sum into the mean, writes it into buf
// and sends it to every member. A gather we cannot deliver fails only the
// member it was for, whose stream we reset.
func (a *AllReducer) finishSegment(ctx context.Context, op *reduceOp, me int, own, buf []float32, lo int,
	senders *sync.WaitGroup) error {
	scale := 1 / float32(len(op.members))
	for i := range own {
		own[i] *= scale
	}
	if !params.AllFinite(own) {
		return fmt.Errorf("%w: the mean of our segment overflows", ErrNonFinite)
	}
	// What we send is what we keep, so every member holds the same bytes.
	dt := FP32
	if a.cfg.DType == FP16 && roundFP16(own) {
		dt = FP16
	}
	copy(buf[lo:], own)
	seg := buf[lo : lo+len(own)]
	for j, p := range op.members {
		if j == me {
			continue
		}
		senders.Go(func() {
			defer op.sent[j].Add(1)
			if err := a.send(ctx, op.abandon, p, reduceGather, dt, op.id, len(buf), lo, seg); err != nil {
				a.log.Debug("all-reduce segment not delivered", "peer", p, "round", op.id.Round, "err", err)
			}
		})
	}
	return nil
}

// cutOff resets p's inbound stream after it sent something no correct peer
// sends.
func (a *AllReducer) cutOff(p peer.ID) {
	a.mu.Lock()
	st := a.inbound[p]
	a.mu.Unlock()
	if st != nil {
		_ = st.Reset()
	}
}

// send writes v, which starts at offset off of a buffer of total elements,
// to p as messages of at most ChunkElements, each as dt or, if fp16 would
// overflow, as fp32. It stops before the next message once stop is closed
// (a message under way is finished); ctx ending resets the stream.
func (a *AllReducer) send(ctx context.Context, stop <-chan struct{}, p peer.ID, kind byte, dt DType, id ReduceID, total, off int, v []float32) error {
	l := a.link(p)
	if l == nil {
		return ErrClosed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st, err := a.open(ctx, l, p)
	if err != nil {
		return err
	}
	// A reduction given up mid-message leaves the stream unusable: reset.
	unreset := context.AfterFunc(ctx, func() { _ = st.Reset() })
	defer func() {
		if !unreset() && l.st == st {
			l.st = nil
		}
	}()
	x := &streamIO{ctx: ctx, st: st, c: a.c, timeout: a.cfg.ChunkTimeout, lim: a.cfg.UploadLimiter}
	scratch := l.scratch
	defer func() { l.scratch = scratch }()
	for len(v) > 0 {
		select {
		case <-stop:
			return nil
		default:
		}
		c := min(len(v), a.cfg.ChunkElements)
		h := reduceHeader{kind: kind, dtype: FP32, id: id, total: uint64(total), offset: uint64(off), count: uint32(c)}
		payload := float32Bytes(v[:c])
		if dt == FP16 {
			scratch = slices.Grow(scratch[:0], 2*c)[:2*c]
			if !encodeFP16(scratch, v[:c]) {
				h.dtype, payload = FP16, scratch
			}
		}
		hb := h.marshal()
		err := x.writeAll(hb[:])
		if err == nil {
			if h.dtype == FP32 && !littleEndian {
				scratch = slices.Grow(scratch[:0], 4*c)[:4*c]
				for i, f := range v[:c] {
					binary.LittleEndian.PutUint32(scratch[4*i:], math.Float32bits(f))
				}
				payload = scratch
			}
			err = x.writeAll(payload)
		}
		if err != nil {
			_ = st.Reset()
			l.st = nil
			return fmt.Errorf("all-reduce to %s: %w", p, err)
		}
		v, off = v[c:], off+c
	}
	return nil
}

// open returns l's stream to p, opening it if need be. l.mu held.
func (a *AllReducer) open(ctx context.Context, l *reduceLink, p peer.ID) (network.Stream, error) {
	if l.st != nil {
		return l.st, nil
	}
	octx, cancel := context.WithTimeout(ctx, a.cfg.ChunkTimeout)
	st, err := a.h.NewStream(network.WithAllowLimitedConn(octx, "all-reduce"), p, AllReduceProtocolID)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("open all-reduce stream to %s: %w", p, err)
	}
	if err := st.Scope().SetService(AllReduceServiceName); err != nil {
		_ = st.Reset()
		return nil, fmt.Errorf("all-reduce stream to %s: %w", p, err)
	}
	l.st = st
	return st, nil
}

// leave tells every member op may still wait on (we have not ended both
// our sends to it) that our part of op is over, so that it fails now, not
// at its deadline. In the background, and only over connections that are
// up: a member we are not connected to has seen our streams break.
func (a *AllReducer) leave(op *reduceOp, me int) {
	for j, p := range op.members {
		if j == me || op.sent[j].Load() >= 2 || a.h.Network().Connectedness(p) != network.Connected {
			continue
		}
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return
		}
		a.wg.Add(1)
		a.mu.Unlock()
		go func() {
			defer a.wg.Done()
			a.sendLeft(p, op.id)
		}()
	}
}

// sendLeft sends p a "left" message for reduction id.
func (a *AllReducer) sendLeft(p peer.ID, id ReduceID) {
	l := a.link(p)
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(network.WithNoDial(a.ctx, "all-reduce left"), a.cfg.ChunkTimeout)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	st, err := a.open(ctx, l, p)
	if err == nil {
		x := &streamIO{ctx: ctx, st: st, c: a.c, timeout: a.cfg.ChunkTimeout}
		hb := reduceHeader{kind: reduceLeft, id: id}.marshal()
		if err = x.writeAll(hb[:]); err != nil {
			_ = st.Reset()
			l.st = nil
		}
	}
	if err != nil {
		a.log.Debug("could not tell a member we left the all-reduce", "peer", p, "round", id.Round, "err", err)
	}
}

func (a *AllReducer) link(p peer.ID) *reduceLink {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	l := a.links[p]
	if l == nil {
		l = &reduceLink{}
		a.links[p] = l
	}
	return l
}
