package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"golang.org/x/time/rate"

	"github.com/meshtrain/meshtrain/params"
)

// The stream plumbing of both stream protocols, the parameter exchange
// (Service) and the sync all-reduce (SyncService): admission of streams and
// of our own requests, connection-manager protection, the stream IO with its
// deadlines and the upload limiter, and shutdown. Each service embeds a
// streamBase and keeps only its protocol.

// Limiter paces uploads. *rate.Limiter satisfies it; NewUploadLimiter
// builds one. WaitN is called with n <= 64 KiB.
type Limiter interface {
	WaitN(ctx context.Context, n int) error
}

// limiterPiece is the largest write made under one WaitN, so a capped
// upload flows smoothly instead of in chunk-sized bursts.
const limiterPiece = 64 << 10

// NewUploadLimiter caps uploads at bytesPerSec (for --max-upload). Each
// frame chunk must still reach the peer within its ChunkTimeout, so caps
// below ChunkSize/ChunkTimeout (100 KiB/s with the defaults) make peers
// cut us off. Share one between the Service and the SyncService of a node
// to cap everything it sends.
func NewUploadLimiter(bytesPerSec int) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(bytesPerSec), limiterPiece)
}

// streamConfig is what the stream base needs of a service's config.
type streamConfig struct {
	Protocol protocol.ID
	// Service is the resource-manager service every stream is attributed
	// to; Tag prefixes the connection manager's protection tags.
	Service, Tag string
	// Request names the first header of an inbound stream in errors, and
	// RequestSize is its length; Streams names the streams waiting for it.
	Request, Streams string
	RequestSize      int

	Fingerprint params.Fingerprint
	MaxElements int
	SendDType   DType
	// ReadDType, if set, is the only frame type read (Limits.DType).
	ReadDType    DType
	ChunkSize    int
	ChunkTimeout time.Duration
	// InboundTimeout caps an inbound stream end to end; 0: only Close does.
	InboundTimeout time.Duration
	MaxPending     int
	UploadLimiter  Limiter
	Alloc          func(n int) []float32

	Counters *Counters
	OnReject RejectFunc
	Logger   *slog.Logger
}

// streamBase is embedded by Service and SyncService.
//
// Ownership: the handles and the config are immutable after init. mu guards
// closed and whatever the embedding service declares guarded by it, so
// that service can decide under one lock whether it is closed; pending and
// tagSeq are atomic. wg counts every stream handler and every outbound
// request, so close can wait for them.
type streamBase struct {
	h        host.Host
	sc       streamConfig
	counters *Counters
	rj       *rejecter
	log      *slog.Logger
	handler  func(in *inbound, request []byte)

	ctx    context.Context // cancelled by close: aborts attached streams and our requests
	cancel context.CancelFunc
	wg     sync.WaitGroup

	pending atomic.Int64
	tagSeq  atomic.Uint64
	// dtype is the DType our frames are encoded as: sc.SendDType until
	// the service's SetSendDType changes it.
	dtype atomic.Uint32

	mu     sync.Mutex
	closed bool
}

// init sets the base up and registers its stream handler, which reads the
// request header of each admitted inbound stream and hands it to handler.
// Call it last in the service's constructor: streams may arrive at once.
func (b *streamBase) init(h host.Host, sc streamConfig, handler func(in *inbound, request []byte)) {
	if sc.Counters == nil {
		sc.Counters = new(Counters)
	}
	if sc.Logger == nil {
		sc.Logger = slog.Default()
	}
	b.h, b.sc, b.handler = h, sc, handler
	b.dtype.Store(uint32(sc.SendDType))
	b.counters = sc.Counters
	b.log = sc.Logger.With("component", "gossip", "protocol", string(sc.Protocol))
	b.rj = newRejecter(sc.Counters, sc.OnReject, b.log)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	h.SetStreamHandler(sc.Protocol, b.accept)
}

// close stops accepting streams, aborts every attached stream and our own
// requests, and waits for their goroutines. stop, if set, runs once under
// mu as the base becomes closed. Safe to call more than once.
func (b *streamBase) close(stop func()) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	if stop != nil {
		stop()
	}
	b.mu.Unlock()
	b.h.RemoveStreamHandler(b.sc.Protocol)
	b.cancel()
	b.wg.Wait()
}

func (b *streamBase) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// enter registers a goroutine with wg unless the base is closed; exit ends
// it.
func (b *streamBase) enter() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	return true
}

func (b *streamBase) exit() { b.wg.Done() }

// protect keeps the connection manager from trimming p's connection while a
// stream is open; each stream has its own tag so overlapping ones do not
// unprotect each other.
func (b *streamBase) protect(p peer.ID) func() {
	cm := b.h.ConnManager()
	if cm == nil {
		return func() {}
	}
	tag := fmt.Sprintf("%s-%d", b.sc.Tag, b.tagSeq.Add(1))
	cm.Protect(p, tag)
	return func() { cm.Unprotect(p, tag) }
}

func (b *streamBase) newIO(ctx context.Context, st network.Stream) *streamIO {
	dl, _ := ctx.Deadline()
	return &streamIO{ctx: ctx, st: st, c: b.counters, timeout: b.sc.ChunkTimeout, deadline: dl, lim: b.sc.UploadLimiter}
}

// encoder encodes our frames; writer sends them on x.
func (b *streamBase) encoder() FrameWriter {
	return FrameWriter{DType: DType(b.dtype.Load()), ChunkSize: b.sc.ChunkSize}
}

func (b *streamBase) writer(x *streamIO) FrameWriter {
	w := b.encoder()
	w.BeforeChunk = x.beforeWrite
	return w
}

// reader expects want elements (0: any up to MaxElements) of our model.
func (b *streamBase) reader(x *streamIO, want int) FrameReader {
	return FrameReader{
		Limits:      Limits{Fingerprint: b.sc.Fingerprint, Elements: want, MaxElements: b.sc.MaxElements, DType: b.sc.ReadDType},
		Alloc:       b.sc.Alloc,
		BeforeChunk: x.beforeRead,
	}
}

// dial opens a stream to p for one request of ours, named what in errors.
// openTimeout, if > 0, bounds opening it. The stream is reset when ctx ends
// or the base closes, and p's connection is protected while it is open. The
// caller must call end once it has closed or reset the stream (see fail).
func (b *streamBase) dial(ctx context.Context, p peer.ID, what string, openTimeout time.Duration) (
	sctx context.Context, x *streamIO, end func(), err error) {
	if !b.enter() {
		return nil, nil, nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stopClose := context.AfterFunc(b.ctx, cancel)
	unprotect := b.protect(p)
	stopReset := func() bool { return false }
	end = func() {
		stopReset()
		unprotect()
		stopClose()
		cancel()
		b.exit()
	}
	octx, ocancel := ctx, context.CancelFunc(func() {})
	if openTimeout > 0 {
		octx, ocancel = context.WithTimeout(ctx, openTimeout)
	}
	st, err := b.h.NewStream(octx, p, b.sc.Protocol)
	ocancel()
	if err != nil {
		end()
		return nil, nil, nil, fmt.Errorf("gossip: %s with %s: open stream: %w", what, p, err)
	}
	stopReset = context.AfterFunc(ctx, func() { _ = st.Reset() })
	if err := st.Scope().SetService(b.sc.Service); err != nil {
		_ = st.Reset()
		end()
		return nil, nil, nil, fmt.Errorf("gossip: %s with %s: resource manager: %w", what, p, err)
	}
	return ctx, b.newIO(ctx, st), end, nil
}

// fail resets a stream of ours that went wrong, counts the failure against
// p if it is a verdict on p's input (our own cancellation is not; see
// streamErr) and returns it, named what.
func (b *streamBase) fail(ctx context.Context, x *streamIO, p peer.ID, what string, err error) error {
	_ = x.st.Reset()
	err = streamErr(ctx, err)
	b.rj.reject(p, err)
	return fmt.Errorf("gossip: %s with %s: %w", what, p, err)
}

// inbound is one admitted inbound stream, owned by its handler goroutine.
type inbound struct {
	// start is when the stream arrived: the peer's snapshot was taken
	// about then, so its age grows by the time since.
	start time.Time
	st    network.Stream
	x     *streamIO
	p     peer.ID
	ctx   context.Context // ends with close or the InboundTimeout
	// stop ends the stream's attachment to ctx.
	stop func() bool
}

// detach stops close (and the InboundTimeout) from resetting the stream,
// and from cutting the upload limiter's waits short: for a stream with only
// answers left to write, which close then lets finish within the chunk
// deadlines. It reports false if the reset came first.
func (in *inbound) detach() bool {
	if !in.stop() {
		return false
	}
	in.x.ctx = context.WithoutCancel(in.x.ctx)
	return true
}

// abort resets an inbound stream and counts err against its peer.
func (b *streamBase) abort(in *inbound, err error) {
	_ = in.st.Reset()
	b.rj.reject(in.p, streamErr(in.ctx, err))
}

// accept serves one inbound stream: admission among the pending streams,
// the request header within the chunk timeout, then the service's handler.
func (b *streamBase) accept(st network.Stream) {
	if !b.enter() {
		_ = st.Reset()
		return
	}
	defer b.exit()
	donePending, ok := admitStream(&b.pending, b.sc.MaxPending, st, b.sc.Service, b.rj, b.sc.Streams)
	if !ok {
		return
	}
	defer donePending()
	ctx, cancel := b.ctx, context.CancelFunc(func() {})
	if b.sc.InboundTimeout > 0 {
		ctx, cancel = context.WithTimeout(b.ctx, b.sc.InboundTimeout)
	}
	defer cancel()
	in := &inbound{start: time.Now(), st: st, p: st.Conn().RemotePeer(), ctx: ctx}
	in.stop = context.AfterFunc(ctx, func() { _ = st.Reset() })
	defer in.stop()
	in.x = b.newIO(ctx, st)
	q := make([]byte, b.sc.RequestSize)
	err := in.x.readFull(q)
	donePending()
	if err != nil {
		b.abort(in, fmt.Errorf("read %s: %w", b.sc.Request, err))
		return
	}
	b.handler(in, q)
}

// admitStream counts an inbound stream among those that have not said what
// they want yet, bounded by max: each costs a goroutine for up to a chunk
// timeout, which is what a stalling peer is after. It attributes the stream
// to service in the resource manager. On refusal it resets the stream and
// counts the rejection; otherwise done (idempotent) ends the pending state.
func admitStream(pending *atomic.Int64, max int, st network.Stream, service string, rj *rejecter, what string) (done func(), ok bool) {
	p := st.Conn().RemotePeer()
	if n := pending.Add(1); n > int64(max) {
		pending.Add(-1)
		_ = st.Reset()
		rj.reject(p, fmt.Errorf("%w: %d %s already waiting for their request", ErrBusy, max, what))
		return nil, false
	}
	var once sync.Once
	done = func() { once.Do(func() { pending.Add(-1) }) }
	if err := st.Scope().SetService(service); err != nil {
		done()
		_ = st.Reset()
		rj.reject(p, fmt.Errorf("%w: resource manager: %w", ErrBusy, err))
		return nil, false
	}
	return done, true
}

// streamIO is the thin shell between the codec and one libp2p stream: it
// renews deadlines before every header and chunk, paces uploads, counts
// bytes and turns transport errors into the package's reasons. Owned by
// the one goroutine running the stream.
type streamIO struct {
	ctx      context.Context
	st       network.Stream
	c        *Counters
	timeout  time.Duration // per header or chunk
	deadline time.Time     // overall (from ctx); zero if none
	lim      Limiter
}

// next is the deadline for the next header or chunk: ChunkTimeout from
// now, or the overall deadline if that comes first.
func (x *streamIO) next() time.Time {
	d := time.Now().Add(x.timeout)
	if !x.deadline.IsZero() && x.deadline.Before(d) {
		d = x.deadline
	}
	return d
}

func (x *streamIO) beforeRead(int) error { return x.st.SetReadDeadline(x.next()) }

func (x *streamIO) beforeWrite(int) error { return x.st.SetWriteDeadline(x.next()) }

// Read counts bytes and reports a reset mid-message as a short read.
func (x *streamIO) Read(p []byte) (int, error) {
	n, err := x.st.Read(p)
	x.c.bytesReceived.Add(uint64(n))
	if err != nil && errors.Is(err, network.ErrReset) {
		err = fmt.Errorf("%w: %w", ErrShortRead, err)
	}
	return n, err
}

// Write counts bytes, paces them through the upload limiter and reports a
// write deadline as a stall of the peer (it stopped reading). A reset is
// passed through: the peer hung up, which is its right.
func (x *streamIO) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		k := len(p)
		if x.lim != nil {
			k = min(k, limiterPiece)
			if err := x.lim.WaitN(x.ctx, k); err != nil {
				return written, fmt.Errorf("upload limiter: %w", err)
			}
			// Waiting for tokens is our doing, not the peer's: renew.
			if err := x.st.SetWriteDeadline(x.next()); err != nil {
				return written, err
			}
		}
		n, err := x.st.Write(p[:k])
		written += n
		x.c.bytesSent.Add(uint64(n))
		if err != nil {
			if isTimeout(err) {
				err = fmt.Errorf("%w: %w", ErrTimeout, err)
			}
			return written, err
		}
		p = p[k:]
	}
	return written, nil
}

func (x *streamIO) readFull(p []byte) error {
	if err := x.beforeRead(len(p)); err != nil {
		return err
	}
	_, err := io.ReadFull(x, p)
	return readError(err)
}

func (x *streamIO) writeAll(p []byte) error {
	if err := x.beforeWrite(len(p)); err != nil {
		return err
	}
	_, err := x.Write(p)
	return err
}

func (x *streamIO) respond(r Response) error {
	b := r.Marshal()
	if err := x.writeAll(b[:]); err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	return nil
}

// readResponse reads the responder's answer and turns a refusal into an
// error. first marks the answer to the request itself: a peer that hangs
// up before it says anything there is treated as overloaded, not hostile.
func (x *streamIO) readResponse(first bool) error {
	var b [ResponseSize]byte
	if err := x.beforeRead(len(b)); err != nil {
		return err
	}
	n, err := io.ReadFull(x, b[:])
	if err != nil {
		if first && n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, ErrShortRead)) {
			return fmt.Errorf("%w: %v", ErrHungUp, err)
		}
		return fmt.Errorf("read response: %w", readError(err))
	}
	r, err := ParseResponse(b[:])
	if err != nil {
		return err
	}
	switch r.Status {
	case StatusOK:
		return nil
	case StatusBusy:
		return ErrPeerBusy
	case StatusUnavailable:
		return ErrUnavailable
	}
	return fmt.Errorf("%w: %s", ErrRefused, r.Reason)
}

// expectEOF checks that the peer has closed its side: one more byte would
// be a protocol violation.
func (x *streamIO) expectEOF() error {
	if err := x.beforeRead(1); err != nil {
		return err
	}
	var b [1]byte
	_, err := io.ReadFull(x, b[:])
	switch {
	case err == nil:
		return fmt.Errorf("%w: bytes after the end of the message", ErrProtocol)
	case errors.Is(err, io.EOF):
		return nil
	}
	return readError(err)
}

// streamErr attributes a failure once the stream's context is involved:
// our own cancellation (Close, the caller giving up) is no verdict on the
// peer, so the peer's reason is dropped from the chain; an overall
// deadline passing is the peer being too slow.
func streamErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	switch ctx.Err() {
	case nil:
		return err
	case context.DeadlineExceeded:
		if ReasonOf(err) == ReasonTimeout {
			return err
		}
		return fmt.Errorf("%w: overall deadline passed: %v", ErrTimeout, err)
	}
	return fmt.Errorf("%w: %v", ctx.Err(), err)
}
