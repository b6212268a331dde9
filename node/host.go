package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
	dutil "github.com/libp2p/go-libp2p/p2p/discovery/util"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	noise "github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	libp2pquic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshtrain/meshtrain/gossip"
)

// Profile selects how far a node reaches out. None of them sends traffic the
// user did not ask for: local stays on loopback, lan adds mDNS on the local
// network, public adds NAT port mapping, AutoNAT, relays and hole punching.
type Profile string

const (
	ProfileLocal  Profile = "local"
	ProfileLAN    Profile = "lan"
	ProfilePublic Profile = "public"
)

// ParseProfile validates a profile name.
func ParseProfile(s string) (Profile, error) {
	switch p := Profile(s); p {
	case ProfileLocal, ProfileLAN, ProfilePublic:
		return p, nil
	}
	return "", fmt.Errorf("node: unknown profile %q (want local, lan or public)", s)
}

// DHTPrefix keeps meshtrain's DHT apart from the public IPFS DHT.
const DHTPrefix = "/meshtrain"

// rendezvous is the DHT key peers of one network advertise under.
func rendezvous(network string) string { return "meshtrain/" + network }

// HostConfig configures the libp2p host and discovery.
type HostConfig struct {
	Profile Profile
	// Listen are multiaddrs to listen on; empty means the profile's
	// default (TCP and QUIC on an OS-chosen port on all interfaces; TCP
	// only on 127.0.0.1 for local).
	Listen []string
	// Announce, if not empty, is the addresses the host tells peers (in
	// identify and the DHT) in place of its listen addresses: those of a
	// port forward or an emulated network in front of it. See
	// announceOption.
	Announce []string
	// Bootstrap peers to connect to at start (full multiaddrs with /p2p/ID).
	Bootstrap []peer.AddrInfo
	// Network keeps meshes apart: the DHT rendezvous and mDNS service name
	// carry it.
	Network string
	// DHTServer forces DHT server mode (bootstrap nodes). The local and lan
	// profiles always serve; public volunteers default to auto mode.
	DHTServer bool
	// PSK makes a private network (TCP only: go-libp2p's QUIC does not
	// support private networks).
	PSK pnet.PSK
	// AllowPeers, if not empty, is the only peers this host talks to.
	AllowPeers []peer.ID
	// Refuse, if set, is asked on every dial and every secured inbound
	// connection; true refuses the peer (the node uses it for bans). It must
	// be fast and must not call into the host.
	Refuse func(peer.ID) bool
	// ConnLow and ConnHigh are the connection manager's watermarks.
	ConnLow, ConnHigh int
	// DiscoveryInterval is how often the node advertises itself and looks
	// for peers on the DHT (default 10 s; a minute on public).
	DiscoveryInterval time.Duration
	// RelayBootDelay (public profile) is how long after the start AutoRelay
	// may wait to collect several relay candidates before it reserves a
	// slot with fewer; 0 means DefaultRelayBootDelay.
	RelayBootDelay time.Duration
	// Gossip sets the resource limits raised for parameter streams.
	Gossip gossip.Config
}

// Host is a libp2p host with meshtrain's discovery running on it.
type Host struct {
	host.Host
	DHT  *dht.IpfsDHT
	cfg  HostConfig
	log  *slog.Logger
	gate *Gate

	// reach follows hole punches, the relay service and background dials
	// (reach.go).
	reach *reachWatch

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mdns   mdns.Service
	once   sync.Once
	err    error

	// bootMu guards bootErr: the latest failed dial of each bootstrap peer
	// (nil once it connected), for the lone-node diagnosis.
	bootMu  sync.Mutex
	bootErr map[peer.ID]error
}

// BootstrapErrors returns the bootstrap peers whose latest dial failed,
// with the error.
func (n *Host) BootstrapErrors() map[peer.ID]error {
	n.bootMu.Lock()
	defer n.bootMu.Unlock()
	out := make(map[peer.ID]error, len(n.bootErr))
	for p, err := range n.bootErr {
		if err != nil {
			out[p] = err
		}
	}
	return out
}

// NewHost builds and starts the host: transports, security, limits,
// connection manager, DHT, and the discovery loops.
func NewHost(key crypto.PrivKey, cfg HostConfig, log *slog.Logger) (*Host, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "host")
	if cfg.Profile == "" {
		cfg.Profile = ProfileLocal
	}
	if cfg.ConnLow == 0 {
		cfg.ConnLow, cfg.ConnHigh = 32, 96
	}
	if cfg.DiscoveryInterval == 0 {
		cfg.DiscoveryInterval = 10 * time.Second
		if cfg.Profile == ProfilePublic {
			cfg.DiscoveryInterval = time.Minute
		}
	}
	if cfg.RelayBootDelay == 0 {
		cfg.RelayBootDelay = DefaultRelayBootDelay
	}
	listen := cfg.Listen
	if len(listen) == 0 {
		listen = defaultListen(cfg.Profile, cfg.PSK != nil)
		if cfg.PSK != nil && cfg.Profile != ProfileLocal {
			log.Info("private network: listening on TCP only, QUIC is off (go-libp2p's QUIC does not support private networks)")
		}
	}
	if cfg.PSK != nil {
		for _, a := range listen {
			if strings.Contains(a, "/quic") {
				return nil, fmt.Errorf("node: listen address %s: a private network (--psk) is TCP only", a)
			}
		}
	}
	cm, err := connmgr.NewConnManager(cfg.ConnLow, cfg.ConnHigh, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		return nil, fmt.Errorf("node: connection manager: %w", err)
	}
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	gossip.ProtocolLimits(&limits, cfg.Gossip)
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()))
	if err != nil {
		return nil, fmt.Errorf("node: resource manager: %w", err)
	}
	gate := NewGate(cfg.AllowPeers, cfg.Refuse, log)
	opts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.ListenAddrStrings(listen...),
		libp2p.Transport(tcp.NewTCPTransport),
		// TLS 1.3 first: the dialer's first choice wins, and its AES-GCM
		// runs on the CPU's AES instructions, where Noise's ChaCha20-Poly1305
		// took 16-18% of a sync node's CPU (docs/benchmarks.md). Noise
		// stays for peers that offer only it.
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Security(noise.ID, noise.New),
		libp2p.DefaultMuxers,
		libp2p.ConnectionManager(cm),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionGater(gate),
		libp2p.UserAgent(AgentVersion()),
		libp2p.DisableMetrics(),
	}
	if len(cfg.Announce) > 0 {
		opt, err := announceOption(cfg.Announce)
		if err != nil {
			rm.Close()
			return nil, err
		}
		opts = append(opts, opt)
	}
	if cfg.PSK != nil {
		opts = append(opts, libp2p.PrivateNetwork(cfg.PSK))
	} else {
		opts = append(opts, libp2p.Transport(libp2pquic.NewTransport))
	}
	watch, relays := newReachWatch(), &relaySource{}
	switch cfg.Profile {
	case ProfilePublic:
		// Every public node helps the others learn their reachability
		// (AutoNAT v1 and v2 services), relays for peers behind NAT once it
		// is reachable itself, and, behind NAT, finds a relay among its
		// peers, advertises the relayed address and upgrades relayed
		// connections by hole punching (reach.go).
		opts = append(opts, libp2p.NATPortMap(), libp2p.EnableRelay(), libp2p.EnableAutoNATv2(), libp2p.EnableNATService(),
			libp2p.EnableHolePunching(holepunch.WithTracer(watch)),
			libp2p.EnableRelayService(relayv2.WithLimit(relayLimit()), relayv2.WithMetricsTracer(&watch.relay)),
			libp2p.EnableAutoRelayWithPeerSource(relays.candidates, autorelay.WithBootDelay(cfg.RelayBootDelay),
				autorelay.WithMinInterval(relayMinInterval)))
		if cfg.DHTServer {
			// A bootstrap node is reachable by definition (volunteers are
			// given its address): it relays and serves from the start
			// rather than after AutoNAT, which needs other reachable peers
			// to confirm it: a mesh with one bootstrap node has none.
			opts = append(opts, libp2p.ForceReachabilityPublic())
		}
	default:
		// No relay, no NAT port mapping (UPnP/NAT-PMP), no AutoNAT: nothing
		// leaves the machine or the LAN unless the user asked for it.
		opts = append(opts, libp2p.DisableRelay(), libp2p.ForceReachabilityPrivate())
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		return nil, fmt.Errorf("node: libp2p host: %w", err)
	}
	mode := dht.ModeAuto
	if cfg.Profile != ProfilePublic || cfg.DHTServer {
		mode = dht.ModeServer
	}
	kad, err := dht.New(h, dht.Mode(mode), dht.ProtocolPrefix(DHTPrefix), dht.BootstrapPeers(cfg.Bootstrap...))
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("node: DHT: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Host{Host: h, DHT: kad, cfg: cfg, log: log, gate: gate, reach: watch, ctx: ctx, cancel: cancel}
	watch.setNetwork(h.Network())
	h.Network().Notify(&network.NotifyBundle{DisconnectedF: watch.disconnected})
	relays.h.Store(n)
	if cfg.Profile == ProfileLAN {
		n.mdns = mdns.NewMdnsService(h, "meshtrain-"+cfg.Network, mdnsNotifee{n: n, ctx: ctx})
		if err := n.mdns.Start(); err != nil {
			n.Close()
			return nil, fmt.Errorf("node: mDNS: %w", err)
		}
	}
	n.wg.Add(1)
	go n.discover(ctx)
	if cfg.Profile == ProfilePublic {
		n.wg.Add(1)
		go n.watchReachability(ctx, log)
	}
	return n, nil
}

// defaultListen is where a host listens when not told: TCP and QUIC on
// an OS-chosen port on all interfaces; TCP only with a private network
// key (go-libp2p's QUIC cannot carry one) and on 127.0.0.1 in the local
// profile. One machine's nodes need none of what QUIC is for (hole
// punching, no head-of-line blocking on lossy paths), and on 127.0.0.1 it
// costs more CPU per byte than TCP: a stream copy runs at about a third
// of TCP's speed (docs/performance.md), and 40 nodes of one testnet used
// 26% less CPU for the same steps on TCP alone (docs/scale.md).
func defaultListen(p Profile, psk bool) []string {
	if p == ProfileLocal {
		return []string{"/ip4/127.0.0.1/tcp/0"}
	}
	out := []string{"/ip4/0.0.0.0/tcp/0"}
	if !psk {
		out = append(out, "/ip4/0.0.0.0/udp/0/quic-v1")
	}
	return out
}

// relayLimit is what the relay a public node serves lets through one
// relayed connection: libp2p's default, 2 minutes and 128 KiB in each
// direction. That is enough for the hole punch and the small messages
// around it, not for a model (about 0.5 MB for the default MLP at fp16),
// and models are never sent over a relay (reach.go): a relay thus costs
// its operator little, at most 128 KiB each way per relayed connection.
func relayLimit() *relayv2.RelayLimit { return relayv2.DefaultLimit() }

// FullAddrs returns the host's listen addresses with its peer ID, the form
// another node's --bootstrap takes.
func (n *Host) FullAddrs() []string {
	var out []string
	for _, a := range n.Addrs() {
		out = append(out, a.String()+"/p2p/"+n.ID().String())
	}
	return out
}

// GateRefused is how many dials and connections the host refused because
// of HostConfig.AllowPeers or HostConfig.Refuse.
func (n *Host) GateRefused() uint64 { return n.gate.Refused() }

// Discovery backs off while the host is well connected. A node that has
// joined the swarm learns its partners from the announcements, so a DHT
// round (a lookup of our own key and one of the rendezvous, each asking up
// to 20 peers) mostly finds peers it already has; with 40 nodes on one
// machine the rounds every 10 s and the answers to the others' were about
// a tenth of each node's CPU.
const (
	// discoveryEnough is the number of connected peers at which the host
	// starts to stretch the wait between rounds.
	discoveryEnough = 8
	// discoveryMaxWait is the longest wait between rounds, in
	// DiscoveryIntervals (1 min on local and lan, 6 min on public).
	discoveryMaxWait = 6
)

// discoveryWait is the wait after a round: the interval while the host has
// fewer than discoveryEnough peers, else double the previous wait, up to
// discoveryMaxWait intervals.
func discoveryWait(prev, interval time.Duration, peers int) time.Duration {
	if peers < discoveryEnough {
		return interval
	}
	return min(max(2*prev, interval), discoveryMaxWait*interval)
}

// bootstrapFastFor is how long a host with no peer at all redials an
// unreachable bootstrap peer every second, before it backs off.
const bootstrapFastFor = time.Minute

// bootstrapRetry is the wait before the next dial of an unreachable
// bootstrap peer, after a wait of prev (0 before the first), given the
// host's peers and how long it has had none: 1 s for the first
// bootstrapFastFor alone, for the host has nothing to train with until
// one answers (two nodes started together, each listening only once its
// trainer registers, would otherwise meet up to a discovery interval
// after the later one listens); else double the last wait, from 1 s up to
// the interval, so a bootstrap peer that keeps turning us away is not
// asked every second for ever.
func bootstrapRetry(prev, interval time.Duration, peers int, alone time.Duration) time.Duration {
	if peers == 0 && alone < bootstrapFastFor {
		return min(time.Second, interval)
	}
	return min(max(2*prev, time.Second), interval)
}

// redialPace is the discovery loop's pace of redials to unreachable
// bootstrap peers (bootstrapRetry): it tracks the last wait and since when
// the host has had no peer, which any round that finds a peer resets, so
// a host that loses its peers hours later redials every second again.
type redialPace struct {
	retry      time.Duration
	aloneSince time.Time // zero while the host has peers
}

// next returns the wait before the next discovery round when a bootstrap
// peer was unreachable in this one (ok), given the host's peers now;
// otherwise it only records them.
func (r *redialPace) next(interval time.Duration, unreachable bool, peers int, now time.Time) (wait time.Duration, ok bool) {
	switch {
	case peers > 0:
		r.aloneSince = time.Time{}
	case r.aloneSince.IsZero():
		r.aloneSince = now
	}
	if !unreachable {
		r.retry = 0
		return 0, false
	}
	var alone time.Duration
	if peers == 0 {
		alone = now.Sub(r.aloneSince)
	}
	r.retry = bootstrapRetry(r.retry, interval, peers, alone)
	return r.retry, true
}

// discover connects to the bootstrap peers, then advertises on and queries
// the DHT rendezvous every DiscoveryInterval, less often while the host is
// well connected (discoveryWait). It owns nothing but its loop.
func (n *Host) discover(ctx context.Context) {
	defer n.wg.Done()
	rd := drouting.NewRoutingDiscovery(n.DHT)
	ns := rendezvous(n.cfg.Network)
	interval := n.cfg.DiscoveryInterval
	t := time.NewTimer(0)
	defer t.Stop()
	advertising := false
	// While a bootstrap peer is unreachable (it may start after us: a
	// node waiting for its external trainer listens only once one has
	// registered), it is retried (redialPace).
	var redial redialPace
	// The host looks at its peer count every interval, so a node that
	// loses its peers during a long wait searches again within one.
	var wait time.Duration
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if peers := len(n.Network().Peers()); !last.IsZero() && peers >= discoveryEnough && time.Since(last) < wait {
			t.Reset(min(interval, wait-time.Since(last)))
			continue
		}
		last = time.Now()
		unreachable := n.connectBootstrap(ctx)
		if err := n.DHT.Bootstrap(ctx); err != nil && ctx.Err() == nil {
			n.log.Debug("DHT bootstrap", "err", err)
		}
		if n.DHT.RoutingTable().Size() > 0 {
			// dutil.Advertise starts a goroutine that re-advertises on its
			// own before the record expires: start it once, not once per
			// round, or every round adds a goroutine and a provide query.
			if !advertising {
				dutil.Advertise(ctx, rd, ns)
				advertising = true
			}
			n.findPeers(ctx, rd, ns)
		}
		wait = discoveryWait(wait, interval, len(n.Network().Peers()))
		next := interval
		if retry, ok := redial.next(interval, unreachable, len(n.Network().Peers()), time.Now()); ok {
			next, wait = min(retry, next), 0
		}
		t.Reset(next)
	}
}

// connectBootstrap dials the bootstrap peers we are not connected to and
// reports whether any of them failed.
func (n *Host) connectBootstrap(ctx context.Context) (failed bool) {
	for _, ai := range n.cfg.Bootstrap {
		if ai.ID == n.ID() || n.Network().Connectedness(ai.ID) == network.Connected {
			continue
		}
		if sw, ok := n.Network().(*swarm.Swarm); ok {
			// A bootstrap peer is named by the operator: a failed dial
			// must not hold the next attempt back for the swarm's
			// backoff (5 s and more).
			sw.Backoff().Clear(ai.ID)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := n.Connect(cctx, ai)
		cancel()
		if ctx.Err() != nil {
			return false
		}
		failed = failed || err != nil
		n.bootMu.Lock()
		if n.bootErr == nil {
			n.bootErr = map[peer.ID]error{}
		}
		prev, seen := n.bootErr[ai.ID]
		n.bootErr[ai.ID] = err
		n.bootMu.Unlock()
		if err != nil {
			// Retried every few seconds: said once, until it changes.
			lvl := slog.LevelWarn
			if seen && prev != nil {
				lvl = slog.LevelDebug
			}
			n.log.Log(ctx, lvl, "bootstrap peer unreachable", "peer", ai.ID, "err", err)
		}
	}
	return failed
}

func (n *Host) findPeers(ctx context.Context, rd *drouting.RoutingDiscovery, ns string) {
	fctx, cancel := context.WithTimeout(ctx, n.cfg.DiscoveryInterval)
	defer cancel()
	ch, err := rd.FindPeers(fctx, ns)
	if err != nil {
		n.log.Debug("DHT find peers", "err", err)
		return
	}
	for ai := range ch {
		// A peer reached through a relay only is skipped too: dialing it
		// again would return the same relayed connection.
		if c := n.Network().Connectedness(ai.ID); ai.ID == n.ID() || len(ai.Addrs) == 0 || c == network.Connected || c == network.Limited {
			continue
		}
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		if err := n.Connect(cctx, ai); err == nil {
			n.log.Info("found peer on the DHT", "peer", ai.ID)
		}
		ccancel()
	}
}

type mdnsNotifee struct {
	n   *Host
	ctx context.Context
}

// HandlePeerFound runs on a goroutine of the mDNS service per entry.
func (m mdnsNotifee) HandlePeerFound(ai peer.AddrInfo) {
	if ai.ID == m.n.ID() || m.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	if err := m.n.Connect(ctx, ai); err == nil {
		m.n.log.Info("found peer on the LAN (mDNS)", "peer", ai.ID)
	}
}

// Close stops discovery, then the DHT and the host. Safe to call twice.
func (n *Host) Close() error {
	n.once.Do(func() {
		n.reach.close()
		n.cancel()
		if n.mdns != nil {
			n.err = errors.Join(n.err, n.mdns.Close())
		}
		n.wg.Wait()
		n.err = errors.Join(n.err, n.DHT.Close(), n.Host.Close())
	})
	return n.err
}

// ParseBootstrap parses full multiaddrs (with /p2p/ID).
func ParseBootstrap(addrs []string) ([]peer.AddrInfo, error) {
	var out []peer.AddrInfo
	var errs []error
	for _, s := range addrs {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("bootstrap %q: %w", s, err))
			continue
		}
		ai, err := peer.AddrInfoFromP2pAddr(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("bootstrap %q: needs /p2p/<peer ID>: %w", s, err))
			continue
		}
		out = append(out, *ai)
	}
	return out, errors.Join(errs...)
}
