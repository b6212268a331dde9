package train

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/params"
)

// The average takes in the parameters as they stand before every
// avgEvery-th step, merges between steps included, at avgEvery steps'
// decay, faster while it is young; a reset and a restore restart it at
// the parameters.
func TestAverageIsTheEMAOfTheParameters(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 400)
	c := testConfig("softmax")
	c.EMA = 0.9
	tr := newTestTrainer(t, c, trainSet)
	want := tr.Snapshot().Params
	if got := tr.AverageInto(nil); !slices.Equal(got.Params, want) {
		t.Fatal("a new trainer's average is not its parameters")
	}
	var n float64
	for i := range 41 {
		if i == 10 {
			// A merge between steps: the next update takes it in.
			if err := tr.Apply(func(w, _ []float32, _ *params.Progress) error {
				for j := range w {
					w[j] *= 0.5
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		before := tr.Snapshot()
		if i%AverageEvery == 0 {
			d := min(math.Pow(c.EMA, AverageEvery), (1+n)/(10+n))
			n++
			if err := averaging.Mix(want, before.Params, 1-d); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tr.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := tr.AverageInto(nil)
		if !slices.Equal(got.Params, want) {
			t.Fatalf("after step %d the average is not the EMA of the parameters", i+1)
		}
		if live := tr.Snapshot(); got.Step != live.Step || got.Progress != live.Progress || got.Fingerprint != live.Fingerprint {
			t.Fatalf("average's snapshot %d/%v, the parameters' %d/%v", got.Step, got.Progress, live.Step, live.Progress)
		}
	}
	live := tr.Snapshot().Params
	if slices.Equal(want, live) {
		t.Fatal("the average equals the parameters: the test shows nothing")
	}
	tr.ResetAverage()
	if !slices.Equal(tr.AverageInto(nil).Params, live) {
		t.Fatal("ResetAverage did not restart the average at the parameters")
	}
	// A state carries the average and its age; a restore brings both
	// back, and a state without one restarts it at the parameters.
	st := tr.State()
	if !slices.Equal(st.Average, live) || st.AverageUpdates != 0 {
		t.Fatalf("State holds an average of %d values after %d updates, want the reset one", len(st.Average), st.AverageUpdates)
	}
	for range 8 {
		if _, err := tr.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	moved := tr.State()
	if slices.Equal(moved.Average, moved.Params) || moved.AverageUpdates != 2 {
		t.Fatalf("after 8 steps the average has %d updates and equals the parameters: %v", moved.AverageUpdates, slices.Equal(moved.Average, moved.Params))
	}
	if err := tr.Restore(st); err != nil {
		t.Fatal(err)
	}
	if err := tr.Restore(moved); err != nil {
		t.Fatal(err)
	}
	if got := tr.State(); !slices.Equal(got.Average, moved.Average) || got.AverageUpdates != moved.AverageUpdates {
		t.Fatal("Restore did not bring back the saved average")
	}
	moved.Average = nil
	if err := tr.Restore(moved); err != nil {
		t.Fatal(err)
	}
	if got := tr.State(); !slices.Equal(got.Average, moved.Params) || got.AverageUpdates != 0 {
		t.Fatal("Restore of a state without an average did not restart it at the parameters")
	}
	bad := tr.State()
	bad.Average = bad.Average[:3]
	if err := tr.Restore(bad); !errors.Is(err, ErrBadState) {
		t.Errorf("an average of 3 values: %v", err)
	}
	bad = tr.State()
	bad.Average[1] = float32(math.NaN())
	if err := tr.Restore(bad); !errors.Is(err, ErrBadState) {
		t.Errorf("a NaN in the average: %v", err)
	}
}

// With no average the trainer reports its parameters.
func TestNoAverageReportsTheParameters(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 200)
	c := testConfig("softmax")
	c.EMA = 0
	tr := newTestTrainer(t, c, trainSet)
	for range 9 {
		if _, err := tr.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		tr.ResetAverage() // a no-op without an average
		if !slices.Equal(tr.AverageInto(nil).Params, tr.Snapshot().Params) {
			t.Fatal("with EMA 0 the reported model is not the parameters")
		}
	}
}

// What the average is for: at a constant rate the parameters keep
// jumping around the optimum with every small batch, and their average
// sits nearer it. Evaluate scores the average.
func TestAverageSmoothsSmallBatchNoise(t *testing.T) {
	trainSet, testSet := splitSynthetic(t, 4000)
	c := testConfig("mlp:32")
	c.Batch, c.LR, c.Schedule, c.Epochs, c.EMA = 16, 0.02, "const", 3, DefaultEMA
	tr := newTestTrainer(t, c, trainSet)
	runAll(t, tr)
	avg, err := tr.Evaluate(testSet)
	if err != nil {
		t.Fatal(err)
	}
	live, err := Evaluate(tr.Model(), tr.Snapshot().Params, testSet, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("test loss: average %.4f, parameters %.4f", avg.Loss, live.Loss)
	if !(avg.Loss < live.Loss) {
		t.Errorf("the average's test loss %.4f is not below the parameters' %.4f", avg.Loss, live.Loss)
	}
}

// AverageIn takes a merged peer's model into the average as one of its
// updates, at the share it is given times Config.EMAPeers; it counts as an
// update (the average ages), and does nothing without an average, at a
// share of 0 or with EMAPeers 0; a vector of the wrong length is refused.
func TestAverageInTakesInPeerModels(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 400)
	c := testConfig("softmax")
	c.EMA, c.EMAPeers = 0.9, 0.5
	tr := newTestTrainer(t, c, trainSet)
	want := tr.AverageInto(nil).Params
	peer := make([]float32, len(want))
	for i := range peer {
		peer[i] = float32(i%7) - 3
	}
	live := tr.Snapshot().Params
	var n int64
	for _, share := range []float64{1, 0.5, 2, 0, -1, math.NaN()} {
		w := 0.0
		if share > 0 {
			d := min(math.Pow(c.EMA, AverageEvery), (1+float64(n))/(10+float64(n)))
			w = (1 - d) * min(1, share) * c.EMAPeers
		}
		if got := AverageInWeight(c.EMA, c.EMAPeers, n, share); got != w {
			t.Fatalf("share %v: AverageInWeight %v, want %v", share, got, w)
		}
		if w > 0 {
			n++
			if err := averaging.Mix(want, peer, w); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.AverageIn(peer, share); err != nil {
			t.Fatalf("share %v: %v", share, err)
		}
		if got := tr.AverageInto(nil).Params; !slices.Equal(got, want) {
			t.Fatalf("share %v: the average did not take in the peer's model at weight %v", share, w)
		}
	}
	if got := tr.State().AverageUpdates; got != n {
		t.Fatalf("%d updates counted, want %d", got, n)
	}
	if err := tr.AverageIn(peer[1:], 1); err == nil {
		t.Fatal("a vector of the wrong length was taken in")
	}
	if !slices.Equal(tr.Snapshot().Params, live) {
		t.Fatal("the peer's model reached the live parameters")
	}

	for _, off := range []func(*Config){func(c *Config) { c.EMAPeers = 0 }, func(c *Config) { c.EMA = 0 }} {
		c := testConfig("softmax")
		c.EMA, c.EMAPeers = 0.9, 1
		off(&c)
		tr := newTestTrainer(t, c, trainSet)
		before := tr.AverageInto(nil).Params
		if err := tr.AverageIn(peer, 1); err != nil {
			t.Fatal(err)
		}
		if got := tr.AverageInto(nil).Params; !slices.Equal(got, before) {
			t.Fatalf("ema %v, ema-peers %v: the average took in a peer's model", c.EMA, c.EMAPeers)
		}
	}
}

// TestAverageOffAndFold: EMA 0 keeps no average and every method does
// nothing; a fold of no steps moves nothing and counts no update.
func TestAverageOffAndFold(t *testing.T) {
	var off *Average
	if a := NewAverage(3, 0, 1); a != nil {
		t.Fatalf("NewAverage at ema 0 = %+v, want nil", a)
	}
	off.Reset([]float32{1, 2, 3})
	off.Fold([]float32{1, 2, 3}, 4)
	off.Restore([]float32{1, 2, 3}, 7)
	if err := off.In([]float32{1}, 1); err != nil || off.Values() != nil || off.Updates() != 0 {
		t.Fatalf("an average that is off: In %v, Values %v, Updates %d", err, off.Values(), off.Updates())
	}
	a := NewAverage(2, 0.5, 1)
	a.Reset([]float32{1, 1})
	a.Fold([]float32{5, 5}, 0)
	if v := a.Values(); v[0] != 1 || a.Updates() != 0 {
		t.Fatalf("a fold of no steps: %v after %d updates, want [1 1] after 0", v, a.Updates())
	}
	a.Fold([]float32{5, 5}, 1) // update 0: decay min(0.5, 1/10) = 0.1
	if v := a.Values(); math.Abs(float64(v[0])-4.6) > 1e-6 || a.Updates() != 1 {
		t.Fatalf("a fold of one step: %v after %d updates, want 4.6 after 1", v, a.Updates())
	}
	if err := a.In([]float32{1, 2, 3}, 1); err == nil {
		t.Fatal("a model of the wrong size joined the average")
	}
}
