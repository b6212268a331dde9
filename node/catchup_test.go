package node_test

import (
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/node"
)

// TestLateJoinerCatchesUp: a node that joins after the others are far
// ahead pulls the swarm's model instead of merging its own young one
// into theirs, and then merges normally.
//
// The joiner must see the others before they start exchanging with it, or
// their models reach it by inbound merges and the gap it would pull across
// closes first. So the early nodes announce every 200 ms and start an
// exchange only every second, while the joiner announces every 3 s (its
// first announcement, made before it is connected, is lost) and looks for
// a partner every 50 ms.
func TestLateJoinerCatchesUp(t *testing.T) {
	checkGoroutines(t)
	const catchUp = 1000 // samples, about 16 steps of batch 64
	config := func(announce, avg time.Duration) node.Config {
		cfg := meshConfig("catchup")
		cfg.Train.Batch = 64
		cfg.CatchUp = catchUp
		cfg.Announce.Interval, cfg.Announce.FreshWindow, cfg.Announce.MaxAge = announce, 10*time.Second, 10*time.Second
		cfg.AvgInterval = avg
		return cfg
	}
	early := []*meshNode{newMeshNode(t, config(200*time.Millisecond, time.Second), nil)}
	cfg := config(200*time.Millisecond, time.Second)
	cfg.Host.Bootstrap = bootstrapOff(t, early[0].Node)
	early = append(early, newMeshNode(t, cfg, nil))
	for _, e := range early {
		e.start(t)
	}
	// Far enough ahead that a few inbound merges (each halves the joiner's
	// gap) cannot bring the gap under catchUp before the joiner's own round.
	const ahead = 40 * catchUp
	eventually(t, time.Minute, "the early nodes to train", func() bool {
		return early[0].Status().Progress >= ahead && early[1].Status().Progress >= ahead
	})

	cfg = config(3*time.Second, 50*time.Millisecond)
	cfg.Host.Bootstrap = bootstrapOff(t, early[0].Node)
	late := newMeshNode(t, cfg, nil)
	late.start(t)
	// Its own steps account for Step x batch samples; the rest came with
	// the pulled models. A pull when the joiner had heard of one early
	// node only is credited catchUp above its own progress (no other peer
	// corroborated the claim), and the gap rule pulls again at its next
	// round: the last catch-up brings the rest.
	jump := func(e node.Event) float64 { return e.Progress - float64(e.Step*int64(cfg.Train.Batch)) }
	var ev []node.Event
	eventually(t, time.Minute, "the late node to catch up", func() bool {
		ev = late.Events("catchup")
		return len(ev) > 0 && jump(ev[len(ev)-1]) >= ahead/2
	})
	for _, e := range ev {
		t.Logf("caught up at step %d: progress %.0f, %.0f above its own steps (%s)", e.Step, e.Progress, jump(e), e.Message)
	}
	merges := late.Status().Merges

	eventually(t, time.Minute, "the late node to merge after catching up", func() bool {
		return late.Status().Merges >= merges+3
	})
	st := late.Status()
	t.Logf("late node: %d catch-ups, merges %d -> %d, progress %.0f (early nodes %.0f, %.0f)",
		st.CatchUps, merges, st.Merges, st.Progress, early[0].Status().Progress, early[1].Status().Progress)
	if p := st.LastMerge; p == nil || p.Partner != early[0].ID().String() && p.Partner != early[1].ID().String() {
		t.Errorf("last merge %+v is not with an early node", p)
	}
}

// TestStartingNodeCatchesUpByRatio: with a catch-up gap no swarm opens,
// a node that has just started still pulls the model of a peer with more
// than twice its progress, once, then merges. The early nodes never start
// an exchange, so nothing reaches the joiner before its own first round.
func TestStartingNodeCatchesUpByRatio(t *testing.T) {
	checkGoroutines(t)
	config := func(avg time.Duration) node.Config {
		cfg := meshConfig("catchup-ratio")
		cfg.Train.Batch = 64
		cfg.CatchUp = 1e12 // the gap rule never fires
		cfg.Announce.Interval, cfg.Announce.FreshWindow, cfg.Announce.MaxAge = 200*time.Millisecond, 10*time.Second, 10*time.Second
		cfg.AvgInterval = avg
		return cfg
	}
	early := newMeshNode(t, config(time.Hour), nil)
	early.start(t)
	// Far enough ahead that the joiner, training as fast, is still under
	// half of it when it first hears of it (a second or two).
	eventually(t, time.Minute, "the early node to train", func() bool { return early.Status().Progress >= 200_000 })

	cfg := config(50 * time.Millisecond)
	cfg.Host.Bootstrap = bootstrapOff(t, early.Node)
	late := newMeshNode(t, cfg, nil)
	late.start(t)
	eventually(t, time.Minute, "the late node to catch up", func() bool { return late.Status().CatchUps >= 1 })
	ev := late.Events("catchup")
	if len(ev) == 0 {
		t.Fatal("CatchUps counted but no catchup event")
	}
	if own := float64(ev[0].Step * int64(cfg.Train.Batch)); ev[0].Progress < 2*own {
		t.Errorf("progress %.0f after catching up at step %d: not the early node's", ev[0].Progress, ev[0].Step)
	}
	merges := late.Status().Merges
	eventually(t, time.Minute, "the late node to merge after catching up", func() bool {
		return late.Status().Merges >= merges+3
	})
	if n := late.Status().CatchUps; n != 1 {
		t.Errorf("%d catch-ups, want exactly 1 (once per process)", n)
	}
}
