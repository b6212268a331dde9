package node_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
)

// echoProto is a test protocol: the server writes back what it read.
const echoProto = protocol.ID("/meshtrain/test-echo/1.0.0")

// newPrivateHost starts a host on 127.0.0.1 (TCP) with the settings edit
// makes to a default config, and an echo handler. It closes with the test.
// Its discovery loop runs once, at the start, before it knows any peer:
// a later round would dial the peers in its DHT routing table behind the
// test's back.
func newPrivateHost(t *testing.T, edit func(*node.HostConfig)) *node.Host {
	t.Helper()
	key, _, err := crypto.GenerateKeyPair(crypto.Ed25519, -1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.HostConfig{Profile: node.ProfileLocal, Network: "private", Listen: []string{"/ip4/127.0.0.1/tcp/0"},
		DiscoveryInterval: time.Hour, Gossip: gossip.DefaultConfig()}
	if edit != nil {
		edit(&cfg)
	}
	h, err := node.NewHost(key, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	h.SetStreamHandler(echoProto, func(s network.Stream) {
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(io.LimitReader(s, 64))
		if err != nil {
			_ = s.Reset()
			return
		}
		_, _ = s.Write(b)
	})
	return h
}

// talk dials b from a and runs one echo exchange. Dial backoff is bypassed,
// so that an earlier refusal does not decide the answer.
func talk(t *testing.T, a, b *node.Host) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ctx = network.WithForceDirectDial(ctx, "test")
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	s, err := a.NewStream(ctx, b.ID(), echoProto)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	msg := []byte("hello " + b.ID().String())
	if _, err := s.Write(msg); err != nil {
		_ = s.Reset()
		return fmt.Errorf("write: %w", err)
	}
	if err := s.CloseWrite(); err != nil {
		_ = s.Reset()
		return fmt.Errorf("close write: %w", err)
	}
	got, err := io.ReadAll(s)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo: got %q, want %q", got, msg)
	}
	return nil
}

// disconnect drops every connection between a and b, so that the next talk
// has to dial again.
func disconnect(t *testing.T, a, b *node.Host) {
	t.Helper()
	eventually(t, 10*time.Second, "the hosts to disconnect", func() bool {
		_ = a.Network().ClosePeer(b.ID())
		_ = b.Network().ClosePeer(a.ID())
		return a.Network().Connectedness(b.ID()) != network.Connected &&
			b.Network().Connectedness(a.ID()) != network.Connected
	})
}

func newPSK(t *testing.T) pnet.PSK {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func withPSK(k pnet.PSK) func(*node.HostConfig) {
	return func(c *node.HostConfig) { c.PSK = k }
}

// TestPrivateNetworkPSK: hosts sharing a key talk; a host without the key
// or with another key cannot connect to a keyed host, in either direction.
func TestPrivateNetworkPSK(t *testing.T) {
	checkGoroutines(t)
	key, other := newPSK(t), newPSK(t)
	a := newPrivateHost(t, withPSK(key))
	b := newPrivateHost(t, withPSK(key))
	open := newPrivateHost(t, nil)
	stranger := newPrivateHost(t, withPSK(other))

	if err := talk(t, a, b); err != nil {
		t.Fatalf("same key: %v", err)
	}
	cases := []struct {
		name     string
		from, to *node.Host
	}{
		{"no key to keyed", open, a},
		{"keyed to no key", a, open},
		{"other key to keyed", stranger, a},
		{"keyed to other key", a, stranger},
	}
	// Some of these fail only when the handshake times out: wait for them
	// together.
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() { errs[i] = talk(t, c.from, c.to) })
	}
	wg.Wait()
	for i, c := range cases {
		if errs[i] == nil {
			t.Errorf("%s: connected and exchanged, want a failed dial", c.name)
		} else {
			t.Logf("%s: %v", c.name, errs[i])
		}
	}
	// a still takes and makes connections with keyed hosts after the
	// strangers' attempts. The two are hosts a has never met: a redial
	// between a and b (b dialing back) can meet a DHT query of a's to b,
	// its routing table's peer, at the same moment, and with both hosts
	// dialing from their listening ports that is one TCP connection on
	// which both start a Noise handshake as its initiator ("noise: message
	// is too short"). That is a race of any two libp2p hosts that know each
	// other, not of the key: it failed this test about once in 60 runs.
	if err := talk(t, newPrivateHost(t, withPSK(key)), a); err != nil {
		t.Fatalf("same key, to a: %v", err)
	}
	if err := talk(t, a, newPrivateHost(t, withPSK(key))); err != nil {
		t.Fatalf("same key, from a: %v", err)
	}
}

// TestPrivateNetworkRefusesQUIC: go-libp2p's QUIC transport cannot carry a
// private network, so asking for both is a configuration error, and the
// default listen addresses of a keyed host are TCP only (on every profile:
// TestDefaultListen).
func TestPrivateNetworkRefusesQUIC(t *testing.T) {
	checkGoroutines(t)
	key, _, err := crypto.GenerateKeyPair(crypto.Ed25519, -1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.HostConfig{Profile: node.ProfileLocal, Network: "private", PSK: newPSK(t), Gossip: gossip.DefaultConfig(),
		Listen: []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}}
	h, err := node.NewHost(key, cfg, nil)
	if err == nil {
		_ = h.Close()
		t.Fatal("a private network host listening on QUIC was built")
	}
	if !strings.Contains(err.Error(), "quic-v1") || !strings.Contains(err.Error(), "TCP only") {
		t.Errorf("error does not name the QUIC address and the reason: %v", err)
	}

	cfg.Listen = nil
	h, err = node.NewHost(key, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if len(h.Addrs()) == 0 {
		t.Fatal("no listen addresses")
	}
	for _, a := range h.Addrs() {
		if _, err := a.ValueForProtocol(ma.P_TCP); err != nil || strings.Contains(a.String(), "/quic") {
			t.Errorf("default listen address %s of a private network host is not TCP", a)
		}
	}
}

// TestDefaultListen: with no --listen, a host listens on TCP and QUIC on
// all interfaces; TCP only with a private network key, whatever the
// profile, and TCP only on 127.0.0.1 in the local profile.
func TestDefaultListen(t *testing.T) {
	for _, c := range []struct {
		profile node.Profile
		psk     bool
		want    []string
	}{
		{node.ProfileLocal, false, []string{"/ip4/127.0.0.1/tcp/0"}},
		{node.ProfileLocal, true, []string{"/ip4/127.0.0.1/tcp/0"}},
		{node.ProfileLAN, false, []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}},
		{node.ProfileLAN, true, []string{"/ip4/0.0.0.0/tcp/0"}},
		{node.ProfilePublic, false, []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}},
		{node.ProfilePublic, true, []string{"/ip4/0.0.0.0/tcp/0"}},
	} {
		if got := node.DefaultListen(c.profile, c.psk); !slices.Equal(got, c.want) {
			t.Errorf("profile %s, psk %v: listens on %v, want %v", c.profile, c.psk, got, c.want)
		}
	}
}
