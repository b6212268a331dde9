package node

import "github.com/meshtrain/meshtrain/averaging"

// slowMomentum is gossip's slow momentum (SlowMo, arXiv 1910.00643, on a
// gossip base and without its all-reduce): every OuterEvery local steps
// the node takes an outer Nesterov step (OuterLR, OuterMomentum) on what
// its model moved since the last one, its own steps and its merges alike.
// Merges bring the swarm's progress in, so the outer step moves the model
// along the swarm's direction, as DiLoCo's moves it along the mean of the
// workers' pseudo-gradients: the step is linear, so the mean of the
// nodes' models takes the outer step of the mean pseudo-gradient. The
// noise of a node's own small-batch steps, which changes direction from
// one period to the next, is mostly not carried. A model replaced whole
// (a catch-up) starts the outer optimizer over: the jump is not progress.
//
// It is the train loop's: not safe for concurrent use. step runs inside
// the trainer's Apply, so no merge lands between reading the model and
// writing it.
type slowMomentum struct {
	every int
	outer averaging.Outer
	// since counts the steps since the last outer step; anchor is the
	// model after it (empty: start over at the next step); replaced the
	// node's count of whole-model replacements when it was taken.
	since    int
	anchor   []float32
	replaced int64
	// taken counts the outer steps taken (not the anchors).
	taken int64
}

func newSlowMomentum(every int, lr, momentum float64) *slowMomentum {
	return &slowMomentum{every: every, outer: averaging.Outer{LR: lr, Momentum: momentum}}
}

// due counts a local step and says whether an outer step is due: every
// every steps, and at once when there is no anchor yet.
func (s *slowMomentum) due() bool {
	if s.since++; s.since < s.every && len(s.anchor) > 0 {
		return false
	}
	s.since = 0
	return true
}

// step takes the outer step on w in place at the inner learning rate lr
// (averaging.Outer.StepInPlace's gamma). replaced is the node's count of
// whole-model replacements: when it moved since the anchor was taken, or
// there is no anchor of w's size, w becomes the anchor and the momentum
// starts from zero, and w is left as it is.
func (s *slowMomentum) step(w []float32, lr float64, replaced int64) error {
	if len(s.anchor) != len(w) || replaced != s.replaced {
		s.anchor, s.replaced = append(s.anchor[:0], w...), replaced
		s.outer.Buf = nil
		return nil
	}
	if err := s.outer.StepInPlace(w, s.anchor, lr); err != nil {
		return err
	}
	s.taken++
	return nil
}

// reset drops the anchor: the next step starts over.
func (s *slowMomentum) reset() {
	s.anchor = s.anchor[:0]
	s.outer.Buf = nil
}
