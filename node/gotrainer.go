package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"

	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train"
)

// goTrainer is the built-in Go trainer (train.Trainer) as a node Trainer,
// with its test set and the holdout the trust checks score merges on. It
// is the only part of the node that knows the Go trainer.
type goTrainer struct {
	t       *train.Trainer
	test    *train.Dataset
	holdout *train.Dataset // nil: no holdout
	info    TrainerInfo
}

var _ Trainer = (*goTrainer)(nil)

// newGoTrainer loads cfg's dataset and builds the trainer on it, its
// schedule spanning the run (cfg.Epochs passes over the training set on the
// run clock). holdout samples of the trainer's own shard are kept aside for
// HoldoutLoss (0: none).
func newGoTrainer(cfg Config, holdout int, log *slog.Logger) (*goTrainer, float64, error) {
	trainSet, testSet, err := train.LoadData(cfg.Dataset, cfg.DataPath, cfg.Train.Seed)
	if err != nil {
		return nil, 0, err
	}
	tc := cfg.Train
	tc.Logger = log
	total := cfg.Epochs * float64(trainSet.N)
	tc.RunSamples, tc.Run = total, RunSpec(total, cfg.Train.Schedule)
	t, err := train.New(tc, trainSet)
	if err != nil {
		return nil, 0, err
	}
	g := &goTrainer{t: t, test: testSet, info: TrainerInfo{Model: t.Model().Spec(), Dataset: cfg.Dataset,
		Network: cfg.Train.Network, Shard: cfg.Train.Shard, Seed: cfg.Train.Seed, Slowdown: cfg.Train.Slowdown,
		TrainSamples: trainSet.N}}
	if holdout > 0 {
		idx, err := train.ShardIndices(trainSet, t.Shard(), tc.Seed, tc.Alpha)
		if err != nil {
			return nil, 0, err
		}
		rng := rand.New(rand.NewPCG(tc.Seed, 0x7275737421))
		rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		if g.holdout, err = trainSet.Subset(idx[:min(holdout, len(idx))]); err != nil {
			return nil, 0, err
		}
		// The merge checks score it again and again: scale it once.
		g.holdout = g.holdout.Floats()
	}
	return g, total, nil
}

func (g *goTrainer) Step(ctx context.Context) (StepResult, error) {
	s, err := g.t.Step(ctx)
	if errors.Is(err, train.ErrDone) {
		return StepResult{}, err
	}
	r := StepResult{Batch: s.Batch, Loss: s.Loss, LR: s.LR, Compute: s.Compute, Busy: s.Busy}
	r.EpochEnd = s.Batch > 0 && g.t.Stats().Epoch != s.Epoch
	return r, err
}

func (g *goTrainer) SnapshotInto(dst []float32) params.Snapshot { return g.t.SnapshotInto(dst) }

// AverageInto and ResetAverage: see ParamAverager.
func (g *goTrainer) AverageInto(dst []float32) params.Snapshot { return g.t.AverageInto(dst) }
func (g *goTrainer) ResetAverage()                             { g.t.ResetAverage() }
func (g *goTrainer) AverageIn(v []float32, share float64) error {
	return g.t.AverageIn(v, share)
}

func (g *goTrainer) Apply(fn func(w, opt []float32, p *params.Progress) error) error {
	return g.t.Apply(fn)
}

// ApplyChecked: see CheckedApplier.
func (g *goTrainer) ApplyChecked(fn func(w, opt []float32, p *params.Progress) error) error {
	return g.t.ApplyChecked(fn)
}

// Opt: see OptReader.
func (g *goTrainer) Opt() []float32 { return g.t.Momentum() }

func (g *goTrainer) State() TrainerState {
	s := g.t.State()
	own, _ := json.Marshal(s) // plain fields only: cannot fail
	return TrainerState{Params: s.Params, Opt: s.Momentum, Average: s.Average, Step: s.Step, Progress: s.Progress,
		Samples: s.Samples, Epoch: s.Epoch, Own: own}
}

// Restore takes the trainer's own state from s.Own and the vectors, step
// and progress from s's fields (a sync group's model replaces them; with
// no Average the average restarts at the parameters).
func (g *goTrainer) Restore(s TrainerState) error {
	var st train.State
	if err := json.Unmarshal(s.Own, &st); err != nil {
		return fmt.Errorf("node: trainer state: %w", err)
	}
	st.Params, st.Momentum, st.Average, st.Step, st.Progress = s.Params, s.Opt, s.Average, s.Step, s.Progress
	return g.t.Restore(st)
}

func (g *goTrainer) Stats() TrainerStats {
	s := g.t.Stats()
	return TrainerStats{Steps: s.Steps, Samples: s.Samples, Epoch: s.Epoch, Progress: s.Progress, Busy: s.Busy,
		SamplesPerSec: s.SamplesPerSec, BaseStep: s.BaseStep, Schedule: g.t.Schedule().String()}
}

func (g *goTrainer) Fingerprint() params.Fingerprint { return g.t.Fingerprint() }
func (g *goTrainer) Layout() params.Layout           { return g.t.Model().Layout() }
func (g *goTrainer) Info() TrainerInfo               { return g.info }
func (g *goTrainer) SetClock(samples float64)        { g.t.SetClock(samples) }
func (g *goTrainer) SetLRScale(x float64)            { g.t.SetLRScale(x) }

func (g *goTrainer) HoldoutLoss(w []float32) (float64, bool, error) {
	if g.holdout == nil {
		return 0, false, nil
	}
	r, err := train.Evaluate(g.t.Model(), w, g.holdout, 0, 1)
	return r.Loss, true, err
}

// ChanceLoss is the cross-entropy of a uniform guess over the classes.
func (g *goTrainer) ChanceLoss() float64 {
	if g.holdout == nil || g.holdout.Classes < 2 {
		return 0
	}
	return math.Log(float64(g.holdout.Classes))
}

// Test scores w on the test set on one goroutine: it runs beside the
// training, whose cores it would otherwise take.
func (g *goTrainer) Test(w []float32) (TestResult, error) {
	r, err := train.Evaluate(g.t.Model(), w, g.test, 0, 1)
	return TestResult{Accuracy: r.Accuracy, Loss: r.Loss}, err
}
