package gossip

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	noise "github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"go.uber.org/goleak"
)

// checkLeaks fails the test if goroutines outlive it. Call it first, so its
// cleanup runs after every host and service has been closed.
func checkLeaks(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

// newHost starts a real libp2p host on 127.0.0.1 only, with one transport,
// no relay, no NAT port mapping and no metrics, and the resource-manager
// limits the node will use (ProtocolLimits); over TCP it prefers Noise to
// TLS, as the node does, so that the benchmarks measure the node's stack.
// It is closed when the test ends.
func newHost(t testing.TB, transport string, cfg Config) host.Host {
	t.Helper()
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	ProtocolLimits(&limits, cfg)
	return startHost(t, transport, limits.AutoScale())
}

// newAttackerHost is a host with no resource limits of its own: an
// attacker does not limit itself.
func newAttackerHost(t testing.TB, transport string) host.Host {
	t.Helper()
	return startHost(t, transport, rcmgr.InfiniteLimits)
}

func startHost(t testing.TB, transport string, limits rcmgr.ConcreteLimitConfig) host.Host {
	t.Helper()
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits))
	if err != nil {
		t.Fatal(err)
	}
	opts := []libp2p.Option{
		libp2p.ResourceManager(rm),
		libp2p.DisableRelay(),
		libp2p.DisableMetrics(),
	}
	switch transport {
	case "tcp":
		opts = append(opts, libp2p.Transport(tcp.NewTCPTransport), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
			libp2p.Security(libp2ptls.ID, libp2ptls.New), libp2p.Security(noise.ID, noise.New)) // as a node's host
	case "quic":
		opts = append(opts, libp2p.Transport(quic.NewTransport), libp2p.ListenAddrStrings("/ip4/127.0.0.1/udp/0/quic-v1"))
	default:
		t.Fatalf("unknown transport %q", transport)
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func connect(t testing.TB, a, b host.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// testConfig is the service config of the network tests: short deadlines
// so stalls are detected quickly, small chunks so frames have several.
func testConfig(n int) Config {
	c := DefaultConfig()
	c.Fingerprint = testFP
	c.Elements = n
	c.MaxElements = 1 << 20
	c.ChunkSize = 4 * MinChunkSize
	c.ChunkTimeout = 500 * time.Millisecond
	c.ExchangeTimeout = 10 * time.Second
	c.Logger = slog.New(slog.DiscardHandler)
	return c
}

// eventually polls cond until it holds or 10s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// goroutinesIn counts goroutines whose stack contains fn.
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
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			count++
		}
	}
	return count
}

// slowLimiter lets every upload piece wait d, so a sender is still writing
// a frame when the receiver has read its header.
type slowLimiter struct{ d time.Duration }

func (l slowLimiter) WaitN(ctx context.Context, _ int) error {
	select {
	case <-time.After(l.d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
