package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/train"
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
)

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
	Event         string   `json:"event"` // start, resumed, listening, progress, epoch, eval, checkpoint, catchup, final
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
	Peers  int      `json:"peers,omitempty"`
	Merges int64    `json:"merges,omitempty"`
	// Status is the node's full status, on the final event only.
	Status *Status `json:"status,omitempty"`
}

// Result is what a finished run reports.
type Result struct {
	Trainer      *train.Trainer
	Test         *train.Dataset
	TestAccuracy float64
	Finished     bool // the run reached a stop condition (not interrupted)
}

// resume restores the newest usable checkpoint unless cfg.Fresh is set.
func resume(ctx context.Context, cfg Config, st store.Store, t *train.Trainer, log *slog.Logger, send func(Event)) error {
	fp := t.Fingerprint()
	cp, skipped, err := st.LoadLatest(ctx, fp)
	for _, s := range skipped {
		// Skipped checkpoints stay in the store for inspection.
		log.Warn("checkpoint failed verification: skipped, kept for inspection", "component", "node", "checkpoint", s.ID, "reason", s.Err)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		send(Event{Event: "start", Fingerprint: fp.String(), Message: "no checkpoint: starting fresh"})
		return nil
	case err != nil:
		return err
	case cfg.Fresh:
		send(Event{Event: "start", Fingerprint: fp.String(),
			Message: fmt.Sprintf("--fresh: starting over (checkpoint %d at step %d is kept but superseded)", cp.ID, cp.Step)})
		return nil
	case cp.Final:
		return fmt.Errorf("%w at step %d (checkpoint %d); pass --fresh to start over, or run 'meshtrain export' for the model",
			ErrFinished, cp.Step, cp.ID)
	}
	var state train.State
	if err := json.Unmarshal([]byte(cp.Meta[MetaTrainerState]), &state); err != nil {
		return fmt.Errorf("node: checkpoint %d has no readable trainer state: %w (pass --fresh to start over)", cp.ID, err)
	}
	state.Params, state.Momentum = cp.Params, cp.OptState
	if err := t.Restore(state); err != nil {
		return fmt.Errorf("node: checkpoint %d does not fit this run's settings: %w (pass --fresh to start over)", cp.ID, err)
	}
	send(Event{Event: "resumed", Step: cp.Step, Epoch: state.Epoch, Progress: float64(cp.Progress), Checkpoint: cp.ID,
		Fingerprint: fp.String(), Message: fmt.Sprintf("resumed from checkpoint %d at step %d", cp.ID, cp.Step)})
	return nil
}

// checkpointer writes checkpoints on its own goroutine so the trainer never
// waits on the disk. It owns the pending slot: at most one checkpoint waits
// while another is written; a newer offer replaces a waiting one.
type checkpointer struct {
	st   store.Store
	meta map[string]string
	log  *slog.Logger
	send func(Event)

	pending chan train.State
	done    chan struct{}
	mu      sync.Mutex // serialises Save between the goroutine and saveNow
}

func newCheckpointer(st store.Store, meta map[string]string, log *slog.Logger, send func(Event)) *checkpointer {
	c := &checkpointer{st: st, meta: meta, log: log.With("component", "checkpointer"), send: send,
		pending: make(chan train.State, 1), done: make(chan struct{})}
	if st == nil {
		close(c.done)
		return c
	}
	go func() {
		defer close(c.done)
		for s := range c.pending {
			if err := c.save(context.Background(), s, false); err != nil {
				c.log.Error("checkpoint failed", "step", s.Step, "err", err)
			}
		}
	}()
	return c
}

// offer queues s, replacing a checkpoint still waiting; it never blocks.
func (c *checkpointer) offer(s train.State) {
	if c.st == nil {
		return
	}
	for {
		select {
		case c.pending <- s:
			return
		default:
		}
		select {
		case <-c.pending: // drop the older waiting one
		default:
		}
	}
}

// saveNow writes s synchronously (after any write in flight).
func (c *checkpointer) saveNow(ctx context.Context, s train.State, final bool) error {
	if c.st == nil {
		return nil
	}
	return c.save(ctx, s, final)
}

func (c *checkpointer) save(ctx context.Context, s train.State, final bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	stateJSON, err := json.Marshal(s)
	if err != nil {
		return err
	}
	meta := make(map[string]string, len(c.meta)+3)
	for k, v := range c.meta {
		meta[k] = v
	}
	meta[MetaTrainerState] = string(stateJSON)
	meta[MetaStep] = strconv.FormatInt(s.Step, 10)
	meta[MetaProgress] = strconv.FormatFloat(float64(s.Progress), 'g', -1, 64)
	fp, _ := params.ParseFingerprint(c.meta[MetaFingerprint])
	info, err := c.st.Save(ctx, &store.Checkpoint{Fingerprint: fp, Step: s.Step, Progress: s.Progress,
		Params: s.Params, OptState: s.Momentum, Meta: meta, Final: final})
	if err != nil {
		return fmt.Errorf("node: checkpoint at step %d: %w", s.Step, err)
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
