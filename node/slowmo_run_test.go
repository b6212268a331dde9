package node_test

import (
	"slices"
	"testing"
)

// A gossip node with the built-in trainer takes its anchor at its first
// step and an outer step every OuterEvery steps after it: alone for 51
// steps at 5, steps 6, 11, ..., 51. The same run without it, from the same
// seed, ends at another model; with OuterEvery 0 it takes none.
func TestSlowMomentumInTheTrainLoop(t *testing.T) {
	run := func(every int) ([]float32, int64) {
		cfg := meshConfig("slowmo-loop")
		cfg.OuterEvery = every
		cfg.MaxSteps = 51
		m := newMeshNode(t, cfg, nil)
		m.start(t)
		res := m.wait(t)
		return res.Snapshot.Params, m.OuterSteps()
	}
	with, steps := run(5)
	if steps != 10 {
		t.Errorf("OuterEvery 5, 51 steps: %d outer steps, want 10", steps)
	}
	without, none := run(0)
	if none != 0 {
		t.Errorf("OuterEvery 0: %d outer steps, want 0", none)
	}
	if slices.Equal(with, without) {
		t.Error("the run with slow momentum ended at the same model as the run without")
	}
}
