package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
)

// ErrFinished is returned when the newest checkpoint belongs to a run that
// already finished: resuming it would silently do nothing, so the caller
// must choose (start over with Fresh, or export the model).
var ErrFinished = errors.New("node: the run in this data dir already finished")

// Checkpoint metadata keys. The model spec, dataset and network are what
// `meshtrain export` and `meshtrain eval` need to rebuild the model.
const (
	MetaModel        = "model"
	MetaDataset      = "dataset"
	MetaNetwork      = "network"
	MetaFingerprint  = "fingerprint"
	MetaStep         = "step"
	MetaProgress     = "progress"
	MetaTrainerState = "trainer_state"
	MetaSeed         = "seed"
	// MetaRunSamples is the run clock when the checkpoint was taken (every
	// node's samples), so a restarted node takes up the run's schedule
	// where it was, before it hears from the swarm again.
	MetaRunSamples = "run_samples"
	// MetaRun is the run's description (RunSpec).
	MetaRun = "run"
	// MetaAverage is "opt-tail" in a checkpoint whose optimizer state
	// ends with the model the node reports, the moving average of its
	// parameters (TrainerState.Average): the last len(Params) values.
	MetaAverage = "average"
)

// CheckpointVectors splits a checkpoint's optimizer state into the
// trainer's optimizer state and the reported model (MetaAverage), nil when
// the checkpoint holds none.
func CheckpointVectors(cp *store.Checkpoint) (opt, average []float32) {
	n := len(cp.Params)
	if cp.Meta[MetaAverage] == "opt-tail" && n > 0 && len(cp.OptState) >= n {
		k := len(cp.OptState) - n
		return cp.OptState[:k:k], cp.OptState[k:]
	}
	return cp.OptState, nil
}

// CheckpointModel is the model a checkpoint's node reported: the moving
// average of its parameters where it kept one, its parameters otherwise.
// It is what `meshtrain export` writes.
func CheckpointModel(cp *store.Checkpoint) params.Snapshot {
	s := cp.Snapshot()
	if _, avg := CheckpointVectors(cp); avg != nil {
		s.Params = avg
	}
	return s
}

// RunSpec is the canonical description of a run that goes into the model
// fingerprint: its length on the run clock and its schedule. A run with no
// end and a constant rate has none ("").
func RunSpec(totalSamples float64, schedule string) string {
	if totalSamples == 0 && schedule == "const" {
		return ""
	}
	return fmt.Sprintf("samples=%s;schedule=%s", strconv.FormatFloat(totalSamples, 'f', -1, 64), schedule)
}

// ModelMetadata is the safetensors metadata of an exported model: what
// `meshtrain eval` and `export` need to rebuild it, and where it came from.
func ModelMetadata(model, dataset, network string, seed uint64, s params.Snapshot) map[string]string {
	return map[string]string{
		MetaModel: model, MetaDataset: dataset, MetaNetwork: network,
		MetaSeed:        strconv.FormatUint(seed, 10),
		MetaFingerprint: s.Fingerprint.String(),
		MetaStep:        strconv.FormatInt(s.Step, 10),
		MetaProgress:    strconv.FormatFloat(float64(s.Progress), 'g', -1, 64),
		"format":        "pt",
	}
}

// Event is one line of a run's progress, printed as text or JSON by the CLI.
type Event struct {
	Event         string   `json:"event"` // start, resumed, listening, progress, epoch, eval, checkpoint, catchup, precision, final
	Step          int64    `json:"step"`
	Epoch         int      `json:"epoch"`
	Progress      float64  `json:"progress"`
	Loss          float64  `json:"loss,omitempty"`
	TestAccuracy  *float64 `json:"test_accuracy,omitempty"`
	TestLoss      float64  `json:"test_loss,omitempty"`
	SamplesPerSec float64  `json:"samples_per_s,omitempty"`
	ETA           float64  `json:"eta_s,omitempty"`
	Elapsed       float64  `json:"elapsed_s"`
	Checkpoint    uint64   `json:"checkpoint,omitempty"`
	Fingerprint   string   `json:"fingerprint,omitempty"`
	Message       string   `json:"message,omitempty"`
	// Mesh fields (meshtrain node).
	PeerID string   `json:"peer_id,omitempty"`
	Addrs  []string `json:"addrs,omitempty"`
	// ListenAddrs (the listening event, with --announce only) are the
	// addresses the node listens on, where Addrs are those it announces.
	ListenAddrs []string `json:"listen_addrs,omitempty"`
	Peers       int      `json:"peers,omitempty"`
	Merges      int64    `json:"merges,omitempty"`
	// The run: the learning rate of the latest step, the run clock and the
	// run's length in samples (0: no end).
	LR         float64 `json:"lr,omitempty"`
	RunSamples float64 `json:"run_samples,omitempty"`
	RunTotal   float64 `json:"run_total,omitempty"`
	// Status is the node's full status, on the final event only.
	Status *Status `json:"status,omitempty"`
}

// Result is what a finished run reports.
type Result struct {
	// Snapshot is the final model, Layout its tensors and Info what it is.
	Snapshot     params.Snapshot
	Layout       params.Layout
	Info         TrainerInfo
	TestAccuracy float64
	Finished     bool   // the run reached a stop condition (not interrupted)
	StopReason   string // one of the Stop constants
}

// resume restores the newest usable checkpoint unless cfg.Fresh is set,
// and returns the run clock it was taken at (0 when starting fresh) and
// whether --fresh passed over a checkpoint of this run (the node must then
// supersede it at once).
func resume(ctx context.Context, cfg Config, st store.Store, t Trainer, log *slog.Logger, send func(Event)) (clock float64, superseded bool, err error) {
	fp := t.Fingerprint()
	cp, skipped, err := st.LoadLatest(ctx, fp)
	others := 0
	for _, s := range skipped {
		// Skipped checkpoints stay in the store for inspection.
		if errors.Is(s.Err, store.ErrFingerprint) {
			others++
			continue
		}
		log.Warn("checkpoint failed verification: skipped, kept for inspection", "component", "node", "checkpoint", s.ID, "reason", s.Err)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		msg := "no checkpoint: starting fresh"
		if others > 0 {
			msg = fmt.Sprintf("no checkpoint of this run: starting fresh (%d checkpoint(s) of another model or run are kept: "+
				"--model, --dataset, --network, --epochs or --schedule differ)", others)
		}
		send(Event{Event: "start", Fingerprint: fp.String(), Message: msg})
		return 0, false, nil
	case err != nil:
		return 0, false, err
	case cfg.Fresh:
		send(Event{Event: "start", Fingerprint: fp.String(),
			Message: fmt.Sprintf("--fresh: starting over (checkpoint %d at step %d is kept but superseded)", cp.ID, cp.Step)})
		return 0, true, nil
	case cp.Final:
		return 0, false, fmt.Errorf("%w at step %d (checkpoint %d); pass --fresh to start over, or run 'meshtrain export' for the model",
			ErrFinished, cp.Step, cp.ID)
	}
	var state checkpointCounters
	if err := json.Unmarshal([]byte(cp.Meta[MetaTrainerState]), &state); err != nil {
		return 0, false, fmt.Errorf("node: checkpoint %d has no readable trainer state: %w (pass --fresh to start over)", cp.ID, err)
	}
	opt, avg := CheckpointVectors(cp)
	ts := TrainerState{Params: cp.Params, Opt: opt, Average: avg, Step: state.Step, Progress: state.Progress, Samples: state.Samples,
		Epoch: state.Epoch, Own: json.RawMessage(cp.Meta[MetaTrainerState])}
	if err := t.Restore(ts); err != nil {
		return 0, false, fmt.Errorf("node: checkpoint %d does not fit this run's settings: %w (pass --fresh to start over)", cp.ID, err)
	}
	// A checkpoint from before the run clock was kept resumes at its own
	// samples: the clock counts at least those.
	clock, _ = strconv.ParseFloat(cp.Meta[MetaRunSamples], 64)
	clock = max(clock, float64(state.Samples))
	send(Event{Event: "resumed", Step: cp.Step, Epoch: state.Epoch, Progress: float64(cp.Progress), Checkpoint: cp.ID,
		Fingerprint: fp.String(), RunSamples: clock,
		Message: fmt.Sprintf("resumed from checkpoint %d at step %d (run clock %.0f samples)", cp.ID, cp.Step, clock)})
	return clock, false, nil
}

// checkpointer writes checkpoints on its own goroutine so the trainer never
// waits on the disk. It owns the pending slot: at most one checkpoint waits
// while another is written; a newer offer replaces a waiting one.
type checkpointer struct {
	st    store.Store
	meta  map[string]string
	log   *slog.Logger
	send  func(Event)
	saved func(store.Info) // told of every committed checkpoint

	pending chan queuedState
	done    chan struct{}
	// seq numbers the states in the order they were taken, so a state is
	// never written after a newer one. Owned by Run's goroutine, the one
	// that calls offer and saveNow.
	seq     uint64
	mu      sync.Mutex // serialises Save between the goroutine and saveNow
	written uint64     // under mu: the seq of the newest state written
}

// queuedState is a state offered to the checkpointer, with its seq.
type queuedState struct {
	checkpointState
	seq uint64
}

// checkpointState is what one checkpoint holds: the trainer's state and the
// run clock at the same moment.
type checkpointState struct {
	TrainerState
	clock float64
}

// checkpointCounters are the counters a node reads back from the trainer's
// own state in a checkpoint (MetaTrainerState). The built-in trainer's
// state has them under these names; a trainer whose own state lacks them
// resumes with the manifest's step and progress only.
type checkpointCounters struct {
	Step     int64           `json:"step"`
	Progress params.Progress `json:"progress"`
	Epoch    int             `json:"epoch"`
	Samples  int64           `json:"samples"`
}

func newCheckpointer(st store.Store, meta map[string]string, log *slog.Logger, send func(Event), saved func(store.Info)) *checkpointer {
	c := &checkpointer{st: st, meta: meta, log: log.With("component", "checkpointer"), send: send, saved: saved,
		pending: make(chan queuedState, 1), done: make(chan struct{})}
	if st == nil {
		close(c.done)
		return c
	}
	go func() {
		defer close(c.done)
		for s := range c.pending {
			if err := c.save(context.Background(), s.checkpointState, false, s.seq); err != nil {
				c.log.Error("checkpoint failed", "step", s.Step, "err", err)
			}
		}
	}()
	return c
}

// offer queues s, replacing a checkpoint still waiting; it never blocks.
func (c *checkpointer) offer(s checkpointState) {
	if c.st == nil {
		return
	}
	c.seq++
	q := queuedState{s, c.seq}
	for {
		select {
		case c.pending <- q:
			return
		default:
		}
		select {
		case <-c.pending: // drop the older waiting one
		default:
		}
	}
}

// saveNow writes s synchronously (after any write in flight). A state
// offered before it and not yet written is dropped, never written after
// it: the final checkpoint stays the store's newest, so a node that
// stops resumes from it, not from an older periodic one. If s cannot be
// written, the dropped state is queued again: it is still newer than any
// the store holds, and close writes it.
func (c *checkpointer) saveNow(ctx context.Context, s checkpointState, final bool) error {
	if c.st == nil {
		return nil
	}
	c.seq++
	seq := c.seq
	var dropped *queuedState
	select {
	case q := <-c.pending:
		dropped = &q
	default:
	}
	err := c.save(ctx, s, final, seq)
	if err != nil && dropped != nil {
		// Run's goroutine is the only one that queues, so the slot is
		// free: the writer only takes from it.
		select {
		case c.pending <- *dropped:
		default:
		}
	}
	return err
}

// save writes s, taken as the seq-th state, unless a newer one has been
// written.
func (c *checkpointer) save(ctx context.Context, s checkpointState, final bool, seq uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq < c.written {
		c.log.Debug("checkpoint skipped: a newer one is written", "step", s.Step)
		return nil
	}
	meta := make(map[string]string, len(c.meta)+5)
	for k, v := range c.meta {
		meta[k] = v
	}
	meta[MetaTrainerState] = string(s.Own)
	meta[MetaStep] = strconv.FormatInt(s.Step, 10)
	meta[MetaProgress] = strconv.FormatFloat(float64(s.Progress), 'g', -1, 64)
	meta[MetaRunSamples] = strconv.FormatFloat(s.clock, 'f', -1, 64)
	fp, _ := params.ParseFingerprint(c.meta[MetaFingerprint])
	opt := s.Opt
	if len(s.Average) > 0 && len(s.Average) == len(s.Params) {
		opt = append(slices.Clip(s.Opt), s.Average...)
		meta[MetaAverage] = "opt-tail"
	}
	info, err := c.st.Save(ctx, &store.Checkpoint{Fingerprint: fp, Step: s.Step, Progress: s.Progress,
		Params: s.Params, OptState: opt, Meta: meta, Final: final})
	if err != nil {
		return fmt.Errorf("node: checkpoint at step %d: %w", s.Step, err)
	}
	c.written = seq
	if c.saved != nil {
		c.saved(info)
	}
	// This event is the promise the crash tests hold us to: once printed,
	// the checkpoint is committed and synced.
	c.send(Event{Event: "checkpoint", Step: info.Step, Progress: float64(info.Progress), Checkpoint: info.ID})
	return nil
}

// close stops the goroutine after the checkpoint in flight is written.
func (c *checkpointer) close() {
	if c.st != nil {
		close(c.pending)
	}
	<-c.done
}
