package node

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/params"
)

// What the external tests (package node_test) reach inside a node. Test
// builds only.

// TrainerOf is n's trainer.
func TrainerOf(n *Node) Trainer { return n.trainer }

// Reinit replaces n's parameters with the built-in model's initialisation
// drawn from seed, before n trains.
func Reinit(n *Node, seed uint64) error {
	g := n.trainer.(*goTrainer)
	return g.t.Apply(func(w, _ []float32, _ *params.Progress) error { return g.t.Model().Init(w, seed) })
}

// DefaultListen is where a host of profile p listens when not told.
func DefaultListen(p Profile, psk bool) []string { return defaultListen(p, psk) }

// DiscoveryWait is the host's wait after a discovery round, and
// DiscoveryEnough and DiscoveryMaxWait its limits.
func DiscoveryWait(prev, interval time.Duration, peers int) time.Duration {
	return discoveryWait(prev, interval, peers)
}

const DiscoveryEnough, DiscoveryMaxWait = discoveryEnough, discoveryMaxWait

// BootstrapRetry is the wait before the next dial of an unreachable
// bootstrap peer.
func BootstrapRetry(prev, interval time.Duration, peers int, alone time.Duration) time.Duration {
	return bootstrapRetry(prev, interval, peers, alone)
}

// BootstrapFastFor is how long a host with no peer redials every second.
const BootstrapFastFor = bootstrapFastFor

// KickAnnounce asks n's announcer for an announcement now.
func KickAnnounce(n *Node) { n.ann.Kick() }

// ClockPeerSamples is the count of p's samples n's run clock holds.
func ClockPeerSamples(n *Node, p peer.ID) float64 { return n.clock.peerSamples(p) }

// RedialPace is the discovery loop's redial pace (redialPace).
type RedialPace struct{ r redialPace }

// Next is redialPace.next.
func (p *RedialPace) Next(interval time.Duration, unreachable bool, peers int, now time.Time) (time.Duration, bool) {
	return p.r.next(interval, unreachable, peers, now)
}
