package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
)

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

func (s *Service) newIO(ctx context.Context, st network.Stream) *streamIO {
	dl, _ := ctx.Deadline()
	return &streamIO{ctx: ctx, st: st, c: s.counters, timeout: s.cfg.ChunkTimeout, deadline: dl, lim: s.cfg.UploadLimiter}
}

func (s *Service) writer(x *streamIO) FrameWriter {
	return FrameWriter{DType: s.cfg.SendDType, ChunkSize: s.cfg.ChunkSize, BeforeChunk: x.beforeWrite}
}

// reader expects want elements (0: any up to MaxElements) of our model.
func (s *Service) reader(x *streamIO, want int) FrameReader {
	return FrameReader{
		Limits:      Limits{Fingerprint: s.cfg.Fingerprint, Elements: want, MaxElements: s.cfg.MaxElements},
		Alloc:       s.cfg.Alloc,
		BeforeChunk: x.beforeRead,
	}
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
