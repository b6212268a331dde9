package node

import (
	"context"
	"errors"
	"testing"

	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/train"
)

func autoShardConfig(shard string) Config {
	c := OfflineConfig()
	c.Dataset = train.DatasetSynthetic
	c.Train.Model = "softmax"
	c.Train.Shard = shard
	return c
}

// "--shard auto" takes the shard the node's peer ID hashes to, and an
// order seed from it too; the same data dir gets the same ones back.
func TestShardAuto(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	for _, c := range []struct {
		spec  string
		count int
	}{{"auto", train.DefaultAutoShards}, {"auto:3", 3}} {
		n, err := New(context.Background(), autoShardConfig(c.spec), st, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		_, id, _, err := Identity(st)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := train.ShardFromKey([]byte(id), c.count)
		if got := n.trainer.Info().Shard; got != want.String() {
			t.Errorf("%s: trains shard %s, want %s (from peer ID %s)", c.spec, got, want, id)
		}
		g := n.trainer.(*goTrainer)
		if got := g.t.State().OrderSeed; got != train.OrderSeedFromKey([]byte(id)) {
			t.Errorf("%s: order seed %d, want the peer ID's", c.spec, got)
		}
		n.Close()
	}
	// An explicit order seed stays.
	cfg := autoShardConfig("auto")
	cfg.Train.OrderSeed = 99
	n, err := New(context.Background(), cfg, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got := n.trainer.(*goTrainer).t.State().OrderSeed; got != 99 {
		t.Errorf("--order-seed 99 with --shard auto: order seed %d", got)
	}
}

func TestShardAutoBadCount(t *testing.T) {
	err := autoShardConfig("auto:0").Validate()
	if !errors.Is(err, ErrBadConfig) || !errors.Is(err, train.ErrBadShard) {
		t.Errorf("auto:0: %v, want a bad-config error naming the shard", err)
	}
	if err := autoShardConfig("auto:5").Validate(); err != nil {
		t.Errorf("auto:5: %v", err)
	}
}

// A node on a shard of MNIST trains on that shard's bytes and keeps its
// holdout, scored at every checked merge, as floats scaled once.
func TestGoTrainerMNISTShard(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Train.Model = "softmax"
	cfg.Train.Shard = "3/100"
	g, _, err := newGoTrainer(cfg, 256, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := g.t.ShardSize(); n != train.MNISTTrainSize/100 || g.info.TrainSamples != train.MNISTTrainSize {
		t.Fatalf("a shard of %d samples of %d", n, g.info.TrainSamples)
	}
	if g.holdout.N != 256 || g.holdout.X == nil || g.holdout.Pix != nil || g.test.Pix == nil {
		t.Fatalf("holdout of %d samples, floats %v; test set in bytes %v", g.holdout.N, g.holdout.X != nil, g.test.Pix != nil)
	}
	w := g.t.Snapshot().Params
	if l, ok, err := g.HoldoutLoss(w); !ok || err != nil || !(l > 2 && l < 2.6) {
		t.Fatalf("holdout loss of the initial model %v, %v, %v (want near ln 10)", l, ok, err)
	}
	if _, err := g.Test(w); err != nil {
		t.Fatal(err)
	}
}
