package node_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshtrain/meshtrain/node"
)

func newPeerID(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateKeyPair(crypto.Ed25519, -1)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestGateDecisions: every check of the gate, without a network.
func TestGateDecisions(t *testing.T) {
	friend, other, banned := newPeerID(t), newPeerID(t), newPeerID(t)
	addr := ma.StringCast("/ip4/127.0.0.1/tcp/4001")
	refuse := func(p peer.ID) bool { return p == banned }

	check := func(name string, g *node.Gate, p peer.ID, want bool) {
		t.Helper()
		before := g.Refused()
		got := map[string]bool{
			"peer dial":        g.InterceptPeerDial(p),
			"address dial":     g.InterceptAddrDial(p, addr),
			"secured inbound":  g.InterceptSecured(network.DirInbound, p, nil),
			"secured outbound": g.InterceptSecured(network.DirOutbound, p, nil),
		}
		for hook, ok := range got {
			if ok != want {
				t.Errorf("%s: %s allowed %v, want %v", name, hook, ok, want)
			}
		}
		wantRefused := before
		if !want {
			wantRefused += uint64(len(got))
		}
		if g.Refused() != wantRefused {
			t.Errorf("%s: refused count %d, want %d", name, g.Refused(), wantRefused)
		}
		// Accept and upgrade always pass: the peer is judged once known.
		if !g.InterceptAccept(nil) {
			t.Errorf("%s: accept refused", name)
		}
		if ok, _ := g.InterceptUpgraded(nil); !ok {
			t.Errorf("%s: upgraded refused", name)
		}
	}

	open := node.NewGate(nil, nil, nil)
	check("open gate, any peer", open, other, true)

	allow := node.NewGate([]peer.ID{friend, banned}, nil, nil)
	check("allow-list, listed", allow, friend, true)
	check("allow-list, not listed", allow, other, false)

	bans := node.NewGate(nil, refuse, nil)
	check("refuse func, not refused", bans, other, true)
	check("refuse func, refused", bans, banned, false)

	both := node.NewGate([]peer.ID{friend, banned}, refuse, nil)
	check("both, listed", both, friend, true)
	check("both, listed but refused", both, banned, false)
	check("both, not listed", both, other, false)
}

// TestGateAllowList: with an allow-list, a listed peer connects both ways and
// any other peer is refused both ways.
func TestGateAllowList(t *testing.T) {
	checkGoroutines(t)
	// Two friends, one for each direction: a redial between two hosts that
	// know each other can race a DHT query between them (TestPrivateNetworkPSK).
	friend, friend2 := newPrivateHost(t, nil), newPrivateHost(t, nil)
	stranger := newPrivateHost(t, nil)
	gated := newPrivateHost(t, func(c *node.HostConfig) { c.AllowPeers = []peer.ID{friend.ID(), friend2.ID()} })

	if err := talk(t, friend, gated); err != nil {
		t.Fatalf("allowed peer dialling in: %v", err)
	}
	if err := talk(t, gated, friend2); err != nil {
		t.Fatalf("dialling out to an allowed peer: %v", err)
	}

	before := gated.GateRefused()
	if err := talk(t, stranger, gated); err == nil {
		t.Error("a peer not on the allow-list dialled in and exchanged")
	}
	if gated.GateRefused() == before {
		t.Error("inbound refusal not counted")
	}
	before = gated.GateRefused()
	if err := talk(t, gated, stranger); err == nil {
		t.Error("dialled out to a peer not on the allow-list")
	}
	if gated.GateRefused() == before {
		t.Error("outbound refusal not counted")
	}
}

// TestGateRefuseFunc: a peer the refuse func names (a ban) cannot connect in
// either direction; once the func lets it through again, it can.
func TestGateRefuseFunc(t *testing.T) {
	checkGoroutines(t)
	peerHost := newPrivateHost(t, nil)
	var banned atomic.Bool
	gated := newPrivateHost(t, func(c *node.HostConfig) {
		c.Refuse = func(p peer.ID) bool { return banned.Load() && p == peerHost.ID() }
	})

	if err := talk(t, peerHost, gated); err != nil {
		t.Fatalf("before the ban: %v", err)
	}
	disconnect(t, peerHost, gated)

	banned.Store(true)
	if err := talk(t, peerHost, gated); err == nil {
		t.Error("a refused peer dialled in and exchanged")
	}
	if err := talk(t, gated, peerHost); err == nil {
		t.Error("dialled out to a refused peer")
	}
	if gated.GateRefused() == 0 {
		t.Error("refusals not counted")
	}
	disconnect(t, peerHost, gated)

	banned.Store(false)
	// A redial right after a disconnect can race the closing connection
	// (a handshake cut short): the claim is that the gate no longer
	// refuses, so a few attempts are allowed.
	if err := talkSoon(t, peerHost, gated); err != nil {
		t.Fatalf("after the ban was lifted, dialling in: %v", err)
	}
	disconnect(t, peerHost, gated)
	if err := talkSoon(t, gated, peerHost); err != nil {
		t.Fatalf("after the ban was lifted, dialling out: %v", err)
	}
}

// talkSoon is talk, retried up to 5 times 200 ms apart.
func talkSoon(t *testing.T, from, to *node.Host) error {
	t.Helper()
	var err error
	for range 5 {
		if err = talk(t, from, to); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}
