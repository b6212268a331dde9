package testnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train"
)

// snapshotMeta is the part of a snapshot's metadata a trace needs.
type snapshotMeta struct {
	peer, model string
	seq         int
	point       Point
	unixNano    int64
	// final: the snapshot the node took as it stopped (its final model).
	final bool
}

// parseSnapshotMeta reads the counters node.writeSnapshot records.
func parseSnapshotMeta(meta map[string]string) (snapshotMeta, error) {
	var m snapshotMeta
	var errs []string
	i64 := func(k string) int64 {
		v, err := strconv.ParseInt(meta[k], 10, 64)
		if err != nil {
			errs = append(errs, k)
		}
		return v
	}
	f64 := func(k string) float64 {
		v, err := strconv.ParseFloat(meta[k], 64)
		if err != nil {
			errs = append(errs, k)
		}
		return v
	}
	m.peer, m.model = meta[node.MetaPeerID], meta[node.MetaModel]
	m.seq = int(i64(node.MetaSnapshotSeq))
	m.final = meta[node.MetaFinal] == "true"
	m.unixNano = i64(node.MetaTimeUnixNano)
	bytes, err := strconv.ParseUint(meta[node.MetaBytesSent], 10, 64)
	if err != nil {
		errs = append(errs, node.MetaBytesSent)
	}
	m.point = Point{Samples: i64(node.MetaSamples), BusyS: time.Duration(i64(node.MetaBusyNanos)).Seconds(),
		NetWaitS: time.Duration(i64(node.MetaNetWaitNanos)).Seconds(), BytesSent: bytes,
		Merges: i64(node.MetaMerges), Step: i64(node.MetaStep), Progress: f64(node.MetaProgress)}
	if len(errs) > 0 {
		return m, fmt.Errorf("%w: snapshot metadata lacks or garbles %v", ErrBench, errs)
	}
	return m, nil
}

// ScoreSnapshots scores every snapshot in dir on test, with workers
// goroutines, and returns one trace per node, in time order. peers maps a
// writer's peer ID to its node index (0..nodes-1); times are seconds
// since t0. Every node must have left at least two snapshots (the first,
// at the start, and the final one), and its last must be the final one:
// a trace holds its last point after it ends (AccuracyAt, SamplesAt), which
// is right only for the model the node ended with.
func ScoreSnapshots(ctx context.Context, dir string, peers map[string]int, nodes int, test *train.Dataset,
	t0 time.Time, workers int) ([]Trace, error) {
	files, err := filepath.Glob(filepath.Join(dir, node.SnapshotGlob))
	if err != nil {
		return nil, err
	}
	type scored struct {
		node  int
		seq   int
		final bool
		p     Point
	}
	out := make([]scored, len(files))
	errs := make([]error, len(files))
	var models sync.Map // spec -> *train.Model; Evaluate only reads a model
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Go(func() {
			for i := range jobs {
				s, err := scoreFile(files[i], test, &models)
				if err != nil {
					errs[i] = err
					continue
				}
				idx, ok := peers[s.peer]
				if !ok {
					errs[i] = fmt.Errorf("%w: %s was written by %q, not a node of this run", ErrBench, files[i], s.peer)
					continue
				}
				s.point.T = float64(s.unixNano-t0.UnixNano()) / 1e9
				out[i] = scored{node: idx, seq: s.seq, final: s.final, p: s.point}
			}
		})
	}
feed:
	for i := range files {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	traces := make([]Trace, nodes)
	seqs := make([][]int, nodes)
	lastFinal := make([]bool, nodes)
	lastSeq := make([]int, nodes)
	for i := range traces {
		traces[i].Node = i
	}
	for _, s := range out {
		if s.node < 0 || s.node >= nodes {
			return nil, fmt.Errorf("%w: snapshot of node %d in a run of %d", ErrBench, s.node, nodes)
		}
		traces[s.node].Points = append(traces[s.node].Points, s.p)
		seqs[s.node] = append(seqs[s.node], s.seq)
		if len(seqs[s.node]) == 1 || s.seq > lastSeq[s.node] {
			lastSeq[s.node], lastFinal[s.node] = s.seq, s.final
		}
	}
	for i := range traces {
		order := make([]int, len(seqs[i]))
		for k := range order {
			order[k] = k
		}
		slices.SortFunc(order, func(a, b int) int { return seqs[i][a] - seqs[i][b] })
		pts := make([]Point, len(order))
		for k, o := range order {
			pts[k] = traces[i].Points[o]
		}
		traces[i].Points = pts
		if len(pts) < 2 {
			return nil, fmt.Errorf("%w: node %d left %d snapshots in %s, want at least 2", ErrBench, i, len(pts), dir)
		}
		if !lastFinal[i] {
			return nil, fmt.Errorf("%w: node %d's last snapshot in %s is not its final one (it did not stop cleanly)", ErrBench, i, dir)
		}
		if err := traces[i].Validate(); err != nil {
			return nil, err
		}
	}
	return traces, nil
}

// scoreFile reads one snapshot and scores it.
func scoreFile(path string, test *train.Dataset, models *sync.Map) (snapshotMeta, error) {
	f, err := os.Open(path)
	if err != nil {
		return snapshotMeta{}, err
	}
	defer f.Close()
	layout, w, meta, err := params.ReadSafetensors(f, 0)
	if err != nil {
		return snapshotMeta{}, fmt.Errorf("%w: %s: %w", ErrBench, path, err)
	}
	s, err := parseSnapshotMeta(meta)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	var m *train.Model
	if v, ok := models.Load(s.model); ok {
		m = v.(*train.Model)
	} else {
		if m, err = train.ModelFromLayout(s.model, layout); err != nil {
			return s, fmt.Errorf("%w: %s: %w", ErrBench, path, err)
		}
		models.Store(s.model, m)
	}
	r, err := train.Evaluate(m, w, test, 0, 1)
	if err != nil {
		return s, fmt.Errorf("%w: %s: %w", ErrBench, path, err)
	}
	s.point.Accuracy = r.Accuracy
	return s, nil
}
