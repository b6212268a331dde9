package api

import (
	"maps"
	"slices"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
)

// The one place the node's values become the API's. Every function copies:
// the result shares no memory with what the Source returned. A nil slice
// or map stays nil (it encodes as null, as it did before these types), so
// what the server sends depends on the node's value alone.

func statusFrom(s node.Status) StatusResponse {
	return StatusResponse{
		PeerID: s.PeerID, Addrs: slices.Clone(s.Addrs), Network: s.Network, Mode: s.Mode, Profile: s.Profile,
		Fingerprint: s.Fingerprint, Version: s.Version,
		Step: s.Step, Progress: s.Progress, Epoch: s.Epoch, Loss: s.Loss, TestAccuracy: s.TestAccuracy,
		SamplesPerSec: s.SamplesPerSec, BusyFraction: s.BusyFraction, BusyS: s.BusyS, UptimeS: s.UptimeS,
		NetworkWaitS: s.NetworkWaitS, Peers: s.Peers, Merges: s.Merges, PeerMerges: maps.Clone(s.PeerMerges),
		LastMerge: mergeFrom(s.LastMerge), CatchUps: s.CatchUps, CatchUpClaimsCut: s.CatchUpClaimsCut, ExchangesStarted: s.ExchangesStarted,
		ExchangeFailedShare: s.ExchangeFailedShare, ExchangesFailed: s.ExchangesFailed,
		ModelAgeS: s.ModelAgeS, ExchangeS: s.ExchangeS, ExchangeAnswerS: s.ExchangeAnswerS, AvgWaitS: s.AvgWaitS,
		WireDType:        s.WireDType,
		ExchangeTimeouts: s.ExchangeTimeouts, InboundDropped: s.InboundDropped, Gossip: gossipFrom(s.Gossip),
		Trust: trustFrom(s.Trust), LastCheckpoint: checkpointPtr(s.LastCheckpoint), Reachability: reachabilityFrom(s.Reachability),
		Run:   runFrom(s.Run),
		Alone: aloneFrom(s.Alone), Trainer: trainerFrom(s.Trainer),
	}
}

func reachabilityFrom(r *node.NodeReachability) *Reachability {
	if r == nil {
		return nil
	}
	out := &Reachability{Status: r.Status, Forced: r.Forced, ReachableAddrs: slices.Clone(r.ReachableAddrs),
		UnreachableAddrs: slices.Clone(r.UnreachableAddrs), RelayAddrs: slices.Clone(r.RelayAddrs),
		HolePunches: r.HolePunches, HolePunchesOK: r.HolePunchesOK, PeersDirect: r.PeersDirect, PeersRelayed: r.PeersRelayed,
		PeersNotConn: r.PeersNotConnected, RelayedSkips: r.RelayedSkips, Dials: r.Dials, DialsFailed: r.DialsFailed,
		BackingOff: r.BackingOff}
	if s := r.RelayService; s != nil {
		out.RelayService = &RelayService{Reservations: s.Reservations, ReservationsTotal: s.ReservationsTotal,
			Circuits: s.Circuits, CircuitsTotal: s.CircuitsTotal, BytesRelayed: s.BytesRelayed, Denied: s.Denied,
			LimitS: s.LimitS, LimitBytes: s.LimitBytes}
	}
	return out
}

func trainerFrom(t *node.TrainerStatus) *TrainerStatus {
	if t == nil {
		return nil
	}
	return &TrainerStatus{Kind: t.Kind, Connected: t.Connected, LastPushS: t.LastPushS, Rejected: maps.Clone(t.Rejected)}
}

func mergeFrom(m *node.MergeInfo) *MergeInfo {
	if m == nil {
		return nil
	}
	return &MergeInfo{Partner: m.Partner, Staleness: m.Staleness, Weight: m.Weight, Inbound: m.Inbound, Time: m.Time}
}

// gossipFrom keys the rejection counters by reason name, the form they
// take in JSON (gossip.Reason encodes as text but does not decode).
func gossipFrom(g gossip.Stats) GossipStats {
	out := GossipStats{
		BytesSent: g.BytesSent, BytesReceived: g.BytesReceived, PullsServed: g.PullsServed,
		ExchangesServed: g.ExchangesServed, PullsDone: g.PullsDone, ExchangesDone: g.ExchangesDone,
		RefusedByPeer: g.RefusedByPeer, AnnouncesSent: g.AnnouncesSent, AnnouncesSeen: g.AnnouncesSeen,
		PubsubBytesSent: g.PubsubBytesSent, PubsubBytesReceived: g.PubsubBytesReceived,
	}
	if g.Rejected != nil {
		out.Rejected = make(map[string]uint64, len(g.Rejected))
		for r, n := range g.Rejected {
			out.Rejected[r.String()] = n
		}
	}
	return out
}

func trustFrom(t node.TrustStats) TrustStats {
	return TrustStats{Enabled: t.Enabled, Refused: maps.Clone(t.Refused), Clipped: t.Clipped, Validated: t.Validated, Holdout: t.Holdout,
		Radius: t.Radius, MedianDistance: t.MedianDistance, Banned: t.Banned, GateRefused: t.GateRefused}
}

func runFrom(r node.RunStatus) RunStatus {
	return RunStatus{Epochs: r.Epochs, TotalSamples: r.TotalSamples, Samples: r.Samples, OwnSamples: r.OwnSamples,
		Fraction: r.Fraction, LR: r.LR, Schedule: r.Schedule, LRScale: r.LRScale, ClockClamped: r.ClockClamped}
}

func aloneFrom(a *node.Alone) *Alone {
	if a == nil {
		return nil
	}
	return &Alone{Reason: string(a.Reason), Message: a.Message, SinceS: a.SinceS}
}

func peerFrom(p node.PeerStatus) PeerStatus {
	out := PeerStatus{
		PeerID: p.PeerID, Addrs: slices.Clone(p.Addrs), Mode: p.Mode, Step: p.Step, Progress: p.Progress, Loss: p.Loss,
		Accuracy: p.Accuracy, SamplesPerSec: p.SamplesPerSec, Staleness: p.Staleness,
		ReputationState: p.ReputationState, Verdicts: maps.Clone(p.Verdicts),
		RTTS: p.RTTS, LastSeenS: p.LastSeenS, Connected: p.Connected, Merges: p.Merges,
		Path: p.Path, RemoteAddr: p.RemoteAddr, HolePunched: p.HolePunched, HolePunches: p.HolePunches,
		HolePunchesOK: p.HolePunchesOK, LastHolePunch: p.LastHolePunch, Exchanges: maps.Clone(p.Exchanges),
	}
	if p.Reputation != nil {
		r := *p.Reputation
		out.Reputation = &r
	}
	if p.BannedUntil != nil {
		t := *p.BannedUntil
		out.BannedUntil = &t
	}
	return out
}

func pointFrom(p store.Point) Point {
	return Point{Time: p.Time, Step: p.Step, Progress: float64(p.Progress), Loss: p.Loss, Accuracy: p.Accuracy,
		SamplesPerSec: p.SamplesPerSec}
}

func checkpointFrom(i store.Info) CheckpointInfo {
	return CheckpointInfo{ID: i.ID, Step: i.Step, Progress: float64(i.Progress), Fingerprint: i.Fingerprint.String(),
		Created: i.Created, SizeBytes: i.Size, ParamsLen: i.ParamsLen, OptLen: i.OptLen, Final: i.Final, Corrupt: i.Corrupt}
}

func checkpointPtr(i *store.Info) *CheckpointInfo {
	if i == nil {
		return nil
	}
	c := checkpointFrom(*i)
	return &c
}

// listFrom converts a list, never returning nil: an empty list is [] in
// JSON, never null.
func listFrom[T, U any](in []T, conv func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = conv(v)
	}
	return out
}
