package node_test

import (
	"slices"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
)

// TestShutdown: cancelling Run mid-training, with the mesh busy exchanging,
// returns an interrupted result, leaves a final checkpoint holding exactly
// the model the node ended with, and stops every goroutine the node
// started (host, DHT, pubsub, protocols, loops) even though New's context
// never ends.
func TestShutdown(t *testing.T) {
	checkGoroutines(t)
	var nodes []*meshNode
	var stores []store.Store
	for i := range 2 {
		cfg := meshConfig("shutdown")
		cfg.CheckpointEvery = 0 // only the final one
		cfg.Announce.Interval, cfg.Announce.FreshWindow, cfg.Announce.MaxAge = 200*time.Millisecond, 5*time.Second, 5*time.Second
		if i > 0 {
			cfg.Host.Bootstrap = bootstrapOff(t, nodes[0].Node)
		}
		st := store.NewMemory()
		t.Cleanup(func() { _ = st.Close() })
		n := newMeshNode(t, cfg, st)
		n.start(t)
		nodes, stores = append(nodes, n), append(stores, st)
	}
	eventually(t, time.Minute, "both nodes to merge", func() bool {
		return nodes[0].Status().Merges >= 2 && nodes[1].Status().Merges >= 2
	})

	for i, n := range nodes {
		began := time.Now()
		res := n.stop(t)
		took := time.Since(began)
		s := node.TrainerOf(n.Node).Stats()
		t.Logf("node %d: Run returned %v after cancel, at step %d with %d merges", i, took, s.Steps, n.Status().Merges)
		if res.Finished {
			t.Errorf("node %d: an interrupted run reports Finished", i)
		}
		if f := n.Events("final"); len(f) != 1 || f[0].Status == nil || f[0].Step != s.Steps {
			t.Errorf("node %d: want one final event with the status at step %d, got %+v", i, s.Steps, f)
		}

		infos, err := stores[i].List()
		if err != nil || len(infos) == 0 {
			t.Fatalf("node %d: no checkpoint after shutdown (%v)", i, err)
		}
		last := infos[0]
		if last.Final || last.Step != s.Steps {
			t.Errorf("node %d: last checkpoint at step %d (final %v), want step %d, not final", i, last.Step, last.Final, s.Steps)
		}
		cp, err := stores[i].Load(t.Context(), last.ID)
		if err != nil {
			t.Fatalf("node %d: load checkpoint %d: %v", i, last.ID, err)
		}
		if !slices.Equal(node.CheckpointModel(cp).Params, res.Snapshot.Params) {
			t.Errorf("node %d: the final checkpoint does not hold the model the node ended with", i)
		}
		if live := node.TrainerOf(n.Node).SnapshotInto(nil).Params; !slices.Equal(cp.Params, live) {
			t.Errorf("node %d: the final checkpoint does not hold the parameters the node trained", i)
		}
		if cp.Meta[node.MetaFingerprint] != node.TrainerOf(n.Node).Fingerprint().String() {
			t.Errorf("node %d: checkpoint fingerprint %q", i, cp.Meta[node.MetaFingerprint])
		}
	}
}
