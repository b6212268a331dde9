package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
)

// Run trains until the run ends, another stop condition holds or ctx ends,
// then writes a final checkpoint and closes the node. emit is called one
// event at a time.
func (n *Node) Run(ctx context.Context, emit func(Event)) (*Result, error) {
	defer n.Close()
	var emitMu sync.Mutex
	send := func(e Event) {
		e.Elapsed = time.Since(n.started).Seconds()
		emitMu.Lock()
		defer emitMu.Unlock()
		if emit != nil {
			emit(e)
		}
	}
	info := n.trainer.Info()
	meta := map[string]string{
		MetaModel: info.Model, MetaDataset: info.Dataset, MetaNetwork: info.Network,
		MetaFingerprint: n.fp.String(), MetaSeed: strconv.FormatUint(info.Seed, 10),
		MetaRun: RunSpec(n.runTotal, n.cfg.Train.Schedule),
	}
	ck := newCheckpointer(n.st, meta, n.log, send, func(info store.Info) { n.rep.lastCkpt.Store(&info) })
	defer ck.close()
	if n.st != nil && n.supersede {
		// A fresh run's first checkpoint supersedes the old run at once, so a
		// crash before the next one cannot resume the run we meant to drop.
		// With no checkpoint of this run to drop (a new volunteer, a data
		// dir of another model) there is nothing to write, and nothing
		// then stands between a starting node and its "listening" event.
		if err := ck.saveNow(context.WithoutCancel(ctx), n.checkpointState(), false); err != nil {
			return nil, err
		}
	}
	if n.host != nil {
		ev := Event{Event: "listening", PeerID: n.id.String(), Addrs: n.Addrs(), Fingerprint: n.fp.String(),
			Message: fmt.Sprintf("peer %s, mode %s, profile %s, network %q", n.id, n.cfg.Mode, n.cfg.Host.Profile, n.cfg.Host.Network)}
		if len(n.cfg.Host.Announce) > 0 {
			ev.ListenAddrs = n.ListenAddrs()
		}
		send(ev)
	}

	runCtx, stopLoops := context.WithCancel(ctx)
	var wg sync.WaitGroup
	spawn := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(runCtx) }()
	}
	if n.ann != nil {
		// The run clock listens while the node waits for a start file too,
		// so training starts at the swarm's point of the run.
		spawn(n.watcher)
	}
	stopAll := func() { stopLoops(); wg.Wait() }
	defer stopAll()

	n.awaitStart(ctx)
	began := time.Now()
	n.busyAtStart.Store(int64(n.busy(n.trainer.Stats())))
	n.trainStart.Store(&began)

	evals := make(chan evalRequest, 1)
	spawn(func(ctx context.Context) { n.evaluator(ctx, evals, send) })
	spawn(n.historian)
	spawn(n.snapshotter)
	if n.host != nil && n.cfg.Mode == ModeGossip {
		spawn(func(ctx context.Context) { n.avg.run(ctx, send) })
	}

	l := &trainLoop{n: n, ck: ck, evals: evals, send: send, began: began}
	reason, err := l.run(ctx)
	if n.sync != nil {
		// A round still in flight (--sync-overlap) carries our last step.
		n.sync.drain(ctx)
	}
	if err != nil {
		return nil, err
	}
	stopAll()
	return n.finish(ctx, ck, reason, l.lossEMA, info, send)
}

// checkpointState is the trainer's state and the run clock, between two
// steps.
func (n *Node) checkpointState() checkpointState {
	s := n.trainer.State()
	return checkpointState{TrainerState: s, clock: n.runPosition(time.Now(), float64(s.Samples))}
}

// trainLoop is the trainer loop's state: Run's goroutine owns it, and it
// is the only caller of Trainer.Step. It never touches the network or the
// disk: sync mode's round is the one wait on the network, by design.
type trainLoop struct {
	n     *Node
	ck    *checkpointer
	evals chan<- evalRequest
	send  func(Event)
	began time.Time

	own        float64 // our samples in the run
	startClock float64
	startSteps int64
	startSamp  int64
	lossEMA    float64
	steps      int
	// lrScale is the --lr-scaling factor (float64 bits) handed to the
	// trainer last: the loop applies the watcher's factor between steps,
	// so that the factor the status shows is the one the step used.
	lrScale uint64

	// slowMo is gossip's slow momentum: nil unless in gossip mode, with
	// the built-in trainer and OuterEvery > 0.
	slowMo *slowMomentum

	lastReport, lastCkpt, lastEval time.Time
	// kicked: the announcement out of schedule that tells the peers we
	// train (kickAfter) has been asked for.
	kicked bool
	// ckptAt is the trainer's steps, the node's merges and the trainer's
	// changes (ChangeCounter) at the last checkpoint offered.
	ckptAt [3]int64
}

// run steps until a stop condition holds and returns why (a Stop constant).
func (l *trainLoop) run(ctx context.Context) (string, error) {
	n, t := l.n, l.n.trainer
	s0 := t.Stats()
	l.own, l.startSteps, l.startSamp = float64(s0.Samples), s0.Steps, s0.Samples
	l.startClock = n.runPosition(l.began, l.own)
	l.lastReport, l.lastCkpt, l.lastEval = l.began, l.began, l.began
	// The slow momentum is optimizer state: an external trainer keeps its
	// own optimizer, which the node does not see, so it gets none.
	if _, builtin := t.(*goTrainer); builtin && n.cfg.Mode == ModeGossip && n.cfg.OuterEvery > 0 {
		l.slowMo = newSlowMomentum(n.cfg.OuterEvery, n.cfg.OuterLR, n.cfg.OuterMomentum)
	}
	for {
		clock := n.runPosition(time.Now(), l.own)
		if reason := l.stop(clock); reason != "" {
			return reason, nil
		}
		t.SetClock(clock)
		l.applyLRScale()
		stats, err := t.Step(ctx)
		if ctx.Err() != nil {
			return StopInterrupted, nil
		}
		if err != nil {
			return "", err
		}
		if stats.Batch == 0 {
			// An external trainer's wait ended with nothing trained (it
			// is away): checkpoint what it left if that is not saved yet,
			// and look at the stop conditions again.
			l.idle()
			continue
		}
		l.own += float64(stats.Batch)
		n.rep.setLR(stats.LR, math.Float64frombits(l.lrScale))
		if n.sync != nil {
			// Sync mode: the group's average replaces our step's result
			// before the next step; all of it is the trainer waiting on
			// the network.
			waited := time.Now()
			err := n.sync.step(ctx)
			n.networkWait.Add(int64(time.Since(waited)))
			if err != nil {
				return StopInterrupted, nil
			}
		}
		if l.slowMo != nil {
			l.outerStep(stats.LR)
		}
		// Yield between steps: with --threads 1 the trainer would otherwise
		// hold the only P until preempted, and every network round trip of
		// an exchange would wait for that (about 10 ms each). A step that
		// slept (--slowdown) has already left the P to them; yielding again
		// would idle the trainer behind their work.
		if stats.Busy <= stats.Compute {
			runtime.Gosched()
		}
		l.after(stats)
	}
}

// outerStep offers the slow momentum a step at the inner learning rate lr
// of the step just taken, and counts its time as busy:
// it is the optimizer's work.
func (l *trainLoop) outerStep(lr float64) {
	n := l.n
	if !l.slowMo.Due() {
		return
	}
	began := time.Now()
	// StepInPlace writes nothing when it fails and only finite values
	// when it succeeds: the trainer need not copy the model for a
	// rollback and scan it after (the built-in trainer is a
	// CheckedApplier; that is what a step would otherwise cost).
	err := n.trainer.(CheckedApplier).ApplyChecked(func(w, _ []float32, _ *params.Progress) error {
		return l.slowMo.step(w, lr, n.replaced.Load())
	})
	n.outerBusy.Add(int64(time.Since(began)))
	n.outerSteps.Store(l.slowMo.Taken())
	if err != nil {
		// A non-finite model is the trainer's to report; a trainer that
		// cannot take a change, the averager's: skip the step, and start
		// over from the model as it is then.
		n.log.Warn("slow-momentum step skipped", "err", err)
		l.slowMo.Reset()
	}
}

// stop is why the run ends at this clock ("" while it goes on).
func (l *trainLoop) stop(clock float64) string {
	n := l.n
	switch {
	case n.runTotal > 0 && clock >= n.runTotal:
		return StopRunComplete
	case n.rep.reached.Load() != nil:
		return StopAccuracy
	case n.cfg.MaxSteps > 0 && n.trainer.Stats().Steps >= n.cfg.MaxSteps:
		return StopMaxSteps
	case n.cfg.Duration > 0 && time.Since(n.started) >= n.cfg.Duration:
		return StopDuration
	}
	return ""
}

// after does a step's bookkeeping: the loss average, and a checkpoint,
// an evaluation and a progress report when each is due. None of them
// waits: each hands its work to its own goroutine or drops it.
func (l *trainLoop) after(stats StepResult) {
	n, t := l.n, l.n.trainer
	if l.steps++; l.steps == 1 {
		l.lossEMA = stats.Loss
	} else {
		l.lossEMA = 0.98*l.lossEMA + 0.02*stats.Loss
	}
	setF64(&n.rep.lastLoss, l.lossEMA)
	now := time.Now()
	if !l.kicked && n.ann != nil && now.Sub(l.began) >= kickAfter {
		// Our samples and rate have left zero: tell the peers now, not
		// up to an announce interval from now, so that their run clocks
		// count us from the start (see kickAfter).
		n.ann.Kick()
		l.kicked = true
	}
	if n.cfg.CheckpointEvery > 0 && now.Sub(l.lastCkpt) >= n.cfg.CheckpointEvery {
		l.checkpoint(now)
	}
	if !n.snaps.NoEval && (stats.EpochEnd || (n.cfg.EvalEvery > 0 && now.Sub(l.lastEval) >= n.cfg.EvalEvery)) {
		// Offer the evaluator a snapshot; if it is still busy with the
		// previous one, skip this one rather than wait.
		kind := "eval"
		if stats.EpochEnd {
			kind = "epoch"
		}
		select {
		case l.evals <- evalRequest{kind: kind, snap: n.reported(nil), epoch: t.Stats().Epoch}:
			l.lastEval = now
		default:
		}
	}
	if now.Sub(l.lastReport) >= n.cfg.ReportEvery {
		l.report(now, stats.LR)
		l.lastReport = now
	}
}

// checkpoint offers the checkpointer the state now.
func (l *trainLoop) checkpoint(now time.Time) {
	l.ck.offer(l.n.checkpointState())
	l.lastCkpt, l.ckptAt = now, l.version()
}

// version is what tells a checkpoint's state from a later one: the
// trainer's steps, the node's merges and, for a trainer that can change
// without a step, its changes.
func (l *trainLoop) version() [3]int64 {
	n := l.n
	v := [3]int64{n.trainer.Stats().Steps, n.Merges(), 0}
	if c, ok := n.trainer.(ChangeCounter); ok {
		v[2] = c.Changes()
	}
	return v
}

// idle is the bookkeeping of a wait in which the trainer did nothing: a
// checkpoint when one is due and the model changed since the last.
func (l *trainLoop) idle() {
	n, now := l.n, time.Now()
	if n.cfg.CheckpointEvery > 0 && now.Sub(l.lastCkpt) >= n.cfg.CheckpointEvery && l.ckptAt != l.version() {
		l.checkpoint(now)
	}
}

// report sends a progress event and records a history point.
func (l *trainLoop) report(now time.Time, lr float64) {
	n := l.n
	s := n.trainer.Stats()
	clock := n.runPosition(now, l.own)
	e := Event{Event: "progress", Step: s.Steps, Epoch: s.Epoch, Progress: float64(s.Progress), Loss: l.lossEMA,
		Merges: n.Merges(), LR: lr, RunSamples: clock, RunTotal: n.runTotal}
	if n.ann != nil {
		e.Peers = len(n.partners())
	}
	if el := now.Sub(l.began).Seconds(); el > 0 {
		e.SamplesPerSec = float64(s.Samples-l.startSamp) / el
		if rate := (clock - l.startClock) / el; n.runTotal > clock && rate > 0 {
			e.ETA = (n.runTotal - clock) / rate
		}
	}
	l.send(e)
	n.rep.record(store.Point{Time: now, Step: s.Steps, Progress: s.Progress, Loss: l.lossEMA,
		Accuracy: f64(&n.rep.lastAcc), SamplesPerSec: s.SamplesPerSec})
}

// finish ends a run after the loops stopped: the model that reached
// --until-accuracy if that is why, the final evaluation, the final
// checkpoint (marked final unless interrupted, so a stopped node resumes)
// and the final event.
func (n *Node) finish(ctx context.Context, ck *checkpointer, reason string, lossEMA float64, info TrainerInfo,
	send func(Event)) (*Result, error) {
	t := n.trainer
	res := &Result{Finished: reason != StopInterrupted, StopReason: reason, Info: info}
	if snap := n.rep.reached.Load(); snap != nil {
		// Steps and merges after the snapshot that reached the target may
		// have drifted below it; the run ends with the model that reached
		// it, so the final event, checkpoint and --save agree with the
		// reason the run stopped.
		if err := t.Apply(func(w, _ []float32, p *params.Progress) error {
			copy(w, snap.Params)
			*p = snap.Progress
			return nil
		}); err != nil {
			return nil, err
		}
		n.resetAverage()
	}
	res.Snapshot, res.Layout = n.reported(nil), t.Layout()
	r, err := t.Test(res.Snapshot.Params)
	scored := err == nil
	if errors.Is(err, ErrNoScore) {
		err = nil // an external trainer that never reported a score
	}
	if err != nil {
		return nil, err
	}
	res.TestAccuracy = r.Accuracy
	if err := ck.saveNow(context.WithoutCancel(ctx), n.checkpointState(), res.Finished); err != nil {
		return nil, err
	}
	s := t.Stats()
	var acc *float64
	if scored {
		setF64(&n.rep.lastAcc, r.Accuracy)
		acc = &r.Accuracy
	}
	status := n.Status()
	send(Event{Event: "final", Step: s.Steps, Epoch: s.Epoch, Progress: float64(s.Progress), Loss: lossEMA,
		TestAccuracy: acc, TestLoss: r.Loss, SamplesPerSec: s.SamplesPerSec, Fingerprint: n.fp.String(),
		Merges: n.Merges(), RunSamples: status.Run.Samples, RunTotal: n.runTotal, Status: &status,
		Message: stopMessage(reason, status.Run, n.st != nil)})
	return res, nil
}
