package node_test

import (
	"math"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/node"
)

// TestMergeScalingInAMesh: with merges every few steps a gossip node runs
// at up to twice its configured rate, and its status says so; with merges
// hundreds of steps apart, or with --lr-scaling none, at the rate as
// configured.
func TestMergeScalingInAMesh(t *testing.T) {
	checkGoroutines(t)
	pair := func(network string, interval time.Duration, scaling node.LRScaling) (*meshNode, *meshNode) {
		cfg := meshConfig(network)
		cfg.AvgInterval, cfg.LRScaling = interval, scaling
		a := newMeshNode(t, cfg, nil)
		cb := cfg
		cb.Host.Bootstrap = bootstrapOff(t, a.Node)
		b := newMeshNode(t, cb, nil)
		a.start(t)
		b.start(t)
		return a, b
	}
	const lr = 0.05 // meshConfig's, on a constant schedule
	// consistent: the rate applied is the configured one times the factor.
	consistent := func(who string, st node.Status) {
		t.Helper()
		if math.Abs(st.Run.LR-lr*st.Run.LRScale) > 1e-9 {
			t.Errorf("%s: lr %v with lr_scale %v, want %v x the factor", who, st.Run.LR, st.Run.LRScale, lr)
		}
	}

	// A step of 2 ms and a merge every 10 ms each way: a few steps a merge.
	a, b := pair("mergescale-often", 10*time.Millisecond, node.LRScalingMerges)
	var sa node.Status
	eventually(t, 30*time.Second, "a factor above 1.3 with merges every few steps", func() bool {
		sa = a.Status()
		return sa.Merges > 20 && sa.Run.LRScale > 1.3 && sa.Run.LRScale <= 2
	})
	consistent("frequent merges", sa)
	a.stop(t)
	b.stop(t)

	// A merge every 2 s each way: hundreds of steps a merge.
	a, b = pair("mergescale-rare", 2*time.Second, node.LRScalingMerges)
	eventually(t, 30*time.Second, "a few merges", func() bool { return a.Status().Merges >= 3 && a.Status().Step > 0 })
	sa = a.Status()
	if sa.Run.LRScale != 1 {
		t.Errorf("merges every 2 s: lr_scale %v, want 1", sa.Run.LRScale)
	}
	consistent("rare merges", sa)
	a.stop(t)
	b.stop(t)

	// Scaling off: the configured rate whatever the merges.
	a, b = pair("mergescale-none", 10*time.Millisecond, node.LRScalingNone)
	eventually(t, 30*time.Second, "merges", func() bool { return a.Status().Merges > 20 })
	if sa = a.Status(); sa.Run.LRScale != 1 || sa.Run.LR != lr {
		t.Errorf("--lr-scaling none: lr %v, lr_scale %v, want %v and 1", sa.Run.LR, sa.Run.LRScale, lr)
	}
	a.stop(t)
	b.stop(t)
}
