package node

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// Trainer is what a node drives: a model, its optimizer and its data, at
// its own pace. The built-in Go trainer (gotrainer.go) is one; a trainer in
// another process, speaking the local trainer API, is another. Nothing else
// in the node knows which it has.
//
// Concurrency: one goroutine, the node's trainer loop, calls Step back to
// back. Every other method may be called from any goroutine at any time;
// Apply, State and Restore wait for the step in progress and so land
// between two steps, and the rest never wait for a step's computation.
type Trainer interface {
	// Step runs one local step. ctx cancels a step that waits (emulated
	// slowness); its update may then already be applied.
	Step(ctx context.Context) (StepResult, error)
	// SnapshotInto copies the parameters, with the fingerprint, step and
	// progress, reusing dst's storage when it is large enough.
	SnapshotInto(dst []float32) params.Snapshot
	// Apply runs fn between two steps on the live parameters, optimizer
	// state (momentum) and progress, for a merge. If fn fails or leaves a
	// non-finite value or an invalid progress, everything is rolled back
	// and Apply returns an error.
	Apply(fn func(w, opt []float32, p *params.Progress) error) error
	// State exports what a checkpoint needs to resume; Restore takes it
	// back (refusing a state of another model or run).
	State() TrainerState
	Restore(TrainerState) error
	// Stats are cumulative counters.
	Stats() TrainerStats
	// Fingerprint identifies the model, dataset, network and run; Layout
	// names the parameter vector's tensors.
	Fingerprint() params.Fingerprint
	Layout() params.Layout
	// Info names the model and its data, for checkpoints and exports.
	Info() TrainerInfo
	// SetClock tells the trainer where the swarm's run stands (samples on
	// the run clock), which its learning-rate schedule reads.
	SetClock(samples float64)
	// HoldoutLoss scores any parameter vector on a small sample of the
	// trainer's own data: the trust checks judge candidate merges with it.
	// ok is false when the trainer has no holdout.
	HoldoutLoss(w []float32) (loss float64, ok bool, err error)
	// Test scores a parameter vector on the test set.
	Test(w []float32) (TestResult, error)
}

// CheckedApplier is implemented by a trainer that can run a merge that
// checks its own inputs without Apply's rollback copies and scan (see
// train.Trainer.ApplyChecked): fn leaves everything unchanged when it
// fails and finite when it succeeds. The averager's merges use it where
// it exists.
type CheckedApplier interface {
	ApplyChecked(fn func(w, opt []float32, p *params.Progress) error) error
}

// OptReader is implemented by a trainer that can copy out its optimizer
// state alone, without the rest of State: a sync leader takes it every
// round for the joiners it may serve.
type OptReader interface {
	Opt() []float32
}

// ParamAverager is implemented by a trainer that keeps a moving average of
// its parameters (the Go trainer's train.Config.EMA). The node reports that
// average as its model: the test accuracy it logs and serves, what /model
// and --save export, the snapshots a benchmark scores, the model that
// meets --until-accuracy. It trains, merges and sends to its peers the
// live parameters; a checkpoint holds both (TrainerState.Average).
type ParamAverager interface {
	// AverageInto is SnapshotInto for the average.
	AverageInto(dst []float32) params.Snapshot
	// ResetAverage restarts the average at the live parameters.
	ResetAverage()
	// AverageIn takes a peer's model just merged into the average, at
	// share (in [0, 1]) of one update's weight.
	AverageIn(v []float32, share float64) error
}

// ChangeCounter is implemented by a trainer whose state can change without
// a step: an external trainer's push that carries no steps (an optimizer
// state sent after the last step's push) replaces the model and the
// optimizer state all the same. Changes counts every change of the state;
// the node checkpoints a wait in which it moved.
type ChangeCounter interface {
	Changes() int64
}

// ReadyReporter is implemented by a trainer whose model may not exist yet
// (an external trainer before its first push): the node serves no model
// until Ready.
type ReadyReporter interface {
	Ready() bool
}

// ErrNoScore is returned by Test when the trainer cannot score a vector
// and has reported no score yet (an external trainer scores its own
// model): the evaluation is skipped quietly.
var ErrNoScore = errors.New("node: the trainer has reported no test score yet")

// StepResult describes one step.
type StepResult struct {
	Batch int     // samples in the step
	Loss  float64 // training loss of the batch
	LR    float64 // learning rate applied
	// EpochEnd: the step finished a pass over the trainer's shard.
	EpochEnd bool
	// Compute is the gradient and update; Busy adds emulated slowness.
	Compute, Busy time.Duration
}

// TrainerStats are a trainer's cumulative counters.
type TrainerStats struct {
	Steps    int64
	Samples  int64
	Epoch    int
	Progress params.Progress
	Busy     time.Duration
	// SamplesPerSec is Samples / Busy.
	SamplesPerSec float64
	// BaseStep is the step time emulated slowness multiplies (0: none).
	BaseStep time.Duration
	// Schedule describes the learning-rate schedule over the run.
	Schedule string
}

// TrainerState is what a checkpoint holds of a trainer: its vectors, the
// counters the node reads, and the trainer's own state (opaque to the
// node, e.g. the data order's position).
type TrainerState struct {
	Params, Opt []float32
	// Average is the model the trainer reports when it keeps a moving
	// average of Params (ParamAverager), nil otherwise. A checkpoint
	// stores it after Opt in its optimizer state (MetaAverage).
	Average  []float32
	Step     int64
	Progress params.Progress
	Samples  int64
	Epoch    int
	// Own is the trainer's own state, JSON.
	Own json.RawMessage
}

// TrainerInfo names what a trainer trains.
type TrainerInfo struct {
	Model, Dataset, Network, Shard string
	Seed                           uint64
	Slowdown                       float64
	// TrainSamples is the size of the whole training set (not the shard):
	// a run of E epochs is E x TrainSamples samples on the run clock.
	TrainSamples int
}

// TestResult is a parameter vector's score on the test set.
type TestResult struct {
	Accuracy, Loss float64
}
