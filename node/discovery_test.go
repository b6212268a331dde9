package node_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
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
