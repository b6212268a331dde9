package sim_test

import (
	"testing"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/sim"
)

// TestSimMirrorsNodeDefaults fails when a node default the simulator
// repeats (it cannot import node) changes without it.
func TestSimMirrorsNodeDefaults(t *testing.T) {
	nc := node.DefaultConfig()
	d := sim.DefaultConfig()
	checks := []struct {
		name      string
		sim, node any
	}{
		{"lr", sim.NodeLR, node.DefaultLR},
		{"schedule", sim.NodeSchedule, node.DefaultSchedule},
		{"avg interval", sim.NodeAvgInterval, node.DefaultAvgInterval},
		{"epochs", float64(sim.NodeEpochs), float64(node.DefaultEpochs)},
		{"catch-up", float64(sim.NodeCatchUp), nc.CatchUp},
		{"config lr", d.LR, nc.Train.LR},
		{"config schedule", d.Schedule, nc.Train.Schedule},
		{"config avg interval", d.AvgInterval, nc.AvgInterval},
		{"config catch-up", d.CatchUp, nc.CatchUp},
		{"outer every", sim.NodeOuterEvery, node.DefaultOuterEvery},
		{"config outer every", d.OuterEvery, nc.OuterEvery},
		{"lr scaling", sim.NodeLRScaling, string(node.DefaultConfig().LRScaling)},
		{"config lr scaling", d.LRScaling, string(nc.LRScaling)},
		{"outer lr", d.OuterLR, nc.OuterLR},
		{"outer momentum", d.OuterMomentum, nc.OuterMomentum},
		{"batch", d.Batch, nc.Train.Batch},
		{"momentum", d.Momentum, nc.Train.Momentum},
		{"weight decay", d.WeightDecay, nc.Train.WeightDecay},
		{"reported average", d.EMA, nc.Train.EMA},
		{"reported average takes in peers", d.EMAPeers, nc.Train.EMAPeers},
		{"merge alpha", d.Merger.Alpha, nc.Merger.Alpha},
		{"merge staleness", d.Merger.Staleness.String(), nc.Merger.Staleness.String()},
		{"merge lag", d.Merger.Lag, nc.Merger.Lag},
		{"merge momentum", d.Merger.Momentum, nc.Merger.Momentum},
		{"wire bytes", d.WireBytes, 2}, // fp16, checked below
		{"dataset", d.Dataset, nc.Dataset},
	}
	for _, c := range checks {
		if c.sim != c.node {
			t.Errorf("%s: the simulator uses %v, the node %v", c.name, c.sim, c.node)
		}
	}
	if nc.Exchange.SendDType != gossip.FP16 {
		t.Errorf("the node sends %v; DefaultConfig.WireBytes assumes fp16", nc.Exchange.SendDType)
	}
}
