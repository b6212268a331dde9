package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Reason names why an input from a peer was refused. The set is small and
// fixed so it can be a Prometheus label
// (meshtrain_rejected_inputs_total{reason}) without unbounded cardinality.
// The numeric value is also the reason code on the wire (docs/protocol.md).
type Reason uint8

// Reasons, in wire-code order. Never renumber: codes travel in responses.
const (
	ReasonNone         Reason = iota // not a rejection
	ReasonBadMagic                   // "bad_magic"
	ReasonBadVersion                 // "bad_version"
	ReasonFingerprint                // "fingerprint"
	ReasonOversize                   // "oversize"
	ReasonSizeMismatch               // "size_mismatch"
	ReasonChecksum                   // "checksum"
	ReasonNonFinite                  // "non_finite"
	ReasonShortRead                  // "short_read"
	ReasonTimeout                    // "timeout"
	ReasonProtocol                   // "protocol"
	ReasonBusy                       // "busy"
	ReasonMalformed                  // "malformed"
	ReasonInconsistent               // "inconsistent"
	ReasonStale                      // "stale"
	ReasonFlood                      // "flood"
	numReasons
)

var reasonNames = [numReasons]string{
	"none", "bad_magic", "bad_version", "fingerprint", "oversize", "size_mismatch",
	"checksum", "non_finite", "short_read", "timeout", "protocol", "busy",
	"malformed", "inconsistent", "stale", "flood",
}

var reasonErrs = [numReasons]error{
	nil, ErrBadMagic, ErrBadVersion, ErrFingerprint, ErrOversize, ErrSizeMismatch,
	ErrChecksum, ErrNonFinite, ErrShortRead, ErrTimeout, ErrProtocol, ErrBusy,
	ErrMalformed, ErrInconsistent, ErrStale, ErrFlood,
}

// String is the label form, e.g. "non_finite".
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// MarshalText makes Reason a readable JSON map key.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Reasons lists every rejection reason (ReasonNone excluded), so a metrics
// exporter can publish all series from the start.
func Reasons() []Reason {
	out := make([]Reason, 0, numReasons-1)
	for r := ReasonBadMagic; r < numReasons; r++ {
		out = append(out, r)
	}
	return out
}

// ReasonOf maps an error to the reason it is counted under, or ReasonNone
// for errors that are no verdict on a peer (local errors, cancellation,
// the remote refusing us).
func ReasonOf(err error) Reason {
	if err == nil {
		return ReasonNone
	}
	for r := ReasonBadMagic; r < numReasons; r++ {
		if errors.Is(err, reasonErrs[r]) {
			return r
		}
	}
	return ReasonNone
}

// Counters are the package's atomic counters. One value may be shared by a
// Service and an Announcer (pass it in both configs) so the node exports a
// single set. Safe for concurrent use; the zero value is ready.
type Counters struct {
	rejected        [numReasons]atomic.Uint64
	bytesSent       atomic.Uint64
	bytesReceived   atomic.Uint64
	pullsServed     atomic.Uint64
	exchangesServed atomic.Uint64
	pullsDone       atomic.Uint64
	exchangesDone   atomic.Uint64
	refusedByPeer   atomic.Uint64
	announcesSent   atomic.Uint64
	announcesSeen   atomic.Uint64
	pubsubSent      atomic.Uint64
	pubsubReceived  atomic.Uint64
}

// Stats is a point-in-time copy of Counters.
type Stats struct {
	// Rejected counts refused inputs by reason; every reason is present.
	Rejected map[Reason]uint64 `json:"rejected"`
	// BytesSent and BytesReceived count parameter-exchange stream bytes,
	// headers included.
	BytesSent     uint64 `json:"bytes_sent"`
	BytesReceived uint64 `json:"bytes_received"`
	// PullsServed and ExchangesServed count inbound requests completed.
	PullsServed     uint64 `json:"pulls_served"`
	ExchangesServed uint64 `json:"exchanges_served"`
	// PullsDone and ExchangesDone count our own requests completed.
	PullsDone     uint64 `json:"pulls_done"`
	ExchangesDone uint64 `json:"exchanges_done"`
	// RefusedByPeer counts our requests a remote answered with busy,
	// unavailable or a rejection.
	RefusedByPeer uint64 `json:"refused_by_peer"`
	// AnnouncesSent counts announcements we published; AnnouncesSeen counts
	// accepted announcements from other peers.
	AnnouncesSent uint64 `json:"announces_sent"`
	AnnouncesSeen uint64 `json:"announces_seen"`
	// PubsubBytesSent and PubsubBytesReceived count the bytes of every
	// pubsub RPC queued to or read from a peer (see PubsubMeter): the
	// announce topic's traffic with gossipsub's control messages.
	PubsubBytesSent     uint64 `json:"pubsub_bytes_sent"`
	PubsubBytesReceived uint64 `json:"pubsub_bytes_received"`
}

// Reject counts one refused input.
func (c *Counters) Reject(r Reason) {
	if r > ReasonNone && r < numReasons {
		c.rejected[r].Add(1)
	}
}

// Rejected returns the count for one reason.
func (c *Counters) Rejected(r Reason) uint64 {
	if r >= numReasons {
		return 0
	}
	return c.rejected[r].Load()
}

// Snapshot copies the counters. Each field is read atomically; the set as a
// whole is not one instant, which is fine for monitoring.
func (c *Counters) Snapshot() Stats {
	s := Stats{Rejected: make(map[Reason]uint64, numReasons-1)}
	for r := ReasonBadMagic; r < numReasons; r++ {
		s.Rejected[r] = c.rejected[r].Load()
	}
	s.BytesSent = c.bytesSent.Load()
	s.BytesReceived = c.bytesReceived.Load()
	s.PullsServed = c.pullsServed.Load()
	s.ExchangesServed = c.exchangesServed.Load()
	s.PullsDone = c.pullsDone.Load()
	s.ExchangesDone = c.exchangesDone.Load()
	s.RefusedByPeer = c.refusedByPeer.Load()
	s.AnnouncesSent = c.announcesSent.Load()
	s.AnnouncesSeen = c.announcesSeen.Load()
	s.PubsubBytesSent = c.pubsubSent.Load()
	s.PubsubBytesReceived = c.pubsubReceived.Load()
	return s
}

// RejectFunc is told about every refused input with the peer it came from,
// so reputation can score peers later. It runs on the goroutine that made
// the verdict (a stream handler or a pubsub validator): it must be fast and
// must not call back into this package.
type RejectFunc func(p peer.ID, r Reason)

// logLimiter lets through at most one log line per reason per interval,
// because every line it guards can be triggered by a remote peer at will.
// Guarded by mu; shared by all goroutines of one Service or Announcer.
type logLimiter struct {
	every time.Duration

	mu         sync.Mutex
	last       [numReasons]time.Time
	suppressed [numReasons]int
}

// allow reports whether to log reason r now and how many lines for r were
// suppressed since the last one let through.
func (l *logLimiter) allow(r Reason, now time.Time) (bool, int) {
	if r >= numReasons {
		r = ReasonNone
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last[r].IsZero() && now.Sub(l.last[r]) < l.every {
		l.suppressed[r]++
		return false, 0
	}
	n := l.suppressed[r]
	l.last[r] = now
	l.suppressed[r] = 0
	return true, n
}

// rejecter counts, reports and (rate-limited) logs refused inputs.
type rejecter struct {
	counters *Counters
	onReject RejectFunc
	log      *slog.Logger
	lim      *logLimiter
}

func newRejecter(c *Counters, f RejectFunc, log *slog.Logger) *rejecter {
	return &rejecter{counters: c, onReject: f, log: log, lim: &logLimiter{every: 10 * time.Second}}
}

// reject records err from p if it is a verdict on p's input and returns
// the reason (ReasonNone otherwise).
func (rj *rejecter) reject(p peer.ID, err error) Reason {
	r := ReasonOf(err)
	if r == ReasonNone {
		return r
	}
	rj.counters.Reject(r)
	if rj.onReject != nil {
		rj.onReject(p, r)
	}
	if ok, suppressed := rj.lim.allow(r, time.Now()); ok {
		rj.log.Warn("rejected input", "peer", p, "reason", r.String(), "err", err, "suppressed", suppressed)
	}
	return r
}
