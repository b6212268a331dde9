package node

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Gate decides which peers the host talks to, in both directions: outbound
// dials are stopped before they start, inbound connections right after the
// security handshake, when the remote peer ID is known. It refuses a peer
// that is not on the allow-list (when one is set) or that the refuse func
// names (bans). It keeps no per-peer state; the libp2p swarm calls it from
// many goroutines at once.
type Gate struct {
	allow   map[peer.ID]struct{} // read-only after NewGate; nil: anyone
	refuse  func(peer.ID) bool
	log     *slog.Logger
	refused atomic.Uint64

	// The lines a refusal logs can be triggered by any remote peer at will,
	// so they are rate-limited: one per reason per gateLogEvery, with a
	// count of the lines left out. Guarded by mu.
	mu         sync.Mutex
	lastLog    [numRefusals]time.Time
	suppressed [numRefusals]int
}

var _ connmgr.ConnectionGater = (*Gate)(nil)

// refusal is why the gate turned a peer away.
type refusal int

const (
	refusedNotAllowed refusal = iota
	refusedByFunc
	numRefusals
)

func (r refusal) String() string {
	if r == refusedNotAllowed {
		return "not on the allow-list"
	}
	return "refused"
}

// gateLogEvery is the least time between two log lines of one reason.
const gateLogEvery = 10 * time.Second

// NewGate returns a gate that lets through only the peers in allow (anyone
// if allow is empty) for which refuse, if not nil, returns false. refuse
// runs on libp2p's dialing and upgrading goroutines: it must be fast,
// thread-safe, and must not call into the host.
func NewGate(allow []peer.ID, refuse func(peer.ID) bool, log *slog.Logger) *Gate {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gate{refuse: refuse, log: log}
	if len(allow) > 0 {
		g.allow = make(map[peer.ID]struct{}, len(allow))
		for _, p := range allow {
			g.allow[p] = struct{}{}
		}
	}
	return g
}

// Refused is how many dials and connections the gate refused.
func (g *Gate) Refused() uint64 { return g.refused.Load() }

// admit reports whether p may be talked to, counting and logging a refusal.
func (g *Gate) admit(p peer.ID, dir string) bool {
	r := numRefusals
	if g.allow != nil {
		if _, ok := g.allow[p]; !ok {
			r = refusedNotAllowed
		}
	}
	if r == numRefusals && g.refuse != nil && g.refuse(p) {
		r = refusedByFunc
	}
	if r == numRefusals {
		return true
	}
	g.refused.Add(1)
	if ok, suppressed := g.logAllowed(r, time.Now()); ok {
		g.log.Debug("connection refused", "peer", p, "direction", dir, "reason", r.String(), "suppressed", suppressed)
	}
	return false
}

// logAllowed reports whether to log a refusal for r now and how many such
// lines were left out since the last one.
func (g *Gate) logAllowed(r refusal, now time.Time) (bool, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.lastLog[r].IsZero() && now.Sub(g.lastLog[r]) < gateLogEvery {
		g.suppressed[r]++
		return false, 0
	}
	n := g.suppressed[r]
	g.lastLog[r], g.suppressed[r] = now, 0
	return true, n
}

// InterceptPeerDial checks a peer before any of its addresses is dialled.
func (g *Gate) InterceptPeerDial(p peer.ID) bool { return g.admit(p, "outbound") }

// InterceptAddrDial checks the peer again per address: a ban may have
// arrived while the dial was under way.
func (g *Gate) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return g.admit(p, "outbound") }

// InterceptAccept lets every inbound connection through to the security
// handshake: the remote peer ID is not known before it.
func (g *Gate) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured checks the authenticated remote peer of a connection in
// either direction.
func (g *Gate) InterceptSecured(d network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	dir := "inbound"
	if d == network.DirOutbound {
		dir = "outbound"
	}
	return g.admit(p, dir)
}

// InterceptUpgraded allows: the peer was checked once it was authenticated.
func (g *Gate) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }

// ParsePeerIDs parses peer IDs, each entry one ID or several separated by
// commas; blank items are skipped. It names every bad item at once.
func ParsePeerIDs(entries []string) ([]peer.ID, error) {
	var out []peer.ID
	var errs []error
	for _, e := range entries {
		for s := range strings.SplitSeq(e, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			id, err := peer.Decode(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("peer ID %q: %w", s, err))
				continue
			}
			out = append(out, id)
		}
	}
	return out, errors.Join(errs...)
}
