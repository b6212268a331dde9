package node_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/goleak"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/train"
)

// meshConfig is a gossip node on the local profile training softmax
// regression on the synthetic set. Steps are emulated at 2 ms (1 ms base,
// slowdown 2), mostly sleep, so that many nodes fit on two cores.
//
// The hosts listen on TCP only: QUIC's per-connection loops cost a lot of
// CPU under the race detector and add nothing these tests look at.
// Discovery and announcements keep their default intervals: every
// announcement is relayed and verified by every node, and with 16 nodes
// under the race detector much shorter intervals saturate the process,
// after which every exchange waits in run queues for seconds. Exchange
// deadlines are generous for the same reason: the machine is shared.
func meshConfig(network string) node.Config {
	c := node.DefaultConfig()
	c.Dataset = train.DatasetSynthetic
	c.Train.Model = "softmax"
	c.Train.Batch = 16
	c.Epochs = 0
	c.Train.LR = 0.05
	c.Train.Schedule = "const"
	c.Train.Seed = 7
	c.Train.BaseStep = time.Millisecond
	c.Train.Slowdown = 2
	c.Train.Network = network
	c.Host.Network = network
	c.Host.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	// The gossip protocols' own defaults (fp32, announcements every 5 s),
	// not the node's faster ones: see above.
	c.Exchange, c.Announce = gossip.DefaultConfig(), gossip.DefaultAnnounceConfig()
	c.EvalEvery = 0
	c.Exchange.ChunkTimeout = 5 * time.Second
	c.Exchange.ExchangeTimeout = 10 * time.Second
	c.ExchangeTimeout = 10 * time.Second
	c.AvgInterval = 100 * time.Millisecond
	c.CatchUp = 0
	c.CheckpointEvery = 0
	c.ReportEvery = time.Second
	return c
}

// meshNode is a node with a run in progress and the events it emitted.
type meshNode struct {
	*node.Node
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []node.Event
	res    *node.Result
	err    error
}

func (m *meshNode) emit(e node.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
}

// Events returns the events of one kind emitted so far.
func (m *meshNode) Events(kind string) []node.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []node.Event
	for _, e := range m.events {
		if e.Event == kind {
			out = append(out, e)
		}
	}
	return out
}

// newMeshNode builds a node. New gets a context that never ends: the mesh
// (host, pubsub, protocols) must stop when Run returns, not when a context
// of the caller's ends, and the goroutine check holds the node to that.
func newMeshNode(t *testing.T, cfg node.Config, st store.Store) *meshNode {
	t.Helper()
	m := &meshNode{done: make(chan struct{})}
	n, err := node.New(context.Background(), cfg, st, nil, m.emit)
	if err != nil {
		t.Fatalf("node.New: %v", err)
	}
	m.Node = n
	t.Cleanup(func() {
		if m.cancel == nil {
			// Never started: Close alone releases the host.
			_ = n.Close()
		}
	})
	return m
}

// start runs the node on its own goroutine until it stops by itself or
// is stopped; the test's cleanup stops it.
func (m *meshNode) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		res, err := m.Run(ctx, m.emit)
		m.mu.Lock()
		m.res, m.err = res, err
		m.mu.Unlock()
	}()
	t.Cleanup(func() { m.stop(t) })
}

// stop cancels the run and waits for Run to return.
func (m *meshNode) stop(t *testing.T) *node.Result {
	t.Helper()
	m.cancel()
	return m.wait(t)
}

// wait waits for Run to return and fails the test on a Run error. The
// bound only turns a hang into a failure with a message.
func (m *meshNode) wait(t *testing.T) *node.Result {
	t.Helper()
	select {
	case <-m.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("node %s: Run did not return", m.ID())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		t.Fatalf("node %s: Run: %v", m.ID(), m.err)
	}
	return m.res
}

// bootstrapOff is the bootstrap list that points at n.
func bootstrapOff(t *testing.T, n *node.Node) []peer.AddrInfo {
	t.Helper()
	ai, err := node.ParseBootstrap(n.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	return ai
}

// eventually polls cond every 10 ms until it holds, failing the test after
// limit. The limit only turns a hang into a failure with a message.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reachable counts n's partners (fresh peers announcing its fingerprint)
// whose addresses its host knows, so that an exchange can dial them.
func reachable(n *node.Node) int {
	ps := n.Host().Peerstore()
	k := 0
	for _, p := range n.Peers() {
		id, err := peer.Decode(p.PeerID)
		if err == nil && p.Mode == string(node.ModeGossip) && len(ps.Addrs(id)) > 0 {
			k++
		}
	}
	return k
}

// paramSpread returns the mean and the max L2 distance of the vectors to
// their mean.
func paramSpread(vs [][]float32) (mean, maxDist float64) {
	centre := make([]float64, len(vs[0]))
	for _, v := range vs {
		for i, x := range v {
			centre[i] += float64(x) / float64(len(vs))
		}
	}
	for _, v := range vs {
		var d float64
		for i, x := range v {
			e := float64(x) - centre[i]
			d += e * e
		}
		d = math.Sqrt(d)
		mean += d / float64(len(vs))
		maxDist = max(maxDist, d)
	}
	return mean, maxDist
}

// reinit replaces n's initial parameters with the model's initialisation
// drawn from seed, before n trains. train.Config.Seed picks both the
// initialisation and the shard partition, and every node of a network must
// share it for the shards to be disjoint; this gives a node its own
// starting point through the merge hook instead, without touching the
// trainer's configuration. (The trainer counts it as a merge in its own
// Stats; the node's merge counters do not see it.)
func reinit(t *testing.T, n *node.Node, seed uint64) {
	t.Helper()
	if err := node.Reinit(n, seed); err != nil {
		t.Fatalf("reinit: %v", err)
	}
}

// checkGoroutines fails the test if goroutines it started outlive it. It
// runs after every cleanup the test registers later, so after its nodes
// stopped.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
}

func percent(x float64) string { return fmt.Sprintf("%.2f%%", 100*x) }
