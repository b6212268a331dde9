package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
)

// How a node reaches its peers, and what it knows of its own reachability.
//
// Most volunteers sit behind a home router that drops connections it did
// not see go out. On the public profile such a node learns that it is
// private (AutoNAT: peers try to dial it back), reserves a slot on a
// reachable peer's circuit relay (AutoRelay) and advertises the relayed
// address. A peer that dials that address gets a relayed connection, over
// which libp2p coordinates a hole punch (DCUtR): both sides dial each other
// at the same moment, which gets through routers whose mapping does not
// depend on the destination (endpoint-independent). A relayed connection is
// limited (2 minutes and 128 KiB per direction by default, less than one
// model), so models never go over one: the averager exchanges only with
// peers it reaches directly, and leaves out a pair whose hole punch failed.
// This file is the host's side: the path to each peer, the hole punches,
// the relay this node serves, and background dials.

// Path is how this node reaches a peer now.
type Path string

const (
	// PathDirect: a direct connection, dialed or made by a hole punch.
	PathDirect Path = "direct"
	// PathRelayed: only a relayed connection, limited in time and bytes;
	// no model goes over it.
	PathRelayed Path = "relayed"
	// PathNone: no connection.
	PathNone Path = "none"
)

// DefaultRelayBootDelay is the public profile's AutoRelay boot delay: how
// long after the start a node behind NAT waits to collect several relay
// candidates before it reserves a slot with fewer (libp2p's default is 3
// minutes). A mesh has few relays (its reachable nodes), and a node behind
// NAT cannot be dialed until it has one; AutoNAT itself takes about 15 s to
// find a node private, so a relay is usually reserved soon after that.
const DefaultRelayBootDelay = 15 * time.Second

// relayMinInterval is how often AutoRelay may ask for relay candidates
// (libp2p's default is 30 s). The node's source of candidates is a look at
// its own peers, so asking costs nothing on the network.
const relayMinInterval = 15 * time.Second

// holePunchWait bounds how long a background dial that only got a relayed
// connection waits for the hole punch libp2p starts on it: DCUtR tries
// three times, each with a 10 s dial.
const holePunchWait = 40 * time.Second

// reachDialTimeout bounds one background dial.
const reachDialTimeout = 20 * time.Second

// relayRetryAfter is how long a relayed connection may stay open without a
// hole punch starting on it before RetryRelayed closes it for a new one.
// libp2p starts DCUtR within a second or two of a relayed connection
// opening, once identify has run over it.
const relayRetryAfter = 20 * time.Second

// ErrRelayedOnly is a background dial's outcome when the peer could be
// reached through a relay only: the hole punch failed or did not happen
// within its time.
var ErrRelayedOnly = errors.New("node: peer reachable through a relay only (no direct connection: the hole punch failed)")

// reachWatch follows hole punches, the connections they made and the relay
// service, and remembers the background dials under way. libp2p calls it
// from its own goroutines; its maps are guarded by mu, its counters are
// atomics.
type reachWatch struct {
	net atomic.Pointer[network.Network] // set once the host exists

	mu       sync.Mutex
	punches  map[peer.ID]*punchStats
	started  map[peer.ID]time.Time // hole punches under way, by start
	punched  map[string]peer.ID    // open direct connections a hole punch made, by connection ID
	reaching map[peer.ID]bool      // background dials under way
	closed   bool                  // the host is closing: no new dials

	punchWait  time.Duration // holePunchWait unless a test shortens it
	retryAfter time.Duration // relayRetryAfter unless a test shortens it
	// lastPunch is when the latest hole punch with each peer started or
	// ended (either side started it).
	lastPunch map[peer.ID]time.Time

	punchTotal, punchOK atomic.Int64
	relay               relayStats
}

// punchStats are the hole punches with one peer (either side started them).
type punchStats struct {
	attempts, ok int64
	last         string // "succeeded" or "failed"
}

func newReachWatch() *reachWatch {
	return &reachWatch{punches: map[peer.ID]*punchStats{}, started: map[peer.ID]time.Time{},
		punched: map[string]peer.ID{}, reaching: map[peer.ID]bool{}, lastPunch: map[peer.ID]time.Time{}}
}

func (w *reachWatch) setNetwork(nw network.Network) { w.net.Store(&nw) }

// close refuses new background dials; the host then waits for the ones
// under way.
func (w *reachWatch) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// Trace is holepunch.EventTracer: called for every step of a hole punch.
func (w *reachWatch) Trace(evt *holepunch.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if evt.Type == holepunch.StartHolePunchEvtT || evt.Type == holepunch.EndHolePunchEvtT {
		if len(w.lastPunch) >= maxPunchPeers {
			clear(w.lastPunch)
		}
		w.lastPunch[evt.Remote] = time.Unix(0, evt.Timestamp)
	}
	switch evt.Type {
	case holepunch.StartHolePunchEvtT:
		if _, ok := w.started[evt.Remote]; !ok {
			w.started[evt.Remote] = time.Unix(0, evt.Timestamp)
		}
	case holepunch.EndHolePunchEvtT:
		end, _ := evt.Evt.(*holepunch.EndHolePunchEvt)
		ok := end != nil && end.Success
		start, began := w.started[evt.Remote]
		delete(w.started, evt.Remote)
		s := w.punches[evt.Remote]
		if s == nil {
			if len(w.punches) >= maxPunchPeers {
				clear(w.punches) // a crude bound; the totals stay
			}
			s = &punchStats{}
			w.punches[evt.Remote] = s
		}
		s.attempts++
		w.punchTotal.Add(1)
		s.last = "failed"
		if ok {
			s.ok++
			w.punchOK.Add(1)
			s.last = "succeeded"
		}
		// The direct connections opened since the punch began are its
		// work (on the side whose own dial lost the race too).
		if nw := w.net.Load(); nw != nil && began {
			for _, c := range (*nw).ConnsToPeer(evt.Remote) {
				if !c.Stat().Limited && !c.Stat().Opened.Before(start) {
					w.punched[c.ID()] = evt.Remote
				}
			}
		}
	}
}

// maxPunchPeers bounds the per-peer hole punch table.
const maxPunchPeers = 4096

// disconnected forgets a closed connection.
func (w *reachWatch) disconnected(_ network.Network, c network.Conn) {
	w.mu.Lock()
	delete(w.punched, c.ID())
	w.mu.Unlock()
}

// relayStats implement the relay service's MetricsTracer: what the relay
// this node serves for others carries.
type relayStats struct {
	active                    atomic.Bool
	reservations, circuits    atomic.Int64 // open now
	circuitsTotal, bytes      atomic.Int64
	reservationsTotal, denied atomic.Int64
}

func (r *relayStats) RelayStatus(enabled bool) { r.active.Store(enabled) }
func (r *relayStats) ConnectionOpened() {
	r.circuits.Add(1)
	r.circuitsTotal.Add(1)
}
func (r *relayStats) ConnectionClosed(time.Duration) { r.circuits.Add(-1) }
func (r *relayStats) ConnectionRequestHandled(s pbv2.Status) {
	if s != pbv2.Status_OK {
		r.denied.Add(1)
	}
}
func (r *relayStats) ReservationAllowed(isRenewal bool) {
	if !isRenewal {
		r.reservations.Add(1)
		r.reservationsTotal.Add(1)
	}
}
func (r *relayStats) ReservationClosed(n int) { r.reservations.Add(-int64(n)) }
func (r *relayStats) ReservationRequestHandled(s pbv2.Status) {
	if s != pbv2.Status_OK {
		r.denied.Add(1)
	}
}
func (r *relayStats) BytesTransferred(n int) { r.bytes.Add(int64(n)) }

// PeerPath is how this node reaches one peer now.
type PeerPath struct {
	Path Path
	// HolePunched: a direct connection a hole punch made is open.
	HolePunched bool
	// RemoteAddr is the address of the connection streams would use.
	RemoteAddr string
	// HolePunches counts the hole punches with the peer (either side
	// started them), HolePunchesOK those that succeeded; LastHolePunch is
	// "succeeded", "failed" or "" (none).
	HolePunches, HolePunchesOK int64
	LastHolePunch              string
}

// PathTo reports how this node reaches p now. Streams go over the best
// connection, and a direct one always beats a relayed one.
func (n *Host) PathTo(p peer.ID) PeerPath {
	out := PeerPath{Path: PathNone}
	conns := n.Network().ConnsToPeer(p)
	n.reach.mu.Lock()
	defer n.reach.mu.Unlock()
	for _, c := range conns {
		if c.Stat().Limited {
			if out.Path == PathNone {
				out.Path, out.RemoteAddr = PathRelayed, c.RemoteMultiaddr().String()
			}
			continue
		}
		_, punched := n.reach.punched[c.ID()]
		if out.Path != PathDirect || (punched && !out.HolePunched) {
			out.RemoteAddr = c.RemoteMultiaddr().String()
		}
		out.Path = PathDirect
		out.HolePunched = out.HolePunched || punched
	}
	if s := n.reach.punches[p]; s != nil {
		out.HolePunches, out.HolePunchesOK, out.LastHolePunch = s.attempts, s.ok, s.last
	}
	return out
}

// PathKind is PathTo(p).Path without the rest: the averager asks it of
// every fresh peer at every round, and PathTo spells out addresses.
func (n *Host) PathKind(p peer.ID) Path {
	out := PathNone
	for _, c := range n.Network().ConnsToPeer(p) {
		if !c.Stat().Limited {
			return PathDirect
		}
		out = PathRelayed
	}
	return out
}

// Reach dials p in the background (at most one dial per peer at a time;
// it returns false if one is under way) and calls done with the outcome
// from the dialing goroutine: nil once a direct connection is open,
// ErrRelayedOnly when a relayed one is all it got (after giving the hole
// punch libp2p starts on it holePunchWait to succeed), or the dial's
// error. addrs are added to what the peer store knows of p. done is not
// called if the host closes first.
func (n *Host) Reach(p peer.ID, addrs []ma.Multiaddr, done func(peer.ID, error)) bool {
	n.reach.mu.Lock()
	if n.reach.reaching[p] || n.reach.closed {
		n.reach.mu.Unlock()
		return false
	}
	n.reach.reaching[p] = true
	// Added under the lock that close takes, so never after Close waits.
	n.wg.Add(1)
	n.reach.mu.Unlock()
	go func() {
		defer n.wg.Done()
		err := n.reachOnce(n.ctx, p, addrs)
		n.reach.mu.Lock()
		delete(n.reach.reaching, p)
		n.reach.mu.Unlock()
		if n.ctx.Err() == nil {
			done(p, err)
		}
	}()
	return true
}

func (n *Host) reachOnce(ctx context.Context, p peer.ID, addrs []ma.Multiaddr) error {
	dctx, cancel := context.WithTimeout(ctx, reachDialTimeout)
	err := n.Connect(dctx, peer.AddrInfo{ID: p, Addrs: addrs})
	cancel()
	if err != nil {
		return err
	}
	if n.PathKind(p) == PathDirect {
		return nil
	}
	// A relayed connection: the side it reached starts a hole punch.
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	wait := n.reach.punchWait
	if wait == 0 {
		wait = holePunchWait
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return ErrRelayedOnly
		case <-t.C:
			switch n.PathKind(p) {
			case PathDirect:
				return nil
			case PathNone:
				return fmt.Errorf("node: the relayed connection to %s closed before a hole punch succeeded", p)
			}
		}
	}
}

// RetryRelayed closes the relayed connections to p when p is reached
// through a relay only and no hole punch has started with p since the
// newest of them opened, relayRetryAfter or more ago; it reports whether it
// closed them. libp2p starts a hole punch only when a relayed connection
// opens, and only if both sides have learned their public addresses by
// then (go-libp2p issue 3024): a pair that met sooner would stay relayed,
// with no model between them, until the relay's limit (2 minutes) ends the
// connection. Once it is closed, the averager's next dial opens a new one,
// and the hole punch starts on it. A pair whose hole punch was tried and
// failed (a symmetric NAT) is left alone, as docs/operations.md says.
func (n *Host) RetryRelayed(p peer.ID, now time.Time) bool {
	var relayed []network.Conn
	var newest time.Time
	for _, c := range n.Network().ConnsToPeer(p) {
		if !c.Stat().Limited {
			return false
		}
		relayed = append(relayed, c)
		if o := c.Stat().Opened; o.After(newest) {
			newest = o
		}
	}
	wait := n.reach.retryAfter
	if wait == 0 {
		wait = relayRetryAfter
	}
	if len(relayed) == 0 || now.Sub(newest) < wait {
		return false
	}
	n.reach.mu.Lock()
	_, underway := n.reach.started[p]
	last, punched := n.reach.lastPunch[p]
	n.reach.mu.Unlock()
	if underway || (punched && !last.Before(newest)) {
		return false
	}
	n.log.Info("no hole punch started on the relayed connection; closing it, the next dial opens a new one",
		"peer", p, "open", now.Sub(newest).Round(time.Second))
	for _, c := range relayed {
		_ = c.Close()
	}
	return true
}

// Reachability is what a node knows of its own reachability and of the
// relay it serves.
type Reachability struct {
	// Status is what AutoNAT found: "public" (peers can dial this node),
	// "private" (behind a NAT or firewall that drops unsolicited
	// connections) or "unknown" (not found out yet). Forced: set by the
	// configuration instead (private on the local and lan profiles, public
	// with --dht-server).
	Status string `json:"status"`
	Forced bool   `json:"forced"`
	// ReachableAddrs and UnreachableAddrs are the public addresses AutoNAT
	// v2 confirmed dialable, or not, by other peers (public profile).
	ReachableAddrs   []string `json:"reachable_addrs"`
	UnreachableAddrs []string `json:"unreachable_addrs"`
	// RelayAddrs are the relayed addresses this node advertises: it holds
	// a slot on those relays, through which peers reach it for a hole punch.
	RelayAddrs []string `json:"relay_addrs"`
	// HolePunches counts the hole punches with peers, either side
	// starting them; HolePunchesOK those that made a direct connection.
	HolePunches   int64 `json:"hole_punches"`
	HolePunchesOK int64 `json:"hole_punches_ok"`
	// RelayService is the relay this node serves for others (nil when it
	// serves none: on the local and lan profiles, or while AutoNAT has not
	// found it public).
	RelayService *RelayService `json:"relay_service,omitempty"`
}

// RelayService is what the circuit relay this node serves carries. Each
// relayed connection is cut after LimitS seconds or LimitBytes in either
// direction, whichever comes first.
type RelayService struct {
	Reservations      int64   `json:"reservations"` // slots held now
	ReservationsTotal int64   `json:"reservations_total"`
	Circuits          int64   `json:"circuits"` // relayed connections open now
	CircuitsTotal     int64   `json:"circuits_total"`
	BytesRelayed      int64   `json:"bytes_relayed"`
	Denied            int64   `json:"denied"` // requests refused (limits, no reservation)
	LimitS            float64 `json:"limit_s"`
	LimitBytes        int64   `json:"limit_bytes"`
}

// Reachability reports what the host knows of its reachability now.
func (n *Host) Reachability() Reachability {
	r := Reachability{Status: "unknown", ReachableAddrs: []string{}, UnreachableAddrs: []string{}, RelayAddrs: []string{}}
	if h, ok := n.Host.(interface{ Reachability() network.Reachability }); ok {
		switch h.Reachability() {
		case network.ReachabilityPublic:
			r.Status = "public"
		case network.ReachabilityPrivate:
			r.Status = "private"
		}
	}
	r.Forced = n.cfg.Profile != ProfilePublic || n.cfg.DHTServer
	if h, ok := n.Host.(interface {
		ConfirmedAddrs() (reachable, unreachable, unknown []ma.Multiaddr)
	}); ok && n.cfg.Profile == ProfilePublic {
		yes, no, _ := h.ConfirmedAddrs()
		r.ReachableAddrs, r.UnreachableAddrs = addrStrings(yes), addrStrings(no)
	}
	for _, a := range n.Addrs() {
		if isRelayAddr(a) {
			r.RelayAddrs = append(r.RelayAddrs, a.String())
		}
	}
	r.HolePunches, r.HolePunchesOK = n.reach.punchTotal.Load(), n.reach.punchOK.Load()
	if rs := &n.reach.relay; rs.active.Load() {
		limit := relayLimit()
		r.RelayService = &RelayService{Reservations: rs.reservations.Load(), ReservationsTotal: rs.reservationsTotal.Load(),
			Circuits: rs.circuits.Load(), CircuitsTotal: rs.circuitsTotal.Load(), BytesRelayed: rs.bytes.Load(),
			Denied: rs.denied.Load(), LimitS: limit.Duration.Seconds(), LimitBytes: limit.Data}
	}
	return r
}

func addrStrings(as []ma.Multiaddr) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	slices.Sort(out)
	return out
}

func isRelayAddr(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

// relaySource is AutoRelay's source of relay candidates: the bootstrap
// peers (the operator named them; bootstrap nodes serve relays), then the
// connected peers that offer the relay protocol, then the DHT servers in
// the routing table (reachable by definition of DHT server mode). AutoRelay
// checks each candidate itself (it must speak the relay protocol and be
// reached directly). It is set to the host once that exists.
type relaySource struct {
	h atomic.Pointer[Host]
}

func (s *relaySource) candidates(ctx context.Context, num int) <-chan peer.AddrInfo {
	ch := make(chan peer.AddrInfo, max(num, 0))
	defer close(ch)
	n := s.h.Load()
	if n == nil || num <= 0 {
		return ch
	}
	seen := map[peer.ID]bool{n.ID(): true}
	add := func(ai peer.AddrInfo) bool {
		if seen[ai.ID] {
			return true
		}
		seen[ai.ID] = true
		ch <- ai
		return len(ch) < num
	}
	for _, ai := range n.cfg.Bootstrap {
		if !add(ai) {
			return ch
		}
	}
	ps := n.Peerstore()
	for _, p := range n.Network().Peers() {
		if ok, _ := ps.SupportsProtocols(p, proto.ProtoIDv2Hop); len(ok) == 0 {
			continue
		}
		if !add(ps.PeerInfo(p)) {
			return ch
		}
	}
	for _, p := range n.DHT.RoutingTable().ListPeers() {
		if !add(ps.PeerInfo(p)) {
			return ch
		}
	}
	return ch
}

// watchReachability logs what the node learns of its reachability: once
// per change, since an operator wants to know whether peers can reach it.
func (n *Host) watchReachability(ctx context.Context, log *slog.Logger) {
	defer n.wg.Done()
	sub, err := n.EventBus().Subscribe([]any{new(event.EvtLocalReachabilityChanged), new(event.EvtAutoRelayAddrsUpdated),
		new(event.EvtHostReachableAddrsChanged)})
	if err != nil {
		log.Warn("cannot follow reachability", "err", err)
		return
	}
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			switch e := e.(type) {
			case event.EvtLocalReachabilityChanged:
				switch e.Reachability {
				case network.ReachabilityPublic:
					log.Info("reachability: public (AutoNAT: peers dialed us back); serving a relay for peers behind NAT")
				case network.ReachabilityPrivate:
					log.Info("reachability: private (AutoNAT: peers could not dial us back); looking for a relay")
				default:
					log.Info("reachability: unknown")
				}
			case event.EvtAutoRelayAddrsUpdated:
				if len(e.RelayAddrs) == 0 {
					log.Info("relay addresses: none (no relay slot held)")
				} else {
					log.Info("relay addresses: peers reach us through a relay, then by hole punching", "addrs", e.RelayAddrs)
				}
			case event.EvtHostReachableAddrsChanged:
				log.Debug("AutoNAT v2", "reachable", e.Reachable, "unreachable", e.Unreachable, "unknown", e.Unknown)
			}
		}
	}
}
