package averaging

// SlowMomentum is gossip's slow momentum (SlowMo, arXiv 1910.00643, on a
// gossip base and without its all-reduce), as the node's train loop and
// the simulator both take it: every Every local steps an outer Nesterov
// step (Outer.StepInPlace) on what the model moved since the last one, its
// own steps and its merges alike. Merges bring the swarm's progress in, so
// the outer step moves the model along the swarm's direction, as DiLoCo's
// moves it along the mean of the workers' pseudo-gradients; the noise of a
// node's own small-batch steps, which changes direction from one period to
// the next, is mostly not carried.
//
// Not safe for concurrent use; Step must see a model no merge changes
// while it runs.
type SlowMomentum struct {
	every int
	outer Outer
	// since counts the steps since the last outer step; anchor is the
	// model after it (empty: start over at the next step); taken counts
	// the outer steps taken.
	since  int
	anchor []float32
	taken  int64
}

// NewSlowMomentum is a slow momentum of an outer step every every >= 1
// local steps at the outer rate lr and momentum mu.
func NewSlowMomentum(every int, lr, mu float64) *SlowMomentum {
	return &SlowMomentum{every: max(1, every), outer: Outer{LR: lr, Momentum: mu}}
}

// Due counts a local step and says whether Step is due: every Every
// steps, and at once when there is no anchor.
func (s *SlowMomentum) Due() bool {
	if s.since++; s.since < s.every && len(s.anchor) > 0 {
		return false
	}
	s.since = 0
	return true
}

// Step takes the outer step on w in place at the inner learning rate lr
// (StepInPlace's gamma). With no anchor of w's size, w becomes the anchor
// and the momentum starts from zero, and w is left as it is. On an error
// nothing is written.
func (s *SlowMomentum) Step(w []float32, lr float64) error {
	if len(s.anchor) != len(w) {
		s.anchor = append(s.anchor[:0], w...)
		s.outer.Buf = nil
		return nil
	}
	if err := s.outer.StepInPlace(w, s.anchor, lr); err != nil {
		return err
	}
	s.taken++
	return nil
}

// Reset drops the anchor and the momentum: the next step starts over. A
// model replaced whole (a catch-up, a restart) calls for it: the jump is
// not progress.
func (s *SlowMomentum) Reset() {
	s.anchor = s.anchor[:0]
	s.outer.Buf = nil
}

// Taken is the outer steps taken (anchors not counted).
func (s *SlowMomentum) Taken() int64 { return s.taken }
