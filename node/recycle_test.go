package node

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestAveragerRecyclesVectors: a vector handed back is what the next
// read of that length gets; another length, or an empty stock, gets a
// fresh one; handing back more than the stock holds drops the rest
// without blocking.
func TestAveragerRecyclesVectors(t *testing.T) {
	a := &averager{spare: make(chan []float32, spareVectors)}
	v := make([]float32, 100)
	a.recycle(v)
	if got := a.alloc(100); &got[0] != &v[0] {
		t.Fatal("a recycled vector of the right length was not reused")
	}
	if got := a.alloc(100); &got[0] == &v[0] || len(got) != 100 {
		t.Fatal("an empty stock did not give a fresh vector")
	}
	a.recycle(v)
	if got := a.alloc(50); len(got) != 50 || &got[0] == &v[0] {
		t.Fatalf("a vector of another length was handed out (%d values)", len(got))
	}
	for range 2 * spareVectors {
		a.recycle(make([]float32, 100))
	}
	if len(a.spare) != spareVectors {
		t.Fatalf("%d vectors kept, want %d", len(a.spare), spareVectors)
	}
}

// TestMergeKeepsNoReceivedVector: what recycling relies on. Once merge
// returns, nothing refers to the vector of the model it merged:
// overwriting it changes neither the node's model nor the average it
// reports, whether the merge clipped the model or not.
func TestMergeKeepsNoReceivedVector(t *testing.T) {
	n := trustNode(t, nil)
	rng := rand.New(rand.NewPCG(3, 5))
	warmUp(t, n, rng, []peer.ID{"honest-a", "honest-b", "honest-c"})
	for i, d := range []float64{0.05, 0.08, 0.5} { // the last one is clipped
		remote := near(n, rng, d)
		before, clipped := n.Merges(), n.TrustStats().Clipped
		n.avg.merge("honest-a", remote, false, discard)
		if n.Merges() != before+1 {
			t.Fatalf("merge %d (distance %v) not applied (trust stats %+v)", i, d, n.TrustStats())
		}
		if c := n.TrustStats().Clipped - clipped; (d > 0.1) != (c == 1) {
			t.Fatalf("merge %d (distance %v): %d clipped (trust stats %+v)", i, d, c, n.TrustStats())
		}
		model := n.trainer.SnapshotInto(nil).Params
		avg := n.reported(nil).Params
		for j := range remote.Params {
			remote.Params[j] = float32(math.NaN())
		}
		if !slices.Equal(model, n.trainer.SnapshotInto(nil).Params) {
			t.Fatalf("merge %d: the model changed with the merged vector", i)
		}
		if !slices.Equal(avg, n.reported(nil).Params) {
			t.Fatalf("merge %d: the reported average changed with the merged vector", i)
		}
	}
}
