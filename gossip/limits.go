package gossip

import (
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

// ProtocolLimits sets the resource-manager limits for the parameter
// exchange on l, before the node scales it (l.AutoScale()) and builds the
// host's resource manager:
//
//	limits := rcmgr.DefaultLimits
//	libp2p.SetDefaultServiceLimits(&limits)
//	gossip.ProtocolLimits(&limits, cfg)
//	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()))
//
// Stream counts: the service admits MaxPending streams waiting for a
// request and MaxInbound transfers itself and counts what it refuses; the
// resource manager is the outer wall, set at twice that so the service's
// own (counted) refusals come first, and per peer at a handful, so one peer
// cannot occupy the service's pending slots.
//
// Memory: a transfer's parameter vector is allocated by the service and
// bounded by MaxInbound x MaxElements x 4 bytes, not reserved here: the
// resource manager's scopes are sized for protocol buffers and would
// refuse a model-sized reservation. What the resource manager does govern
// is the yamux receive window, reserved from the connection scope (at a
// priority that may use about half of it): a window grows from 256 KiB to
// 16 MiB only while the connection and peer scopes can grant it, otherwise
// the transfer silently runs with small windows. The default 32 MiB per
// connection leaves room for one such window; two peers exchanging with
// each other at the same time run two transfers on one connection.
// ProtocolLimits therefore raises the connection and peer memory bases to
// 64 and 128 MiB if they are lower, which touches every protocol's
// connections, not only ours.
func ProtocolLimits(l *rcmgr.ScalingLimitConfig, c Config) {
	in := 2 * (c.MaxPending + c.MaxInbound)
	const perPeer = 4
	const out = 64
	streams := rcmgr.BaseLimit{
		StreamsInbound:  in,
		StreamsOutbound: out,
		Streams:         in + out,
		Memory:          64 << 20,
	}
	peerStreams := rcmgr.BaseLimit{
		StreamsInbound:  perPeer,
		StreamsOutbound: perPeer,
		Streams:         2 * perPeer,
		Memory:          32 << 20,
	}
	// No per-GB increase: these counts bound goroutines and allocations of
	// the service, which do not grow with the machine.
	l.AddProtocolLimit(ProtocolID, streams, rcmgr.BaseLimitIncrease{})
	l.AddServiceLimit(ServiceName, streams, rcmgr.BaseLimitIncrease{})
	l.AddProtocolPeerLimit(ProtocolID, peerStreams, rcmgr.BaseLimitIncrease{})
	l.AddServicePeerLimit(ServiceName, peerStreams, rcmgr.BaseLimitIncrease{})
	l.ConnBaseLimit.Memory = max(l.ConnBaseLimit.Memory, 64<<20)
	l.PeerBaseLimit.Memory = max(l.PeerBaseLimit.Memory, 128<<20)
}
