package node

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshtrain/meshtrain/gossip"
)

// loopbackHost is a plain libp2p host on 127.0.0.1 (TCP only) that may
// dial and accept relayed connections; it is closed when the test ends.
func loopbackHost(t *testing.T, opts ...libp2p.Option) host.Host {
	t.Helper()
	h, err := libp2p.New(append([]libp2p.Option{libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics(),
		libp2p.EnableRelay(), libp2p.ForceReachabilityPrivate()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// wrapHost makes h a Host as far as reach.go is concerned, with background
// dials waiting punchWait for a hole punch.
func wrapHost(t *testing.T, h host.Host, cfg HostConfig, punchWait time.Duration) *Host {
	t.Helper()
	w := newReachWatch()
	w.punchWait = punchWait
	w.setNetwork(h.Network())
	h.Network().Notify(&network.NotifyBundle{DisconnectedF: w.disconnected})
	ctx, cancel := context.WithCancel(context.Background())
	n := &Host{Host: h, cfg: cfg, reach: w, ctx: ctx, cancel: cancel, log: slog.New(slog.DiscardHandler)}
	t.Cleanup(func() {
		w.close()
		cancel()
		n.wg.Wait()
	})
	return n
}

// behindRelay starts a host with a reservation on the circuit relay r and
// returns it with its relayed address.
func behindRelay(ctx context.Context, t *testing.T, r host.Host) (host.Host, ma.Multiaddr) {
	t.Helper()
	a := loopbackHost(t)
	rInfo := peer.AddrInfo{ID: r.ID(), Addrs: r.Addrs()}
	if err := a.Connect(ctx, rInfo); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Reserve(ctx, a, rInfo); err != nil {
		t.Fatalf("reservation on the relay: %v", err)
	}
	return a, ma.StringCast(r.Addrs()[0].String() + "/p2p/" + r.ID().String() + "/p2p-circuit")
}

// On loopback, with a real circuit relay: a peer reached through the relay
// only is on the relayed path, a background dial that gets no further
// reports ErrRelayedOnly, the averager leaves the peer out without a dial
// or an exchange, and the relay's own counters see the circuit. A hole
// punch's direct connection is then marked as such.
func TestRelayedPeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	relayWatch := newReachWatch()
	r := loopbackHost(t)
	if _, err := relayv2.New(r, relayv2.WithLimit(relayLimit()), relayv2.WithMetricsTracer(&relayWatch.relay)); err != nil {
		t.Fatal(err)
	}
	relayHost := &Host{Host: r, cfg: HostConfig{Profile: ProfilePublic, DHTServer: true}, reach: relayWatch}
	a, circuit := behindRelay(ctx, t, r)
	b := wrapHost(t, loopbackHost(t), HostConfig{Profile: ProfilePublic}, 300*time.Millisecond)

	if got, kind := b.PathTo(a.ID()).Path, b.PathKind(a.ID()); got != PathNone || kind != got {
		t.Fatalf("path before any dial: %s (kind %s)", got, kind)
	}
	done := make(chan error, 1)
	if !b.Reach(a.ID(), []ma.Multiaddr{circuit}, func(_ peer.ID, err error) { done <- err }) {
		t.Fatal("Reach refused the first dial")
	}
	if b.Reach(a.ID(), []ma.Multiaddr{circuit}, func(peer.ID, error) { t.Error("a second dial under way reported") }) {
		t.Error("Reach started a second dial to the same peer while the first was under way")
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrRelayedOnly) {
			t.Fatalf("background dial through the relay: %v, want ErrRelayedOnly", err)
		}
	case <-ctx.Done():
		t.Fatal("the background dial never reported")
	}
	pp := b.PathTo(a.ID())
	if pp.Path != PathRelayed || !strings.Contains(pp.RemoteAddr, "/p2p-circuit") {
		t.Fatalf("path to a peer reached through a relay: %+v", pp)
	}
	if kind := b.PathKind(a.ID()); kind != PathRelayed {
		t.Fatalf("path kind through a relay: %s", kind)
	}

	rs := newReachState(b)
	if got := rs.candidates([]gossip.PeerInfo{info(a.ID(), 1)}, time.Now()); len(got) != 0 {
		t.Errorf("a relayed peer is a candidate: %v", got)
	}
	if rs.relayedSkips.Load() != 1 || rs.dials.Load() != 0 {
		t.Errorf("relayed skips %d, dials %d; want 1 and 0", rs.relayedSkips.Load(), rs.dials.Load())
	}

	svc := relayHost.Reachability().RelayService
	if svc == nil || svc.CircuitsTotal < 1 || svc.ReservationsTotal != 1 || svc.BytesRelayed == 0 ||
		svc.LimitS != 120 || svc.LimitBytes != 128<<10 {
		t.Errorf("relay service status %+v: want the reservation, a circuit, relayed bytes and the 2 min, 128 KiB limit", svc)
	}
	if got := relayHost.Reachability(); got.Status != "private" || !got.Forced {
		// The plain test host forces private; the status reads it from libp2p.
		t.Errorf("relay host reachability %+v", got)
	}

	// A hole punch: its events bracket a direct connection, which is then
	// the one streams use, and is marked as punched.
	start := time.Now()
	b.reach.Trace(&holepunch.Event{Timestamp: start.UnixNano(), Remote: a.ID(), Type: holepunch.StartHolePunchEvtT})
	direct := network.WithForceDirectDial(ctx, "test")
	if err := b.Connect(direct, peer.AddrInfo{ID: a.ID(), Addrs: a.Addrs()}); err != nil {
		t.Fatal(err)
	}
	b.reach.Trace(&holepunch.Event{Timestamp: time.Now().UnixNano(), Remote: a.ID(), Type: holepunch.EndHolePunchEvtT,
		Evt: &holepunch.EndHolePunchEvt{Success: true}})
	pp = b.PathTo(a.ID())
	if pp.Path != PathDirect || !pp.HolePunched || pp.HolePunches != 1 || pp.HolePunchesOK != 1 || pp.LastHolePunch != "succeeded" ||
		strings.Contains(pp.RemoteAddr, "p2p-circuit") {
		t.Errorf("after a successful hole punch: %+v", pp)
	}
	if kind := b.PathKind(a.ID()); kind != PathDirect {
		t.Errorf("path kind with a direct and a relayed connection: %s", kind)
	}
	if got := rs.candidates([]gossip.PeerInfo{info(a.ID(), 1)}, time.Now()); len(got) != 1 {
		t.Errorf("a peer with a hole-punched connection is not a candidate")
	}
	if rs.begin(a.ID()) != exchangeHolePunched {
		t.Errorf("an exchange with it is not counted as hole punched")
	}
	if st := b.Reachability(); st.HolePunches != 1 || st.HolePunchesOK != 1 {
		t.Errorf("host totals: %d hole punches, %d ok", st.HolePunches, st.HolePunchesOK)
	}
	// Once the direct connection closes, the mark goes with it.
	for _, c := range b.Network().ConnsToPeer(a.ID()) {
		if !c.Stat().Limited {
			_ = c.Close()
		}
	}
	if pp := b.PathTo(a.ID()); pp.HolePunched {
		t.Errorf("a closed hole-punched connection is still marked: %+v", pp)
	}
}

// A relayed connection on which no hole punch ever started (libp2p starts
// one only as the connection opens, and not at all if a side did not know
// its public address yet) is closed once relayRetryAfter has passed, so
// that the next round dials a new one; one on which a hole punch was
// tried, and failed, is kept, as is one a punch is under way on, or a
// young one. A retried peer backs off before the new dial.
func TestRelayedPeerWithoutHolePunchIsRetried(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := loopbackHost(t)
	if _, err := relayv2.New(r, relayv2.WithLimit(relayLimit())); err != nil {
		t.Fatal(err)
	}
	a, circuit := behindRelay(ctx, t, r)
	b := wrapHost(t, loopbackHost(t), HostConfig{Profile: ProfilePublic}, 100*time.Millisecond)
	b.reach.retryAfter = time.Minute
	done := make(chan error, 1)
	if !b.Reach(a.ID(), []ma.Multiaddr{circuit}, func(_ peer.ID, err error) { done <- err }) {
		t.Fatal("Reach refused the first dial")
	}
	if err := <-done; !errors.Is(err, ErrRelayedOnly) {
		t.Fatalf("background dial through the relay: %v, want ErrRelayedOnly", err)
	}
	conns := b.Network().ConnsToPeer(a.ID())
	if len(conns) != 1 || !conns[0].Stat().Limited {
		t.Fatalf("want one relayed connection, have %d", len(conns))
	}
	opened := conns[0].Stat().Opened
	later := opened.Add(b.reach.retryAfter)
	punch := func(typ string, at time.Time) {
		b.reach.Trace(&holepunch.Event{Timestamp: at.UnixNano(), Remote: a.ID(), Type: typ, Evt: &holepunch.EndHolePunchEvt{}})
	}

	if b.RetryRelayed(a.ID(), later.Add(-time.Millisecond)) {
		t.Error("a relayed connection younger than relayRetryAfter was closed")
	}
	punch(holepunch.StartHolePunchEvtT, opened.Add(-2*time.Second))
	if b.RetryRelayed(a.ID(), later) {
		t.Error("a relayed connection was closed while a hole punch was under way")
	}
	punch(holepunch.EndHolePunchEvtT, opened.Add(time.Millisecond))
	if b.RetryRelayed(a.ID(), later) {
		t.Error("a relayed connection whose hole punch failed was closed (a symmetric NAT: the pair stays skipped)")
	}
	if b.PathKind(a.ID()) != PathRelayed {
		t.Fatal("the relayed connection is gone")
	}

	// The latest punch ended before this connection opened: none started
	// on it.
	punch(holepunch.StartHolePunchEvtT, opened.Add(-2*time.Second))
	punch(holepunch.EndHolePunchEvtT, opened.Add(-time.Second))
	rs := newReachState(b)
	peers := []gossip.PeerInfo{info(a.ID(), 1)}
	if got := rs.candidates(peers, later); len(got) != 0 {
		t.Errorf("a relayed peer is a candidate: %v", got)
	}
	if rs.relayedSkips.Load() != 1 || rs.relayRetries.Load() != 1 {
		t.Errorf("relayed skips %d, retries %d; want 1 and 1", rs.relayedSkips.Load(), rs.relayRetries.Load())
	}
	if kind := b.PathKind(a.ID()); kind != PathNone {
		t.Fatalf("path after the retry: %s, want none", kind)
	}
	rs.candidates(peers, later)
	if rs.dials.Load() != 0 || rs.backingOff.Load() != 1 {
		t.Errorf("right after the retry: %d dials, %d backing off; want 0 and 1", rs.dials.Load(), rs.backingOff.Load())
	}
	rs.candidates(peers, later.Add(reachBackoffMax))
	if rs.dials.Load() != 1 {
		t.Errorf("after the backoff: %d dials, want 1", rs.dials.Load())
	}
	select {
	case res := <-rs.results:
		// On loopback, b has learned a's own addresses by now and may
		// reach it directly.
		if res.err != nil && !errors.Is(res.err, ErrRelayedOnly) {
			t.Fatalf("the new dial: %v", res.err)
		}
		if kind := b.PathKind(a.ID()); kind == PathNone {
			t.Fatalf("the new dial reported %v, but there is no connection", res.err)
		}
	case <-ctx.Done():
		t.Fatal("the new dial never reported")
	}
}
