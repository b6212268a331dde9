package trainerapi_test

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/trainerapi"
)

const dim = 64

// externalNode is a node around an External, served on a socket, with a
// Go trainer client registered and its first model pushed.
type externalNode struct {
	n      *node.Node
	ext    *trainerapi.External
	c      *trainerapi.Client
	w, d   []float32
	done   chan struct{}
	result *node.Result
}

func startExternal(t *testing.T, ctx context.Context, bootstrap []string, start float32) *externalNode {
	t.Helper()
	return startExternalOn(t, ctx, store.NewMemory(), bootstrap, start)
}

// startExternalOn is startExternal with the node's checkpoints in st.
func startExternalOn(t *testing.T, ctx context.Context, st store.Store, bootstrap []string, start float32) *externalNode {
	t.Helper()
	cfg := externalConfig()
	var err error
	if cfg.Host.Bootstrap, err = node.ParseBootstrap(bootstrap); err != nil {
		t.Fatal(err)
	}
	spec := externalSpec()
	en := &externalNode{w: make([]float32, dim), d: make([]float32, dim), done: make(chan struct{})}
	attach := func(actx context.Context, s trainerapi.Spec) (*trainerapi.External, error) {
		if en.ext != nil {
			return en.ext, nil
		}
		x, err := trainerapi.NewExternal(s, externalRun(cfg))
		if err != nil {
			return nil, err
		}
		cfg.Train.Batch = s.Batch
		n, err := node.NewWith(ctx, cfg, x, st, nil, nil)
		if err != nil {
			return nil, err
		}
		en.ext, en.n = x, n
		return x, nil
	}
	srv, err := trainerapi.Listen(trainerapi.Config{Listen: "unix:" + filepath.Join(t.TempDir(), "t.sock"), Attach: attach})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if en.c, err = trainerapi.Dial(srv.Addr(), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := en.c.Register(spec); err != nil {
		t.Fatal(err)
	}
	for i := range en.w {
		en.w[i] = start
	}
	if _, err := en.c.Push(en.w, nil, 0, 0, 0, en.d); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(en.done)
		en.result, _ = en.n.Run(ctx, nil)
	}()
	return en
}

// externalConfig is the test nodes' configuration: loopback, no run end,
// no catch-up, checkpoints only at the end.
func externalConfig() node.Config {
	cfg := node.DefaultConfig()
	cfg.Host.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Host.Network = "ext-test"
	cfg.Train.Network = "ext-test"
	cfg.Exchange, cfg.Announce = gossip.DefaultConfig(), gossip.DefaultAnnounceConfig()
	cfg.Announce.Interval = 200 * time.Millisecond
	cfg.Epochs, cfg.Train.Schedule, cfg.CatchUp, cfg.CheckpointEvery = 0, "const", 0, 0
	return cfg
}

// externalSpec is the test trainers' registration.
func externalSpec() trainerapi.Spec {
	return trainerapi.Spec{Run: "mesh-test", TrainSamples: 1000, Batch: 16,
		Tensors:   []trainerapi.TensorSpec{{Name: "w", Dtype: "F32", Shape: []int{dim}}},
		Optimizer: []trainerapi.TensorSpec{{Name: "m", Dtype: "F32", Shape: []int{dim}}}}
}

// externalRun is the node's side of the run, as the node command builds it.
func externalRun(cfg node.Config) trainerapi.RunConfig {
	return trainerapi.RunConfig{Network: cfg.Train.Network, Schedule: cfg.Train.Schedule,
		EMA: cfg.Train.EMA, EMAPeers: cfg.Train.EMAPeers}
}

// TestExternalAverageSurvivesARestart: the final checkpoint of a node
// around an external trainer holds the average it reports after the
// trainer's optimizer state, and the node started again on the same store
// reports it, not the trainer's model, and gives the optimizer state back.
func TestExternalAverageSurvivesARestart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := store.NewMemory()
	a := startExternalOn(t, ctx, st, nil, 0)
	for i := range 40 {
		for j := range a.w {
			a.w[j] = float32(i)
		}
		a.train(t)
	}
	opt := make([]float32, dim)
	for j := range opt {
		opt[j] = -float32(j)
	}
	if _, err := a.c.Push(a.w, opt, 16, 1, 1, a.d); err != nil {
		t.Fatal(err)
	}
	want := a.ext.AverageInto(nil).Params
	if want[0] == a.w[0] || want[0] <= 0 {
		t.Fatalf("the average %v should lag the pushed model %v", want[0], a.w[0])
	}
	cancel()
	<-a.done
	cfg := externalConfig()
	cfg.Train.Batch = externalSpec().Batch
	x, err := trainerapi.NewExternal(externalSpec(), externalRun(cfg))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.NewWith(context.Background(), cfg, x, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	got := x.AverageInto(nil).Params
	if !slices.Equal(got, want) {
		t.Fatalf("restarted node reports %v, want the average it reported before, %v", got[:3], want[:3])
	}
	if live := x.SnapshotInto(nil).Params; live[0] != 39 {
		t.Fatalf("restarted node holds the model %v, want the last pushed (39)", live[0])
	}
	if got := x.State().Opt; !slices.Equal(got, opt) {
		t.Fatalf("restarted node's optimizer state %v, want %v", got[:3], opt[:3])
	}
}

// train pushes the trainer's model (no learning of its own: one step of
// 16 samples each time) and adds the deltas the node answers with.
func (en *externalNode) train(t *testing.T) (deltas int) {
	t.Helper()
	p, err := en.c.Push(en.w, nil, 16, 1, 1, en.d)
	if err != nil {
		t.Fatal(err)
	}
	if p.Delta {
		for i := range en.w {
			en.w[i] += en.d[i]
		}
		deltas++
	}
	return deltas
}

// TestExternalTrainersMerge: two nodes around Go trainers whose models
// start 10 apart in every coordinate; each trainer only pushes and adds
// the deltas it is answered with. The gap closes, so merges reach the
// trainers (a node that dropped the deltas would leave it at 10).
func TestExternalTrainersMerge(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := startExternal(t, ctx, nil, 0)
	b := startExternal(t, ctx, a.n.Addrs()[:1], 10)
	deltas := 0
	gap := func() float64 { return math.Abs(float64(b.w[0] - a.w[0])) }
	deadline := time.Now().Add(60 * time.Second)
	for gap() > 1 && time.Now().Before(deadline) {
		deltas += a.train(t) + b.train(t)
		time.Sleep(10 * time.Millisecond)
	}
	if g := gap(); g > 1 {
		t.Fatalf("after 60 s the trainers' models are still %.2f apart (was 10); %d deltas, merges %d and %d",
			g, deltas, a.n.Merges(), b.n.Merges())
	}
	if deltas == 0 || a.n.Merges()+b.n.Merges() == 0 {
		t.Fatalf("gap closed without merges? deltas %d merges %d %d", deltas, a.n.Merges(), b.n.Merges())
	}
	// Each node reports the average of its trainer's models and of the
	// peer's it merged: after 100 more pushes (the zeros of the first ones
	// weigh a few percent) it has moved from its start towards the other's.
	for range 100 {
		a.train(t)
		b.train(t)
		time.Sleep(time.Millisecond)
	}
	for _, x := range []struct {
		en       *externalNode
		from, to float32
	}{{a, 0, 10}, {b, 10, 0}} {
		avg := make([]float32, dim)
		averaged, err := x.en.c.Average(avg)
		if err != nil || !averaged {
			t.Fatalf("average: averaged %v err %v", averaged, err)
		}
		if d := (avg[0] - x.from) / (x.to - x.from); !(d > 0.1 && d < 0.9) {
			t.Fatalf("node starting at %v reports %v: want it moved towards %v", x.from, avg[0], x.to)
		}
	}
	if st := a.n.Status(); st.Trust.Holdout || st.Trainer == nil || !st.Trainer.Connected {
		t.Fatalf("status: trust.holdout %v, trainer %+v; want no holdout and a connected trainer", st.Trust.Holdout, st.Trainer)
	}
	cancel()
	<-a.done
	<-b.done
}
