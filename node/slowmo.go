package node

import "github.com/meshtrain/meshtrain/averaging"

// slowMomentum is the train loop's averaging.SlowMomentum (gossip mode,
// the built-in trainer, OuterEvery > 0), started over whenever the node's
// count of whole-model replacements (Node.replaced: a catch-up) has moved.
// step runs inside the trainer's ApplyChecked, so no merge or catch-up
// lands between reading the count and the model and writing the model.
type slowMomentum struct {
	averaging.SlowMomentum
	replaced int64
}

func newSlowMomentum(every int, lr, momentum float64) *slowMomentum {
	return &slowMomentum{SlowMomentum: *averaging.NewSlowMomentum(every, lr, momentum)}
}

// step is SlowMomentum.Step after a Reset if the model was replaced since
// the last step.
func (s *slowMomentum) step(w []float32, lr float64, replaced int64) error {
	if replaced != s.replaced {
		s.replaced = replaced
		s.Reset()
	}
	return s.Step(w, lr)
}
