package node

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
)

// reporter is the node's view of its own progress: the latest loss, test
// accuracy, learning rate and checkpoint, the metric history, and whether
// --until-accuracy was reached. The trainer loop and the evaluator write
// it, through atomics and the history's lock; the status, announcements and
// events read it. Its goroutines (evaluator, historian) own nothing else.
type reporter struct {
	lastLoss, lastAcc atomic.Uint64 // float64 bits
	// lastLR is the latest step's rate and the --lr-scaling factor in it
	// (0: none), read together.
	lrMu                sync.Mutex
	lastLR, lastLRScale float64
	lastCkpt            atomic.Pointer[store.Info]
	reached             atomic.Pointer[params.Snapshot] // the snapshot that reached --until-accuracy

	histMu sync.Mutex
	hist   []store.Point
	histQ  chan store.Point
}

// setLR records a step's rate and the --lr-scaling factor in it (0: none).
func (r *reporter) setLR(lr, scale float64) {
	r.lrMu.Lock()
	r.lastLR, r.lastLRScale = lr, scale
	r.lrMu.Unlock()
}

// lr is the latest step's rate and the factor in it (1 without one).
func (r *reporter) lr() (lr, scale float64) {
	r.lrMu.Lock()
	defer r.lrMu.Unlock()
	if r.lastLRScale > 0 {
		return r.lastLR, r.lastLRScale
	}
	return r.lastLR, 1
}

func newReporter() *reporter { return &reporter{histQ: make(chan store.Point, 16)} }

// historyLimit bounds the in-memory history the dashboard reads.
const historyLimit = 2000

// History returns the last k metric points (all with k <= 0), oldest first.
func (n *Node) History(k int) []store.Point { return n.rep.history(k) }

func (r *reporter) history(k int) []store.Point {
	r.histMu.Lock()
	defer r.histMu.Unlock()
	h := r.hist
	if k > 0 && len(h) > k {
		h = h[len(h)-k:]
	}
	return append([]store.Point{}, h...)
}

// record appends a metric point to the in-memory history and queues it
// for the store; it never waits for the disk (a full queue drops it).
func (r *reporter) record(p store.Point) {
	r.histMu.Lock()
	r.hist = append(r.hist, p)
	if len(r.hist) > historyLimit {
		r.hist = append(r.hist[:0:0], r.hist[len(r.hist)-historyLimit:]...)
	}
	r.histMu.Unlock()
	select {
	case r.histQ <- p:
	default:
	}
}

// historian writes queued metric points to the store until ctx ends.
func (n *Node) historian(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-n.rep.histQ:
			if n.st == nil {
				continue
			}
			if err := n.st.AppendHistory(p); err != nil {
				n.log.Warn("metric history not stored", "err", err)
			}
		}
	}
}

type evalRequest struct {
	kind  string
	snap  params.Snapshot
	epoch int
}

// evaluator scores snapshots on the test set, off the trainer loop.
func (n *Node) evaluator(ctx context.Context, in <-chan evalRequest, send func(Event)) {
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-in:
			r, err := n.trainer.Test(req.snap.Params)
			if errors.Is(err, ErrNoScore) {
				continue
			}
			if err != nil {
				n.log.Error("evaluation failed", "err", err)
				continue
			}
			setF64(&n.rep.lastAcc, r.Accuracy)
			e := Event{Event: req.kind, Step: req.snap.Step, Epoch: req.epoch, Progress: float64(req.snap.Progress),
				Loss: f64(&n.rep.lastLoss), TestAccuracy: &r.Accuracy, TestLoss: r.Loss, Merges: n.Merges()}
			if n.ann != nil {
				e.Peers = len(n.partners())
			}
			send(e)
			if n.cfg.UntilAccuracy > 0 && r.Accuracy >= n.cfg.UntilAccuracy {
				n.rep.reached.CompareAndSwap(nil, &req.snap)
			}
		}
	}
}
