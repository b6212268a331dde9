package gossip

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshtrain/meshtrain/params"
)

// The announce message and the pure logic around it: encoding, validation
// verdicts and the table of fresh peers. The pubsub shell is in
// announcer.go.
//
// Announcements are JSON. They are small (a few hundred bytes), sent every
// few seconds, and read by people debugging a mesh as often as by code:
// JSON is self-describing, extensible (decoders ignore unknown fields, so
// a newer peer may add one without a new topic) and cannot even express
// NaN or Inf, so a non-finite number arrives as a malformed message. A
// compact binary form would save bytes nobody is short of.

// MaxAnnounceSize bounds an encoded announcement. An honest peer stays far
// below (the encoder caps addresses); pubsub itself would allow 1 MiB.
const MaxAnnounceSize = 4 << 10

// Limits on announcement fields, so MaxAnnounceSize always has room.
const (
	maxAnnounceAddrs = 16
	// maxIntervalMs bounds IntervalMs: an hour.
	maxIntervalMs = 3600 * 1000
	maxAddrLen    = 256
)

var modePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// Announcement is what a peer tells the mesh about itself.
type Announcement struct {
	// Peer must be the peer that signed the pubsub message.
	Peer        peer.ID            `json:"peer"`
	Fingerprint params.Fingerprint `json:"fingerprint"`
	Step        int64              `json:"step"`
	// Progress is params.Progress: samples the model embodies.
	Progress float64 `json:"progress"`
	// Loss is the latest training loss, 0 if not known yet.
	Loss float64 `json:"loss"`
	// Accuracy is the latest evaluated accuracy in [0, 1], 0 if not known.
	Accuracy      float64 `json:"accuracy"`
	SamplesPerSec float64 `json:"samples_per_s"`
	// Samples is how many training samples the peer has processed in this
	// run, and RunSamples its estimate of the run clock: every node's
	// samples added up (see node's run clock). 0 from peers that do not
	// count them.
	Samples    float64 `json:"samples,omitempty"`
	RunSamples float64 `json:"run_samples,omitempty"`
	// AgeS is the age of the peer's model (params.Snapshot.Age) at TimeMs,
	// in seconds: how long since it last took in a peer's model.
	AgeS float64 `json:"age_s,omitempty"`
	// IntervalMs is the sender's current wait between its announcements,
	// in milliseconds (it grows with the swarm: see
	// AnnounceConfig.TopicRate). A receiver keeps the sender fresh for
	// three such intervals, and at least its own FreshWindow. 0, from
	// peers that do not say: the receiver's FreshWindow alone.
	IntervalMs int64 `json:"interval_ms,omitempty"`
	// Addrs are listen multiaddrs, at most 16.
	Addrs []string `json:"addrs"`
	// Mode is the node's averaging mode ("gossip", "sync", "local"); any
	// short lower-case token is accepted so new modes need no new topic.
	Mode string `json:"mode"`
	// TimeMs is the sender's wall clock, Unix milliseconds.
	TimeMs int64 `json:"time_ms"`
}

// Time is TimeMs as a time.Time.
func (a Announcement) Time() time.Time { return time.UnixMilli(a.TimeMs) }

// Validate checks every field on its own (no local state): ranges,
// finiteness, parseable addresses. Errors wrap ErrMalformed.
func (a Announcement) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case a.Peer.Validate() != nil:
		return fmt.Errorf("%w: no peer", ErrMalformed)
	case a.Fingerprint.IsZero():
		return fmt.Errorf("%w: no fingerprint", ErrMalformed)
	case a.Step < 0:
		return fmt.Errorf("%w: step %d", ErrMalformed, a.Step)
	case !finite(a.Progress) || a.Progress < 0:
		return fmt.Errorf("%w: progress %v", ErrMalformed, a.Progress)
	case !finite(a.Loss) || a.Loss < 0:
		return fmt.Errorf("%w: loss %v", ErrMalformed, a.Loss)
	case !(a.Accuracy >= 0 && a.Accuracy <= 1):
		return fmt.Errorf("%w: accuracy %v", ErrMalformed, a.Accuracy)
	case !finite(a.SamplesPerSec) || a.SamplesPerSec < 0:
		return fmt.Errorf("%w: samples/s %v", ErrMalformed, a.SamplesPerSec)
	case !finite(a.Samples) || a.Samples < 0 || !finite(a.RunSamples) || a.RunSamples < 0:
		return fmt.Errorf("%w: samples %v, run samples %v", ErrMalformed, a.Samples, a.RunSamples)
	case !finite(a.AgeS) || a.AgeS < 0:
		return fmt.Errorf("%w: age %v s", ErrMalformed, a.AgeS)
	case a.IntervalMs < 0 || a.IntervalMs > maxIntervalMs:
		return fmt.Errorf("%w: interval %d ms", ErrMalformed, a.IntervalMs)
	case len(a.Addrs) > maxAnnounceAddrs:
		return fmt.Errorf("%w: %d addresses", ErrMalformed, len(a.Addrs))
	case !modePattern.MatchString(a.Mode):
		return fmt.Errorf("%w: mode %q", ErrMalformed, a.Mode)
	case a.TimeMs <= 0:
		return fmt.Errorf("%w: time %d", ErrMalformed, a.TimeMs)
	}
	for _, s := range a.Addrs {
		if len(s) > maxAddrLen {
			return fmt.Errorf("%w: address of %d bytes", ErrMalformed, len(s))
		}
		if _, err := ma.NewMultiaddr(s); err != nil {
			return fmt.Errorf("%w: address %q: %v", ErrMalformed, s, err)
		}
	}
	return nil
}

// EncodeAnnouncement validates a and encodes it.
func EncodeAnnouncement(a Announcement) ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(b) > MaxAnnounceSize {
		return nil, fmt.Errorf("%w: announcement of %d bytes, limit %d", ErrOversize, len(b), MaxAnnounceSize)
	}
	return b, nil
}

// DecodeAnnouncement bounds, decodes and validates one message. Unknown
// fields are ignored (forward compatibility); trailing data is not.
func DecodeAnnouncement(b []byte) (Announcement, error) {
	var a Announcement
	if len(b) > MaxAnnounceSize {
		return a, fmt.Errorf("%w: announcement of %d bytes, limit %d", ErrOversize, len(b), MaxAnnounceSize)
	}
	// Unmarshal, unlike a Decoder, refuses anything after the object.
	if err := json.Unmarshal(b, &a); err != nil {
		return Announcement{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := a.Validate(); err != nil {
		return Announcement{}, err
	}
	return a, nil
}

// Verdict is what the announce validator tells pubsub.
type Verdict uint8

// Verdicts, mirroring pubsub's Accept, Reject and Ignore.
const (
	Accept Verdict = iota
	// Reject: the message is wrong for every honest peer (malformed,
	// oversized, self-inconsistent). Every honest relay runs the same
	// check and never forwards it, so the peer that handed it to us is
	// faulty or hostile and pubsub may penalise it.
	Reject
	// Ignore: the message is fine but useless to us (another model, too
	// old, too many from that peer). Whether that holds depends on our
	// own state (clock, fingerprint, rate window), on which an honest relay
	// may differ, so we drop it without penalising anyone.
	Ignore
)

func (v Verdict) String() string {
	switch v {
	case Accept:
		return "accept"
	case Reject:
		return "reject"
	}
	return "ignore"
}

// VerdictOf maps an announce error to a verdict.
func VerdictOf(err error) Verdict {
	switch ReasonOf(err) {
	case ReasonNone:
		if err == nil {
			return Accept
		}
		return Reject
	case ReasonFingerprint, ReasonStale, ReasonFlood:
		return Ignore
	}
	return Reject
}

// PeerInfo is a peer's latest accepted announcement and when we saw it.
type PeerInfo struct {
	Announcement
	SeenAt time.Time
}

// peerTable is the pure state behind the announce topic: who was seen
// when, and how many announcements each peer sent in the current rate
// window. Its methods take the time as an argument and never block on
// I/O. mu guards everything because pubsub runs validators (which call
// admit) on its own goroutines concurrently with the reader loop
// (observe) and with callers of Fresh.
type peerTable struct {
	// fresh: a peer is fresh this long after its last announcement, or
	// three of the intervals it announced, whichever is longer, up to
	// maxFresh.
	fresh, maxFresh time.Duration
	rateWindow      time.Duration
	maxPerWin       int
	maxPeers        int

	mu    sync.Mutex
	peers map[peer.ID]PeerInfo
	rate  map[peer.ID]rateCount
}

type rateCount struct {
	start time.Time
	n     int
}

func newPeerTable(fresh, maxFresh, rateWindow time.Duration, maxPerWin, maxPeers int) *peerTable {
	return &peerTable{
		fresh: fresh, maxFresh: max(fresh, maxFresh), rateWindow: rateWindow, maxPerWin: maxPerWin, maxPeers: maxPeers,
		peers: make(map[peer.ID]PeerInfo),
		rate:  make(map[peer.ID]rateCount),
	}
}

// admit charges one announcement from p to p's rate window and reports
// ErrFlood once p is over budget, or when tracking p would grow the table
// past maxPeers (a flood of identities).
func (t *peerTable) admit(p peer.ID, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	rc, ok := t.rate[p]
	if !ok && len(t.rate) >= t.maxPeers {
		return fmt.Errorf("%w: tracking %d peers already", ErrFlood, t.maxPeers)
	}
	if !ok || now.Sub(rc.start) >= t.rateWindow || now.Before(rc.start) {
		rc = rateCount{start: now}
	}
	rc.n++
	t.rate[p] = rc
	if rc.n > t.maxPerWin {
		return fmt.Errorf("%w: %d announcements within %v, limit %d", ErrFlood, rc.n, t.rateWindow, t.maxPerWin)
	}
	return nil
}

// observe records an accepted announcement. An older announcement than
// the one on file (reordered delivery) does not replace it.
func (t *peerTable) observe(a Announcement, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.peers[a.Peer]; ok && old.TimeMs > a.TimeMs {
		return
	}
	if _, ok := t.peers[a.Peer]; !ok && len(t.peers) >= t.maxPeers {
		return
	}
	t.peers[a.Peer] = PeerInfo{Announcement: a, SeenAt: now}
}

// freshFor is how long pi stays fresh after it was seen.
func (t *peerTable) freshFor(pi PeerInfo) time.Duration {
	return min(max(t.fresh, 3*time.Duration(pi.IntervalMs)*time.Millisecond), t.maxFresh)
}

// count is how many peers are fresh at now.
func (t *peerTable) count(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, pi := range t.peers {
		if now.Sub(pi.SeenAt) <= t.freshFor(pi) {
			n++
		}
	}
	return n
}

// freshPeers returns copies of the peers seen within their fresh window,
// ordered by peer ID so callers see a stable order; with shareAddrs, each
// copy's Addrs is the table's own slice, which callers must not modify.
func (t *peerTable) freshPeers(now time.Time, shareAddrs bool) []PeerInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]PeerInfo, 0, len(t.peers))
	for _, pi := range t.peers {
		if now.Sub(pi.SeenAt) <= t.freshFor(pi) {
			if !shareAddrs {
				pi.Addrs = slices.Clone(pi.Addrs)
			}
			out = append(out, pi)
		}
	}
	slices.SortFunc(out, func(a, b PeerInfo) int {
		switch {
		case a.Peer < b.Peer:
			return -1
		case a.Peer > b.Peer:
			return 1
		}
		return 0
	})
	return out
}

// prune forgets peers no longer fresh and rate windows that have ended,
// so both maps stay bounded by the peers active recently.
func (t *peerTable) prune(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, pi := range t.peers {
		if now.Sub(pi.SeenAt) > t.freshFor(pi) {
			delete(t.peers, p)
		}
	}
	for p, rc := range t.rate {
		if now.Sub(rc.start) >= t.rateWindow {
			delete(t.rate, p)
		}
	}
}

// checkAnnouncement applies the checks that need context: the signed
// sender, our fingerprint and our clock. The flood budget is charged
// separately, last, so only otherwise useful messages spend it.
func checkAnnouncement(a Announcement, signer peer.ID, fp params.Fingerprint, now time.Time, maxAge, maxSkew time.Duration) error {
	if a.Peer != signer {
		return fmt.Errorf("%w: announcement names %s, signed by %s", ErrInconsistent, a.Peer, signer)
	}
	if a.Fingerprint != fp {
		return fmt.Errorf("%w: announcement for %s, we train %s", ErrFingerprint, a.Fingerprint.Short(), fp.Short())
	}
	at := a.Time()
	if age := now.Sub(at); age > maxAge {
		return fmt.Errorf("%w: %v old, limit %v", ErrStale, age.Round(time.Millisecond), maxAge)
	}
	if ahead := at.Sub(now); ahead > maxSkew {
		return fmt.Errorf("%w: %v in the future, limit %v", ErrStale, ahead.Round(time.Millisecond), maxSkew)
	}
	return nil
}
