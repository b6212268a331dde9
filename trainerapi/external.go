package trainerapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train"
)

// TensorSpec is one tensor of a registration: the safetensors header's
// name, dtype and shape.
type TensorSpec struct {
	Name  string `json:"name"`
	Dtype string `json:"dtype"`
	Shape []int  `json:"shape"`
}

// Spec is what a trainer registers: its model's tensors, the optimizer
// state the node keeps for it, and the run's identity.
type Spec struct {
	// Run names the model, data and anything else peers must share; with
	// the layout and the node's run it makes the fingerprint.
	Run       string       `json:"run"`
	Tensors   []TensorSpec `json:"tensors"`
	Optimizer []TensorSpec `json:"optimizer"`
	// TrainSamples is the whole training set (one epoch on the run
	// clock); Batch the trainer's batch (staleness counts its steps).
	TrainSamples int `json:"train_samples"`
	Batch        int `json:"batch"`
	// Holdout: the trainer scores candidate vectors. Version 1 has no
	// such request, so it must be false: trust runs without the loss checks.
	Holdout bool `json:"holdout"`
}

// maxRunLen bounds the run identity.
const maxRunLen = 1024

// layouts validates s and returns its model and optimizer layouts (the
// optimizer's has size 0 when there is no state).
func (s Spec) layouts() (model, opt params.Layout, err error) {
	switch {
	case s.Run == "" || len(s.Run) > maxRunLen:
		return model, opt, fmt.Errorf("run identity must be 1 to %d bytes, got %d", maxRunLen, len(s.Run))
	case s.TrainSamples < 1:
		return model, opt, fmt.Errorf("train_samples %d: must be the size of the training set, >= 1", s.TrainSamples)
	case s.Batch < 1:
		return model, opt, fmt.Errorf("batch %d: must be >= 1", s.Batch)
	case s.Holdout:
		return model, opt, errors.New(`holdout scoring is not in protocol version 1: register "holdout": false (trust then runs without the loss checks)`)
	case len(s.Tensors) == 0:
		return model, opt, errors.New("no tensors: register the model's trainable parameters")
	}
	specs := func(ts []TensorSpec, what string) ([]params.TensorSpec, error) {
		out := make([]params.TensorSpec, len(ts))
		for i, t := range ts {
			if t.Dtype != "F32" {
				return nil, fmt.Errorf("%s tensor %q has dtype %q: protocol version 1 carries F32 only (convert it to float32)", what, t.Name, t.Dtype)
			}
			out[i] = params.TensorSpec{Name: t.Name, Shape: t.Shape}
		}
		return out, nil
	}
	ms, err := specs(s.Tensors, "model")
	if err != nil {
		return model, opt, err
	}
	if model, err = params.NewLayout(ms...); err != nil {
		return model, opt, err
	}
	if len(s.Optimizer) > 0 {
		os, err := specs(s.Optimizer, "optimizer")
		if err != nil {
			return model, opt, err
		}
		if opt, err = params.NewLayout(os...); err != nil {
			return model, opt, fmt.Errorf("optimizer: %w", err)
		}
	}
	return model, opt, nil
}

// SameRun reports whether two registrations are of one model and run.
func SameRun(a, b Spec) bool { return a.equal(b) }

// Describe names a registration in a sentence, for errors.
func Describe(s Spec) string {
	n := 0
	for _, t := range s.Tensors {
		k := 1
		for _, d := range t.Shape {
			k *= d
		}
		n += k
	}
	return fmt.Sprintf("run %q (%d tensors, %d values, %d optimizer tensors, train_samples %d, batch %d)",
		s.Run, len(s.Tensors), n, len(s.Optimizer), s.TrainSamples, s.Batch)
}

func (s Spec) equal(o Spec) bool {
	eq := func(a, b []TensorSpec) bool {
		return slices.EqualFunc(a, b, func(x, y TensorSpec) bool {
			return x.Name == y.Name && x.Dtype == y.Dtype && slices.Equal(x.Shape, y.Shape)
		})
	}
	return s.Run == o.Run && s.TrainSamples == o.TrainSamples && s.Batch == o.Batch && s.Holdout == o.Holdout &&
		eq(s.Tensors, o.Tensors) && eq(s.Optimizer, o.Optimizer)
}

// RunConfig is the node's side of an external trainer's run.
type RunConfig struct {
	Network  string  // the mesh's network name
	Epochs   float64 // run length in passes over the training set (0: no end)
	Schedule string  // the learning-rate schedule the trainer is told to follow
	// EMA and EMAPeers are the moving average the node reports as its
	// model (train.Config's fields of the same names): the average of the
	// pushed models at a decay of EMA per step, which also takes in every
	// peer's model the node merges. EMA 0 keeps none: the node reports the
	// pushed model.
	EMA, EMAPeers float64
}

// External is an external trainer as a node.Trainer: the node's mirror of
// the trainer's model, updated by pushes, changed by merges. The trainer
// learns the merges at its next push as a delta (merged - snapshot).
type External struct {
	spec      Spec
	layout    params.Layout
	optLen    int
	fp        params.Fingerprint
	sched     train.Schedule
	total     float64
	scheduleS string

	wake chan struct{} // a push is waiting for Step (cap 1)

	mu       sync.Mutex
	w, base  []float32 // the node's model; what the trainer holds as far as the node knows
	bak      []float32 // Apply's rollback copy
	opt      []float32 // the optimizer state last pushed (nil: none yet)
	ready    bool      // the model exists: first push, or restored
	merged   bool      // w has merges the trainer has not got
	step     int64
	samples  int64
	progress params.Progress
	clock    float64
	stop     string
	score    *node.TestResult
	pending  pending
	busy     time.Duration
	lastWork time.Time
	lastLR   float64
	lrScale  float64 // speed scaling's factor (0: none set)
	merges   int64   // Applies since registration
	changes  int64   // pushes taken (Changes)
	lastPush time.Time
	srv      *Server // the server that bound the trainer, for the status
	peerID   string  // the node's, told to the trainer at registration

	avg *train.Average // the reported average (RunConfig.EMA); nil when off
}

// SetPeerID names the node the mirror belongs to, for the registration
// reply.
func (e *External) SetPeerID(id string) {
	e.mu.Lock()
	e.peerID = id
	e.mu.Unlock()
}

// pending is what pushes brought since the node's last Step.
type pending struct {
	samples, steps int64
	lossSum        float64
	losses         int
}

var (
	_ node.Trainer         = (*External)(nil)
	_ node.ReadyReporter   = (*External)(nil)
	_ node.HoldoutReporter = (*External)(nil)

	_ node.TrainerStatusReporter = (*External)(nil)
	_ node.ChangeCounter         = (*External)(nil)
	_ node.ParamAverager         = (*External)(nil)
)

// Changes counts the pushes taken: each replaces the model (and, when it
// carries one, the optimizer state), steps or none, so the node checkpoints
// a wait after a push that carried no steps.
func (e *External) Changes() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changes
}

// TrainerStatus is the trainer's connection, for the node's status.
func (e *External) TrainerStatus() node.TrainerStatus {
	e.mu.Lock()
	srv, last := e.srv, e.lastPush
	e.mu.Unlock()
	ts := node.TrainerStatus{Kind: "external", LastPushS: -1, Rejected: map[string]int64{}}
	if !last.IsZero() {
		ts.LastPushS = time.Since(last).Seconds()
	}
	if srv != nil {
		ts.Connected, ts.Rejected = srv.Connected(), srv.Rejections()
	}
	return ts
}

// NewExternal validates spec and builds the mirror of its model.
func NewExternal(spec Spec, rc RunConfig) (*External, error) {
	layout, opt, err := spec.layouts()
	if err != nil {
		return nil, err
	}
	sched, err := train.ParseSchedule(rc.Schedule)
	if err != nil {
		return nil, err
	}
	if !(rc.EMA >= 0 && rc.EMA < 1) || !(rc.EMAPeers >= 0 && rc.EMAPeers <= 1) {
		return nil, fmt.Errorf("trainerapi: ema %v must be in [0,1) and ema-peers %v in [0,1]", rc.EMA, rc.EMAPeers)
	}
	total := rc.Epochs * float64(spec.TrainSamples)
	if sched, err = sched.Resolve(total); err != nil {
		return nil, err
	}
	e := &External{spec: spec, layout: layout, optLen: opt.Size(), sched: sched, total: total, scheduleS: rc.Schedule,
		wake: make(chan struct{}, 1), w: make([]float32, layout.Size()), base: make([]float32, layout.Size()),
		avg: train.NewAverage(layout.Size(), rc.EMA, rc.EMAPeers)}
	e.fp = params.RunFingerprint(layout, "external:"+spec.Run, rc.Network, node.RunSpec(total, rc.Schedule))
	return e, nil
}

// Spec is the registration the mirror was built for.
func (e *External) Spec() Spec { return e.spec }

// Step waits for the trainer's next push and reports the samples and steps
// it brought. It returns an empty result after a second without one (the
// trainer is away), so the node keeps checking its stop conditions.
func (e *External) Step(ctx context.Context) (node.StepResult, error) {
	idle := time.NewTimer(time.Second)
	defer idle.Stop()
	for {
		e.mu.Lock()
		if p := e.pending; p.samples > 0 || p.steps > 0 {
			e.pending = pending{}
			now := time.Now()
			busy := now.Sub(e.lastWork)
			if e.lastWork.IsZero() {
				busy = 0
			}
			e.lastWork = now
			e.busy += busy
			r := node.StepResult{Batch: int(p.samples), LR: e.lastLR, Compute: busy, Busy: busy}
			if p.losses > 0 {
				r.Loss = p.lossSum / float64(p.losses)
			}
			e.mu.Unlock()
			return r, nil
		}
		e.mu.Unlock()
		select {
		case <-ctx.Done():
			return node.StepResult{}, ctx.Err()
		case <-idle.C:
			e.mu.Lock()
			e.lastWork = time.Time{} // the wait is not the trainer's work
			e.mu.Unlock()
			return node.StepResult{}, nil
		case <-e.wake:
		}
	}
}

// SnapshotInto copies the node's model.
func (e *External) SnapshotInto(dst []float32) params.Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snapshotOf(e.w, dst)
}

// snapshotOf copies src (the model or its average) into dst's storage,
// when large enough, with the model's step and progress. Holds mu.
func (e *External) snapshotOf(src, dst []float32) params.Snapshot {
	if cap(dst) < len(src) {
		dst = make([]float32, len(src))
	}
	dst = dst[:len(src)]
	copy(dst, src)
	return params.Snapshot{Fingerprint: e.fp, Step: e.step, Progress: e.progress, Params: dst}
}

// Apply runs a merge on the node's model. The optimizer state is the
// trainer's own and opaque to the node: fn sees none.
func (e *External) Apply(fn func(w, opt []float32, p *params.Progress) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.ready {
		return errors.New("trainerapi: no model yet (the trainer has not pushed one)")
	}
	if cap(e.bak) < len(e.w) {
		e.bak = make([]float32, len(e.w))
	}
	e.bak = e.bak[:len(e.w)]
	copy(e.bak, e.w)
	p := e.progress
	err := fn(e.w, nil, &p)
	if err == nil {
		err = params.CheckFinite(e.w)
	}
	if err == nil && !p.Valid() {
		err = fmt.Errorf("trainerapi: merge left an invalid progress %v", float64(p))
	}
	if err != nil {
		copy(e.w, e.bak)
		return err
	}
	e.progress, e.merged = p, true
	e.merges++
	return nil
}

// ResetAverage restarts the reported average at the node's model (after a
// catch-up replaced it).
func (e *External) ResetAverage() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.avg.Reset(e.w)
}

// AverageIn takes a peer's model the node just merged into the average
// (train.Average.In).
func (e *External) AverageIn(v []float32, share float64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.ready {
		return nil
	}
	return e.avg.In(v, share)
}

// AverageInto is SnapshotInto for the reported average; with none (EMA
// 0) it is SnapshotInto.
func (e *External) AverageInto(dst []float32) params.Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snapshotOf(e.reported(), dst)
}

// reported is the model the node reports: the average, or the model when
// it keeps none. Holds mu.
func (e *External) reported() []float32 {
	if v := e.avg.Values(); v != nil {
		return v
	}
	return e.w
}

// ownState is the checkpoint's trainer state: the counters the node reads
// back and the registration it belongs to.
type ownState struct {
	Step      int64           `json:"step"`
	Progress  params.Progress `json:"progress"`
	Epoch     int             `json:"epoch"`
	Samples   int64           `json:"samples"`
	Spec      Spec            `json:"spec"`
	Optimizer bool            `json:"optimizer"`
	// AverageUpdates counts the average's updates since its last reset.
	AverageUpdates int64 `json:"average_updates,omitempty"`
}

// State is the node's model and the optimizer state last pushed.
func (e *External) State() node.TrainerState {
	e.mu.Lock()
	defer e.mu.Unlock()
	own, _ := json.Marshal(ownState{Step: e.step, Progress: e.progress, Epoch: e.epoch(), Samples: e.samples,
		Spec: e.spec, Optimizer: e.opt != nil, AverageUpdates: e.avg.Updates()}) // plain fields: cannot fail
	return node.TrainerState{Params: slices.Clone(e.w), Opt: slices.Clone(e.opt), Average: slices.Clone(e.avg.Values()),
		Step: e.step, Progress: e.progress, Samples: e.samples, Epoch: e.epoch(), Own: own}
}

// Restore takes a checkpoint of the same registration back.
func (e *External) Restore(s node.TrainerState) error {
	var own ownState
	if err := json.Unmarshal(s.Own, &own); err != nil {
		return fmt.Errorf("trainerapi: checkpoint state: %w", err)
	}
	if !own.Spec.equal(e.spec) {
		return errors.New("trainerapi: the checkpoint is of another registration (tensors, optimizer, run identity, training set size or batch differ)")
	}
	if len(s.Params) != len(e.w) || (len(s.Opt) != 0 && len(s.Opt) != e.optLen) {
		return fmt.Errorf("trainerapi: checkpoint holds %d parameters and %d optimizer values, want %d and %d",
			len(s.Params), len(s.Opt), len(e.w), e.optLen)
	}
	if len(s.Average) != 0 && len(s.Average) != len(e.w) {
		return fmt.Errorf("trainerapi: checkpoint holds %d averaged values, want %d", len(s.Average), len(e.w))
	}
	if err := params.CheckFinite(s.Params); err != nil {
		return err
	}
	if err := params.CheckFinite(s.Average); err != nil {
		return fmt.Errorf("trainerapi: checkpoint's average: %w", err)
	}
	if own.AverageUpdates < 0 {
		return fmt.Errorf("trainerapi: checkpoint's average has %d updates", own.AverageUpdates)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	copy(e.w, s.Params)
	copy(e.base, s.Params)
	e.avg.Reset(e.w)
	if len(s.Average) != 0 {
		e.avg.Restore(s.Average, own.AverageUpdates)
	}
	e.opt = nil
	if own.Optimizer && len(s.Opt) == e.optLen {
		e.opt = slices.Clone(s.Opt)
	}
	e.step, e.progress, e.samples = s.Step, s.Progress, s.Samples
	e.ready, e.merged = true, false
	return nil
}

func (e *External) epoch() int { return int(e.samples / int64(e.spec.TrainSamples)) }

// Stats are the trainer's counters as its pushes reported them.
func (e *External) Stats() node.TrainerStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := node.TrainerStats{Steps: e.step, Samples: e.samples, Epoch: e.epoch(), Progress: e.progress, Busy: e.busy,
		Schedule: e.scheduleS}
	if e.busy > 0 {
		s.SamplesPerSec = float64(e.samples) / e.busy.Seconds()
	}
	return s
}

func (e *External) Fingerprint() params.Fingerprint { return e.fp }
func (e *External) Layout() params.Layout           { return e.layout }

// Info names the external model by its run identity.
func (e *External) Info() node.TrainerInfo {
	return node.TrainerInfo{Model: "external", Dataset: e.spec.Run, TrainSamples: e.spec.TrainSamples}
}

// SetClock records the run clock the trainer is told about.
func (e *External) SetClock(samples float64) {
	e.mu.Lock()
	e.clock = samples
	e.mu.Unlock()
}

// SetLRScale multiplies the run's lr_factor by x (the node's speed
// scaling, node.LRScaling): the trainer's rate follows it as it follows the
// schedule.
func (e *External) SetLRScale(x float64) {
	if !(x > 0) || math.IsInf(x, 0) {
		return
	}
	e.mu.Lock()
	e.lrScale = x
	e.mu.Unlock()
}

// HasHoldout is false: protocol version 1 asks the trainer for no losses.
func (e *External) HasHoldout() bool { return false }

// HoldoutLoss: there is none.
func (e *External) HoldoutLoss([]float32) (float64, bool, error) { return 0, false, nil }

// Ready reports whether the model exists (pushed or restored).
func (e *External) Ready() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ready
}

// Test is the trainer's own last reported score (the node cannot score an
// external model): node.ErrNoScore until it reports one.
func (e *External) Test([]float32) (node.TestResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.score == nil {
		return node.TestResult{}, node.ErrNoScore
	}
	return *e.score, nil
}

// Stop marks the run ended (a node stop reason): pushes get no delta
// from now on and are told why.
func (e *External) Stop(reason string) {
	e.mu.Lock()
	e.stop = reason
	e.mu.Unlock()
}

// RunInfo is the swarm's run as the trainer sees it.
type RunInfo struct {
	Samples  float64 `json:"samples"`
	Total    float64 `json:"total"`
	Fraction float64 `json:"fraction"`
	LRFactor float64 `json:"lr_factor"`
	Stop     string  `json:"stop"`
}

func (e *External) runInfo() RunInfo {
	r := RunInfo{Samples: e.clock, Total: e.total, LRFactor: e.sched.Factor(params.Progress(e.clock)), Stop: e.stop}
	if e.lrScale > 0 {
		r.LRFactor *= e.lrScale
	}
	if e.total > 0 {
		r.Fraction = min(e.clock/e.total, 1)
	}
	return r
}

// pushIn is one push's counters.
type pushIn struct {
	samples, steps int64
	loss, lr       *float64
}

// push takes the trainer's snapshot (and optimizer state, if opt is not
// nil) and writes the merges since the last push or pull into delta,
// reporting whether there were any. The caller has checked sizes and
// finiteness.
func (e *External) push(snap, opt, delta []float32, in pushIn) (bool, RunInfo) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stop != "" {
		return false, e.runInfo()
	}
	merged := e.merged && e.ready
	if merged {
		w, base := e.w[:len(snap)], e.base[:len(snap)]
		delta = delta[:len(snap)]
		for i, s := range snap {
			d := w[i] - base[i]
			delta[i] = d
			w[i] = s + d
			base[i] = s + d
		}
	} else {
		copy(e.w, snap)
		copy(e.base, snap)
	}
	if opt != nil {
		if e.opt == nil {
			e.opt = make([]float32, e.optLen)
		}
		copy(e.opt, opt)
	}
	if !e.ready {
		e.avg.Reset(e.w)
	} else {
		// The pushed model (with the merges since the last push) joins
		// the average as the Go trainer's parameters do, at a decay of
		// EMA for each step it took since: its batches, if it counts
		// only samples.
		steps := in.steps
		if steps == 0 && in.samples > 0 {
			steps = (in.samples + int64(e.spec.Batch) - 1) / int64(e.spec.Batch)
		}
		e.avg.Fold(e.w, steps)
	}
	e.merged, e.ready = false, true
	e.changes++
	e.step += in.steps
	e.samples += in.samples
	e.progress += params.Progress(in.samples)
	e.pending.samples += in.samples
	e.pending.steps += in.steps
	if in.loss != nil && in.samples > 0 {
		e.pending.lossSum += *in.loss
		e.pending.losses++
	}
	if in.lr != nil {
		e.lastLR = *in.lr
	}
	e.lastPush = time.Now()
	if e.lastWork.IsZero() {
		e.lastWork = e.lastPush
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return merged, e.runInfo()
}

// pull copies the node's model (and the optimizer state, when it has one)
// for a trainer that takes it up: the next delta counts from it.
func (e *External) pull(w, opt []float32) (step, samples int64, hasOpt bool, run RunInfo, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.ready {
		return 0, 0, false, run, errors.New("the node holds no model of this run yet: push yours first")
	}
	copy(w, e.w)
	copy(e.base, e.w)
	e.merged = false
	if e.opt != nil {
		copy(opt, e.opt)
	}
	return e.step, e.samples, e.opt != nil, e.runInfo(), nil
}

// average copies the model the node reports (the moving average, or the
// model when the node keeps none) into dst for a trainer to score; it
// changes nothing.
func (e *External) average(dst []float32) (step, samples, updates int64, averaged bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.ready {
		return 0, 0, 0, false, errors.New("the node holds no model of this run yet: push yours first")
	}
	copy(dst, e.reported())
	return e.step, e.samples, e.avg.Updates(), e.avg != nil, nil
}

// setScore records the trainer's own test score.
func (e *External) setScore(acc, loss float64) error {
	if !(acc >= 0 && acc <= 1) || math.IsNaN(loss) || math.IsInf(loss, 0) {
		return fmt.Errorf("accuracy %v must be in [0,1] and loss %v finite", acc, loss)
	}
	e.mu.Lock()
	e.score = &node.TestResult{Accuracy: acc, Loss: loss}
	e.mu.Unlock()
	return nil
}

// status is the mirror's state for a registration reply.
func (e *External) status() (ready bool, step, samples int64, run RunInfo) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ready, e.step, e.samples, e.runInfo()
}
