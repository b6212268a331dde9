package api

import (
	"sync"
	"time"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
)

// t0 is the fixed instant every fake time is relative to, so golden files
// do not change from run to run.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	fakePeer   = "12D3KooWHxkqBTjZqZ8yDyGGpdhhKpsZBVmWJ5NsS8BLVnqL7N6v"
	otherPeer  = "12D3KooWRBhwfeP2Y9CDkFRBAZ1pmxUadH36TKuk3KtKm5XXP8mA"
	thirdPeer  = "12D3KooWPjceQrSwdWXPyLLeABRXmuqt69Rg3sBYbU1Nft9HyQ6X"
	bannedPeer = "12D3KooWRBhwfeP2Y4TCx1SM6s9rXRg9CUAFWrgmJQ4wxn6kQgE7"
)

// fakeSource is a Source with fixed values. panicOn names a method that
// panics; block, when set, holds Snapshot until it is closed (entered is
// signalled first).
type fakeSource struct {
	mu      sync.Mutex
	status  node.Status
	peers   []node.PeerStatus
	hist    []store.Point
	snap    params.Snapshot
	layout  params.Layout
	ckpts   []store.Info
	ckptErr error
	panicOn string
	block   chan struct{}
	entered chan struct{}
}

var fakeLayout = params.MustLayout(
	params.TensorSpec{Name: "fc1.weight", Shape: []int{3, 2}},
	params.TensorSpec{Name: "fc1.bias", Shape: []int{3}},
)

func newFake() *fakeSource {
	fp := params.NewFingerprint(fakeLayout, "synthetic", "main")
	var c gossip.Counters
	c.Reject(gossip.ReasonChecksum)
	c.Reject(gossip.ReasonChecksum)
	c.Reject(gossip.ReasonStale)
	g := c.Snapshot()
	g.BytesSent, g.BytesReceived = 123456789, 98765432
	g.ExchangesDone, g.ExchangesServed, g.PullsDone, g.PullsServed = 40, 38, 1, 2
	g.RefusedByPeer, g.AnnouncesSent, g.AnnouncesSeen = 3, 200, 410
	rep, banned := 0.75, -45.0
	bannedUntil := t0.Add(time.Hour)
	ckpt := store.Info{ID: 7, Step: 1200, Progress: 76800, Fingerprint: fp, Created: t0.Add(-10 * time.Second),
		Size: 36, ParamsLen: 9, OptLen: 9}
	return &fakeSource{
		status: node.Status{
			PeerID: fakePeer, Addrs: []string{"/ip4/127.0.0.1/tcp/4001/p2p/" + fakePeer},
			Network: "main", Mode: "gossip", Profile: "local", Fingerprint: fp.String(), Version: "v1.2.3",
			Step: 1234, Progress: 78976, Epoch: 2, Loss: 0.3125, TestAccuracy: 0.9125, SamplesPerSec: 3456.5,
			BusyFraction: 0.97, BusyS: 116.4, UptimeS: 120, NetworkWaitS: 0,
			Peers: 2, Merges: 57, PeerMerges: map[string]int64{otherPeer: 30, thirdPeer: 27},
			LastMerge: &node.MergeInfo{Partner: otherPeer, Staleness: 1.5, Weight: 0.3125, Inbound: true, Time: t0.Add(-time.Second)},
			CatchUps:  1, CatchUpClaimsCut: 1, ExchangesStarted: 45, ExchangeFailedShare: 0.04, ExchangesFailed: 4, ExchangeTimeouts: 1, InboundDropped: 2,
			Gossip: g, LastCheckpoint: &ckpt,
			Reachability: &node.NodeReachability{
				Reachability: node.Reachability{Status: "private", ReachableAddrs: []string{},
					UnreachableAddrs: []string{"/ip4/198.51.100.7/udp/4001/quic-v1"},
					RelayAddrs:       []string{"/ip4/203.0.113.7/tcp/4001/p2p/" + thirdPeer + "/p2p-circuit"},
					HolePunches:      3, HolePunchesOK: 2,
					RelayService: &node.RelayService{Reservations: 1, ReservationsTotal: 2, Circuits: 1, CircuitsTotal: 5,
						BytesRelayed: 40960, Denied: 1, LimitS: 120, LimitBytes: 131072}},
				PeersDirect: 1, PeersRelayed: 1, PeersNotConnected: 0, RelayedSkips: 12, Dials: 4, DialsFailed: 1, BackingOff: 1,
			},
			Trust: node.TrustStats{Enabled: true, Refused: map[string]int64{"outlier": 9, "loss_jump": 1, "non_finite": 0, "ignored": 4},
				Clipped: 3, Validated: 12, Radius: 0.42, MedianDistance: 0.21, Banned: 1, GateRefused: 2},
			Run: node.RunStatus{Epochs: 40, TotalSamples: 2400000, Samples: 230400, OwnSamples: 76800, Fraction: 0.096,
				LR: 0.0975, Schedule: "cosine:warmup=4%,total=2400000", LRScale: 1.5, ClockClamped: 1},
		},
		peers: []node.PeerStatus{
			{PeerID: otherPeer, Addrs: []string{"/ip4/127.0.0.1/tcp/4002/p2p/" + otherPeer}, Mode: "gossip", Step: 1100,
				Progress: 70400, Loss: 0.33, Accuracy: 0.905, SamplesPerSec: 3000, Staleness: 133, Reputation: &rep,
				ReputationState: "ok", Verdicts: map[string]int64{"accepted": 30},
				RTTS: 0.00025, LastSeenS: 1.5, Connected: true, Merges: 30,
				Path: "direct", RemoteAddr: "/ip4/198.51.100.9/udp/4001/quic-v1", HolePunched: true, HolePunches: 1, HolePunchesOK: 1,
				LastHolePunch: "succeeded", Exchanges: map[string]int64{"direct": 2, "hole_punched": 14}},
			{PeerID: thirdPeer, Addrs: []string{"/ip4/127.0.0.1/tcp/4003/p2p/" + thirdPeer}, Mode: "local", Step: 600,
				Progress: 38400, Loss: 0.5, Accuracy: 0.85, SamplesPerSec: 1500, Staleness: 634, RTTS: 0.001,
				LastSeenS: 4, Connected: false, Merges: 27, Path: "relayed",
				RemoteAddr: "/ip4/203.0.113.7/tcp/4001/p2p/" + bannedPeer + "/p2p-circuit", HolePunches: 2,
				LastHolePunch: "failed", Exchanges: map[string]int64{}},
			{PeerID: bannedPeer, Addrs: []string{}, Reputation: &banned, ReputationState: "banned", BannedUntil: &bannedUntil,
				Verdicts: map[string]int64{"outlier": 9}, Path: "none", Exchanges: map[string]int64{}},
		},
		hist: []store.Point{
			{Time: t0.Add(-4 * time.Second), Step: 1100, Progress: 70400, Loss: 0.35, Accuracy: 0, SamplesPerSec: 3300},
			{Time: t0.Add(-2 * time.Second), Step: 1170, Progress: 74880, Loss: 0.33, Accuracy: 0.9, SamplesPerSec: 3400},
			{Time: t0, Step: 1234, Progress: 78976, Loss: 0.3125, Accuracy: 0.9125, SamplesPerSec: 3456.5},
		},
		snap:   params.Snapshot{Fingerprint: fp, Step: 1234, Progress: 78976, Params: []float32{1, -2, 0.5, 0, 3.25, -0.125, 7, 8, 9}},
		layout: fakeLayout,
		ckpts:  []store.Info{ckpt, {ID: 6, Step: 600, Progress: 38400, Fingerprint: fp, Created: t0.Add(-40 * time.Second), Size: 36, ParamsLen: 9, OptLen: 9}, {ID: 5, Corrupt: true}},
	}
}

func (f *fakeSource) check(method string) {
	f.mu.Lock()
	p := f.panicOn
	f.mu.Unlock()
	if p == method {
		panic("fake: " + method + " exploded")
	}
}

func (f *fakeSource) Status() node.Status {
	f.check("Status")
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

func (f *fakeSource) Peers() []node.PeerStatus {
	f.check("Peers")
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]node.PeerStatus(nil), f.peers...)
}

func (f *fakeSource) History(k int) []store.Point {
	f.check("History")
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hist
	if k > 0 && len(h) > k {
		h = h[len(h)-k:]
	}
	return append([]store.Point(nil), h...)
}

func (f *fakeSource) Snapshot() (params.Snapshot, params.Layout) {
	f.check("Snapshot")
	if f.block != nil {
		f.entered <- struct{}{}
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap.Clone(), f.layout
}

func (f *fakeSource) ModelMeta() (model, dataset, network string, seed uint64) {
	return "mlp:3", "synthetic", "main", 42
}

func (f *fakeSource) Checkpoints() ([]store.Info, error) {
	f.check("Checkpoints")
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]store.Info(nil), f.ckpts...), f.ckptErr
}

// countingFake adds the optional sample counter.
type countingFake struct {
	*fakeSource
	n int64
}

func (c countingFake) SamplesTotal() int64 { return c.n }
