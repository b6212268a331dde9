package node_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/train"
)

// TestReportedAverageTakesInMergedModels: a gossip node's reported average
// also takes in every peer's model it merges (--ema-peers), one update of
// the average each on top of its own every train.AverageEvery steps; at
// --ema-peers 0 only its own.
func TestReportedAverageTakesInMergedModels(t *testing.T) {
	for _, peers := range []float64{train.DefaultEMAPeers, 0} {
		config := func() node.Config {
			cfg := meshConfig("ema-peers")
			cfg.Train.EMAPeers = peers
			cfg.Announce.Interval, cfg.Announce.FreshWindow, cfg.Announce.MaxAge = 200*time.Millisecond, 10*time.Second, 10*time.Second
			cfg.AvgInterval = 50 * time.Millisecond
			return cfg
		}
		a := newMeshNode(t, config(), nil)
		a.start(t)
		cfg := config()
		cfg.Host.Bootstrap = bootstrapOff(t, a.Node)
		b := newMeshNode(t, cfg, nil)
		b.start(t)
		eventually(t, time.Minute, "both nodes to merge", func() bool {
			return a.Status().Merges >= 3 && b.Status().Merges >= 3
		})
		for name, m := range map[string]*meshNode{"a": a, "b": b} {
			m.stop(t)
			status := m.Status()
			if status.ExchangeS > 0 && (status.ExchangeAnswerS <= 0 || status.ExchangeAnswerS > status.ExchangeS) {
				t.Errorf("node %s: exchanges of %v s whose answers took %v s on average", name, status.ExchangeS, status.ExchangeAnswerS)
			}
			if _, err := gossip.ParseDType(status.WireDType); err != nil {
				t.Errorf("node %s: status says it sends its models as %q", name, status.WireDType)
			}
			merges := status.Merges
			st := node.TrainerOf(m.Node).State()
			var own train.State
			if err := json.Unmarshal(st.Own, &own); err != nil {
				t.Fatal(err)
			}
			// The average took in the parameters before steps 0, 4, 8, ...
			folds := (st.Step + train.AverageEvery - 1) / train.AverageEvery
			want := folds
			if peers > 0 {
				want += merges
			}
			if own.AverageUpdates != want {
				t.Errorf("ema-peers %v, node %s: %d updates of the average after %d steps and %d merges, want %d",
					peers, name, own.AverageUpdates, st.Step, merges, want)
			}
		}
	}
}
