package node_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/testnet"
)

// TestDiscoveryAdvertisesOnce: the discovery loop runs every interval, but
// the DHT advertisement re-publishes itself, so it must be started once per
// host, not once per round (each start is another goroutine and another
// provide query for the life of the host).
func TestDiscoveryAdvertisesOnce(t *testing.T) {
	checkGoroutines(t)
	const interval = 20 * time.Millisecond
	var hosts []*node.Host
	for i := range 2 {
		key, _, err := crypto.GenerateKeyPair(crypto.Ed25519, -1)
		if err != nil {
			t.Fatal(err)
		}
		cfg := node.HostConfig{Profile: node.ProfileLocal, Network: "advertise", Listen: []string{"/ip4/127.0.0.1/tcp/0"},
			DiscoveryInterval: interval, Gossip: gossip.DefaultConfig()}
		if i > 0 {
			if cfg.Bootstrap, err = node.ParseBootstrap(hosts[0].FullAddrs()); err != nil {
				t.Fatal(err)
			}
		}
		h, err := node.NewHost(key, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		hosts = append(hosts, h)
	}
	eventually(t, time.Minute, "both routing tables to fill", func() bool {
		return hosts[0].DHT.RoutingTable().Size() > 0 && hosts[1].DHT.RoutingTable().Size() > 0
	})
	// Many discovery rounds with a routing table to advertise to.
	time.Sleep(50 * interval)
	if n := goroutinesIn("discovery/util.Advertise"); n > len(hosts) {
		t.Errorf("%d advertising goroutines for %d hosts", n, len(hosts))
	}
}

// TestDiscoveryWait: a host with fewer than DiscoveryEnough peers searches
// the DHT every interval; a well-connected one doubles its wait after each
// round, up to DiscoveryMaxWait intervals, and drops back to the interval
// as soon as it has fewer peers.
func TestDiscoveryWait(t *testing.T) {
	const iv = 10 * time.Second
	few, many := node.DiscoveryEnough-1, node.DiscoveryEnough
	var got []time.Duration
	w := time.Duration(0)
	for range 6 {
		w = node.DiscoveryWait(w, iv, many)
		got = append(got, w)
	}
	want := []time.Duration{iv, 2 * iv, 4 * iv, node.DiscoveryMaxWait * iv, node.DiscoveryMaxWait * iv, node.DiscoveryMaxWait * iv}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waits with %d peers: %v, want %v", many, got, want)
	}
	if w := node.DiscoveryWait(node.DiscoveryMaxWait*iv, iv, few); w != iv {
		t.Errorf("wait with %d peers after a long one: %v, want the interval %v", few, w, iv)
	}
	if w := node.DiscoveryWait(0, time.Minute, 0); w != time.Minute {
		t.Errorf("wait alone: %v, want the interval", w)
	}
}

// TestBootstrapRetry: a host with no peer redials an unreachable bootstrap
// peer every second for its first BootstrapFastFor alone, however long it
// had backed off before, so two nodes that start listening at different
// times meet within a second of the later one; after that, and while it
// has peers, it backs off, doubling from 1 s up to the discovery interval.
func TestBootstrapRetry(t *testing.T) {
	const iv = 10 * time.Second
	series := func(peers int, alone time.Duration) []time.Duration {
		var got []time.Duration
		r := time.Duration(0)
		for range 6 {
			r = node.BootstrapRetry(r, iv, peers, alone)
			got = append(got, r)
		}
		return got
	}
	s := time.Second
	if got, want := series(0, 0), []time.Duration{s, s, s, s, s, s}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("retries alone: %v, want %v", got, want)
	}
	backoff := []time.Duration{s, 2 * s, 4 * s, 8 * s, iv, iv}
	if got := series(1, 0); fmt.Sprint(got) != fmt.Sprint(backoff) {
		t.Errorf("retries with a peer: %v, want %v", got, backoff)
	}
	if got := series(0, node.BootstrapFastFor); fmt.Sprint(got) != fmt.Sprint(backoff) {
		t.Errorf("retries alone for %v: %v, want %v", node.BootstrapFastFor, got, backoff)
	}
	if r := node.BootstrapRetry(iv, iv, 0, node.BootstrapFastFor-s); r != s {
		t.Errorf("retry alone after a long wait: %v, want 1s", r)
	}
	if r := node.BootstrapRetry(0, 300*time.Millisecond, 0, 0); r != 300*time.Millisecond {
		t.Errorf("retry alone with an interval under a second: %v, want the interval", r)
	}
}

// TestRedialPace: the discovery loop's redials to an unreachable bootstrap
// peer come every second while the host is alone, for a minute, then back
// off; a round that finds a peer resets both, so a host that loses its
// peers much later redials every second again at once.
func TestRedialPace(t *testing.T) {
	const iv = 10 * time.Second
	s := time.Second
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var p node.RedialPace
	type round struct {
		at          time.Duration // after t0
		unreachable bool
		peers       int
		want        time.Duration // 0: no redial
	}
	for i, r := range []round{
		{0, true, 0, s},
		{30 * s, true, 0, s},
		{59 * s, true, 0, s},
		{61 * s, true, 0, 2 * s}, // a minute alone: back off
		{63 * s, true, 0, 4 * s},
		{70 * s, false, 1, 0},       // met it
		{80 * s, false, 1, 0},       // and kept it
		{5 * time.Hour, true, 0, s}, // lost it hours later: every second again
		{5*time.Hour + s, true, 0, s},
		{5*time.Hour + 2*s, true, 2, 2 * s}, // peers, but not the bootstrap one: backing off
		{5*time.Hour + 4*s, true, 2, 4 * s},
		{5*time.Hour + 8*s, true, 0, s}, // alone again
	} {
		got, ok := p.Next(iv, r.unreachable, r.peers, t0.Add(r.at))
		if ok != (r.want > 0) || got != r.want {
			t.Fatalf("round %d (%v, unreachable %v, %d peers): wait %v, redial %v; want %v", i, r.at, r.unreachable, r.peers, got, ok, r.want)
		}
	}
}

// goroutinesIn counts the goroutines with a frame whose function name
// contains fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	k := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			k++
		}
	}
	return k
}

// TestBootstrapStartingLater: a node whose bootstrap peer starts after it
// (a node that waits for its external trainer listens only once one has
// registered) connects within seconds of it, not a discovery interval
// later, and not after the swarm's dial backoff: the interval here is an
// hour.
func TestBootstrapStartingLater(t *testing.T) {
	checkGoroutines(t)
	key, _, err := crypto.GenerateKeyPair(crypto.Ed25519, -1)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	port, err := testnet.FreePort("tcp")
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)
	cfg := func() node.HostConfig {
		return node.HostConfig{Profile: node.ProfileLocal, Network: "late", Listen: []string{"/ip4/127.0.0.1/tcp/0"},
			DiscoveryInterval: time.Hour, Gossip: gossip.DefaultConfig()}
	}
	c := cfg()
	if c.Bootstrap, err = node.ParseBootstrap([]string{addr + "/p2p/" + id.String()}); err != nil {
		t.Fatal(err)
	}
	bkey, _, _ := crypto.GenerateKeyPair(crypto.Ed25519, -1)
	b, err := node.NewHost(bkey, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	eventually(t, time.Minute, "the first dial to fail", func() bool { return b.BootstrapErrors()[id] != nil })
	ac := cfg()
	ac.Listen = []string{addr}
	a, err := node.NewHost(key, ac, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	eventually(t, time.Minute, "the late bootstrap peer to be dialled", func() bool {
		return b.Network().Connectedness(id) == network.Connected
	})
}

// TestAnnounceReplacesTheListenAddresses: a host given --announce tells
// its peers (identify, and so the DHT) only the announced address, and
// reports it as its own, while it still listens where it was told to.
func TestAnnounceReplacesTheListenAddresses(t *testing.T) {
	checkGoroutines(t)
	const announced = "/ip4/127.0.0.1/udp/9/quic-v1"
	var hosts []*node.Host
	for i := range 2 {
		key, _, err := crypto.GenerateKeyPair(crypto.Ed25519, -1)
		if err != nil {
			t.Fatal(err)
		}
		cfg := node.HostConfig{Profile: node.ProfileLocal, Network: "announce", Listen: []string{"/ip4/127.0.0.1/tcp/0"},
			DiscoveryInterval: time.Hour, Gossip: gossip.DefaultConfig()}
		if i == 0 {
			cfg.Announce = []string{announced}
		} else {
			// The announced address leads nowhere: dial the one host 0
			// listens on.
			addr := hosts[0].Network().ListenAddresses()[0].String() + "/p2p/" + hosts[0].ID().String()
			if cfg.Bootstrap, err = node.ParseBootstrap([]string{addr}); err != nil {
				t.Fatal(err)
			}
		}
		h, err := node.NewHost(key, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		hosts = append(hosts, h)
	}
	a, b := hosts[0], hosts[1]
	if got := a.FullAddrs(); len(got) != 1 || got[0] != announced+"/p2p/"+a.ID().String() {
		t.Errorf("host reports %v, want only its announced address", got)
	}
	if l := a.Network().ListenAddresses(); len(l) != 1 || !strings.Contains(l[0].String(), "/tcp/") {
		t.Errorf("host listens on %v, want its TCP listen address", l)
	}
	eventually(t, time.Minute, "identify to tell b a's addresses", func() bool {
		return len(b.Peerstore().Addrs(a.ID())) > 0 && slicesContain(b.Peerstore().Addrs(a.ID()), announced)
	})
	// b keeps the address it dialled (the bootstrap address it was given)
	// and learns only the announced one besides.
	for _, addr := range b.Peerstore().Addrs(a.ID()) {
		if s := addr.String(); s != announced && !strings.Contains(s, "/tcp/") {
			t.Errorf("b learned %s for a", s)
		}
	}
	if _, err := node.ParseAnnounce([]string{"/ip4/1.2.3.4/tcp/1/p2p/" + a.ID().String()}); err == nil {
		t.Error("an announce address with /p2p/ was taken")
	}
}

func slicesContain[T fmt.Stringer](xs []T, s string) bool {
	for _, x := range xs {
		if x.String() == s {
			return true
		}
	}
	return false
}
