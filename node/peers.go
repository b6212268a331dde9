package node

import (
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/reputation"
	"github.com/meshtrain/meshtrain/store"
)

// PeerStatus is what this node knows about one fresh peer.
type PeerStatus struct {
	PeerID        string   `json:"peer_id"`
	Addrs         []string `json:"addrs"`
	Mode          string   `json:"mode"`
	Step          int64    `json:"step"`
	Progress      float64  `json:"progress"`
	Loss          float64  `json:"loss"`
	Accuracy      float64  `json:"accuracy"`
	SamplesPerSec float64  `json:"samples_per_s"`
	// Staleness is the peer's model's staleness relative to ours, in our
	// steps: max(0, our progress - theirs) / our batch.
	Staleness float64 `json:"staleness"`
	// Reputation is the peer's score (nil with --trust=false), and
	// ReputationState what this node does with it: ok, ignored (never
	// merged), disconnected or banned (connections refused until
	// BannedUntil). Verdicts counts what the score was made of.
	Reputation      *float64         `json:"reputation"`
	ReputationState string           `json:"reputation_state,omitempty"`
	BannedUntil     *time.Time       `json:"banned_until,omitempty"`
	Verdicts        map[string]int64 `json:"verdicts,omitempty"`
	RTTS            float64          `json:"rtt_s"`
	LastSeenS       float64          `json:"last_seen_s"` // seconds ago
	Connected       bool             `json:"connected"`
	Merges          int64            `json:"merges"`
	// Path is how this node reaches the peer now: direct, relayed (models
	// are not sent: the pair is skipped) or none. RemoteAddr is the
	// connection's address; HolePunched says a hole punch made the direct
	// connection. HolePunches and HolePunchesOK count the hole punches with
	// the peer, LastHolePunch is the latest one's outcome (succeeded,
	// failed; empty: none).
	Path          string `json:"path"`
	RemoteAddr    string `json:"remote_addr,omitempty"`
	HolePunched   bool   `json:"hole_punched"`
	HolePunches   int64  `json:"hole_punches"`
	HolePunchesOK int64  `json:"hole_punches_ok"`
	LastHolePunch string `json:"last_hole_punch,omitempty"`
	// Exchanges counts the exchanges this node started with the peer, by
	// the path they took: direct (a connection one side dialed) or
	// hole_punched (a direct connection a hole punch made).
	Exchanges map[string]int64 `json:"exchanges"`
}

// Peers lists the fresh peers that announced our fingerprint, and the
// peers we have judged below the ignore threshold even if they no longer
// announce (a banned peer is cut off), sorted by ID.
func (n *Node) Peers() []PeerStatus {
	if n.ann == nil {
		return []PeerStatus{}
	}
	own := n.trainer.Stats().Progress
	merges := n.PeerMerges()
	now := time.Now()
	out := []PeerStatus{}
	for _, p := range n.ann.Fresh() {
		if p.Fingerprint != n.fp || p.Peer == n.id {
			continue
		}
		// The announced age grew since the announcement was sent.
		age := time.Duration(p.AgeS*float64(time.Second)) + max(0, now.Sub(p.SeenAt))
		s, _ := n.cfg.Merger.Lag.Staleness(own, params.Progress(p.Progress), age, n.cfg.Train.Batch)
		path := n.host.PathTo(p.Peer)
		out = append(out, PeerStatus{
			PeerID: p.Peer.String(), Addrs: append([]string{}, p.Addrs...), Mode: p.Mode, Step: p.Step,
			Progress: p.Progress, Loss: p.Loss, Accuracy: p.Accuracy, SamplesPerSec: p.SamplesPerSec,
			Staleness: s, RTTS: n.host.Peerstore().LatencyEWMA(p.Peer).Seconds(),
			LastSeenS: now.Sub(p.SeenAt).Seconds(), Connected: n.host.Network().Connectedness(p.Peer) == network.Connected,
			Merges: merges[p.Peer.String()],
			Path:   string(path.Path), RemoteAddr: path.RemoteAddr, HolePunched: path.HolePunched,
			HolePunches: path.HolePunches, HolePunchesOK: path.HolePunchesOK, LastHolePunch: path.LastHolePunch,
			Exchanges: n.exchangesByPath(p.Peer),
		})
	}
	if n.trust != nil {
		seen := make(map[string]int, len(out))
		for i, p := range out {
			seen[p.PeerID] = i
		}
		for _, r := range n.trust.book.Peers(now) {
			i, ok := seen[r.Peer]
			if !ok {
				if r.State == reputation.OK {
					continue
				}
				ps := PeerStatus{PeerID: r.Peer, Addrs: []string{}, Merges: merges[r.Peer], Path: string(PathNone),
					Exchanges: map[string]int64{}}
				if id, err := peer.Decode(r.Peer); err == nil {
					ps.Path, ps.Exchanges = string(n.host.PathTo(id).Path), n.exchangesByPath(id)
				}
				out = append(out, ps)
				i = len(out) - 1
			}
			score := r.Score
			out[i].Reputation, out[i].ReputationState, out[i].Verdicts = &score, r.StateName, r.Counts
			if !r.BannedUntil.IsZero() {
				until := r.BannedUntil
				out[i].BannedUntil = &until
			}
		}
		for i := range out {
			if out[i].Reputation == nil {
				zero := 0.0
				out[i].Reputation, out[i].ReputationState = &zero, reputation.OK.String()
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PeerID < out[j].PeerID })
	return out
}

// Snapshot returns a frozen copy of the model the node reports (the
// moving average of its parameters where the trainer keeps one:
// ParamAverager) and its layout.
func (n *Node) Snapshot() (params.Snapshot, params.Layout) {
	return n.reported(nil), n.trainer.Layout()
}

// ModelMeta is the safetensors metadata of an exported model.
func (n *Node) ModelMeta() (model, dataset, network string, seed uint64) {
	i := n.trainer.Info()
	return i.Model, i.Dataset, i.Network, i.Seed
}

// Checkpoints lists the store's checkpoints (empty without a store).
func (n *Node) Checkpoints() ([]store.Info, error) {
	if n.st == nil {
		return []store.Info{}, nil
	}
	l, err := n.st.List()
	if l == nil {
		l = []store.Info{}
	}
	return l, err
}
