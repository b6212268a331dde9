package train

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// splitSynthetic draws one synthetic distribution and splits it into a
// training and a held-out set.
func splitSynthetic(t testing.TB, n int) (trainSet, testSet *Dataset) {
	t.Helper()
	c := DefaultSynthetic()
	c.N = n + 1000
	d, err := Synthetic(c)
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, d.N)
	for i := range idx {
		idx[i] = i
	}
	trainSet, err = d.Subset(idx[:n])
	if err != nil {
		t.Fatal(err)
	}
	testSet, err = d.Subset(idx[n:])
	if err != nil {
		t.Fatal(err)
	}
	return trainSet, testSet
}

func testConfig(model string) Config {
	c := DefaultConfig()
	c.Model = model
	c.Batch = 32
	c.Epochs = 8
	c.LR = 0.05
	c.Schedule = "cosine:warmup=500"
	return c
}

func newTestTrainer(t testing.TB, c Config, d *Dataset) *Trainer {
	t.Helper()
	tr, err := New(c, d)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func runAll(t testing.TB, tr *Trainer) []StepStats {
	t.Helper()
	var out []StepStats
	for {
		st, err := tr.Step(context.Background())
		if errors.Is(err, ErrDone) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
}

func TestTrainerLearnsSynthetic(t *testing.T) {
	trainSet, testSet := splitSynthetic(t, 2000)
	for _, c := range []struct {
		model string
		min   float64
	}{{"softmax", 0.80}, {"mlp:64", 0.90}} {
		t.Run(c.model, func(t *testing.T) {
			tr := newTestTrainer(t, testConfig(c.model), trainSet)
			before, err := tr.Evaluate(testSet)
			if err != nil {
				t.Fatal(err)
			}
			stats := runAll(t, tr)
			after, err := tr.Evaluate(testSet)
			if err != nil {
				t.Fatal(err)
			}
			first, last := meanLoss(stats[:20]), meanLoss(stats[len(stats)-20:])
			t.Logf("accuracy %.3f -> %.3f, batch loss %.3f -> %.3f, %d steps", before.Accuracy, after.Accuracy, first, last, len(stats))
			if after.Accuracy < c.min || after.Loss >= before.Loss || last >= first/2 {
				t.Fatalf("did not learn: accuracy %.3f (want >= %.2f), loss %.3f -> %.3f", after.Accuracy, c.min, first, last)
			}
			s := tr.Stats()
			wantSteps := int64(8 * ((2000 + 31) / 32))
			if s.Steps != wantSteps || s.Samples != 8*2000 || s.Epoch != 8 || float64(s.Progress) != 16000 || !tr.Done() {
				t.Fatalf("stats %+v", s)
			}
			if last := stats[len(stats)-1]; last.Batch != 2000%32 || last.Step != wantSteps || last.LR > 1e-3 {
				t.Fatalf("last step %+v", last)
			}
		})
	}
}

func meanLoss(s []StepStats) float64 {
	sum := 0.0
	for _, st := range s {
		sum += st.Loss
	}
	return sum / float64(len(s))
}

// The MLP must beat softmax regression on clustered classes: the synthetic
// set is not linearly separable.
func TestSyntheticNeedsHiddenLayer(t *testing.T) {
	trainSet, testSet := splitSynthetic(t, 2000)
	acc := map[string]float64{}
	for _, model := range []string{"softmax", "mlp:64"} {
		tr := newTestTrainer(t, testConfig(model), trainSet)
		runAll(t, tr)
		r, _ := tr.Evaluate(testSet)
		acc[model] = r.Accuracy
	}
	if acc["mlp:64"] <= acc["softmax"] {
		t.Fatalf("accuracy: %v", acc)
	}
}

func TestTrainStepAllocatesNothing(t *testing.T) {
	cases := []struct {
		name, model string
		dim         int
		pooled      bool // shapes for which the matrix multiply uses pooled packing buffers
	}{
		{"small", "mlp:8,8", 16, false},
		{"blocked", "mlp:128,64", 300, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pooled && raceEnabled {
				t.Skip("the race detector drops sync.Pool items on purpose; covered by the non-race run and BenchmarkTrainStep")
			}
			d, _ := Synthetic(SyntheticConfig{N: 100, Dim: tc.dim, Classes: 10, Clusters: 1, Noise: 1, Seed: 1})
			c := testConfig(tc.model)
			c.Epochs = 0
			c.Schedule = "const"
			tr := newTestTrainer(t, c, d)
			ctx := context.Background()
			if _, err := tr.Step(ctx); err != nil {
				t.Fatal(err)
			}
			// 50 runs of 32 samples cross several epoch boundaries and
			// short last batches.
			allocs := testing.AllocsPerRun(50, func() {
				if _, err := tr.Step(ctx); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per step", allocs)
			}
			if tr.Stats().Epoch < 10 {
				t.Fatalf("only %d epochs covered", tr.Stats().Epoch)
			}
		})
	}
}

func TestStateRestoreResumesBitForBit(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 500)
	c := testConfig("mlp:16")
	c.Shard = "1/3"
	c.OrderSeed = 9
	a := newTestTrainer(t, c, trainSet)
	ctx := context.Background()
	for range 7 { // a 167-sample shard: 6 steps (the last of 7 samples), then one more
		if _, err := a.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	saved := a.State()
	if saved.Epoch != 1 || saved.Pos != 32 {
		t.Fatalf("state at epoch %d pos %d", saved.Epoch, saved.Pos)
	}
	var wantLoss []float64
	for range 12 {
		st, err := a.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantLoss = append(wantLoss, st.Loss)
	}
	want := a.State()

	b := newTestTrainer(t, c, trainSet)
	if err := b.Restore(saved); err != nil {
		t.Fatal(err)
	}
	saved.Params[0] = 42 // Restore copied; the caller's slices stay theirs.
	for i := range 12 {
		st, err := b.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Loss != wantLoss[i] {
			t.Fatalf("step %d loss %v, want %v", i, st.Loss, wantLoss[i])
		}
	}
	got := b.State()
	if !slicesEqual(got.Params, want.Params) || !slicesEqual(got.Momentum, want.Momentum) ||
		got.Step != want.Step || got.Progress != want.Progress || got.Epoch != want.Epoch || got.Pos != want.Pos {
		t.Fatal("restored trainer diverged from the original")
	}
}

func TestRestoreRejects(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 200)
	tr := newTestTrainer(t, testConfig("mlp:8"), trainSet)
	good := tr.State()
	mutate := map[string]func(*State){
		"model":     func(s *State) { s.Model = "mlp:9" },
		"seed":      func(s *State) { s.Seed++ },
		"shard":     func(s *State) { s.Shard = "0/2" },
		"short":     func(s *State) { s.Params = s.Params[:3] },
		"nan":       func(s *State) { s.Momentum[2] = float32(math.NaN()) },
		"progress":  func(s *State) { s.Progress = -1 },
		"position":  func(s *State) { s.Pos = 200 },
		"neg epoch": func(s *State) { s.Epoch = -1 },
	}
	for name, f := range mutate {
		s := good
		s.Params, s.Momentum = slices.Clone(good.Params), slices.Clone(good.Momentum)
		f(&s)
		if err := tr.Restore(s); !errors.Is(err, ErrBadState) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if !slicesEqual(tr.State().Params, good.Params) {
		t.Fatal("a refused state changed the trainer")
	}
}

func TestApply(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 200)
	tr := newTestTrainer(t, testConfig("softmax"), trainSet)
	if _, err := tr.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := tr.Snapshot()
	remote := make([]float32, len(before.Params))
	err := tr.Apply(func(w, mom []float32, p *params.Progress) error {
		for i := range w {
			w[i] = 0.5*w[i] + 0.5*remote[i]
		}
		clear(mom)
		*p = p.Mix(1000, 0.5)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after := tr.Snapshot()
	if after.Params[3] != 0.5*before.Params[3] || float64(after.Progress) != (32+1000)/2.0 || after.Step != before.Step {
		t.Fatalf("merge not applied: %v -> %v, progress %v", before.Params[3], after.Params[3], after.Progress)
	}
	if tr.Stats().Merges != 1 {
		t.Fatal("merge not counted")
	}
	if slices.ContainsFunc(tr.State().Momentum, func(v float32) bool { return v != 0 }) {
		t.Fatal("momentum not reset")
	}
	failures := map[string]func(w, mom []float32, p *params.Progress) error{
		"error":    func(w, _ []float32, _ *params.Progress) error { w[0] = 7; return errors.New("peer went away") },
		"nan":      func(w, _ []float32, _ *params.Progress) error { w[1] = float32(math.NaN()); return nil },
		"inf mom":  func(_, m []float32, _ *params.Progress) error { m[1] = float32(math.Inf(1)); return nil },
		"progress": func(_, _ []float32, p *params.Progress) error { *p = params.Progress(math.NaN()); return nil },
	}
	for name, f := range failures {
		if err := tr.Apply(f); !errors.Is(err, ErrMerge) {
			t.Errorf("%s: %v", name, err)
		}
		now := tr.Snapshot()
		if !slicesEqual(now.Params, after.Params) || now.Progress != after.Progress {
			t.Fatalf("%s: failed merge left changes", name)
		}
	}
	if tr.Stats().Merges != 1 {
		t.Fatal("failed merges counted")
	}
}

// ApplyChecked applies what fn writes and counts it; a failing fn (which
// by contract wrote nothing) and an invalid progress are refused, leave
// the progress as it was and are not counted.
func TestApplyChecked(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 200)
	tr := newTestTrainer(t, testConfig("softmax"), trainSet)
	if _, err := tr.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := tr.Snapshot()
	if err := tr.ApplyChecked(func(w, _ []float32, p *params.Progress) error {
		for i := range w {
			w[i] *= 0.5
		}
		*p = p.Mix(1000, 0.5)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	after := tr.Snapshot()
	if after.Params[3] != 0.5*before.Params[3] || float64(after.Progress) != (32+1000)/2.0 || tr.Stats().Merges != 1 {
		t.Fatalf("merge not applied or counted: %v -> %v, progress %v, merges %d",
			before.Params[3], after.Params[3], after.Progress, tr.Stats().Merges)
	}
	for name, f := range map[string]func(w, mom []float32, p *params.Progress) error{
		"error":    func(_, _ []float32, _ *params.Progress) error { return errors.New("peer went away") },
		"progress": func(_, _ []float32, p *params.Progress) error { *p = params.Progress(math.NaN()); return nil },
	} {
		if err := tr.ApplyChecked(f); !errors.Is(err, ErrMerge) {
			t.Errorf("%s: %v, want ErrMerge", name, err)
		}
		if now := tr.Snapshot(); now.Progress != after.Progress || !slicesEqual(now.Params, after.Params) {
			t.Fatalf("%s: refused merge changed the model", name)
		}
	}
	if tr.Stats().Merges != 1 {
		t.Fatal("refused merges counted")
	}
}

// Snapshots, merges, stats and evaluations from other goroutines while the
// trainer loop steps: the race detector checks the ownership rules.
func TestTrainerConcurrentUse(t *testing.T) {
	trainSet, testSet := splitSynthetic(t, 500)
	tr := newTestTrainer(t, testConfig("mlp:16"), trainSet)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		defer cancel()
		for range 60 {
			if _, err := tr.Step(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() {
		buf := make([]float32, 0)
		for ctx.Err() == nil {
			s := tr.SnapshotInto(buf)
			buf = s.Params
			if s.Fingerprint != tr.Fingerprint() || len(s.Params) != tr.Model().Size() {
				t.Error("bad snapshot")
				return
			}
			_ = tr.Stats()
		}
	})
	wg.Go(func() {
		for ctx.Err() == nil {
			err := tr.Apply(func(w, mom []float32, p *params.Progress) error {
				for i := range w {
					w[i] *= 0.999
				}
				return nil
			})
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := tr.Evaluate(testSet); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	if got := tr.Stats().Steps; got != 60 {
		t.Fatalf("%d steps", got)
	}
}

// fakeClock advances by inc[i] on the i-th call of Now (cycling) and records
// every sleep, advancing by it.
type fakeClock struct {
	now   time.Time
	inc   []time.Duration
	calls int
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time {
	t := c.now
	if len(c.inc) > 0 {
		c.now = c.now.Add(c.inc[c.calls%len(c.inc)])
	}
	c.calls++
	return t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

func TestSlowdownStretchesSteps(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 200)
	c := testConfig("softmax")
	c.Slowdown = 3
	c.BaseStep = 10 * time.Millisecond
	// Now is called at entry, after the lock, after compute and at the end:
	// compute takes 2 ms of fake time.
	clk := &fakeClock{now: time.Unix(0, 0), inc: []time.Duration{0, 2 * time.Millisecond, 0, 0}}
	tr, err := newTrainer(c, trainSet, clk)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		st, err := tr.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Compute != 2*time.Millisecond || clk.slept[i] != 28*time.Millisecond || st.Busy != 30*time.Millisecond {
			t.Fatalf("step %d: compute %v, slept %v, busy %v; want 2ms + 28ms = 3 × 10ms", i, st.Compute, clk.slept[i], st.Busy)
		}
	}
	if s := tr.Stats(); s.Busy != 90*time.Millisecond || math.Abs(s.SamplesPerSec-96/0.09) > 1e-6 {
		t.Fatalf("stats %+v", s)
	}
	// A step slower than the target is not slowed further.
	clk.inc = []time.Duration{0, 50 * time.Millisecond, 0, 0}
	if st, _ := tr.Step(context.Background()); len(clk.slept) != 3 || st.Busy != 50*time.Millisecond {
		t.Fatalf("slow step slept %v, busy %v", clk.slept, st.Busy)
	}
}

// A base step given with a slowdown of 1 paces every step to it (a
// testnet of equal nodes at a chosen speed); with none, steps run back to
// back.
func TestBaseStepPacesSlowdownOne(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 200)
	c := testConfig("softmax")
	c.Slowdown = 1
	c.BaseStep = 10 * time.Millisecond
	clk := &fakeClock{now: time.Unix(0, 0), inc: []time.Duration{0, 2 * time.Millisecond, 0, 0}}
	tr, err := newTrainer(c, trainSet, clk)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := tr.Step(context.Background()); err != nil || len(clk.slept) != 1 || clk.slept[0] != 8*time.Millisecond || st.Busy != 10*time.Millisecond {
		t.Fatalf("slept %v, busy %v (%v); want 2ms + 8ms = the 10ms base step", clk.slept, st.Busy, err)
	}
	c.BaseStep = 0
	clk = &fakeClock{now: time.Unix(0, 0), inc: []time.Duration{0, 2 * time.Millisecond, 0, 0}}
	if tr, err = newTrainer(c, trainSet, clk); err != nil {
		t.Fatal(err)
	}
	if st, err := tr.Step(context.Background()); err != nil || len(clk.slept) != 0 || st.Busy != 2*time.Millisecond {
		t.Fatalf("unpaced: slept %v, busy %v (%v); want no sleep", clk.slept, st.Busy, err)
	}
}

func TestCalibrationTakesMedianAndKeepsModel(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 200)
	c := testConfig("mlp:8")
	c.Slowdown = 2
	c.CalibrationSteps = 5
	ms := time.Millisecond
	clk := &fakeClock{now: time.Unix(0, 0), inc: []time.Duration{5 * ms, 0, 1 * ms, 0, 9 * ms, 0, 3 * ms, 0, 7 * ms, 0}}
	tr, err := newTrainer(c, trainSet, clk)
	if err != nil {
		t.Fatal(err)
	}
	if tr.BaseStep() != 5*ms || tr.Stats().BaseStep != 5*ms {
		t.Fatalf("base step %v, want the median 5ms", tr.BaseStep())
	}
	c.Slowdown = 1
	plain := newTestTrainer(t, c, trainSet)
	got, want := tr.State(), plain.State()
	if !slicesEqual(got.Params, want.Params) || slices.ContainsFunc(got.Momentum, func(v float32) bool { return v != 0 }) ||
		got.Step != 0 || got.Progress != 0 || got.Pos != 0 {
		t.Fatal("calibration changed the model or its position")
	}
	if plain.BaseStep() != 0 {
		t.Fatal("calibrated without slowdown")
	}
}

func TestSlowdownSleepIsInterruptible(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 200)
	c := testConfig("softmax")
	c.Slowdown = 2
	c.BaseStep = time.Hour
	tr := newTestTrainer(t, c, trainSet)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	st, err := tr.Step(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("step returned %v", err)
	}
	if st.Step != 1 || tr.Stats().Steps != 1 {
		t.Fatal("the update of an interrupted step was lost")
	}
	if _, err := tr.Step(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("step on a cancelled context: %v", err)
	}
}

func TestDivergedStepIsRefused(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 200)
	tr := newTestTrainer(t, testConfig("softmax"), trainSet)
	_ = tr.Apply(func(w, _ []float32, _ *params.Progress) error {
		for i := range w {
			w[i] = 3e38
		}
		return nil
	})
	before := tr.Snapshot()
	if _, err := tr.Step(context.Background()); !errors.Is(err, ErrDiverged) {
		t.Fatalf("step with overflowing logits: %v", err)
	}
	if after := tr.Snapshot(); after.Step != 0 || !slicesEqual(after.Params, before.Params) {
		t.Fatal("diverged update applied")
	}
}

func TestNewTrainer(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 200)
	c := testConfig("mlp:8")
	c.Shard = "1/4"
	c.Network = "lab"
	c.Schedule = "cosine:warmup=100"
	tr := newTestTrainer(t, c, trainSet)
	if tr.ShardSize() != 50 || tr.Shard() != (Shard{1, 4}) {
		t.Fatalf("shard %v of %d", tr.Shard(), tr.ShardSize())
	}
	if tr.Fingerprint() != params.NewFingerprint(tr.Model().Layout(), trainSet.Name, "lab") {
		t.Fatal("fingerprint")
	}
	if s := tr.Schedule(); s.Total != 8*50 || s.Warmup != 100 {
		t.Fatalf("schedule %+v, want total = 8 epochs × 50 samples", s)
	}
	c.Shard = "0/1000"
	if _, err := New(c, trainSet); !errors.Is(err, ErrBadShard) {
		t.Fatalf("more shards than samples: %v", err)
	}
	c = testConfig("mlp:8")
	c.Epochs = 1
	if _, err := New(c, trainSet); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("warmup longer than training: %v", err)
	}
	c.Batch = 0
	if _, err := New(c, trainSet); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("batch 0: %v", err)
	}
	if _, err := New(testConfig("mlp:8"), nil); !errors.Is(err, ErrBadDataset) {
		t.Fatalf("no data: %v", err)
	}
}

// TestSetLRScale: the factor multiplies the schedule's rate in LR and in
// the steps; values that are not finite and positive are ignored.
func TestSetLRScale(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 512)
	c := testConfig("softmax")
	c.Schedule = "const"
	tr := newTestTrainer(t, c, trainSet)
	if lr := tr.LR(); lr != 0.05 {
		t.Fatalf("LR %v before any scale, want 0.05", lr)
	}
	tr.SetLRScale(2.5)
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		tr.SetLRScale(bad)
	}
	if lr := tr.LR(); math.Abs(lr-0.125) > 1e-12 {
		t.Errorf("LR %v after SetLRScale(2.5), want 0.125", lr)
	}
	st, err := tr.Step(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(st.LR-0.125) > 1e-12 {
		t.Errorf("the step applied rate %v, want 0.125", st.LR)
	}
}

// TestMomentumIsACopy: Momentum returns the optimizer's momentum as State
// has it, and a copy the caller may keep while the trainer steps on.
func TestMomentumIsACopy(t *testing.T) {
	trainSet, _ := splitSynthetic(t, 500)
	tr := newTestTrainer(t, testConfig("mlp:16"), trainSet)
	for range 3 {
		if _, err := tr.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	m := tr.Momentum()
	if want := tr.State().Momentum; !slices.Equal(m, want) {
		t.Fatalf("Momentum differs from State's: %d values against %d", len(m), len(want))
	}
	if !slices.ContainsFunc(m, func(v float32) bool { return v != 0 }) {
		t.Fatal("momentum is all zero after three steps")
	}
	kept := slices.Clone(m)
	if _, err := tr.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m, kept) {
		t.Fatal("a step changed the copy Momentum returned")
	}
	if slices.Equal(tr.Momentum(), kept) {
		t.Fatal("the momentum did not change over a step")
	}
}
