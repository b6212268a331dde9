package node

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/params"
)

// discard is a send for events a test does not look at.
func discard(Event) {}

// TestStartingNodeTakesAModelAheadWhole: until it has judged a model to
// catch up with, a node takes whole a model that an exchange brings it
// (sent to it, or the answer to its own) when its next round would pull
// that model anyway (more than twice its progress): merging it would lift
// its progress past the rule with its own model in the mix, and it would
// never pull. The judgement ends the start: the next such model is merged.
func TestStartingNodeTakesAModelAheadWhole(t *testing.T) {
	for _, inbound := range []bool{true, false} {
		n := trustNode(t, nil)
		n.avg.judgedCatchUp = false
		rng := rand.New(rand.NewPCG(11, 12))
		var events []Event
		send := func(e Event) { events = append(events, e) }

		n.avg.merge("level", near(n, rng, 0.01), inbound, send)
		if n.Merges() != 1 || n.avg.catchups.Load() != 0 || n.avg.judgedCatchUp {
			t.Fatalf("inbound %v: a model level with ours: merges %d, catch-ups %d, judged %v; want it merged",
				inbound, n.Merges(), n.avg.catchups.Load(), n.avg.judgedCatchUp)
		}

		own := n.trainer.Stats().Progress
		ahead := near(n, rng, 0.02)
		ahead.Progress = 3 * own
		want := slices.Clone(ahead.Params)
		n.avg.merge("ahead", ahead, inbound, send)
		if n.avg.catchups.Load() != 1 || n.Merges() != 1 || !n.avg.judgedCatchUp {
			t.Fatalf("inbound %v: a model at 3x our progress: catch-ups %d, merges %d, judged %v; want it taken whole",
				inbound, n.avg.catchups.Load(), n.Merges(), n.avg.judgedCatchUp)
		}
		got := n.trainer.SnapshotInto(nil)
		if got.Progress != ahead.Progress || !slices.Equal(got.Params, want) {
			t.Fatalf("inbound %v: after the catch-up progress %v (want %v), model equal to the one taken: %v",
				inbound, got.Progress, ahead.Progress, slices.Equal(got.Params, want))
		}
		how := map[bool]string{true: "sent to us", false: "in our exchange"}[inbound]
		if i := slices.IndexFunc(events, func(e Event) bool { return e.Event == "catchup" }); i < 0 || !strings.Contains(events[i].Message, how) {
			t.Fatalf("inbound %v: events %+v; want a catchup saying %q", inbound, events, how)
		}

		again := near(n, rng, 0.02)
		again.Progress = 3 * got.Progress
		n.avg.merge("further", again, inbound, send)
		if n.avg.catchups.Load() != 1 || n.Merges() != 2 {
			t.Fatalf("inbound %v: past the start, a model at 3x our progress: catch-ups %d, merges %d; want it merged",
				inbound, n.avg.catchups.Load(), n.Merges())
		}
	}
}

// TestStartingNodeRefusingAModelAheadEndsItsStart: a model it would take
// whole that fails the catch-up's holdout check is refused, not merged,
// and ends the start as a refused pull does, so the node merges the next
// models instead of waiting for one it can take.
func TestStartingNodeRefusingAModelAheadEndsItsStart(t *testing.T) {
	n := trustNode(t, nil)
	n.avg.judgedCatchUp = false
	rng := rand.New(rand.NewPCG(13, 14))
	before := n.trainer.SnapshotInto(nil)
	bad := near(n, rng, 0.01)
	for i := range bad.Params {
		bad.Params[i] = float32(rng.NormFloat64() * 3)
	}
	bad.Progress = 3 * before.Progress
	n.avg.merge("garbage", bad, true, discard)
	got := n.trainer.SnapshotInto(nil)
	if n.avg.catchups.Load() != 0 || n.Merges() != 0 || !n.avg.judgedCatchUp || !slices.Equal(got.Params, before.Params) {
		t.Fatalf("a garbage model at 3x our progress: catch-ups %d, merges %d, judged %v, model unchanged %v; want it refused and the start ended",
			n.avg.catchups.Load(), n.Merges(), n.avg.judgedCatchUp, slices.Equal(got.Params, before.Params))
	}
	if r := n.TrustStats().Refused["loss_jump"]; r != 1 {
		t.Fatalf("refusals %+v; want one loss_jump", n.TrustStats().Refused)
	}
	n.avg.merge("level", near(n, rng, 0.01), true, discard)
	if n.Merges() != 1 {
		t.Fatalf("after the refusal a model level with ours was not merged: %+v", n.TrustStats())
	}
}

// heard is an announce table's peers with these claims.
func heard(claims map[peer.ID]float64) []gossip.PeerInfo {
	var out []gossip.PeerInfo
	for p, q := range claims {
		out = append(out, gossip.PeerInfo{Announcement: gossip.Announcement{Peer: p, Progress: q}})
	}
	return out
}

// TestCatchUpCreditsAnUncorroboratedClaimAsAMerge: a model taken whole that
// claims more progress than any other peer the node heard of is credited
// up to the highest of their claims, or as a merge would be (the catch-up
// threshold above ours) when that is more; the event says what it
// claimed. A cut is counted when other peers' claims show it (not when
// the node heard of none: a swarm of two). And a starting node that heard
// of two peers or more merges, not takes, a model whose claim is ahead of
// the peer it would pull.
func TestCatchUpCreditsAnUncorroboratedClaimAsAMerge(t *testing.T) {
	boast := func(n *Node, rng *rand.Rand) params.Snapshot {
		s := near(n, rng, 0.02)
		s.Progress = 1e12
		return s
	}
	caughtUp := func(t *testing.T, n *Node, events []Event, want params.Snapshot, progress params.Progress, cut int64) {
		t.Helper()
		got := n.trainer.SnapshotInto(nil)
		if n.avg.catchups.Load() != 1 || !slices.Equal(got.Params, want.Params) || got.Progress != progress {
			t.Fatalf("a model claiming 1e12: catch-ups %d, model taken %v, progress %v; want it taken whole at %v",
				n.avg.catchups.Load(), slices.Equal(got.Params, want.Params), got.Progress, progress)
		}
		if st := n.Status(); st.CatchUpClaimsCut != cut {
			t.Fatalf("claims cut %d; want %d", st.CatchUpClaimsCut, cut)
		}
		if i := slices.IndexFunc(events, func(e Event) bool { return e.Event == "catchup" }); i < 0 || !strings.Contains(events[i].Message, "of the 1000000000000 it claims") {
			t.Fatalf("events %+v; want a catchup saying what the model claimed", events)
		}
	}

	t.Run("no other peer heard of", func(t *testing.T) {
		n := trustNode(t, nil)
		n.avg.judgedCatchUp = false
		rng := rand.New(rand.NewPCG(15, 16))
		var events []Event
		own := n.trainer.Stats().Progress
		m := boast(n, rng)
		want := params.Snapshot{Params: slices.Clone(m.Params)}
		n.avg.merge("boaster", m, true, func(e Event) { events = append(events, e) })
		caughtUp(t, n, events, want, own+params.Progress(n.cfg.CatchUp), 0)
	})
	t.Run("another peer heard of", func(t *testing.T) {
		n := trustNode(t, nil)
		n.avg.judgedCatchUp = false
		n.avg.heard = func() []gossip.PeerInfo { return heard(map[peer.ID]float64{"other": 100_000}) }
		rng := rand.New(rand.NewPCG(17, 18))
		var events []Event
		m := boast(n, rng)
		want := params.Snapshot{Params: slices.Clone(m.Params)}
		n.avg.merge("boaster", m, true, func(e Event) { events = append(events, e) })
		caughtUp(t, n, events, want, 100_000, 1)
	})
	t.Run("two other peers heard of", func(t *testing.T) {
		n := trustNode(t, nil)
		n.avg.judgedCatchUp = false
		n.avg.heard = func() []gossip.PeerInfo {
			return heard(map[peer.ID]float64{"boaster": 1e12, "a": 100_000, "b": 90_000})
		}
		rng := rand.New(rand.NewPCG(19, 20))
		n.avg.merge("boaster", boast(n, rng), true, discard)
		if n.avg.catchups.Load() != 0 || n.Merges() != 1 || n.avg.judgedCatchUp {
			t.Fatalf("a model claiming 1e12, two honest peers heard of: catch-ups %d, merges %d, judged %v; want it merged",
				n.avg.catchups.Load(), n.Merges(), n.avg.judgedCatchUp)
		}
	})
}
