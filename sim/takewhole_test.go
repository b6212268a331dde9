package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// TestSimStartingNodeTakesAModelAheadWhole: as the node's averager does,
// a starting node takes whole a model an exchange brings it that it would
// pull, unless the node it would pull instead (the second most advanced
// live node) is that far ahead of that model too; the judgement ends its
// start. A claim ahead of that node's is merged, not taken; the progress
// credited is the claim up to another node's.
func TestSimStartingNodeTakesAModelAheadWhole(t *testing.T) {
	c := small()
	c.Nodes = 4
	c.Duration = 5 * time.Second
	c.CatchUp = 60000
	s := simulate(t, c)
	if len(s.live) != 4 {
		t.Fatalf("%d live nodes at the end, want 4", len(s.live))
	}
	r, from, other, third := s.live[0], s.live[1], s.live[2], s.live[3]
	setup := func(otherProgress, thirdProgress params.Progress) snap {
		r.judgedCatchUp, r.progress = false, 100
		from.progress, other.progress, third.progress = 400, otherProgress, thirdProgress
		sn := s.snapshot(from)
		for i := range sn.s.Params {
			sn.s.Params[i] += 1e-3 // a model other than ours
		}
		return sn
	}

	sn := setup(500, 300)
	want := slices.Clone(sn.s.Params)
	before := s.res.CatchUps
	s.merge(r, from, &sn)
	if s.res.CatchUps != before+1 || !r.judgedCatchUp || r.progress != 400 || !slices.Equal(r.w, want) {
		t.Fatalf("a model at 4x our progress: catch-ups %d -> %d, judged %v, progress %v; want it taken whole",
			before, s.res.CatchUps, r.judgedCatchUp, r.progress)
	}
	s.release(&sn)

	// A claim a little above every other node's is taken, credited as far
	// as the highest of the others' (the sender's own announcement does
	// not corroborate it).
	sn = setup(70000, 200)
	sn.s.Progress, from.progress = 75000, 75000
	want = slices.Clone(sn.s.Params)
	s.merge(r, from, &sn)
	if !r.judgedCatchUp || r.progress != 70000 || !slices.Equal(r.w, want) {
		t.Fatalf("a model claiming 75000, another node at 70000: judged %v, progress %v; want it taken whole at 70000",
			r.judgedCatchUp, r.progress)
	}
	s.release(&sn)

	// A claim far above every other node's is merged (its claim clamped),
	// not taken: nobody corroborates it.
	sn = setup(70000, 200)
	sn.s.Progress, from.progress = 1e9, 1e9
	before, merges := s.res.CatchUps, s.res.Merges
	s.merge(r, from, &sn)
	if s.res.CatchUps != before || r.judgedCatchUp || s.res.Merges != merges+1 {
		t.Fatalf("a model claiming 1e9, the others at most 70000: catch-ups %d -> %d, merges %d -> %d, judged %v; want it merged",
			before, s.res.CatchUps, merges, s.res.Merges, r.judgedCatchUp)
	}
	s.release(&sn)

	// One live node far ahead of the model, the rest not: nobody
	// corroborates its claim, so the model is taken.
	sn = setup(5000, 300)
	s.merge(r, from, &sn)
	if !r.judgedCatchUp || r.progress != 400 {
		t.Fatalf("one live node far ahead of the model: judged %v, progress %v; want the model taken whole", r.judgedCatchUp, r.progress)
	}
	s.release(&sn)

	sn = setup(5000, 6000) // two live nodes far ahead of the model: pull one of them
	before, merges = s.res.CatchUps, s.res.Merges
	s.merge(r, from, &sn)
	if s.res.CatchUps != before || r.judgedCatchUp || s.res.Merges != merges+1 {
		t.Fatalf("a model far behind two other live nodes: catch-ups %d -> %d, merges %d -> %d, judged %v; want it merged",
			before, s.res.CatchUps, merges, s.res.Merges, r.judgedCatchUp)
	}
	s.release(&sn)
}
