package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unsafe"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/meshtrain/meshtrain/params"
)

// ProtocolID is the parameter exchange protocol. 2.1.0 added int8 frames
// and the request's precision (byte 6), which 2.0.0 nodes refuse.
const ProtocolID protocol.ID = "/meshtrain/params/2.1.0"

// ServiceName is the resource-manager service every exchange stream is
// attributed to, so limits can be set for it (see ProtocolLimits).
const ServiceName = "meshtrain.params"

// SnapshotFunc hands the service the node's latest frozen snapshot, or
// false if there is none yet. It must be cheap and must not block on the
// trainer: serving a peer copies nothing more than what it returns, and
// never writes to it. The service keeps the last snapshot it encoded (so
// its vector stays alive) until it encodes another.
type SnapshotFunc func() (params.Snapshot, bool)

// ReceiveFunc is given the initiator's snapshot after an inbound exchange
// completed, so the node can merge it too. It runs on the stream handler
// goroutine; Close waits for it. It should hand the snapshot off without
// blocking (dropping it if the merger is behind) and return: the inbound
// slot is already free, so the handoff is what bounds the snapshots
// waiting to be merged.
type ReceiveFunc func(p peer.ID, s params.Snapshot)

// Config tunes a Service. Durations are wall-clock; sizes are elements or
// bytes as named.
type Config struct {
	// Fingerprint of the model this node trains. Required: every frame,
	// inbound or outbound, must carry it.
	Fingerprint params.Fingerprint
	// Elements is the exact parameter count of that model, or 0 if not
	// known (then only MaxElements bounds a frame).
	Elements int
	// MaxElements caps any frame we read, in elements (4 bytes each as
	// fp32). Default 1<<26 (256 MiB as fp32).
	MaxElements int
	// SendDType is how we encode the frames we send: FP32 (default, exact),
	// FP16 (half the bytes, about 3 significant digits) or INT8 (a quarter
	// of the bytes, each value within 1/254 of its block's largest).
	SendDType DType
	// ChunkSize is the payload unit we send, in bytes. Default 1 MiB.
	ChunkSize int
	// ChunkTimeout is how long a peer may take to move one chunk (or one
	// header) before it is cut off and counted as "timeout". It also sets
	// the lowest throughput we tolerate: ChunkSize/ChunkTimeout. Default 10s.
	ChunkTimeout time.Duration
	// ExchangeTimeout caps one inbound request end to end. Our own requests
	// are bounded by the caller's context instead. Default 5 minutes.
	ExchangeTimeout time.Duration
	// MaxInbound is how many inbound transfers run at once (each holds up
	// to MaxElements*4 bytes); more are answered "busy". A peer may hold
	// one at a time. Default 2.
	MaxInbound int
	// MaxPending is how many inbound streams may wait for their request
	// header (at most ChunkTimeout each); more are reset and counted as
	// "busy". Default 16.
	MaxPending int
	// UploadLimiter, if set, paces every byte we send. Give the node's
	// SyncService the same one (Service.UploadLimiter) to cap both
	// protocols together.
	UploadLimiter Limiter
	// Alloc, if set, supplies the vector for every snapshot we receive (see
	// FrameReader.Alloc): a node that recycles vectors after merging saves
	// faulting in a model's worth of fresh memory per transfer.
	Alloc func(n int) []float32
	// OnReceive, if set, gets the initiator's snapshot of each completed
	// inbound exchange.
	OnReceive ReceiveFunc
	// OnReject, if set, hears about every refused input.
	OnReject RejectFunc
	// testHooks is empty in a release build. The testhooks build (make
	// build-testhooks) adds Tamper, which rewrites every frame we send, for
	// test nodes that play a hostile peer; see adversary.go.
	//lint:ignore U1000 empty in a release build; the testhooks build fills it
	testHooks
	// Counters to count into; a new set if nil. Share one with the
	// Announcer to export a single set.
	Counters *Counters
	// Logger; slog.Default() if nil. The service adds component=gossip.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults documented on Config; the caller sets
// Fingerprint and usually Elements.
func DefaultConfig() Config {
	return Config{
		MaxElements:     1 << 26,
		SendDType:       FP32,
		ChunkSize:       DefaultChunkSize,
		ChunkTimeout:    10 * time.Second,
		ExchangeTimeout: 5 * time.Minute,
		MaxInbound:      2,
		MaxPending:      16,
	}
}

// Validate reports every bad field at once.
func (c Config) Validate() error {
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
	if c.SendDType.Size() == 0 {
		bad("SendDType %d is not FP32, FP16 or INT8", c.SendDType)
	}
	if !validChunkSize(int64(c.ChunkSize)) {
		bad("ChunkSize %d not a multiple of 4 in [%d, %d]", c.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	if c.ChunkTimeout <= 0 {
		bad("ChunkTimeout %v not positive", c.ChunkTimeout)
	}
	if c.ExchangeTimeout < c.ChunkTimeout {
		bad("ExchangeTimeout %v shorter than ChunkTimeout %v", c.ExchangeTimeout, c.ChunkTimeout)
	}
	if c.MaxInbound < 1 {
		bad("MaxInbound %d < 1", c.MaxInbound)
	}
	if c.MaxPending < 1 {
		bad("MaxPending %d < 1", c.MaxPending)
	}
	return errors.Join(errs...)
}

// Service serves and makes parameter exchanges on one host.
//
// Ownership: cfg and the handles are immutable after NewService. The
// stream base's mu guards active and activeBy (and the base's closed);
// cacheMu guards the last encoded frame. The base (stream.go) owns the
// streams' lifecycle.
type Service struct {
	streamBase
	cfg      Config
	snapshot SnapshotFunc

	active   int             // guarded by mu
	activeBy map[peer.ID]int // guarded by mu

	// cacheMu guards the last encoded frame of each dtype (indexed by it),
	// so that peers asking for different precisions do not make us
	// encode the same snapshot again at every request.
	cacheMu   sync.Mutex
	cached    [numDTypes]*Frame
	cachedKey [numDTypes]frameKey
}

// NewService validates cfg and registers the protocol handler on h.
func NewService(h host.Host, cfg Config, snapshot SnapshotFunc) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if snapshot == nil {
		return nil, fmt.Errorf("%w: nil SnapshotFunc", ErrBadConfig)
	}
	s := &Service{cfg: cfg, snapshot: snapshot, activeBy: make(map[peer.ID]int)}
	s.init(h, streamConfig{
		Protocol: ProtocolID, Service: ServiceName, Tag: "meshtrain-params",
		Request: "request", Streams: "streams", RequestSize: RequestSize,
		Fingerprint: cfg.Fingerprint, MaxElements: cfg.MaxElements, SendDType: cfg.SendDType,
		ChunkSize: cfg.ChunkSize, ChunkTimeout: cfg.ChunkTimeout, InboundTimeout: cfg.ExchangeTimeout,
		MaxPending: cfg.MaxPending, UploadLimiter: cfg.UploadLimiter, Alloc: cfg.Alloc,
		Counters: cfg.Counters, OnReject: cfg.OnReject, Logger: cfg.Logger,
	}, s.handle)
	return s, nil
}

// Counters returns the counters the service counts into.
func (s *Service) Counters() *Counters { return s.counters }

// SetSendDType changes how the frames we send from now on are encoded,
// those we serve as responder included (Config.SendDType at the start).
// Safe for concurrent use; a transfer under way keeps its frame.
func (s *Service) SetSendDType(d DType) error {
	if d.Size() == 0 {
		return fmt.Errorf("%w: dtype %d", ErrBadConfig, d)
	}
	s.dtype.Store(uint32(d))
	return nil
}

// SendDType is how the frames we send are encoded now.
func (s *Service) SendDType() DType { return DType(s.dtype.Load()) }

// Stats is s.Counters().Snapshot().
func (s *Service) Stats() Stats { return s.counters.Snapshot() }

// UploadLimiter returns the limiter the service paces its uploads with
// (nil if none), so the node's SyncService can share it.
func (s *Service) UploadLimiter() Limiter { return s.cfg.UploadLimiter }

// Close stops accepting streams, aborts those in flight and waits for
// their goroutines. Safe to call more than once.
func (s *Service) Close() error {
	s.close(nil)
	return nil
}

// acquire takes an inbound transfer slot for p, if one is free.
func (s *Service) acquire(p peer.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active >= s.cfg.MaxInbound || s.activeBy[p] > 0 {
		return false
	}
	s.active++
	s.activeBy[p]++
	return true
}

func (s *Service) release(p peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.activeBy[p]--; s.activeBy[p] <= 0 {
		delete(s.activeBy, p)
	}
}

// Pull fetches p's current snapshot.
func (s *Service) Pull(ctx context.Context, p peer.ID) (params.Snapshot, error) {
	// The pulled model replaces ours (a catch-up): asked as fp16 at least.
	remote, _, err := s.request(ctx, p, KindPull, s.SendDType().Reduced(), nil)
	return remote, err
}

// Exchange sends local to p and returns p's snapshot: each side then
// computes its own merge weight. local must carry the service's
// fingerprint (and Elements, if set).
func (s *Service) Exchange(ctx context.Context, p peer.ID, local params.Snapshot) (params.Snapshot, error) {
	remote, _, err := s.ExchangeTimed(ctx, p, local)
	return remote, err
}

// Timing is how long the parts of a successful exchange took.
type Timing struct {
	// Answer is from the request's departure (on an open stream) to the
	// responder's answer: about one round trip of the path, plus the
	// responder's time to take it up. Our frame is on its way meanwhile,
	// so Total less Answer is about the time the frames take to cross.
	Answer time.Duration
	// Total is the whole exchange, from opening the stream.
	Total time.Duration
}

// ExchangeTimed is Exchange, and says how long its parts took.
func (s *Service) ExchangeTimed(ctx context.Context, p peer.ID, local params.Snapshot) (params.Snapshot, Timing, error) {
	dt := s.SendDType()
	f, err := s.encode(local, dt)
	if err != nil {
		return params.Snapshot{}, Timing{}, err
	}
	return s.request(ctx, p, KindExchange, dt, f)
}

// encode checks a local snapshot against the service and prepares its
// frame, before any stream is opened or any answer promised. The last
// frame is kept: a frozen snapshot is usually sent several times (to each
// peer that pulls it, and in our own exchanges), and without the cache
// every request, a hostile one included, would cost a pass over the model.
func (s *Service) encode(local params.Snapshot, dt DType) (*Frame, error) {
	if err := s.checkLocal(local); err != nil {
		return nil, err
	}
	w := s.encoder()
	w.DType = dt
	key := frameKey{data: unsafe.SliceData(local.Params), n: len(local.Params), step: local.Step, progress: local.Progress}
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if c := s.cached[dt]; c != nil && s.cachedKey[dt] == key {
		return c, nil
	}
	f, err := w.Encode(local)
	if err != nil {
		return nil, err
	}
	f = s.rewrite(f)
	s.cached[dt], s.cachedKey[dt] = f, key
	return f, nil
}

// frameKey identifies a snapshot by its vector's memory and metadata.
// Snapshots are immutable once taken (params.Snapshot), and the cached
// frame references the vector, so no other vector can occupy that memory
// while the key is held.
type frameKey struct {
	data     *float32
	n        int
	step     int64
	progress params.Progress
}

func (s *Service) checkLocal(local params.Snapshot) error {
	switch {
	case local.Fingerprint != s.cfg.Fingerprint:
		return fmt.Errorf("%w: fingerprint %s, service is for %s", ErrBadSnapshot, local.Fingerprint.Short(), s.cfg.Fingerprint.Short())
	case len(local.Params) == 0 || len(local.Params) > s.cfg.MaxElements:
		return fmt.Errorf("%w: %d parameters", ErrBadSnapshot, len(local.Params))
	case s.cfg.Elements > 0 && len(local.Params) != s.cfg.Elements:
		return fmt.Errorf("%w: %d parameters, service expects %d", ErrBadSnapshot, len(local.Params), s.cfg.Elements)
	}
	return nil
}

// request runs the initiator's side of one stream:
//
//	pull:     -> request, CloseWrite; <- response, frame, EOF
//	exchange: -> request, frame, CloseWrite;
//	          <- response, frame, response, EOF
//
// Each side writes only while the other reads, so neither can deadlock on
// flow control. An exchange's frame follows its request without waiting
// for the answer, so the two frames cross one round trip sooner; a
// refusal stops it (the responder closes its reading side, and we reset
// the stream once we have read the refusal).
func (s *Service) request(ctx context.Context, p peer.ID, kind RequestKind, dt DType, local *Frame) (params.Snapshot, Timing, error) {
	start := time.Now()
	ctx, x, end, err := s.dial(ctx, p, kind.String(), 0)
	if err != nil {
		return params.Snapshot{}, Timing{}, err
	}
	defer end()
	remote, answer, err := s.converse(x, x.st, kind, dt, local)
	if err != nil {
		err = s.fail(ctx, x, p, kind.String(), err)
		if errors.Is(err, ErrPeerBusy) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRefused) {
			s.counters.refusedByPeer.Add(1)
		}
		return params.Snapshot{}, Timing{}, err
	}
	_ = x.st.Close()
	// The peer took its snapshot after our request reached it; counting
	// the whole exchange errs on the old side.
	total := time.Since(start)
	remote.Age += total
	if kind == KindPull {
		s.counters.pullsDone.Add(1)
	} else {
		s.counters.exchangesDone.Add(1)
	}
	return remote, Timing{Answer: answer, Total: total}, nil
}

// converse runs the request on an open stream and returns the remote
// snapshot and how long the answer to the request took.
func (s *Service) converse(x *streamIO, st network.Stream, kind RequestKind, dt DType, local *Frame) (params.Snapshot, time.Duration, error) {
	q := Request{Kind: kind, Fingerprint: s.cfg.Fingerprint, Elements: uint64(s.cfg.Elements), DType: dt}
	want := s.cfg.Elements
	if kind == KindExchange {
		q.Elements = local.Header.Elements
		want = int(q.Elements)
	}
	qb := q.Marshal()
	sentAt := time.Now()
	if err := x.writeAll(qb[:]); err != nil {
		return params.Snapshot{}, 0, fmt.Errorf("write request: %w", err)
	}
	// Ending our side cannot fail in a way the response would not show:
	// a responder that answers and closes at once (as a refusal does) has,
	// on QUIC, also stopped our sending by then, so CloseWrite fails with
	// the answer waiting to be read; a broken stream fails the read too.
	if kind == KindPull {
		_ = st.CloseWrite()
		if err := x.readResponse(true); err != nil {
			return params.Snapshot{}, 0, err
		}
		answer := time.Since(sentAt)
		remote, err := s.reader(x, want).ReadFrame(x)
		if err != nil {
			return params.Snapshot{}, 0, err
		}
		return remote, answer, x.expectEOF()
	}
	// Our frame goes out on its own goroutine, right behind the request,
	// while we read the answer and the responder's frame: the frames
	// cross, so an exchange costs one transfer and one round trip. On a
	// refusal the reset below stops the writer; what it sent by then is
	// what the responder discards.
	sent := make(chan error, 1)
	go func() {
		err := s.writer(x).Send(x, local)
		if err == nil {
			_ = st.CloseWrite() // as above: a refusal of the frame may be waiting
		}
		sent <- err
	}()
	err := x.readResponse(true)
	answer := time.Since(sentAt)
	var remote params.Snapshot
	if err == nil {
		remote, err = s.reader(x, want).ReadFrame(x)
	}
	if err == nil {
		// The responder's verdict on our frame follows its own.
		err = x.readResponse(false)
	}
	if err == nil {
		err = x.expectEOF()
	}
	if err != nil {
		_ = st.Reset() // stops our writer if it is still sending
		<-sent
		return params.Snapshot{}, 0, err
	}
	if err := <-sent; err != nil {
		return params.Snapshot{}, 0, err
	}
	return remote, answer, nil
}

// handle serves one inbound stream once its request header has arrived
// (streamBase.accept); the stream is reset when the ExchangeTimeout passes.
func (s *Service) handle(in *inbound, qb []byte) {
	st, x, p, ctx := in.st, in.x, in.p, in.ctx
	q, err := ParseRequest(qb)
	if err != nil {
		s.abort(in, fmt.Errorf("read request: %w", err))
		return
	}
	local, resp, err := s.admit(p, q)
	if resp.Status != StatusOK {
		if x.respond(resp) == nil && st.CloseWrite() == nil {
			_ = st.Close()
		} else {
			_ = st.Reset()
		}
		s.rj.reject(p, err)
		return
	}
	held := true
	release := func() {
		if held {
			held = false
			s.release(p)
		}
	}
	defer release()
	defer s.protect(p)()

	remote, graceful, err := s.serve(x, st, q, local, release)
	if err != nil {
		// The transfer is over: free the slot before the refusal is
		// counted, so whoever sees the count can start the next one.
		release()
		if graceful {
			_ = st.Close()
		} else {
			_ = st.Reset()
		}
		s.rj.reject(p, streamErr(ctx, err))
		return
	}
	_ = st.Close()
	if q.Kind == KindPull {
		s.counters.pullsServed.Add(1)
		return
	}
	s.counters.exchangesServed.Add(1)
	remote.Age += time.Since(in.start)
	if s.cfg.OnReceive != nil {
		s.cfg.OnReceive(p, remote)
	}
}

// admit decides on a request before any payload moves and picks the
// snapshot to send. On StatusOK it holds an inbound slot for p that the
// caller must release. The error, if any, is what the refusal is counted
// as (nil: not the peer's fault).
func (s *Service) admit(p peer.ID, q Request) (*Frame, Response, error) {
	if q.Fingerprint != s.cfg.Fingerprint {
		return nil, Response{Status: StatusRejected, Reason: ReasonFingerprint},
			fmt.Errorf("%w: request for %s", ErrFingerprint, q.Fingerprint.Short())
	}
	if q.Elements > uint64(s.cfg.MaxElements) {
		return nil, Response{Status: StatusRejected, Reason: ReasonOversize},
			fmt.Errorf("%w: request for %d elements", ErrOversize, q.Elements)
	}
	if q.Elements != 0 && s.cfg.Elements != 0 && q.Elements != uint64(s.cfg.Elements) {
		return nil, Response{Status: StatusRejected, Reason: ReasonSizeMismatch},
			fmt.Errorf("%w: request for %d elements, we have %d", ErrSizeMismatch, q.Elements, s.cfg.Elements)
	}
	if !s.acquire(p) {
		return nil, Response{Status: StatusBusy}, fmt.Errorf("%w: %d inbound transfers running", ErrBusy, s.cfg.MaxInbound)
	}
	// Encoded before answering, so a snapshot we cannot send (none yet, or
	// a diverged model) is refused up front instead of cut off mid-frame.
	var local *Frame
	snap, ok := s.snapshot()
	if ok {
		var err error
		// The initiator's precision, so an exchange is alike both ways;
		// but never more bytes than we send on our own.
		dt := s.SendDType()
		if q.DType != 0 && q.DType.Size() <= dt.Size() {
			dt = q.DType
		}
		if local, err = s.encode(snap, dt); err != nil {
			s.log.Error("cannot serve the current snapshot", "err", err)
			ok = false
		}
	}
	if !ok {
		s.release(p)
		return nil, Response{Status: StatusUnavailable}, nil
	}
	// A hostile test peer answers anyway, as a real attacker would, so the
	// honest side is the one that refuses the frame.
	if q.Elements != 0 && q.Elements != local.Header.Elements && !s.hostile() {
		s.release(p)
		return nil, Response{Status: StatusRejected, Reason: ReasonSizeMismatch},
			fmt.Errorf("%w: request for %d elements, we have %d", ErrSizeMismatch, q.Elements, local.Header.Elements)
	}
	return local, Response{Status: StatusOK}, nil
}

// serve runs the responder's side after admission. graceful reports that
// the peer has been told why its frame was refused, so the stream should
// be closed rather than reset (a reset could discard that answer).
//
// release frees the inbound slot; serve calls it after the last payload
// byte and before the end of stream, so the peer cannot see the end of
// one transfer and start its next before the slot is free again (which
// would make it look busy to itself).
func (s *Service) serve(x *streamIO, st network.Stream, q Request, local *Frame, release func()) (remote params.Snapshot, graceful bool, err error) {
	if err := x.respond(Response{Status: StatusOK}); err != nil {
		return params.Snapshot{}, false, err
	}
	if q.Kind == KindPull {
		if err := s.writer(x).Send(x, local); err != nil {
			return params.Snapshot{}, false, err
		}
		release()
		if err := st.CloseWrite(); err != nil {
			return params.Snapshot{}, false, fmt.Errorf("close write: %w", err)
		}
		// The initiator closed its side after the request; anything more
		// is a protocol violation.
		if err := x.expectEOF(); err != nil {
			return params.Snapshot{}, false, err
		}
		return params.Snapshot{}, false, nil
	}
	// Exchange: our frame goes out on its own goroutine while we read the
	// initiator's; the verdict on theirs follows our frame, so the writer
	// waits for it.
	verdict := make(chan Response, 1)
	sent := make(chan error, 1)
	go func() {
		if err := s.writer(x).Send(x, local); err != nil {
			sent <- err
			return
		}
		r, ok := <-verdict
		if !ok {
			sent <- errAborted
			return
		}
		sent <- x.respond(r)
	}()
	want := int(local.Header.Elements)
	if s.hostile() && s.cfg.Elements != 0 {
		want = s.cfg.Elements // a hostile peer still reads honest frames
	}
	remote, err = s.reader(x, want).ReadFrame(x)
	if err == nil {
		err = x.expectEOF()
	}
	if err != nil {
		// A frame that arrived whole but is bad gets an answer: the peer
		// has finished writing and waits for one. Anything else may leave
		// the peer mid-write, so it gets a reset.
		if r := ReasonOf(err); r == ReasonChecksum || r == ReasonNonFinite {
			verdict <- Response{Status: StatusRejected, Reason: r}
			ok := <-sent == nil && st.CloseWrite() == nil
			return params.Snapshot{}, ok, err
		}
		close(verdict)
		_ = st.Reset() // stops our writer if it is still sending
		<-sent
		return params.Snapshot{}, false, err
	}
	verdict <- Response{Status: StatusOK}
	if err := <-sent; err != nil {
		return params.Snapshot{}, false, err
	}
	release()
	if err := st.CloseWrite(); err != nil {
		return params.Snapshot{}, false, fmt.Errorf("close write: %w", err)
	}
	return remote, false, nil
}

// errAborted: our writer stopped because the exchange failed on the read
// side (that failure is the one reported).
var errAborted = errors.New("gossip: exchange aborted")
