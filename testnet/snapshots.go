package testnet

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
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
	// Optional: a node older than these keys did not write them.
	if _, ok := meta[node.MetaRunSamples]; ok {
		m.point.RunSamples = f64(node.MetaRunSamples)
	}
	if _, ok := meta[node.MetaLR]; ok {
		m.point.LR = f64(node.MetaLR)
	}
	if len(errs) > 0 {
		return m, fmt.Errorf("%w: snapshot metadata lacks or garbles %v", ErrBench, errs)
	}
	return m, nil
}

// ScoreSnapshots scores every snapshot in dir on test, with workers
// goroutines, and returns one trace per node, in time order, and the
// nodes' consensus distance over time (see ConsensusPoint): one point at
// every snapshot instant from the first at which every node has a
// snapshot. peers maps a writer's peer ID to its node index (0..nodes-1);
// times are seconds since t0. Every node must have left at least two
// snapshots (the first, at the start, and the final one), and its last
// must be the final one: a trace holds its last point after it ends
// (AccuracyAt, SamplesAt), which is right only for the model the node ended
// with.
//
// With averageUntil > 0 the swarm's average model is scored too, at every
// such instant until its accuracy first reaches averageUntil
// (ConsensusPoint.AverageAccuracy).
//
// The snapshots are scored in time order, and their models folded into the
// consensus distance as they come, so at most one model per node and a few
// per worker are held at once, not a run's snapshots.
func ScoreSnapshots(ctx context.Context, dir string, peers map[string]int, nodes int, test *train.Dataset,
	t0 time.Time, workers int, averageUntil float64) ([]Trace, []ConsensusPoint, error) {
	files, err := filepath.Glob(filepath.Join(dir, node.SnapshotGlob))
	if err != nil {
		return nil, nil, err
	}
	// The headers first, for the time order.
	type snapFile struct {
		path string
		node int
		meta snapshotMeta
	}
	snaps := make([]snapFile, 0, len(files))
	for _, path := range files {
		m, err := readSnapshotMeta(path)
		if err != nil {
			return nil, nil, err
		}
		idx, ok := peers[m.peer]
		if !ok {
			return nil, nil, fmt.Errorf("%w: %s was written by %q, not a node of this run", ErrBench, path, m.peer)
		}
		if idx < 0 || idx >= nodes {
			return nil, nil, fmt.Errorf("%w: snapshot of node %d in a run of %d", ErrBench, idx, nodes)
		}
		snaps = append(snaps, snapFile{path: path, node: idx, meta: m})
	}
	slices.SortFunc(snaps, func(a, b snapFile) int {
		return cmp.Or(cmp.Compare(a.meta.unixNano, b.meta.unixNano), cmp.Compare(a.node, b.node), cmp.Compare(a.meta.seq, b.meta.seq))
	})

	// Workers score in parallel; this goroutine takes their results in
	// time order. window bounds the snapshots scored but not yet taken.
	type result struct {
		s   snapshotMeta
		w   []float32
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	workers = max(1, workers)
	done := make([]chan result, len(snaps))
	for i := range done {
		done[i] = make(chan result, 1)
	}
	window := make(chan struct{}, 2*workers)
	jobs := make(chan int)
	var models sync.Map // spec -> *train.Model; Evaluate only reads a model
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				s, w, err := scoreFile(snaps[i].path, test, &models)
				done[i] <- result{s: s, w: w, err: err}
			}
		})
	}
	wg.Go(func() {
		defer close(jobs)
		for i := range snaps {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	})
	type scored struct {
		node  int
		seq   int
		final bool
		p     Point
	}
	out := make([]scored, len(snaps))
	cons := newConsensusSet(nodes)
	var consensus []ConsensusPoint
	var avg []float32
	averaging := averageUntil > 0
	for i, f := range snaps {
		var r result
		select {
		case r = <-done[i]:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		<-window
		if r.err != nil {
			return nil, nil, r.err
		}
		if r.s.peer != f.meta.peer || r.s.seq != f.meta.seq || r.s.unixNano != f.meta.unixNano {
			return nil, nil, fmt.Errorf("%w: %s changed while it was scored", ErrBench, f.path)
		}
		r.s.point.T = float64(r.s.unixNano-t0.UnixNano()) / 1e9
		out[i] = scored{node: f.node, seq: r.s.seq, final: r.s.final, p: r.s.point}
		if err := cons.set(f.node, r.w); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.path, err)
		}
		if i+1 < len(snaps) && snaps[i+1].meta.unixNano == f.meta.unixNano {
			continue // the distance once every snapshot of this instant is in
		}
		d, ok := cons.distance()
		if !ok {
			continue
		}
		pt := ConsensusPoint{T: r.s.point.T, Distance: d}
		if averaging {
			avg, _ = cons.average(avg)
			v, ok := models.Load(r.s.model)
			if !ok {
				return nil, nil, fmt.Errorf("%w: %s: no model to score the average with", ErrBench, f.path)
			}
			ev, err := train.Evaluate(v.(*train.Model), avg, test, 0, 1)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: the average model at %.2fs: %w", ErrBench, pt.T, err)
			}
			acc := ev.Accuracy
			pt.AverageAccuracy = &acc
			averaging = acc < averageUntil
		}
		consensus = append(consensus, pt)
	}
	traces := make([]Trace, nodes)
	seqs := make([][]int, nodes)
	lastFinal := make([]bool, nodes)
	lastSeq := make([]int, nodes)
	for i := range traces {
		traces[i].Node = i
	}
	for _, s := range out {
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
			return nil, nil, fmt.Errorf("%w: node %d left %d snapshots in %s, want at least 2", ErrBench, i, len(pts), dir)
		}
		if !lastFinal[i] {
			return nil, nil, fmt.Errorf("%w: node %d's last snapshot in %s is not its final one (it did not stop cleanly)", ErrBench, i, dir)
		}
		if err := traces[i].Validate(); err != nil {
			return nil, nil, err
		}
	}
	if err := validateConsensus(consensus); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrBench, dir, err)
	}
	return traces, consensus, nil
}

// readSnapshotMeta reads a snapshot's metadata from the safetensors header
// (params.WriteSafetensors' layout: an 8-byte little-endian length, then
// JSON with the metadata under "__metadata__"), not its model.
func readSnapshotMeta(path string) (snapshotMeta, error) {
	f, err := os.Open(path)
	if err != nil {
		return snapshotMeta{}, err
	}
	defer f.Close()
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return snapshotMeta{}, fmt.Errorf("%w: %s: header length: %w", ErrBench, path, err)
	}
	hl := binary.LittleEndian.Uint64(n[:])
	if hl == 0 || hl > params.MaxSafetensorsHeader {
		return snapshotMeta{}, fmt.Errorf("%w: %s: header length %d out of range", ErrBench, path, hl)
	}
	hb := make([]byte, hl)
	if _, err := io.ReadFull(f, hb); err != nil {
		return snapshotMeta{}, fmt.Errorf("%w: %s: header: %w", ErrBench, path, err)
	}
	var h struct {
		Meta map[string]string `json:"__metadata__"`
	}
	if err := json.Unmarshal(hb, &h); err != nil {
		return snapshotMeta{}, fmt.Errorf("%w: %s: header: %w", ErrBench, path, err)
	}
	s, err := parseSnapshotMeta(h.Meta)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// scoreFile reads one snapshot and scores it; it returns the model too.
func scoreFile(path string, test *train.Dataset, models *sync.Map) (snapshotMeta, []float32, error) {
	f, err := os.Open(path)
	if err != nil {
		return snapshotMeta{}, nil, err
	}
	defer f.Close()
	layout, w, meta, err := params.ReadSafetensors(f, 0)
	if err != nil {
		return snapshotMeta{}, nil, fmt.Errorf("%w: %s: %w", ErrBench, path, err)
	}
	s, err := parseSnapshotMeta(meta)
	if err != nil {
		return s, nil, fmt.Errorf("%s: %w", path, err)
	}
	var m *train.Model
	if v, ok := models.Load(s.model); ok {
		m = v.(*train.Model)
	} else {
		if m, err = train.ModelFromLayout(s.model, layout); err != nil {
			return s, nil, fmt.Errorf("%w: %s: %w", ErrBench, path, err)
		}
		models.Store(s.model, m)
	}
	r, err := train.Evaluate(m, w, test, 0, 1)
	if err != nil {
		return s, nil, fmt.Errorf("%w: %s: %w", ErrBench, path, err)
	}
	s.point.Accuracy = r.Accuracy
	return s, w, nil
}
