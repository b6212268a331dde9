package gossip

import (
	"errors"
	"os"
)

// Sentinels for input a peer sent us that we refused. Each maps to exactly
// one Reason (see ReasonOf), so a rejection is counted once under a name
// that dashboards and the reputation hook can rely on.
var (
	// ErrBadMagic: the bytes do not start like a meshtrain header at all.
	ErrBadMagic = errors.New("gossip: bad magic")
	// ErrBadVersion: a meshtrain header of a wire version we do not speak.
	ErrBadVersion = errors.New("gossip: unsupported wire version")
	// ErrFingerprint: a model of another architecture, dataset or network.
	ErrFingerprint = errors.New("gossip: fingerprint mismatch")
	// ErrOversize: more elements (or announce bytes) than the configured limit.
	ErrOversize = errors.New("gossip: larger than limit")
	// ErrSizeMismatch: an element count other than the one both sides expect.
	ErrSizeMismatch = errors.New("gossip: element count mismatch")
	// ErrChecksum: the payload does not hash to the header's checksum.
	ErrChecksum = errors.New("gossip: checksum mismatch")
	// ErrNonFinite: NaN or ±Inf in parameters or progress.
	ErrNonFinite = errors.New("gossip: non-finite value")
	// ErrShortRead: the peer ended or reset the stream mid-message.
	ErrShortRead = errors.New("gossip: truncated transfer")
	// ErrTimeout: the peer stalled past a per-chunk or overall deadline.
	ErrTimeout = errors.New("gossip: peer stalled past deadline")
	// ErrProtocol: a well-formed header with fields no correct peer sends
	// (reserved bits set, unknown kind, trailing bytes, bad chunk size).
	ErrProtocol = errors.New("gossip: protocol violation")
	// ErrBusy: we refused an inbound stream because we are at capacity.
	ErrBusy = errors.New("gossip: at capacity")
	// ErrMalformed: an announcement that does not decode or has a field out
	// of range.
	ErrMalformed = errors.New("gossip: malformed announcement")
	// ErrInconsistent: an announcement that contradicts its own envelope,
	// e.g. it names a peer other than the one that signed it.
	ErrInconsistent = errors.New("gossip: self-inconsistent announcement")
	// ErrStale: an announcement too old (or too far in the future) to use.
	ErrStale = errors.New("gossip: stale announcement")
	// ErrFlood: more announcements from one peer per interval than allowed.
	ErrFlood = errors.New("gossip: announcement flood")
)

// Errors that are not a verdict on a peer's input.
var (
	// ErrBadConfig is wrapped by every Config.Validate error.
	ErrBadConfig = errors.New("gossip: bad config")
	// ErrBadSnapshot: a local snapshot we were asked to send is unusable
	// (empty, wrong fingerprint or size, invalid progress).
	ErrBadSnapshot = errors.New("gossip: bad local snapshot")
	// ErrClosed: the service or announcer has been closed.
	ErrClosed = errors.New("gossip: closed")
	// ErrPeerBusy: the remote refused us because it is at capacity.
	ErrPeerBusy = errors.New("gossip: peer busy")
	// ErrUnavailable: the remote has no snapshot to serve yet.
	ErrUnavailable = errors.New("gossip: peer has no snapshot")
	// ErrRefused: the remote refused our request or our frame; the remote's
	// reason is in the message.
	ErrRefused = errors.New("gossip: refused by peer")
	// ErrHungUp: the remote closed or reset the stream before it answered
	// at all, which an overloaded honest peer may do; not counted against it.
	ErrHungUp = errors.New("gossip: peer hung up before responding")
)

// isTimeout reports a deadline error from any transport: quic-go wraps
// os.ErrDeadlineExceeded, yamux returns a net.Error whose Timeout is true.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
