package node

import (
	"slices"
	"testing"
)

// A catch-up between two outer steps (the node's replacement count moved)
// starts the slow momentum over: the step anchors on the pulled model
// instead of carrying the jump.
func TestSlowMomentumStartsOverAfterACatchUp(t *testing.T) {
	s := newSlowMomentum(1, 0.7, 0.9)
	w := []float32{1, 2}
	for range 2 {
		if err := s.step(w, 1, 0); err != nil {
			t.Fatal(err)
		}
		w[0] += 0.1 // local steps between outer steps
	}
	if s.Taken() != 1 {
		t.Fatalf("%d outer steps, want 1 after the anchor", s.Taken())
	}
	w[0], w[1] = 10, -10 // the catch-up
	if err := s.step(w, 1, 1); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w, []float32{10, -10}) || s.Taken() != 1 {
		t.Fatalf("after a catch-up: w %v, %d outer steps; want the pulled model as it is and no step", w, s.Taken())
	}
	if err := s.step(w, 1, 1); err != nil || s.Taken() != 2 {
		t.Fatalf("the next step: %v, %d outer steps, want 2", err, s.Taken())
	}
}
