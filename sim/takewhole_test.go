package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// TestSimStartingNodeTakesAModelAheadWhole: as the node's averager does,
// a starting node takes whole a model an exchange brings it that it would
// pull, unless a live node is that far ahead of that model too; the
// judgement ends its start.
func TestSimStartingNodeTakesAModelAheadWhole(t *testing.T) {
	c := small()
	c.Nodes = 3
	c.Duration = 5 * time.Second
	c.CatchUp = 60000
	s := simulate(t, c)
	if len(s.live) != 3 {
		t.Fatalf("%d live nodes at the end, want 3", len(s.live))
	}
	r, from, other := s.live[0], s.live[1], s.live[2]
	setup := func(otherProgress params.Progress) snap {
		r.judgedCatchUp, r.progress = false, 100
		from.progress, other.progress = 400, otherProgress
		sn := s.snapshot(from)
		for i := range sn.s.Params {
			sn.s.Params[i] += 1e-3 // a model other than ours
		}
		return sn
	}

	sn := setup(500)
	want := slices.Clone(sn.s.Params)
	before := s.res.CatchUps
	s.merge(r, from, &sn)
	if s.res.CatchUps != before+1 || !r.judgedCatchUp || r.progress != 400 || !slices.Equal(r.w, want) {
		t.Fatalf("a model at 4x our progress: catch-ups %d -> %d, judged %v, progress %v; want it taken whole",
			before, s.res.CatchUps, r.judgedCatchUp, r.progress)
	}
	s.release(&sn)

	sn = setup(5000) // a live node far ahead of the model: pull that one
	before, merges := s.res.CatchUps, s.res.Merges
	s.merge(r, from, &sn)
	if s.res.CatchUps != before || r.judgedCatchUp || s.res.Merges != merges+1 {
		t.Fatalf("a model far behind another live node: catch-ups %d -> %d, merges %d -> %d, judged %v; want it merged",
			before, s.res.CatchUps, merges, s.res.Merges, r.judgedCatchUp)
	}
	s.release(&sn)
}
