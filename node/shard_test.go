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
