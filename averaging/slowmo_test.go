package averaging

import (
	"math"
	"slices"
	"testing"
)

// The slow momentum takes its anchor at the first step, an outer step
// every `every` steps after that on what the model moved (merges
// included), and starts over, without a step, after a Reset (a catch-up
// replaced the model) or on a model of another size.
func TestSlowMomentumSteps(t *testing.T) {
	const lr, mu = 0.5, 0.8
	s := NewSlowMomentum(3, lr, mu)
	w := []float32{1, 2}
	step := func() {
		t.Helper()
		if !s.Due() {
			return
		}
		if err := s.Step(w, 1); err != nil {
			t.Fatal(err)
		}
	}
	step() // the anchor: w unchanged
	if !slices.Equal(w, []float32{1, 2}) || !slices.Equal(s.anchor, w) {
		t.Fatalf("first step: w %v anchor %v", w, s.anchor)
	}
	// Three local steps (a merge among them) move the model by (-0.3, 0.6):
	// the third is an outer step of lr (d + mu d) with d = (0.3, -0.6).
	for _, dw := range [][2]float32{{-0.1, 0.2}, {-0.1, 0.2}, {-0.1, 0.2}} {
		w[0] += dw[0]
		w[1] += dw[1]
		step()
	}
	want := []float64{1 - lr*(1+mu)*0.3, 2 + lr*(1+mu)*0.6}
	for i := range want {
		if math.Abs(float64(w[i])-want[i]) > 1e-5 {
			t.Fatalf("after the outer step: w %v, want %v", w, want)
		}
	}
	if !slices.Equal(s.anchor, w) {
		t.Fatalf("anchor %v, want the new model %v", s.anchor, w)
	}
	// Two steps: not due.
	before := slices.Clone(w)
	step()
	step()
	if !slices.Equal(w, before) {
		t.Fatalf("between outer steps the model changed: %v, was %v", w, before)
	}
	// A catch-up replaces the model and resets: the next due step
	// re-anchors on it and does not carry the jump or the old momentum.
	w[0], w[1] = 10, -10
	s.Reset()
	step()
	if w[0] != 10 || w[1] != -10 || s.outer.Buf != nil || !slices.Equal(s.anchor, w) {
		t.Fatalf("after a catch-up: w %v anchor %v buffer %v, want w as pulled, anchored, no momentum", w, s.anchor, s.outer.Buf)
	}
	// A model of another size (a node that restarted on another run) too.
	w = []float32{1, 2, 3}
	for range 3 {
		step()
	}
	if !slices.Equal(w, []float32{1, 2, 3}) || len(s.anchor) != 3 || s.Taken() != 1 {
		t.Fatalf("another size: w %v anchor %v, %d outer steps taken (want 1)", w, s.anchor, s.Taken())
	}
	// A reset, after a failed step: the next step is due at once.
	s.Reset()
	if !s.Due() {
		t.Fatal("after a reset the next step is not due")
	}
}

// A non-finite model skips the step and writes nothing.
func TestSlowMomentumRejectsNonFinite(t *testing.T) {
	s := NewSlowMomentum(1, 0.7, 0.9)
	w := []float32{1, 2}
	if err := s.Step(w, 1); err != nil {
		t.Fatal(err)
	}
	w[1] = float32(math.NaN())
	if err := s.Step(w, 1); err == nil {
		t.Fatal("a NaN model took an outer step")
	}
	if w[0] != 1 || !slices.Equal(s.anchor, []float32{1, 2}) {
		t.Fatalf("w %v anchor %v: the failed step wrote", w, s.anchor)
	}
}
