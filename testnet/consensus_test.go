package testnet

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/train"
)

// consensusModel is a small model on the synthetic test set, for snapshot
// files (the consensus and the trace tests).
func consensusModel(t *testing.T) (*train.Model, *train.Dataset) {
	t.Helper()
	_, test, err := train.LoadData(train.DatasetSynthetic, "", 3)
	if err != nil {
		t.Fatal(err)
	}
	model, err := train.ParseModel("softmax", test.Dim, test.Classes)
	if err != nil {
		t.Fatal(err)
	}
	return model, test
}

// filled is a model with every parameter c.
func filled(model *train.Model, c float32) []float32 {
	w := make([]float32, model.Size())
	for i := range w {
		w[i] = c
	}
	return w
}

func TestScoreSnapshotsConsensusDistance(t *testing.T) {
	model, test := consensusModel(t)
	p := float64(model.Size())
	dir := t.TempDir()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Two nodes with every parameter at a or b: the average is (a+b)/2, so
	// the distance is ((a-b)/2)^2 per parameter. Both final snapshots fall
	// on one instant: one point there, with both in.
	writeSnap(t, dir, "peerA", 0, at(0), model, filled(model, 0.5), 0, false)
	writeSnap(t, dir, "peerB", 0, at(500), model, filled(model, -0.5), 0, false)  // ±0.5: 0.25 p
	writeSnap(t, dir, "peerA", 1, at(1000), model, filled(model, 1.5), 10, false) // 1.5, -0.5: 1 p
	writeSnap(t, dir, "peerB", 1, at(1500), model, filled(model, 1.5), 10, false) // equal: 0
	writeSnap(t, dir, "peerA", 2, at(2000), model, filled(model, 0.25), 20, true) // (0.25, 1.5) not recorded
	writeSnap(t, dir, "peerB", 2, at(2000), model, filled(model, 0.25), 20, true) // equal: 0
	want := []ConsensusPoint{{T: 0.5, Distance: 0.25 * p}, {T: 1, Distance: p}, {T: 1.5, Distance: 0}, {T: 2, Distance: 0}}
	for _, workers := range []int{1, 3} {
		traces, got, err := ScoreSnapshots(t.Context(), dir, map[string]int{"peerA": 0, "peerB": 1}, 2, test, t0, workers, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%d workers: consensus %v, want %v (%g parameters)", workers, got, want, p)
		}
		if len(traces) != 2 || len(traces[0].Points) != 3 || len(traces[1].Points) != 3 || traces[1].Points[0].T != 0.5 {
			t.Errorf("%d workers: traces %+v", workers, traces)
		}
	}

	// Three nodes, one at +d, one at -d, one at 0 in every parameter: the
	// average is 0, so the distance is (d^2 + d^2 + 0)/3 per parameter.
	dir3 := t.TempDir()
	for i, c := range []float32{0.75, -0.75, 0} {
		peer := string(rune('A' + i))
		writeSnap(t, dir3, peer, 0, at(0), model, filled(model, c), 0, false)
		writeSnap(t, dir3, peer, 1, at(250), model, filled(model, c), 1, true)
	}
	_, got, err := ScoreSnapshots(t.Context(), dir3, map[string]int{"A": 0, "B": 1, "C": 2}, 3, test, t0, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := 2 * 0.75 * 0.75 / 3 * p
	if len(got) != 2 || got[0].T != 0 || got[1].T != 0.25 || !near(got[0].Distance, d) || !near(got[1].Distance, d) {
		t.Errorf("three nodes: %v, want %g at 0 and 0.25 s", got, d)
	}
}

func TestScoreSnapshotsConsensusWaitsForEveryNode(t *testing.T) {
	model, test := consensusModel(t)
	p := float64(model.Size())
	dir := t.TempDir()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	writeSnap(t, dir, "peerA", 0, at(0), model, filled(model, 1), 0, false)
	writeSnap(t, dir, "peerA", 1, at(500), model, filled(model, 1), 5, false)
	writeSnap(t, dir, "peerA", 2, at(1000), model, filled(model, 1), 10, true)
	writeSnap(t, dir, "peerB", 0, at(0), model, filled(model, -1), 0, false)
	writeSnap(t, dir, "peerB", 1, at(750), model, filled(model, 0), 5, false)
	writeSnap(t, dir, "peerB", 2, at(1000), model, filled(model, 1), 10, true)
	peers := map[string]int{"peerA": 0, "peerB": 1}
	_, got, err := ScoreSnapshots(t.Context(), dir, peers, 2, test, t0, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []ConsensusPoint{{T: 0, Distance: p}, {T: 0.5, Distance: p}, {T: 0.75, Distance: 0.25 * p}, {T: 1, Distance: 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("every node from the start: %v, want %v", got, want)
	}

	// Without node B's first snapshot, the series starts at its second:
	// node A alone has no distance to anything.
	if err := os.Remove(filepath.Join(dir, "snap-peerB-000000.safetensors")); err != nil {
		t.Fatal(err)
	}
	_, got, err = ScoreSnapshots(t.Context(), dir, peers, 2, test, t0, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want[2:]) {
		t.Errorf("node B's first snapshot missing: %v, want %v", got, want[2:])
	}
	if _, ok := ConsensusAt(got, 0.5); ok {
		t.Error("a distance at 0.5 s, before node B's first snapshot")
	}
	if d, ok := ConsensusAt(got, 0.8); !ok || d != 0.25*p {
		t.Errorf("at 0.8 s: %v %v, want node B's first snapshot's %v", d, ok, 0.25*p)
	}
}

func TestConsensusSetIsTheMeanSquaredDistanceToTheAverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, size = 4, 257
	c := newConsensusSet(n)
	models := make([][]float32, n)
	direct := func() float64 {
		var s float64
		for k := range size {
			var mean float64
			for _, m := range models {
				mean += float64(m[k])
			}
			mean /= n
			for _, m := range models {
				d := float64(m[k]) - mean
				s += d * d
			}
		}
		return s / n
	}
	for step := range 20 {
		i := step % n
		if step >= n {
			i = rng.IntN(n)
		}
		w := make([]float32, size)
		for k := range w {
			w[k] = float32(rng.NormFloat64())
		}
		models[i] = w
		if err := c.set(i, w); err != nil {
			t.Fatal(err)
		}
		d, ok := c.distance()
		if ok != (step >= n-1) {
			t.Fatalf("step %d: ok=%v with %d of %d nodes", step, ok, min(step+1, n), n)
		}
		if ok && math.Abs(d-direct()) > 1e-12*direct() {
			t.Errorf("step %d: %v, want (1/n) sum ||x_i - xbar||^2 = %v", step, d, direct())
		}
	}
	if err := c.set(0, make([]float32, size+1)); err == nil {
		t.Error("a model of another size was accepted")
	}
	one := newConsensusSet(1)
	if err := one.set(0, []float32{3, 4}); err != nil {
		t.Fatal(err)
	}
	if d, ok := one.distance(); !ok || d != 0 {
		t.Errorf("one node: %v %v, want 0", d, ok)
	}
}

func TestResultsValidateConsensus(t *testing.T) {
	res := fakeResults()
	if err := res.Validate(); err != nil {
		t.Fatalf("fake results: %v", err)
	}
	for _, c := range []struct {
		name string
		p    ConsensusPoint
	}{
		{"NaN distance", ConsensusPoint{T: 0.5, Distance: math.NaN()}},
		{"negative distance", ConsensusPoint{T: 0.5, Distance: -1e-9}},
		{"infinite distance", ConsensusPoint{T: 0.5, Distance: math.Inf(1)}},
		{"NaN time", ConsensusPoint{T: math.NaN(), Distance: 1}},
		{"time going back", ConsensusPoint{T: -1, Distance: 1}},
	} {
		bad := fakeResults()
		bad.Runs[1].Consensus[1] = c.p
		err := bad.Validate()
		if err == nil || !strings.Contains(err.Error(), "consensus point 1") {
			t.Errorf("%s: %v", c.name, err)
		}
	}

	// Results from before consensus was recorded have no field, and still
	// read; the field is left out when empty.
	old := fakeResults()
	for i := range old.Runs {
		old.Runs[i].Consensus = nil
	}
	for i := range old.Tuning {
		old.Tuning[i].Consensus = nil
	}
	var buf bytes.Buffer
	if err := WriteResults(&buf, fakeBench(old)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), `"consensus"`) {
		t.Error("an empty consensus series is written")
	}
	if _, err := ReadResults(&buf); err != nil {
		t.Errorf("results without consensus: %v", err)
	}
	buf.Reset()
	if err := WriteResults(&buf, fakeBench(res)); err != nil {
		t.Fatal(err)
	}
	var all struct {
		Networks []struct {
			Runs []map[string]json.RawMessage `json:"runs"`
		} `json:"networks"`
	}
	if err := json.Unmarshal(buf.Bytes(), &all); err != nil || len(all.Networks) != 1 {
		t.Fatal(err)
	}
	raw := all.Networks[0]
	var pts []map[string]float64
	if err := json.Unmarshal(raw.Runs[0]["consensus"], &pts); err != nil || len(pts) == 0 ||
		!reflect.DeepEqual(pts[2], map[string]float64{"t_s": 1, "distance": 0.005}) {
		t.Errorf("consensus in results.json: %v (%v)", pts, err)
	}
}

func TestConsensusCurveIsTheMedianOverSeedsAndAtTarget(t *testing.T) {
	tt := func(x float64) *float64 { return &x }
	runs := []Run{
		{Mode: ModeGossip, FixedWallS: 2, TimeToTargetS: tt(1), Consensus: []ConsensusPoint{{T: 0.5, Distance: 4}, {T: 1, Distance: 2}}},
		{Mode: ModeGossip, FixedWallS: 2, TimeToTargetS: tt(1.5), Consensus: []ConsensusPoint{{T: 0, Distance: 8}, {T: 1.5, Distance: 1}}},
		{Mode: ModeGossip, FixedWallS: 2, Consensus: []ConsensusPoint{{T: 0, Distance: 6}, {T: 1, Distance: 3}}},
		{Mode: ModeGossip, Error: "failed", Consensus: []ConsensusPoint{{T: 0, Distance: 100}}},
		{Mode: ModeSync, FixedWallS: 2, Consensus: []ConsensusPoint{{T: 0, Distance: 0}}},
		{Mode: ModeLocal, FixedWallS: 2},
	}
	ts, ds := ConsensusCurve(runs, ModeGossip, 2, 0.5)
	// At 0 two runs have a distance (8, 6); from 0.5 all three.
	if !reflect.DeepEqual(ts, []float64{0, 0.5, 1, 1.5, 2}) || !reflect.DeepEqual(ds, []float64{7, 6, 3, 2, 2}) {
		t.Errorf("curve %v %v", ts, ds)
	}
	// At target: 2 (at 1 s) and 1 (at 1.5 s); the third run at W, 3.
	if d, n, atW := ConsensusAtTarget(runs, ModeGossip); d != 2 || n != 3 || atW != 1 {
		t.Errorf("gossip at target: %v over %d runs, %d at W", d, n, atW)
	}
	if d, n, atW := ConsensusAtTarget(runs, ModeLocal); !math.IsNaN(d) || n != 0 || atW != 0 {
		t.Errorf("local, no series: %v %d %d", d, n, atW)
	}

	var buf bytes.Buffer
	if err := WriteReport(&buf, fakeBench(fakeResults())); err != nil {
		t.Fatal(err)
	}
	// Gossip at target: seed 1 at 2 s (0.01/3), seed 2 at 2.5 s
	// (0.02/3.5); local never reaches it: at W, 0.1 x 10.
	for _, want := range []string{"Consensus distance", "`consensus.png`", "gossip 4.52e-03,", "gossip-const 6.94e-03,",
		"sync 0.00e+00,", "local 1.00e+00 (at W)."} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestPlotConsensusOnlyWithASeries(t *testing.T) {
	res := fakeResults()
	for i := range res.Runs {
		res.Runs[i].Consensus = nil
	}
	dir := t.TempDir()
	if err := WriteAll(dir, fakeBench(res)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ConsensusPlot)); !os.IsNotExist(err) {
		t.Errorf("a consensus plot without a series: %v", err)
	}
	report, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil || strings.Contains(string(report), ConsensusPlot) || strings.Contains(string(report), "Consensus distance") {
		t.Errorf("the report names a consensus plot that is not there (%v)", err)
	}
	// Every model identical throughout (a linear axis): still a plot.
	for i := range res.Runs {
		res.Runs[i].Consensus = []ConsensusPoint{{T: 0, Distance: 0}, {T: 5, Distance: 0}}
	}
	if err := PlotConsensus(res, filepath.Join(dir, ConsensusPlot)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, ConsensusPlot)); err != nil || fi.Size() < 1000 {
		t.Errorf("all-zero consensus plot: %v", err)
	}
}

// TestScoreSnapshotsAverageModel: two nodes hold a trained model pushed
// apart by the same noise in opposite directions; each scores poorly, their
// average is the trained model itself. The average is scored at every
// instant until it reaches the target, and no later.
func TestScoreSnapshotsAverageModel(t *testing.T) {
	model, test := consensusModel(t)
	cfg := train.DefaultConfig()
	cfg.Model, cfg.Epochs, cfg.Seed = "softmax", 1000, 1
	tr, err := train.New(cfg, test)
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		if _, err := tr.Step(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	good := tr.Snapshot().Params
	ev, err := train.Evaluate(model, good, test, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	plus, minus := make([]float32, len(good)), make([]float32, len(good))
	for i, g := range good {
		n := float32(rng.NormFloat64() * 20)
		plus[i], minus[i] = g+n, g-n
	}
	evPlus, err := train.Evaluate(model, plus, test, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	target := (ev.Accuracy + evPlus.Accuracy) / 2
	if ev.Accuracy-evPlus.Accuracy < 0.1 {
		t.Fatalf("the set-up needs a noisy model far worse than the trained one: %.3f against %.3f", evPlus.Accuracy, ev.Accuracy)
	}

	dir := t.TempDir()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	zero := make([]float32, len(good))
	writeSnap(t, dir, "A", 0, at(0), model, zero, 0, false)
	writeSnap(t, dir, "B", 0, at(0), model, plus, 0, false) // average plus/2: not the trained model
	writeSnap(t, dir, "A", 1, at(500), model, plus, 5, false)
	writeSnap(t, dir, "B", 1, at(500), model, minus, 5, false) // average: the trained model
	writeSnap(t, dir, "A", 2, at(1000), model, plus, 10, true)
	writeSnap(t, dir, "B", 2, at(1000), model, minus, 10, true)
	traces, got, err := ScoreSnapshots(t.Context(), dir, map[string]int{"A": 0, "B": 1}, 2, test, t0, 2, target)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].AverageAccuracy == nil || got[1].AverageAccuracy == nil || got[2].AverageAccuracy != nil {
		t.Fatalf("consensus points %+v: want the average scored at 0 and 0.5 s only", got)
	}
	if *got[0].AverageAccuracy >= target {
		t.Errorf("the average at 0 s scored %.3f, at or above the target %.3f", *got[0].AverageAccuracy, target)
	}
	if a := *got[1].AverageAccuracy; math.Abs(a-ev.Accuracy) > 1e-3 {
		t.Errorf("the average at 0.5 s scored %.4f, want the trained model's %.4f", a, ev.Accuracy)
	}
	for _, tr := range traces {
		if acc := tr.Points[1].Accuracy; acc >= target {
			t.Errorf("node %d's own model at 0.5 s scored %.3f: the set-up wants each below the target %.3f", tr.Node, acc, target)
		}
	}
	if tt, ok := AverageTimeToTarget(got, target); !ok || tt != 0.5 {
		t.Errorf("AverageTimeToTarget = %v, %v; want 0.5 s", tt, ok)
	}
	if _, ok := AverageTimeToTarget(got, 1.01); ok {
		t.Error("AverageTimeToTarget reached an accuracy above 1")
	}
}
