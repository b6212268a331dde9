package node_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train"
)

// offlineConfig trains a small MLP on the synthetic set with no network.
func offlineConfig() node.Config {
	c := node.DefaultConfig()
	c.Offline = true
	c.Dataset = train.DatasetSynthetic
	c.Train.Model = "mlp:16"
	c.Train.Batch = 16
	c.Epochs = 0
	c.Train.Schedule = "const"
	c.Train.BaseStep = time.Millisecond
	c.Train.Slowdown = 2
	c.CheckpointEvery = 0
	return c
}

func readSnapshot(t *testing.T, path string) ([]float32, map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, v, meta, err := params.ReadSafetensors(f, 0)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v, meta
}

func metaInt(t *testing.T, meta map[string]string, key string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(meta[key], 10, 64)
	if err != nil {
		t.Fatalf("metadata %s=%q: %v", key, meta[key], err)
	}
	return v
}

func TestSnapshotsWaitForStartFileAndRecordCounters(t *testing.T) {
	dir := t.TempDir()
	cfg := offlineConfig()
	cfg.MaxSteps = 60
	n, err := node.New(t.Context(), cfg, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := filepath.Join(dir, "go")
	snapDir := filepath.Join(dir, "snaps")
	if err := n.SetSnapshots(node.SnapshotConfig{Dir: snapDir, Every: 20 * time.Millisecond, StartFile: start}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := n.Run(t.Context(), nil); done <- err }()

	// Held at the start line: no step, no snapshot.
	time.Sleep(100 * time.Millisecond)
	if s := node.TrainerOf(n).Stats(); s.Steps != 0 {
		t.Fatalf("trainer took %d steps before the start file existed", s.Steps)
	}
	if files, _ := filepath.Glob(filepath.Join(snapDir, node.SnapshotGlob)); len(files) != 0 {
		t.Fatalf("%d snapshots before the start file existed", len(files))
	}
	released := time.Now()
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not finish")
	}

	files, err := filepath.Glob(filepath.Join(snapDir, node.SnapshotGlob))
	if err != nil || len(files) < 2 {
		t.Fatalf("want a first and a final snapshot at least, got %d (%v)", len(files), err)
	}
	var lastTime, lastSamples, lastBusy int64 = 0, -1, -1
	for i, f := range files {
		v, meta := readSnapshot(t, f)
		if got := metaInt(t, meta, node.MetaSnapshotSeq); got != int64(i) {
			t.Errorf("%s: seq %d, want %d", f, got, i)
		}
		if len(v) != node.TrainerOf(n).Layout().Size() {
			t.Errorf("%s: %d params, want %d", f, len(v), node.TrainerOf(n).Layout().Size())
		}
		if meta[node.MetaModel] != "mlp:16" || meta[node.MetaDataset] != train.DatasetSynthetic || meta[node.MetaSlowdown] != "2" ||
			meta[node.MetaShard] != "all" || meta[node.MetaPeerID] != "" {
			t.Errorf("%s: metadata %v", f, meta)
		}
		ts := metaInt(t, meta, node.MetaTimeUnixNano)
		samples, busy := metaInt(t, meta, node.MetaSamples), metaInt(t, meta, node.MetaBusyNanos)
		if ts < released.Add(-10*time.Millisecond).UnixNano() || ts < lastTime || samples < lastSamples || busy < lastBusy {
			t.Errorf("%s: time %d, samples %d, busy %d do not follow the previous snapshot (%d, %d, %d) after the release at %d",
				f, ts, samples, busy, lastTime, lastSamples, lastBusy, released.UnixNano())
		}
		if step := metaInt(t, meta, node.MetaStep); samples != step*int64(cfg.Train.Batch) {
			t.Errorf("%s: %d samples after %d steps of %d", f, samples, step, cfg.Train.Batch)
		}
		if metaInt(t, meta, node.MetaBaseStepNano) != int64(time.Millisecond) {
			t.Errorf("%s: base step %s", f, meta[node.MetaBaseStepNano])
		}
		// Offline, the run clock is the node's own samples.
		if rs, err := strconv.ParseFloat(meta[node.MetaRunSamples], 64); err != nil || rs != float64(samples) {
			t.Errorf("%s: run clock %q, want the node's own %d samples", f, meta[node.MetaRunSamples], samples)
		}
		final := meta[node.MetaFinal] == "true"
		if final != (i == len(files)-1) {
			t.Errorf("%s: final=%v, want it on the last snapshot only", f, final)
		}
		if lr, err := strconv.ParseFloat(meta[node.MetaLR], 64); err != nil || (final && lr <= 0) {
			t.Errorf("%s: learning rate %q after %d steps", f, meta[node.MetaLR], samples/int64(cfg.Train.Batch))
		}
		lastTime, lastSamples, lastBusy = ts, samples, busy
	}
	if lastSamples != cfg.MaxSteps*int64(cfg.Train.Batch) {
		t.Errorf("final snapshot has %d samples, want every step's %d", lastSamples, cfg.MaxSteps*int64(cfg.Train.Batch))
	}
	if want := time.Duration(cfg.MaxSteps) * 2 * time.Millisecond; time.Duration(lastBusy) < want {
		t.Errorf("final busy %v, less than the %v the emulated steps last", time.Duration(lastBusy), want)
	}
}

func TestSnapshotsRefuseBadSettings(t *testing.T) {
	n, err := node.New(t.Context(), offlineConfig(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetSnapshots(node.SnapshotConfig{Dir: t.TempDir(), Every: 0}); !errors.Is(err, node.ErrSnapshots) {
		t.Errorf("zero interval: got %v, want ErrSnapshots", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.SetSnapshots(node.SnapshotConfig{Dir: filepath.Join(file, "sub"), Every: time.Second}); !errors.Is(err, node.ErrSnapshots) {
		t.Errorf("dir under a file: got %v, want ErrSnapshots", err)
	}
}

func TestStartFileWaitEndsWithContext(t *testing.T) {
	cfg := offlineConfig()
	n, err := node.New(t.Context(), cfg, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetSnapshots(node.SnapshotConfig{StartFile: filepath.Join(t.TempDir(), "never")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	res, err := n.Run(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := node.TrainerOf(n).Stats(); s.Steps != 0 || res.Snapshot.Step != 0 {
		t.Errorf("took %d steps (final model at step %d) without a start", s.Steps, res.Snapshot.Step)
	}
}

func TestNoEvalSkipsEvaluationsWhileTraining(t *testing.T) {
	for _, noEval := range []bool{false, true} {
		cfg := offlineConfig()
		cfg.MaxSteps = 300 // more than two epochs of the 2000 synthetic samples at batch 16
		n, err := node.New(t.Context(), cfg, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.SetSnapshots(node.SnapshotConfig{NoEval: noEval}); err != nil {
			t.Fatal(err)
		}
		var evals, finals int
		_, err = n.Run(t.Context(), func(e node.Event) {
			switch e.Event {
			case "eval", "epoch":
				evals++
			case "final":
				finals++
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		// The evaluator may skip an epoch end while busy, never all of them.
		if noEval && evals != 0 || !noEval && evals == 0 || finals != 1 {
			t.Errorf("NoEval=%v: %d evaluations while training and %d final events", noEval, evals, finals)
		}
	}
}

// A node reports the moving average of its parameters (the Go trainer's
// --ema): its snapshots, Snapshot (what /model serves) and the run's
// final model hold the average, not the live parameters; with --ema 0
// they hold the parameters.
func TestNodeReportsTheAverageOfItsParameters(t *testing.T) {
	for _, ema := range []float64{train.DefaultEMA, 0} {
		dir := t.TempDir()
		cfg := offlineConfig()
		cfg.MaxSteps, cfg.Train.EMA, cfg.Train.LR = 80, ema, 0.2
		n, err := node.New(t.Context(), cfg, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.SetSnapshots(node.SnapshotConfig{Dir: dir, Every: time.Hour}); err != nil {
			t.Fatal(err)
		}
		res, err := n.Run(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		files, err := filepath.Glob(filepath.Join(dir, node.SnapshotGlob))
		if err != nil || len(files) == 0 {
			t.Fatalf("no snapshots (%v)", err)
		}
		final, meta := readSnapshot(t, files[len(files)-1])
		if meta[node.MetaFinal] != "true" {
			t.Fatalf("the last snapshot is not the final one: %v", meta)
		}
		live := node.TrainerOf(n).SnapshotInto(nil).Params
		served, _ := n.Snapshot()
		want := live
		if ema > 0 {
			want = node.TrainerOf(n).(node.ParamAverager).AverageInto(nil).Params
			if slices.Equal(want, live) {
				t.Fatal("the average equals the live parameters: the test shows nothing")
			}
		}
		for name, got := range map[string][]float32{"final snapshot": final, "Snapshot": served.Params, "the run's model": res.Snapshot.Params} {
			if !slices.Equal(got, want) {
				t.Errorf("ema %v: %s is not the reported model (the average when ema > 0)", ema, name)
			}
		}
	}
}
