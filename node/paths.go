package node

import (
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/merge"
)

// The averager's side of reachability (the host's is reach.go): which of
// its partners it can exchange with now, and a backoff for the ones it
// could not reach.
//
// A model goes only to a peer this node reaches directly: a relayed
// connection is limited to less than one model, and a stream opened on
// one without libp2p's permission for limited connections waits for a
// direct connection (up to the exchange's timeout, holding the averager).
// So before merge.ChoosePartner, each fresh partner is
//   - left out while it waits out a backoff after a failed attempt;
//   - a candidate if a direct connection is open;
//   - left out if only a relayed one is (a hole punch is under way or
//     failed: the pair is skipped, see docs/operations.md); if no hole
//     punch ever started on it, the relayed connection is closed
//     (Host.RetryRelayed), so that the next round dials a new one;
//   - dialed in the background if it is not connected at all, and left out
//     this round: the next round finds it connected, or the dial failed
//     and the peer backs off (unless it announces new addresses: a peer
//     behind NAT announces its relayed one some 15 s after it starts).

// Backoff after failed attempts on a peer: 1 s, doubling, at most 5
// minutes (a peer behind a NAT we cannot get through is then dialed, and
// hole punched, about every 5 minutes).
const (
	reachBackoffBase = time.Second
	reachBackoffMax  = 5 * time.Minute
)

// failWindow is how many of the latest exchanges the failure share covers.
const failWindow = 100

// Exchange paths, as the status counts them: over a direct connection
// that one side dialed, or one that a hole punch made.
const (
	exchangeDirect      = "direct"
	exchangeHolePunched = "hole_punched"
)

// pathFinder is what the averager needs of the host (an interface so the
// partner filter is tested without a network).
type pathFinder interface {
	PathTo(peer.ID) PeerPath
	PathKind(peer.ID) Path
	Reach(p peer.ID, addrs []ma.Multiaddr, done func(peer.ID, error)) bool
	RetryRelayed(p peer.ID, now time.Time) bool
}

// reachState is the averager's reachability bookkeeping. The averager
// goroutine owns backoff and recent; background dials report on results;
// the counters and byPath are read by the status.
type reachState struct {
	host    pathFinder
	backoff *merge.Backoff
	results chan reachResult

	recent  [failWindow]bool // true: failed; a ring of the latest exchanges
	next, n int
	// failure is the error of the exchange under way (between begin and
	// end), which the averager's exchangeFailed sets.
	failure error

	started, relayedSkips, dials, dialsFailed atomic.Int64
	relayRetries                              atomic.Int64  // relayed connections closed for a new one (RetryRelayed)
	backingOff                                atomic.Int64  // partners left out for a backoff in the latest round
	share                                     atomic.Uint64 // float64 bits: failed share of recent

	// dialed holds the announced addresses each background dial used (the
	// averager's goroutine owns it): a peer whose addresses changed since
	// its failed dial (it just got a relayed address) is dialed again at
	// once instead of after its backoff.
	dialed map[peer.ID]string

	mu     sync.Mutex
	byPath map[peer.ID]map[string]int64 // exchanges we started, by path
}

// maxDialed bounds reachState.dialed (it is cleared when full).
const maxDialed = 4096

type reachResult struct {
	p   peer.ID
	err error
}

func newReachState(h pathFinder) *reachState {
	return &reachState{host: h, backoff: merge.NewBackoff(reachBackoffBase, reachBackoffMax),
		results: make(chan reachResult, 16), byPath: map[peer.ID]map[string]int64{}, dialed: map[peer.ID]string{}}
}

// candidates are the partners the averager may exchange with now (see the
// top of this file), in the order given.
func (r *reachState) candidates(peers []gossip.PeerInfo, now time.Time) []merge.Candidate {
	out := make([]merge.Candidate, 0, len(peers))
	waiting := 0
	defer func() { r.backingOff.Store(int64(waiting)) }()
	for _, p := range peers {
		id := p.Peer.String()
		path := r.host.PathKind(p.Peer)
		addrs := strings.Join(p.Addrs, " ")
		if !r.backoff.Ready(id, now) {
			if prev, ok := r.dialed[p.Peer]; !ok || prev == addrs || path != PathNone {
				waiting++
				continue
			}
		}
		switch path {
		case PathDirect:
			out = append(out, merge.Candidate{Peer: id, Progress: p.Progress})
		case PathRelayed:
			r.relayedSkips.Add(1)
			if r.host.RetryRelayed(p.Peer, now) {
				// A new relayed connection after the backoff, and a hole
				// punch on it; a peer that never punches is retried ever
				// more rarely.
				r.relayRetries.Add(1)
				r.backoff.Fail(id, now)
			}
		default:
			if r.host.Reach(p.Peer, announcedAddrs(p.Addrs), r.report) {
				r.dials.Add(1)
				if len(r.dialed) >= maxDialed {
					clear(r.dialed)
				}
				r.dialed[p.Peer] = addrs
			}
		}
	}
	return out
}

// report hands a background dial's outcome to the averager; a full queue
// drops it (the peer is then dialed again when next chosen).
func (r *reachState) report(p peer.ID, err error) {
	select {
	case r.results <- reachResult{p: p, err: err}:
	default:
	}
}

// reached takes a background dial's outcome: a peer that could not be
// reached directly backs off.
func (r *reachState) reached(res reachResult, now time.Time) time.Duration {
	if res.err == nil {
		r.backoff.Succeed(res.p.String())
		delete(r.dialed, res.p)
		return 0
	}
	r.dialsFailed.Add(1)
	return r.backoff.Fail(res.p.String(), now)
}

// begin counts an exchange (or pull) we start with p and returns its path.
func (r *reachState) begin(p peer.ID) string {
	r.started.Add(1)
	r.failure = nil
	if r.host.PathTo(p).HolePunched {
		return exchangeHolePunched
	}
	return exchangeDirect
}

// end records how the exchange begun on path went (failure says): a failed
// one makes p back off, unless p answered that it is busy or has no model
// yet (it is reachable, and may well take the next one).
func (r *reachState) end(p peer.ID, path string, now time.Time) {
	failed := r.failure != nil
	busy := errors.Is(r.failure, gossip.ErrPeerBusy) || errors.Is(r.failure, gossip.ErrUnavailable)
	r.failure = nil
	r.recent[r.next] = failed
	r.next = (r.next + 1) % failWindow
	r.n = min(r.n+1, failWindow)
	k := 0
	for i := range r.n {
		if r.recent[i] {
			k++
		}
	}
	r.share.Store(math.Float64bits(float64(k) / float64(r.n)))
	if failed {
		if !busy {
			r.backoff.Fail(p.String(), now)
		}
		return
	}
	r.backoff.Succeed(p.String())
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.byPath[p]
	if m == nil {
		m = map[string]int64{}
		r.byPath[p] = m
	}
	m[path]++
}

// failedShare is the share of the latest (up to failWindow) exchanges we
// started that failed.
func (r *reachState) failedShare() float64 { return math.Float64frombits(r.share.Load()) }

// exchangesByPath returns the exchanges we started with p, by path.
func (r *reachState) exchangesByPath(p peer.ID) map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.byPath[p]))
	for k, v := range r.byPath[p] {
		out[k] = v
	}
	return out
}

// announcedAddrs parses a peer's announced addresses, skipping bad ones
// (the announcement was validated; this is belt and braces).
func announcedAddrs(ss []string) []ma.Multiaddr {
	out := make([]ma.Multiaddr, 0, len(ss))
	for _, s := range ss {
		if a, err := ma.NewMultiaddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// reachability is the status's view of reachability: the host's, and how
// this node reaches partners (the fresh peers it could merge with).
func (n *Node) reachability(partners []gossip.PeerInfo) *NodeReachability {
	r := &NodeReachability{Reachability: n.host.Reachability()}
	for _, p := range partners {
		switch n.host.PathKind(p.Peer) {
		case PathDirect:
			r.PeersDirect++
		case PathRelayed:
			r.PeersRelayed++
		default:
			r.PeersNotConnected++
		}
	}
	if a := n.avg; a != nil {
		r.RelayedSkips, r.Dials, r.DialsFailed = a.reach.relayedSkips.Load(), a.reach.dials.Load(), a.reach.dialsFailed.Load()
		r.BackingOff = int(a.reach.backingOff.Load())
	}
	return r
}

// exchangesByPath returns the exchanges this node started with p, by path.
func (n *Node) exchangesByPath(p peer.ID) map[string]int64 {
	if n.avg == nil {
		return map[string]int64{}
	}
	return n.avg.reach.exchangesByPath(p)
}
