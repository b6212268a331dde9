package train

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// DefaultEvalBatch is the rows per forward pass in Evaluate.
const DefaultEvalBatch = 500

// EvalResult is a model's quality on a dataset.
type EvalResult struct {
	N        int     `json:"n"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"` // Correct / N
	Loss     float64 `json:"loss"`     // mean cross-entropy
}

// Evaluate measures parameters w of model m on d in batches of batch rows
// (0: DefaultEvalBatch) over up to threads goroutines (0 or 1: the caller's
// goroutine). It only reads w and d and allocates its own buffers, so it can
// run on a snapshot while a trainer keeps stepping. The result does not
// depend on threads: per-batch sums are added in batch order.
func Evaluate(m *Model, w []float32, d *Dataset, batch, threads int) (EvalResult, error) {
	if d.Dim != m.Dim() || d.Classes != m.Classes() {
		return EvalResult{}, fmt.Errorf("%w: %s (%d inputs, %d classes) cannot score %s (%d features, %d classes)",
			ErrBadModel, m.Spec(), m.Dim(), m.Classes(), d.Name, d.Dim, d.Classes)
	}
	if err := m.layout.Check(w); err != nil {
		return EvalResult{}, fmt.Errorf("train: evaluate %s: %w", m.Spec(), err)
	}
	if batch <= 0 {
		batch = DefaultEvalBatch
	}
	chunks := (d.N + batch - 1) / batch
	threads = max(1, min(threads, chunks))
	losses := make([]float64, chunks)
	correct := make([]int, chunks)
	errs := make([]error, threads)
	var next atomic.Int64
	work := func(t int) {
		ws := m.NewWorkspace(min(batch, d.N))
		var xb []float32 // a byte dataset's chunk, scaled
		if d.X == nil {
			xb = make([]float32, min(batch, d.N)*d.Dim)
		}
		for {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			lo, hi := c*batch, min((c+1)*batch, d.N)
			l, k, err := m.Loss(ws, w, d.RowsTo(xb, lo, hi), d.Y[lo:hi])
			if err != nil {
				errs[t] = err
				return
			}
			losses[c], correct[c] = l, k
		}
	}
	if threads == 1 {
		work(0)
	} else {
		var wg sync.WaitGroup
		for t := range threads {
			wg.Go(func() { work(t) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return EvalResult{}, fmt.Errorf("train: evaluate %s on %s: %w", m.Spec(), d.Name, err)
		}
	}
	r := EvalResult{N: d.N}
	var loss float64
	for c := range chunks {
		loss += losses[c]
		r.Correct += correct[c]
	}
	r.Accuracy = float64(r.Correct) / float64(d.N)
	r.Loss = loss / float64(d.N)
	return r, nil
}
