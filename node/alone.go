package node

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// A node with no partner trains alone, which is rarely what its user
// meant: it says so, in the log and in its status, with the reason it
// can tell.

// AloneReason says why a node trains alone.
type AloneReason string

// The reasons, most specific first: diagnose returns the first that holds.
const (
	// AloneBootstrapUnreachable: --bootstrap was given and no dial to any
	// of those peers succeeded, and no other peer is connected.
	AloneBootstrapUnreachable AloneReason = "bootstrap_unreachable"
	// AloneNoPeers: no peer is connected at all (no bootstrap given, and
	// none found by mDNS or on the DHT).
	AloneNoPeers AloneReason = "no_peers"
	// AloneFingerprintMismatch: peers announce, but for another model,
	// dataset, network or run.
	AloneFingerprintMismatch AloneReason = "fingerprint_mismatch"
	// AloneAllBanned: every peer that trains our model is banned or
	// ignored by the trust checks.
	AloneAllBanned AloneReason = "all_peers_banned"
	// AloneRelayedOnly: the peers that could be partners are reached only
	// through a relay (a hole punch between the two NATs failed), and
	// models do not go over relays.
	AloneRelayedOnly AloneReason = "relayed_only"
	// AloneOtherMode: peers train our model in another mode (sync, local).
	AloneOtherMode AloneReason = "other_mode"
	// AloneNoAnnouncements: peers are connected but none has announced
	// itself yet (or recently).
	AloneNoAnnouncements AloneReason = "no_announcements"
)

// Alone is the status of a node that has had no partner for a while.
type Alone struct {
	Reason  AloneReason `json:"reason"`
	Message string      `json:"message"`
	// SinceS is how long the node has had no partner, seconds.
	SinceS float64 `json:"since_s"`
}

// aloneAfter is how long a node may have no partner before it says so:
// long enough for a start-up's dials and first announcements.
const aloneAfter = 5 * time.Second

// aloneInputs is what diagnose looks at, gathered by the node.
type aloneInputs struct {
	profile   Profile
	mode      Mode
	bootstrap int               // bootstrap peers configured
	bootErrs  map[peer.ID]error // those whose latest dial failed
	connected int               // peers connected now
	otherFP   int               // peers announcing another fingerprint recently
	ourFP     string            // our fingerprint, short
	sameFP    int               // fresh peers announcing our fingerprint
	inMode    int               // of those, in our mode
	excluded  int               // of those in our mode, banned or ignored
	relayed   int               // of those in our mode not excluded, reached only through a relay
	modes     map[string]int    // modes of the peers on our fingerprint
}

// diagnose names the reason a node has no partner, and a message for its
// user.
func diagnose(in aloneInputs) (AloneReason, string) {
	switch {
	case in.connected == 0 && in.bootstrap > 0 && len(in.bootErrs) > 0:
		var parts []string
		for p, err := range in.bootErrs {
			parts = append(parts, fmt.Sprintf("%s: %v", p, err))
		}
		sort.Strings(parts)
		return AloneBootstrapUnreachable, "training alone: bootstrap peer unreachable (" + strings.Join(parts, "; ") +
			"); check the --bootstrap address and that the peer is running"
	case in.connected == 0:
		how := "on the DHT"
		switch {
		case in.profile == ProfileLocal:
			how = "(profile local finds peers only through --bootstrap)"
		case in.profile == ProfileLAN:
			how = "by mDNS on the LAN or on the DHT"
		}
		if in.bootstrap == 0 {
			return AloneNoPeers, "training alone: no peers: no --bootstrap given and none found " + how
		}
		return AloneNoPeers, "training alone: no peers connected yet " + how
	case in.sameFP == 0 && in.otherFP > 0:
		return AloneFingerprintMismatch, fmt.Sprintf("training alone: %d peer(s) announce another model or run (their fingerprint "+
			"is not ours, %s): every node of a run needs the same --network, --dataset, --model, --epochs and --schedule",
			in.otherFP, in.ourFP)
	case in.inMode > 0 && in.excluded == in.inMode:
		return AloneAllBanned, fmt.Sprintf("training alone: all %d peer(s) on this run are banned or ignored by the trust checks "+
			"(meshtrain peers shows why)", in.inMode)
	case in.relayed > 0 && in.excluded+in.relayed == in.inMode:
		return AloneRelayedOnly, fmt.Sprintf("training alone: the %d peer(s) on this run are reachable only through a relay "+
			"(a hole punch through this node's NAT and theirs failed; it is retried) and models are not sent over relays: "+
			"a reachable peer (a public node, or one behind a NAT that keeps ports) gets this node merging again", in.relayed)
	case in.sameFP > 0 && in.inMode == 0:
		var ms []string
		for m, k := range in.modes {
			ms = append(ms, fmt.Sprintf("%d in %s", k, m))
		}
		sort.Strings(ms)
		return AloneOtherMode, fmt.Sprintf("training alone: the peers on this run average in another mode (%s; ours is %s)",
			strings.Join(ms, ", "), in.mode)
	}
	return AloneNoAnnouncements, fmt.Sprintf("training alone: %d peer(s) connected, none has announced this run recently", in.connected)
}

// otherRuns remembers the peers whose announcements were ignored for
// another fingerprint, for the diagnosis. Bounded: at most otherRunsMax
// peers, each forgotten otherRunsTTL after its latest announcement.
type otherRuns struct {
	mu    sync.Mutex
	peers map[peer.ID]time.Time
}

const (
	otherRunsMax = 256
	otherRunsTTL = 30 * time.Second
)

func (o *otherRuns) note(p peer.ID, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.peers == nil {
		o.peers = map[peer.ID]time.Time{}
	}
	if _, ok := o.peers[p]; !ok && len(o.peers) >= otherRunsMax {
		for q, at := range o.peers {
			if now.Sub(at) > otherRunsTTL {
				delete(o.peers, q)
			}
		}
		if len(o.peers) >= otherRunsMax {
			return
		}
	}
	o.peers[p] = now
}

// recent returns the peers noted within the TTL, forgetting older ones.
func (o *otherRuns) recent(now time.Time) []peer.ID {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []peer.ID
	for p, at := range o.peers {
		if now.Sub(at) > otherRunsTTL {
			delete(o.peers, p)
			continue
		}
		out = append(out, p)
	}
	return out
}
