package node_test

import (
	"slices"
	"testing"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
)

// A checkpoint marked MetaAverage ends its optimizer state with the
// reported model; one without the mark holds none, and its parameters are
// the model.
func TestCheckpointVectors(t *testing.T) {
	w := []float32{1, 2, 3}
	mom := []float32{4, 5, 6}
	avg := []float32{7, 8, 9}
	cp := &store.Checkpoint{Params: w, OptState: slices.Concat(mom, avg), Meta: map[string]string{node.MetaAverage: "opt-tail"}}
	opt, got := node.CheckpointVectors(cp)
	if !slices.Equal(opt, mom) || !slices.Equal(got, avg) {
		t.Fatalf("split %v into %v and %v", cp.OptState, opt, got)
	}
	if m := node.CheckpointModel(cp); !slices.Equal(m.Params, avg) {
		t.Errorf("model %v, want the average %v", m.Params, avg)
	}
	if opt = append(opt, 0); opt[3] != 0 || cp.OptState[3] != 7 {
		t.Error("appending to the optimizer state overwrote the average")
	}
	for name, c := range map[string]*store.Checkpoint{
		"no mark":   {Params: w, OptState: slices.Concat(mom, avg), Meta: map[string]string{}},
		"too short": {Params: w, OptState: []float32{1}, Meta: map[string]string{node.MetaAverage: "opt-tail"}},
	} {
		opt, got := node.CheckpointVectors(c)
		if got != nil || !slices.Equal(opt, c.OptState) {
			t.Errorf("%s: split into %v and %v", name, opt, got)
		}
		if m := node.CheckpointModel(c); !slices.Equal(m.Params, w) {
			t.Errorf("%s: model %v, want the parameters", name, m.Params)
		}
	}
}
