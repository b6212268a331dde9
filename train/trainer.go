package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// ErrDiverged reports a step whose loss is NaN or infinite; the update is
// not applied.
var ErrDiverged = errors.New("train: loss is not finite (learning rate too high?)")

// Trainer is the built-in Go trainer: one model, its parameters and
// momentum, an optimizer, a shard of a dataset and a schedule.
//
// Ownership. One goroutine, the trainer loop, calls Step back to back; it
// is the only writer of the parameters during a step. Any goroutine may call
// Snapshot, Stats, Evaluate and the read-only accessors at any time: they
// copy under a read lock and never wait for a step's computation, only for
// its short parameter update. Apply, State and Restore may also be called
// from any goroutine: they wait for the step in progress to finish, so a
// merge always lands between two steps. Emulated slowness (Slowdown) sleeps
// outside every lock, so merges and snapshots proceed during it.
type Trainer struct {
	cfg   Config
	model *Model
	shard Shard
	data  *Dataset // the shard's samples alone, or the whole set on "all"
	idx   []int    // the samples of data to train on: 0 to N-1
	sched Schedule
	opt   SGD
	fp    params.Fingerprint
	log   *slog.Logger
	clock clock
	base  time.Duration

	// stepMu serializes whole steps with Apply, State and Restore. The
	// buffers below it belong to whoever holds it.
	stepMu    sync.Mutex
	ws        *Workspace
	grad      []float32
	xb        []float32
	yb        []uint8
	perm      []int // this epoch's order of idx
	permEpoch int   // the epoch perm was built for; -1 before the first
	pcg       rand.PCG
	rng       *rand.Rand
	spareW    []float32 // rollback copy for Apply, scratch for calibration
	spareM    []float32

	// mu guards the model and counters for readers. Writers hold stepMu
	// too, so a holder of stepMu may read them without mu.
	mu       sync.RWMutex
	w, mom   []float32
	avg      *Average // the moving average of w (cfg.EMA); nil when off
	step     int64
	progress params.Progress
	epoch    int
	pos      int // samples of perm already consumed in this epoch
	samples  int64
	merges   int64
	busy     time.Duration

	// runPos is the run position the schedule reads (float64 bits), set by
	// SetClock; until then runPosSet is false and the schedule follows the
	// model's progress.
	runPos    atomic.Uint64
	runPosSet atomic.Bool
	// lrScale multiplies the schedule's rate (float64 bits; 0 stands for
	// 1), set by SetLRScale.
	lrScale atomic.Uint64
}

// StepStats describes one step.
type StepStats struct {
	Step     int64           // steps taken, including this one
	Epoch    int             // epoch the step's batch came from
	Batch    int             // samples in the batch (the last of an epoch may be short)
	Loss     float64         // mean cross-entropy of the batch before the update
	LR       float64         // learning rate applied
	Progress params.Progress // progress after the step
	Compute  time.Duration   // gradient and update
	Busy     time.Duration   // compute plus emulated slowness (the node "computing")
	Duration time.Duration   // wall time of the call, including waiting for a merge
}

// Stats are cumulative counters since the trainer was built or restored.
type Stats struct {
	Steps         int64           `json:"steps"`
	Samples       int64           `json:"samples"`
	Merges        int64           `json:"merges"`
	Epoch         int             `json:"epoch"`
	Progress      params.Progress `json:"progress"`
	Busy          time.Duration   `json:"busy"`
	SamplesPerSec float64         `json:"samples_per_s"` // Samples / Busy
	BaseStep      time.Duration   `json:"base_step"`
}

// New builds a trainer on the training set data: it validates cfg, picks the
// shard, initializes the parameters from cfg.Seed and, when Slowdown > 1 and
// BaseStep is 0, calibrates the base step time. On a shard other than "all"
// it copies the shard's samples and keeps no reference to data; on "all"
// data must stay unmodified while the trainer lives.
func New(cfg Config, data *Dataset) (*Trainer, error) {
	return newTrainer(cfg, data, newRealClock())
}

func newTrainer(cfg Config, data *Dataset, clk clock) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if data == nil || data.N == 0 {
		return nil, fmt.Errorf("%w: no training data", ErrBadDataset)
	}
	model, err := ParseModel(cfg.Model, data.Dim, data.Classes)
	if err != nil {
		return nil, err
	}
	shard, _ := ParseShard(cfg.Shard)
	idx, err := ShardIndices(data, shard, cfg.Seed, cfg.Alpha)
	if err != nil {
		return nil, err
	}
	if len(idx) < data.N {
		// Keep a copy of the shard alone, so that the caller may drop the
		// rest: a node training on 1/100 of MNIST holds 1/100 of it. The
		// shuffle below works on positions in idx, so the order of the
		// samples does not change.
		if data, err = data.Subset(idx); err != nil {
			return nil, err
		}
		for i := range idx {
			idx[i] = i
		}
	}
	sched, _ := ParseSchedule(cfg.Schedule)
	total := float64(cfg.Epochs) * float64(len(idx))
	if cfg.RunSamples > 0 {
		total = cfg.RunSamples
	}
	if sched, err = sched.Resolve(total); err != nil {
		return nil, fmt.Errorf("%w: schedule %q over a run of %.0f samples: %w", ErrBadConfig, cfg.Schedule, total, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := model.Size()
	t := &Trainer{
		cfg: cfg, model: model, data: data, shard: shard, idx: idx, sched: sched,
		opt:   SGD{Momentum: cfg.Momentum, WeightDecay: cfg.WeightDecay},
		fp:    params.RunFingerprint(model.Layout(), data.Name, cfg.Network, cfg.Run),
		log:   log.With("component", "train"),
		clock: clk,
		ws:    model.NewWorkspace(cfg.Batch),
		grad:  make([]float32, n),
		xb:    make([]float32, cfg.Batch*data.Dim),
		yb:    make([]uint8, cfg.Batch),
		perm:  make([]int, len(idx)), permEpoch: -1,
		spareW: make([]float32, n), spareM: make([]float32, n),
		w: make([]float32, n), mom: make([]float32, n),
	}
	t.rng = rand.New(&t.pcg)
	t.avg = NewAverage(n, cfg.EMA, cfg.EMAPeers)
	if err := model.Init(t.w, cfg.Seed); err != nil {
		return nil, err
	}
	t.resetAverage()
	t.base = cfg.BaseStep
	if cfg.Slowdown > 1 && t.base == 0 {
		t.base = t.calibrate()
		t.log.Info("calibrated base step", "base_step_s", t.base.Seconds(), "steps", cfg.CalibrationSteps,
			"slowdown", cfg.Slowdown, "model", model.Spec(), "batch", cfg.Batch)
	}
	return t, nil
}

// calibrate times CalibrationSteps steps on copies of the parameters and
// momentum, over the first batches of the current epoch, and returns the
// median. The model, the position and the counters do not change.
func (t *Trainer) calibrate() time.Duration {
	t.stepMu.Lock()
	defer t.stepMu.Unlock()
	t.ensurePerm()
	copy(t.spareW, t.w)
	copy(t.spareM, t.mom)
	times := make([]time.Duration, t.cfg.CalibrationSteps)
	pos := t.pos
	for i := range times {
		if pos >= len(t.perm) {
			pos = 0
		}
		start := t.clock.Now()
		b := t.gather(pos)
		// An error here can only be a bug in sizes the constructor set.
		_, _ = t.model.Grad(t.ws, t.spareW, t.xb[:b*t.data.Dim], t.yb[:b], t.grad)
		t.opt.Update(t.spareW, t.spareM, t.grad, t.cfg.LR*t.sched.Factor(t.progress+params.Progress(b)))
		times[i] = t.clock.Now().Sub(start)
		pos += b
	}
	slices.Sort(times)
	return max(times[len(times)/2], time.Nanosecond)
}

// ensurePerm builds this epoch's order of the shard, deterministically from
// the seeds and the epoch number, without allocating.
func (t *Trainer) ensurePerm() {
	if t.permEpoch == t.epoch {
		return
	}
	t.pcg.Seed(t.cfg.Seed^0x6a09e667f3bcc908, splitmix(t.cfg.OrderSeed)^uint64(t.epoch))
	copy(t.perm, t.idx)
	for i := len(t.perm) - 1; i > 0; i-- {
		j := t.rng.IntN(i + 1)
		t.perm[i], t.perm[j] = t.perm[j], t.perm[i]
	}
	t.permEpoch = t.epoch
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// gather copies the batch starting at pos of perm into xb/yb and returns its
// size.
func (t *Trainer) gather(pos int) int {
	b := min(t.cfg.Batch, len(t.perm)-pos)
	dim := t.data.Dim
	for r, i := range t.perm[pos : pos+b] {
		t.data.RowTo(t.xb[r*dim:(r+1)*dim], i)
		t.yb[r] = t.data.Y[i]
	}
	return b
}

// Step runs one training step: the next batch of the shard (reshuffled every
// epoch), forward and backward, the SGD update, then, when steps are paced
// (a base step given, or Slowdown > 1), a sleep until Slowdown × the base
// step time has passed since the step began.
// ctx cancels that sleep; the update has then already been applied and Step
// returns its stats with ctx's error. Call Step from one goroutine only.
func (t *Trainer) Step(ctx context.Context) (StepStats, error) {
	if err := ctx.Err(); err != nil {
		return StepStats{}, err
	}
	called := t.clock.Now()
	t.stepMu.Lock()
	start := t.clock.Now()
	if t.done() {
		t.stepMu.Unlock()
		return StepStats{}, ErrDone
	}
	t.ensurePerm()
	b := t.gather(t.pos)
	loss, err := t.model.Grad(t.ws, t.w, t.xb[:b*t.data.Dim], t.yb[:b], t.grad)
	if err == nil && (math.IsNaN(loss) || math.IsInf(loss, 0)) {
		err = fmt.Errorf("%w: step %d, loss %v", ErrDiverged, t.step+1, loss)
	}
	if err != nil {
		t.stepMu.Unlock()
		return StepStats{}, err
	}
	lr := t.cfg.LR * t.sched.Factor(t.position()+params.Progress(b)) * t.scale()
	st := StepStats{Epoch: t.epoch, Batch: b, Loss: loss, LR: lr}

	t.mu.Lock()
	if t.step%AverageEvery == 0 {
		// The parameters as they stand before the step (after any
		// merge between steps).
		t.avg.Fold(t.w, AverageEvery)
	}
	t.opt.Update(t.w, t.mom, t.grad, lr)
	t.step++
	t.progress = t.progress.Step(b)
	t.samples += int64(b)
	t.pos += b
	if t.pos >= len(t.perm) {
		t.epoch++
		t.pos = 0
	}
	st.Step, st.Progress = t.step, t.progress
	t.mu.Unlock()
	t.stepMu.Unlock()

	st.Compute = t.clock.Now().Sub(start)
	if target := t.stepTarget(); target > st.Compute {
		err = t.clock.Sleep(ctx, target-st.Compute)
	}
	end := t.clock.Now()
	st.Busy, st.Duration = end.Sub(start), end.Sub(called)
	t.mu.Lock()
	t.busy += st.Busy
	t.mu.Unlock()
	return st, err
}

// SetClock sets the run position, in samples, that the learning-rate
// schedule reads from the next step on: a node sets it to the swarm's run
// clock (every node's samples added up), so that every node of a swarm
// follows one schedule and a late joiner starts where the swarm is. Until
// it is first called the schedule follows the model's own progress. Any
// goroutine may call it; a negative or non-finite value is ignored.
func (t *Trainer) SetClock(samples float64) {
	if !(samples >= 0) || math.IsInf(samples, 0) {
		return
	}
	t.runPos.Store(math.Float64bits(samples))
	t.runPosSet.Store(true)
}

// position is where the schedule stands before the next step's batch.
func (t *Trainer) position() params.Progress {
	if t.runPosSet.Load() {
		return params.Progress(math.Float64frombits(t.runPos.Load()))
	}
	return t.progress
}

// LR is the learning rate the next step would use (before its batch is
// added to the position).
func (t *Trainer) LR() float64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.cfg.LR * t.sched.Factor(t.position()) * t.scale()
}

// SetLRScale multiplies the learning rate of the steps from the next one on
// by x (1 until it is called): a node of a swarm whose nodes run at
// different speeds scales its steps so that every node's data moves the
// swarm's model alike (node.LRScaling). Any goroutine may call it; a value
// that is not finite and positive is ignored.
func (t *Trainer) SetLRScale(x float64) {
	if !(x > 0) || math.IsInf(x, 0) {
		return
	}
	t.lrScale.Store(math.Float64bits(x))
}

func (t *Trainer) scale() float64 {
	if b := t.lrScale.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return 1
}

// stepTarget is how long a step must last under Slowdown (0: no emulation):
// Slowdown × the base step, given or calibrated. With no base step (Slowdown
// 1 and none given) steps run back to back.
func (t *Trainer) stepTarget() time.Duration {
	if t.base == 0 {
		return 0
	}
	return time.Duration(t.cfg.Slowdown * float64(t.base))
}

func (t *Trainer) done() bool { return t.cfg.Epochs > 0 && t.epoch >= t.cfg.Epochs }

// Done reports whether the configured epochs are complete.
func (t *Trainer) Done() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.done()
}

// Snapshot returns a deep copy of the parameters with the fingerprint, step
// and progress; it is safe to use from any goroutine while training goes on.
func (t *Trainer) Snapshot() params.Snapshot {
	return t.SnapshotInto(nil)
}

// SnapshotInto is Snapshot reusing dst's storage when it is large enough.
func (t *Trainer) SnapshotInto(dst []float32) params.Snapshot {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.snapshotOf(t.w, dst)
}

// Momentum returns a copy of the optimizer's momentum.
func (t *Trainer) Momentum() []float32 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Clone(t.mom)
}

// snapshotOf copies src (the parameters or their average) into dst,
// reused when large enough, with the parameters' step and progress.
// Holds mu for reading.
func (t *Trainer) snapshotOf(src, dst []float32) params.Snapshot {
	if cap(dst) < len(src) {
		dst = make([]float32, len(src))
	}
	dst = dst[:len(src)]
	copy(dst, src)
	return params.Snapshot{Fingerprint: t.fp, Step: t.step, Progress: t.progress, Params: dst}
}

// DefaultEMA is Config.EMA's default: an average over about the last 50
// steps. It brought a swarm's nodes to the target with a third fewer
// samples than their live parameters; 0.99 measured the same, and the
// shorter average follows a changing model more closely
// (docs/benchmarks.md, "The model a node reports").
const DefaultEMA = 0.98

// AverageEvery is how many steps apart the average takes in the
// parameters.
// A pass over them at every step would cost the step a third of its time
// on the default model (mixing 235,146 values against a step of about
// 0.7 ms); every fourth step costs it under a percent, and the average
// still spans a dozen samples of the parameters, which momentum makes
// alike from one step to the next anyway.
const AverageEvery = 4

// AverageDecay is the decay of the n-th update of the average (0 the
// first after a reset) at a decay of ema per step: ema^AverageEvery, but
// faster for the first updates ((1+n)/(10+n)), so that the average
// follows a model that is still changing fast rather than hold on to its
// start.
func AverageDecay(ema float64, n int64) float64 {
	return AverageDecaySteps(ema, AverageEvery, n)
}

// AverageDecaySteps is AverageDecay for an update that comes steps steps
// after the last one (an external trainer's push): ema^steps, but at most
// (1+n)/(10+n).
func AverageDecaySteps(ema float64, steps, n int64) float64 {
	x := float64(n)
	return min(math.Pow(ema, float64(steps)), (1+x)/(10+x))
}

// DefaultEMAPeers is Config.EMAPeers's default: every merged model counts
// as one update. On label-skewed shards it brought every node of a swarm
// to the target 1.9x sooner than an average of its own parameters alone,
// and on iid shards as soon (docs/benchmarks.md, "The models a node
// merges join its average").
const DefaultEMAPeers = 1.0

// AverageIn takes v, a peer's model the parameters have just merged,
// into the moving average (Average.In, at Config.EMAPeers).
func (t *Trainer) AverageIn(v []float32, share float64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.avg.In(v, share)
}

// AverageInWeight is the weight with which the n-th update of the average
// (0 the first after a reset) takes in a merged peer's model: an own
// update's, 1 - AverageDecay(ema, n), times peers (Config.EMAPeers) times
// share clamped to [0, 1] (the merge's weight over its base weight).
func AverageInWeight(ema, peers float64, n int64, share float64) float64 {
	if !(share > 0) {
		return 0
	}
	return (1 - AverageDecay(ema, n)) * min(1, share) * peers
}

// resetAverage restarts the average at the parameters. Holds mu for
// writing (or owns the trainer).
func (t *Trainer) resetAverage() {
	t.avg.Reset(t.w)
}

// ResetAverage restarts the moving average at the live parameters: a node
// calls it when it replaces its model with another (a catch-up), whose
// average the old one's would only drag back.
func (t *Trainer) ResetAverage() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resetAverage()
}

// AverageInto is SnapshotInto for the moving average of the parameters
// (Config.EMA), with the live parameters' step and progress: the model a
// node reports, scores and exports. With no average it is SnapshotInto.
func (t *Trainer) AverageInto(dst []float32) params.Snapshot {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if v := t.avg.Values(); v != nil {
		return t.snapshotOf(v, dst)
	}
	return t.snapshotOf(t.w, dst)
}

// Apply runs fn between two steps with the live parameters, momentum and
// progress, for merges. fn may change all three in place; it must not keep
// the slices or call back into the trainer. If fn fails, or leaves a NaN or
// Inf or an invalid progress, everything is rolled back and Apply returns an
// error wrapping ErrMerge.
func (t *Trainer) Apply(fn func(w, momentum []float32, p *params.Progress) error) error {
	t.stepMu.Lock()
	defer t.stepMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	copy(t.spareW, t.w)
	copy(t.spareM, t.mom)
	p := t.progress
	err := fn(t.w, t.mom, &p)
	if err == nil {
		switch {
		case params.CheckFinite(t.w) != nil:
			err = errors.New("parameters hold NaN or Inf")
		case params.CheckFinite(t.mom) != nil:
			err = errors.New("momentum holds NaN or Inf")
		case !p.Valid():
			err = fmt.Errorf("progress %v is not finite and >= 0", float64(p))
		}
	}
	if err != nil {
		copy(t.w, t.spareW)
		copy(t.mom, t.spareM)
		return fmt.Errorf("%w: %w", ErrMerge, err)
	}
	t.progress = p
	t.merges++
	return nil
}

// ApplyChecked is Apply for an fn that checks its inputs before it writes
// anything: it must leave w, momentum and p unchanged when it fails, and
// finite and valid when it succeeds (a merge of finite models with a
// weight in [0, 1] does both: averaging.Merger.MergeAt). It skips Apply's
// copies for a rollback and its scan of the result, which at a merge
// every few steps cost the trainer about a percent of its time.
func (t *Trainer) ApplyChecked(fn func(w, momentum []float32, p *params.Progress) error) error {
	t.stepMu.Lock()
	defer t.stepMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.progress
	if err := fn(t.w, t.mom, &p); err != nil {
		return fmt.Errorf("%w: %w", ErrMerge, err)
	}
	if !p.Valid() {
		return fmt.Errorf("%w: progress %v is not finite and >= 0", ErrMerge, float64(p))
	}
	t.progress = p
	t.merges++
	return nil
}

// State is everything a checkpoint needs to resume training bit for bit:
// restored into a trainer built with the same Model, Seed, OrderSeed, Shard
// and Alpha, the next steps are exactly the ones the saved trainer would
// have taken.
type State struct {
	Model     string          `json:"model"`
	Seed      uint64          `json:"seed"`
	OrderSeed uint64          `json:"order_seed"`
	Shard     string          `json:"shard"`
	Alpha     float64         `json:"alpha"`
	Params    []float32       `json:"-"`
	Momentum  []float32       `json:"-"`
	Step      int64           `json:"step"`
	Progress  params.Progress `json:"progress"`
	Epoch     int             `json:"epoch"`
	// Pos is how many samples of the epoch's permutation were consumed.
	Pos     int           `json:"pos"`
	Samples int64         `json:"samples"`
	Merges  int64         `json:"merges"`
	Busy    time.Duration `json:"busy_ns"`
	// Average is the moving average of Params (Config.EMA), nil when the
	// trainer keeps none; AverageUpdates is its count of updates since it
	// was last reset. A state without it restores with the average
	// restarted at Params.
	Average        []float32 `json:"-"`
	AverageUpdates int64     `json:"average_updates,omitempty"`
}

// State exports a deep copy of the trainer's state, between two steps.
func (t *Trainer) State() State {
	t.stepMu.Lock()
	defer t.stepMu.Unlock()
	return State{
		Model: t.model.Spec(), Seed: t.cfg.Seed, OrderSeed: t.cfg.OrderSeed, Shard: t.shard.String(), Alpha: t.cfg.Alpha,
		Params: slices.Clone(t.w), Momentum: slices.Clone(t.mom),
		Step: t.step, Progress: t.progress, Epoch: t.epoch, Pos: t.pos,
		Samples: t.samples, Merges: t.merges, Busy: t.busy,
		Average: slices.Clone(t.avg.Values()), AverageUpdates: t.avg.Updates(),
	}
}

// Restore replaces the trainer's state with s (copied), between two steps.
// It refuses, wrapping ErrBadState, a state made for another model or data
// order, or one with wrong sizes, NaNs or out-of-range counters.
func (t *Trainer) Restore(s State) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadState}, a...)...)
	}
	n := t.model.Size()
	switch {
	case s.Model != t.model.Spec():
		return bad("model %q, trainer has %q", s.Model, t.model.Spec())
	case s.Seed != t.cfg.Seed || s.OrderSeed != t.cfg.OrderSeed || s.Shard != t.shard.String() || s.Alpha != t.cfg.Alpha:
		return bad("data order (seed %d, order seed %d, shard %s, alpha %v) differs from the trainer's (%d, %d, %s, %v)",
			s.Seed, s.OrderSeed, s.Shard, s.Alpha, t.cfg.Seed, t.cfg.OrderSeed, t.shard, t.cfg.Alpha)
	case len(s.Params) != n || len(s.Momentum) != n || len(s.Average) != 0 && len(s.Average) != n:
		return bad("%d parameters, %d momentum values and %d averaged, want %d", len(s.Params), len(s.Momentum), len(s.Average), n)
	case params.CheckFinite(s.Params) != nil || params.CheckFinite(s.Momentum) != nil || params.CheckFinite(s.Average) != nil:
		return bad("parameters, momentum or average hold NaN or Inf")
	case !s.Progress.Valid() || s.Step < 0 || s.Samples < 0 || s.Merges < 0 || s.Busy < 0 || s.AverageUpdates < 0:
		return bad("negative or non-finite counters")
	case s.Epoch < 0 || s.Pos < 0 || s.Pos >= len(t.idx):
		return bad("epoch %d position %d outside a shard of %d", s.Epoch, s.Pos, len(t.idx))
	}
	t.stepMu.Lock()
	defer t.stepMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	copy(t.w, s.Params)
	copy(t.mom, s.Momentum)
	t.step, t.progress, t.epoch, t.pos = s.Step, s.Progress, s.Epoch, s.Pos
	t.samples, t.merges, t.busy = s.Samples, s.Merges, s.Busy
	t.resetAverage()
	if s.Average != nil {
		t.avg.Restore(s.Average, s.AverageUpdates)
	}
	return nil
}

// Stats returns the cumulative counters.
func (t *Trainer) Stats() Stats {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := Stats{Steps: t.step, Samples: t.samples, Merges: t.merges, Epoch: t.epoch,
		Progress: t.progress, Busy: t.busy, BaseStep: t.base}
	if t.busy > 0 {
		s.SamplesPerSec = float64(t.samples) / t.busy.Seconds()
	}
	return s
}

// Evaluate scores the model the trainer reports (AverageInto: the moving
// average of the parameters, or the parameters when it keeps none) on d
// with cfg.Threads goroutines; the trainer's own buffers are not touched.
func (t *Trainer) Evaluate(d *Dataset) (EvalResult, error) {
	s := t.AverageInto(nil)
	return Evaluate(t.model, s.Params, d, 0, t.cfg.Threads)
}

// Model returns the (immutable) model.
func (t *Trainer) Model() *Model { return t.model }

// Fingerprint identifies the model, dataset and network.
func (t *Trainer) Fingerprint() params.Fingerprint { return t.fp }

// Config returns the configuration the trainer was built with.
func (t *Trainer) Config() Config { return t.cfg }

// Shard returns the shard and ShardSize its number of samples.
func (t *Trainer) Shard() Shard       { return t.shard }
func (t *Trainer) ShardSize() int     { return len(t.idx) }
func (t *Trainer) Schedule() Schedule { return t.sched }

// BaseStep is the solo step time Slowdown multiplies (given or calibrated;
// 0 when Slowdown is 1 and none was given).
func (t *Trainer) BaseStep() time.Duration { return t.base }

// clock lets tests replace time: pure step logic asks it for the time and
// for interruptible sleeps.
type clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// realClock reuses one timer so that emulated slowness allocates nothing
// per step; like the rest of the step path it belongs to the trainer loop.
type realClock struct{ timer *time.Timer }

func newRealClock() *realClock {
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	return &realClock{timer: tm}
}

func (*realClock) Now() time.Time { return time.Now() }

func (c *realClock) Sleep(ctx context.Context, d time.Duration) error {
	c.timer.Reset(d)
	select {
	case <-c.timer.C:
		return nil
	case <-ctx.Done():
		// Since Go 1.23 Stop leaves no stale tick behind for the next Reset.
		c.timer.Stop()
		return ctx.Err()
	}
}
