package testnet

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train"
)

func pts(ts, accs []float64) []Point {
	out := make([]Point, len(ts))
	for i := range ts {
		out[i] = Point{T: ts[i], Accuracy: accs[i], Samples: int64(1000 * ts[i]), BusyS: 0.9 * ts[i]}
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestTimeToTargetIsTheFirstCrossing(t *testing.T) {
	p := pts([]float64{0, 1, 2, 3, 4}, []float64{0.1, 0.96, 0.97, 0.95, 0.99})
	cases := []struct {
		target float64
		want   float64
		ok     bool
	}{
		{0.97, 2, true},   // reached at 2 even though it dips after
		{0.96, 1, true},   // at or above counts
		{0.05, 0, true},   // the first snapshot already
		{0.995, 0, false}, // never
	}
	for _, c := range cases {
		got, ok := TimeToTarget(p, c.target)
		if got != c.want || ok != c.ok {
			t.Errorf("target %v: (%v, %v), want (%v, %v)", c.target, got, ok, c.want, c.ok)
		}
	}
	if _, ok := TimeToTarget(nil, 0.5); ok {
		t.Error("no points reached a target")
	}
}

func TestTimesToTargetAllNodesIsTheLastNodesFirstTime(t *testing.T) {
	tr := []Trace{
		{Node: 0, Points: pts([]float64{0, 1, 2}, []float64{0.5, 0.98, 0.99})},
		{Node: 1, Points: pts([]float64{0, 1.5, 2.5}, []float64{0.5, 0.9, 0.975})},
		{Node: 2, Points: pts([]float64{0, 0.5}, []float64{0.5, 0.97})},
	}
	c := TimesToTarget(tr, 0.97)
	if !c.AllOK || c.All != 2.5 || !c.FirstOK || c.First != 0.5 {
		t.Errorf("got %+v, want all 2.5 and first 0.5", c)
	}
	if *c.PerNode[0] != 1 || *c.PerNode[1] != 2.5 || *c.PerNode[2] != 0.5 {
		t.Errorf("per node %v %v %v", *c.PerNode[0], *c.PerNode[1], *c.PerNode[2])
	}
	tr[1].Points[2].Accuracy = 0.96
	c = TimesToTarget(tr, 0.97)
	if c.AllOK || c.All != 0 || c.PerNode[1] != nil || !c.FirstOK || c.First != 0.5 {
		t.Errorf("a node that never reached the target: got %+v", c)
	}
	if c := TimesToTarget(nil, 0.5); c.AllOK || c.FirstOK {
		t.Errorf("no nodes: %+v", c)
	}
}

func TestSamplesAtInterpolatesAndHolds(t *testing.T) {
	tr := []Trace{
		{Points: []Point{{T: 0, Samples: 0}, {T: 1, Samples: 100}, {T: 3, Samples: 300}}},
		{Points: []Point{{T: 0.5, Samples: 10}, {T: 2.5, Samples: 50}}},
	}
	cases := map[float64]float64{
		-1:  0 + 10,   // before everything: first counts
		0:   0 + 10,   //
		0.5: 50 + 10,  // node 0 halfway to its second snapshot
		1:   100 + 20, // node 1 a quarter of the way from 10 to 50
		2:   200 + 40,
		3:   300 + 50, // node 1 held after its last snapshot
		9:   300 + 50,
	}
	for at, want := range cases {
		if got := SamplesAt(tr, at); !near(got, want) {
			t.Errorf("SamplesAt(%v) = %v, want %v", at, got, want)
		}
	}
}

func TestAccuracyAtIsTheLatestSnapshotSoFar(t *testing.T) {
	p := pts([]float64{0, 1, 2}, []float64{0.1, 0.5, 0.9})
	for at, want := range map[float64]float64{-1: 0.1, 0: 0.1, 0.99: 0.1, 1: 0.5, 1.5: 0.5, 2: 0.9, 10: 0.9} {
		if got := AccuracyAt(p, at); got != want {
			t.Errorf("AccuracyAt(%v) = %v, want %v", at, got, want)
		}
	}
	if AccuracyAt(nil, 1) != 0 {
		t.Error("no points")
	}
}

func TestBusyFractionOverTheTrace(t *testing.T) {
	p := []Point{{T: 1, BusyS: 2}, {T: 2, BusyS: 2.5}, {T: 5, BusyS: 5.6}}
	if got := BusyFraction(p); !near(got, 0.9) {
		t.Errorf("busy %v, want (5.6-2)/(5-1) = 0.9", got)
	}
	// Rounding in the counters may push a fully busy node past 1.
	if got := BusyFraction([]Point{{T: 0}, {T: 1, BusyS: 1.001}}); got != 1 {
		t.Errorf("capped busy %v", got)
	}
	if BusyFraction(p[:1]) != 0 || BusyFraction(nil) != 0 {
		t.Error("a single point has no span")
	}
}

func TestSoloRatesEfficiencyAndIdealOnTheProfile(t *testing.T) {
	solo := SoloRates(64, 0.002, []float64{2, 2, 4, 8})
	want := []float64{16000, 16000, 8000, 4000}
	for i := range want {
		if !near(solo[i], want[i]) {
			t.Fatalf("solo rates %v, want %v", solo, want)
		}
	}
	sum := Sum(solo)
	// Sync runs every node at the slowest one's pace: 4 x 4000 samples/s.
	if got := sum / (4 * 4000); !near(got, 2.75) {
		t.Errorf("structural ratio %v, want 2.75", got)
	}
	if got := Efficiency(sum*10, 10, solo); !near(got, 1) {
		t.Errorf("flat-out efficiency %v", got)
	}
	if got := Efficiency(4*4000*10, 10, solo); !near(got, 1/2.75) {
		t.Errorf("sync-paced efficiency %v, want 1/2.75", got)
	}
	if got := IdealTime(88000, solo); !near(got, 2) {
		t.Errorf("ideal %v, want 88000/44000 = 2 s", got)
	}
	if got := SyncPaceTime(88000, solo); !near(got, 5.5) {
		t.Errorf("sync pace %v, want 88000/(4 x 4000) = 5.5 s", got)
	}
	if Efficiency(1, 0, solo) != 0 || IdealTime(1, nil) != 0 || SyncPaceTime(1, nil) != 0 || SoloRates(64, 0, []float64{2})[0] != 0 {
		t.Error("degenerate inputs must give 0")
	}
}

func TestMedian(t *testing.T) {
	xs := []float64{5, 1, 3}
	if Median(xs) != 3 || xs[0] != 5 {
		t.Errorf("odd median %v (or input changed: %v)", Median(xs), xs)
	}
	if Median([]float64{4, 1, 3, 2}) != 2.5 {
		t.Error("even median")
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("median of nothing")
	}
	if Median([]float64{1, math.Inf(1), math.Inf(1)}) != math.Inf(1) {
		t.Error("a majority of censored runs makes the median missing")
	}
}

func TestMedianOfCountsUnreachedAsSlowest(t *testing.T) {
	one, three := 1.0, 3.0
	runs := []*Run{{TimeToTargetS: &one}, {TimeToTargetS: nil}, {TimeToTargetS: &three}}
	got := medianOf(runs, func(r *Run) *float64 { return r.TimeToTargetS })
	if got == nil || *got != 3 {
		t.Errorf("median with one unreached run %v, want 3", got)
	}
	runs[2].TimeToTargetS = nil
	if got := medianOf(runs, func(r *Run) *float64 { return r.TimeToTargetS }); got != nil {
		t.Errorf("median with two of three unreached: %v, want missing", *got)
	}
}

// fakeTrace is a node snapshotted every 0.5 s whose accuracy climbs to
// 0.9 and jumps to 0.99 at reach seconds, processing rate samples/s while
// busy a fraction busy.
func fakeTrace(node int, reach, rate, busy, wall float64) Trace {
	tr := Trace{Node: node, Slowdown: 1}
	for t := 0.0; t <= wall+1e-9; t += 0.5 {
		acc := 0.5 + 0.4*t/reach
		if t >= reach {
			acc = 0.99
		}
		tr.Points = append(tr.Points, Point{T: t, Accuracy: acc,
			Samples: int64(rate * t), BusyS: busy * t, BytesSent: uint64(1000 * t), Merges: int64(t)})
	}
	return tr
}

func fakeRun(mode string, seed uint64, reaches []float64, rate, busy, wall float64) Run {
	r := Run{Mode: mode, Seed: seed, LR: 0.1}
	for i, reach := range reaches {
		r.Traces = append(r.Traces, fakeTrace(i, reach, rate, busy, wall))
	}
	return r
}

func TestAnalyzeRun(t *testing.T) {
	r := fakeRun(ModeGossip, 1, []float64{2, 4}, 1000, 0.98, 10)
	solo := []float64{1000, 1000}
	analyzeRun(&r, 0.97, 10, solo)
	if r.TimeToTargetS == nil || *r.TimeToTargetS != 4 || *r.FirstNodeTimeS != 2 {
		t.Fatalf("times %v %v, want 4 and 2", r.TimeToTargetS, r.FirstNodeTimeS)
	}
	if *r.SamplesToTarget != 8000 {
		t.Errorf("samples to target %v, want 2 nodes x 1000/s x 4 s", *r.SamplesToTarget)
	}
	if r.WallS != 10 || r.FixedWallS != 10 || !near(r.SamplesPerS, 2000) || !near(r.Efficiency, 1) {
		t.Errorf("wall %v, samples/s %v, efficiency %v", r.WallS, r.SamplesPerS, r.Efficiency)
	}
	if !near(r.BusyFraction[0], 0.98) || r.BytesSent[1] != 10000 || r.Merges[0] != 10 || r.FinalAccuracy[0] != 0.99 {
		t.Errorf("per node: busy %v, bytes %v, merges %v, accuracy %v", r.BusyFraction, r.BytesSent, r.Merges, r.FinalAccuracy)
	}
	never := fakeRun(ModeSync, 1, []float64{2, 40}, 1000, 0.5, 10)
	analyzeRun(&never, 0.97, 10, solo)
	if never.TimeToTargetS != nil || never.SamplesToTarget != nil || never.FirstNodeTimeS == nil {
		t.Errorf("a node short of the target: %v %v %v", never.TimeToTargetS, never.SamplesToTarget, never.FirstNodeTimeS)
	}
}

// fakeResults is a benchmark of two seeds where gossip is twice as fast as
// sync in samples/s and reaches the target in a third of its time.
func fakeResults() *Results {
	res := &Results{Schema: ResultsSchema, Command: "meshtrain bench --fake", Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		RunTimeS: 100, Machine: Machine{NumCPU: 2, MemoryBytes: 8 << 30, OS: "linux", Arch: "amd64", GoVersion: "go1.26"},
		BaseStepS: 0.002, LR: map[string]float64{ModeGossip: 0.1, ModeGossipConst: 0.1, ModeSync: 0.2, ModeLocal: 0.1},
		Schedule: map[string]string{ModeGossip: "const", ModeGossipConst: "const", ModeSync: "const", ModeLocal: "const"}}
	res.Settings = Settings{Nodes: 2, Slowdowns: []float64{2, 4}, Target: 0.97, Seeds: []uint64{1, 2}, TuneSeed: 1000,
		Dataset: "mnist", Model: "mlp:256,128", Batch: 64, Schedule: "const", Modes: AllModes, DurationS: 10, FixedWallS: 10,
		SnapshotS: 0.5, AvgIntervalS: 0.25, Alpha: 0.5, Staleness: "poly:0.5", WireDType: "fp16", Threads: 1,
		Heterogeneity: "emulated"}
	res.SoloSamplesPerS = SoloRates(64, 0.002, res.Settings.Slowdowns)
	res.SoloSamplesPerSSum = Sum(res.SoloSamplesPerS)
	solo := res.SoloSamplesPerS
	for _, seed := range res.Settings.Seeds {
		s := float64(seed)
		runs := []Run{
			fakeRun(ModeGossip, seed, []float64{1.5, 1.5 + s/2}, 6000, 0.99, 10),
			fakeRun(ModeGossipConst, seed, []float64{2, 2.5 + s/2}, 6000, 0.99, 10),
			fakeRun(ModeSync, seed, []float64{6, 6}, 2000, 0.5, 10),
			fakeRun(ModeLocal, seed, []float64{3, 20}, 6000, 0.99, 10),
		}
		for i := range runs {
			analyzeRun(&runs[i], 0.97, 10, solo)
		}
		res.Runs = append(res.Runs, runs...)
	}
	tune := fakeRun(ModeGossip, 1000, []float64{2, 3}, 6000, 0.99, 10)
	analyzeRun(&tune, 0.97, 10, solo)
	res.Tuning = []Run{tune, {Mode: ModeSync, Seed: 1000, LR: 0.4, Error: "testnet: bench: node 1 exited"}}
	summarize(res)
	return res
}

func TestSummarizeIdealRatiosAndBars(t *testing.T) {
	res := fakeResults()
	// Sync's samples to target: 2 nodes x 2000/s x 6 s = 24000; the solo
	// rates sum to 16000 + 8000.
	for _, r := range res.Runs {
		if r.IdealTimeS == nil || !near(*r.IdealTimeS, 1) {
			t.Fatalf("%s seed %d: ideal %v, want 24000/24000 = 1 s", r.Mode, r.Seed, r.IdealTimeS)
		}
		if r.SyncPaceTimeS == nil || !near(*r.SyncPaceTimeS, 1.5) {
			t.Fatalf("%s seed %d: sync pace %v, want 24000/(2 x 8000) = 1.5 s", r.Mode, r.Seed, r.SyncPaceTimeS)
		}
	}
	g := res.Summary[ModeGossip]
	if g.Runs != 2 || g.Reached != 2 || !near(*g.TimeToTargetS, 2.25) {
		t.Errorf("gossip summary %+v (time %v), want the median of 2 and 2.5", g, *g.TimeToTargetS)
	}
	if l := res.Summary[ModeLocal]; l.Reached != 0 || l.TimeToTargetS != nil || l.FirstNodeTimeS == nil || *l.FirstNodeTimeS != 3 {
		t.Errorf("local summary %+v", l)
	}
	q := res.Ratios
	if !near(*q.GossipOverSync, 2.25/6) || !near(*q.GossipOverIdeal, 2.25) || !near(*q.ThroughputGossipOverSync, 3) ||
		!near(*q.GossipOverSyncPace, 1.5) {
		t.Errorf("ratios %v %v %v %v", *q.GossipOverSync, *q.GossipOverIdeal, *q.ThroughputGossipOverSync, *q.GossipOverSyncPace)
	}
	if !near(q.StructuralThroughput, 24000.0/(2*8000)) || len(q.PerSeedGossipOverSync) != 2 || !near(*q.PerSeedGossipOverSync[1], 2.5/6) {
		t.Errorf("structural %v, per seed %v", q.StructuralThroughput, q.PerSeedGossipOverSync)
	}
	pass := map[string]bool{}
	for _, b := range res.Bars {
		pass[b.Name] = b.Pass
	}
	want := map[string]bool{BarGossipOverSync: true, BarGossipOverIdeal: false, BarThroughput: true,
		BarFinalAccuracy: true, BarBusy: true, BarStaleness: true}
	if !reflect.DeepEqual(pass, want) {
		t.Errorf("bars %v, want %v", pass, want)
	}
	if BestLR(res.Tuning, ModeGossip) != 0.1 || BestLR(res.Tuning, ModeSync) != 0 {
		t.Errorf("best LRs %v %v", BestLR(res.Tuning, ModeGossip), BestLR(res.Tuning, ModeSync))
	}
}

func TestAnnealTotalIsTheTuningRunsProgressAtTheEnd(t *testing.T) {
	run := func(lr float64, progress ...float64) Run {
		r := Run{Mode: ModeGossip, LR: lr}
		for _, p := range progress {
			r.Traces = append(r.Traces, Trace{Points: []Point{{T: 0}, {T: 10, Progress: p}, {T: 20, Progress: 2 * p}}})
		}
		return r
	}
	tuning := []Run{run(0.05, 1, 1), run(0.1, 100, 300), {Mode: ModeSync, LR: 0.1, Error: "failed"}}
	if got := AnnealTotal(tuning, ModeGossip, 0.1, 15); !near(got, 300) {
		t.Errorf("total %v, want the mean of 150 and 450", got)
	}
	if AnnealTotal(tuning, ModeSync, 0.1, 15) != 0 || AnnealTotal(tuning, ModeGossip, 0.2, 15) != 0 {
		t.Error("a failed or missing tuning run gives no total")
	}
}

func TestBestLRPrefersReachingThenFasterThenAccuracy(t *testing.T) {
	two, three := 2.0, 3.0
	tuning := []Run{
		{Mode: ModeGossip, LR: 0.05, FinalAccuracyMean: 0.99},
		{Mode: ModeGossip, LR: 0.2, TimeToTargetS: &three},
		{Mode: ModeGossip, LR: 0.1, TimeToTargetS: &two},
		{Mode: ModeGossip, LR: 0.4, Error: "crashed"},
		{Mode: ModeSync, LR: 0.8, FinalAccuracyMean: 0.9},
		{Mode: ModeSync, LR: 0.4, FinalAccuracyMean: 0.95},
		{Mode: ModeLocal, LR: 0.2, TimeToTargetS: &two},
		{Mode: ModeLocal, LR: 0.1, TimeToTargetS: &two},
	}
	for mode, want := range map[string]float64{ModeGossip: 0.1, ModeSync: 0.4, ModeLocal: 0.1, ModeGossipConst: 0} {
		if got := BestLR(tuning, mode); got != want {
			t.Errorf("%s: %v, want %v", mode, got, want)
		}
	}
}

func TestResultsRoundTrip(t *testing.T) {
	res := fakeResults()
	var buf bytes.Buffer
	if err := WriteResults(&buf, res); err != nil {
		t.Fatal(err)
	}
	back, err := ReadResults(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res, back) {
		t.Errorf("round trip changed the results")
	}
	var again bytes.Buffer
	if err := WriteResults(&again, back); err != nil || !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("re-encoding differs (%v)", err)
	}
	// Missing values are null, not NaN (which JSON cannot hold).
	if !strings.Contains(buf.String(), `"time_to_target_s": null`) {
		t.Error("an unreached target is not encoded as null")
	}
}

func TestReadResultsRefusesMalformed(t *testing.T) {
	encode := func(res *Results) []byte {
		var buf bytes.Buffer
		if err := WriteResults(&buf, res); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	cases := map[string]func(*Results) []byte{
		"wrong schema":     func(r *Results) []byte { r.Schema = "other/1"; return encode(r) },
		"missing run":      func(r *Results) []byte { r.Runs = r.Runs[1:]; return encode(r) },
		"duplicate run":    func(r *Results) []byte { r.Runs = append(r.Runs, r.Runs[0]); return encode(r) },
		"short per-node":   func(r *Results) []byte { r.Runs[0].BusyFraction = r.Runs[0].BusyFraction[:1]; return encode(r) },
		"busy above one":   func(r *Results) []byte { r.Runs[0].BusyFraction[0] = 1.5; return encode(r) },
		"no lr":            func(r *Results) []byte { delete(r.LR, ModeSync); return encode(r) },
		"no summary":       func(r *Results) []byte { delete(r.Summary, ModeLocal); return encode(r) },
		"unknown mode":     func(r *Results) []byte { r.Settings.Modes = append(r.Settings.Modes, "async"); return encode(r) },
		"no base step":     func(r *Results) []byte { r.BaseStepS = 0; return encode(r) },
		"time goes back":   func(r *Results) []byte { r.Runs[0].Traces[0].Points[3].T = 0; return encode(r) },
		"reached disagree": func(r *Results) []byte { r.Runs[0].SamplesToTarget = nil; return encode(r) },
		"unknown field": func(r *Results) []byte {
			return bytes.Replace(encode(r), []byte(`"schema"`), []byte(`"extra": 1, "schema"`), 1)
		},
		"not json": func(*Results) []byte { return []byte("{") },
	}
	for name, mangle := range cases {
		_, err := ReadResults(bytes.NewReader(mangle(fakeResults())))
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if !errors.Is(err, ErrBench) && !errors.Is(err, ErrBadResults) {
			t.Errorf("%s: %v is not a bench error", name, err)
		}
	}
}

func TestBenchConfigValidateReportsEveryField(t *testing.T) {
	if err := func() error { c := DefaultBenchConfig(); c.Binary = "meshtrain"; return c.Validate() }(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := func() error { c := QuickBenchConfig(); c.Binary = "meshtrain"; return c.Validate() }(); err != nil {
		t.Fatalf("quick: %v", err)
	}
	if err := func() error {
		c := QuickBenchConfig()
		c.Binary, c.Anneal = "meshtrain", true
		return c.Validate()
	}(); err == nil || !strings.Contains(err.Error(), "annealing") {
		t.Errorf("annealing with fixed learning rates: %v", err)
	}
	c := DefaultBenchConfig()
	c.Nodes, c.Target, c.Seeds, c.TuneSeed = 0, 1.5, 3, 2
	c.Modes = []string{"gossip", "async"}
	c.LRGrid = []float64{-1}
	c.Duration, c.SnapshotEvery = 0, 0
	c.Staleness = "poly"
	c.WireDType = "fp8"
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"no binary", "nodes 0", "target 1.5", "tune seed 2", "async", "-1", "duration", "snapshot", "poly", "fp8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
	if !errors.Is(err, ErrBench) {
		t.Errorf("%v does not wrap ErrBench", err)
	}
}

// writeSnap writes a snapshot file as node.Node does.
func writeSnap(t *testing.T, dir, peer string, seq int, at time.Time, model *train.Model, w []float32, samples int64) {
	t.Helper()
	meta := map[string]string{
		node.MetaModel: model.Spec(), node.MetaPeerID: peer, node.MetaSnapshotSeq: strconv.Itoa(seq),
		node.MetaTimeUnixNano: strconv.FormatInt(at.UnixNano(), 10), node.MetaSamples: strconv.FormatInt(samples, 10),
		node.MetaBusyNanos: strconv.FormatInt(int64(at.Sub(time.Unix(0, 0))/1000), 10), node.MetaNetWaitNanos: "0",
		node.MetaBytesSent: "0", node.MetaMerges: "0", node.MetaStep: strconv.FormatInt(samples/16, 10),
		node.MetaProgress: strconv.FormatInt(samples, 10),
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("snap-%s-%06d.safetensors", peer, seq)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := params.WriteSafetensors(f, model.Layout(), w, meta); err != nil {
		t.Fatal(err)
	}
}

func TestScoreSnapshotsBuildsTracesInOrder(t *testing.T) {
	_, test, err := node.LoadData(node.DatasetSynthetic, "", 3)
	if err != nil {
		t.Fatal(err)
	}
	model, err := train.ParseModel("softmax", test.Dim, test.Classes)
	if err != nil {
		t.Fatal(err)
	}
	// Two models: zeros (every class tied) and a trained one.
	zero := make([]float32, model.Size())
	trainSet, _, _ := node.LoadData(node.DatasetSynthetic, "", 3)
	tc := train.DefaultConfig()
	tc.Model, tc.Batch, tc.Epochs, tc.Schedule, tc.Seed = "softmax", 16, 3, "const", 3
	tr, err := train.New(tc, trainSet)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := tr.Step(t.Context()); err != nil {
			break
		}
	}
	trained := tr.Snapshot().Params
	wantZero, _ := train.Evaluate(model, zero, test, 0, 1)
	wantTrained, _ := train.Evaluate(model, trained, test, 0, 1)
	if wantTrained.Accuracy <= wantZero.Accuracy {
		t.Fatalf("the trained model (%v) should beat the zero one (%v)", wantTrained.Accuracy, wantZero.Accuracy)
	}

	dir := t.TempDir()
	t0 := time.Now()
	// Written out of order, and with sequence numbers that sort
	// differently from the file names' times.
	writeSnap(t, dir, "peerB", 1, t0.Add(2*time.Second), model, trained, 300)
	writeSnap(t, dir, "peerA", 0, t0, model, zero, 0)
	writeSnap(t, dir, "peerB", 0, t0.Add(time.Second), model, zero, 100)
	writeSnap(t, dir, "peerA", 1, t0.Add(1500*time.Millisecond), model, trained, 200)
	traces, err := ScoreSnapshots(t.Context(), dir, map[string]int{"peerA": 0, "peerB": 1}, 2, test, t0, 2)
	if err != nil {
		t.Fatal(err)
	}
	a, b := traces[0].Points, traces[1].Points
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("points %d and %d, want 2 each", len(a), len(b))
	}
	if a[0].T != 0 || a[1].T != 1.5 || b[0].T != 1 || b[1].T != 2 || a[1].Samples != 200 || b[1].Samples != 300 {
		t.Errorf("times or counters out of place: %+v %+v", a, b)
	}
	if a[0].Accuracy != wantZero.Accuracy || a[1].Accuracy != wantTrained.Accuracy || b[1].Accuracy != wantTrained.Accuracy {
		t.Errorf("accuracies %v %v %v, want %v, %v, %v", a[0].Accuracy, a[1].Accuracy, b[1].Accuracy,
			wantZero.Accuracy, wantTrained.Accuracy, wantTrained.Accuracy)
	}

	// A stranger's snapshot, or a node that left only one, is an error.
	if _, err := ScoreSnapshots(t.Context(), dir, map[string]int{"peerA": 0}, 2, test, t0, 1); !errors.Is(err, ErrBench) {
		t.Errorf("unknown writer: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "snap-peerB-000001.safetensors")); err != nil {
		t.Fatal(err)
	}
	if _, err := ScoreSnapshots(t.Context(), dir, map[string]int{"peerA": 0, "peerB": 1}, 2, test, t0, 1); !errors.Is(err, ErrBench) {
		t.Errorf("a node with one snapshot: %v", err)
	}
}

func TestParseSnapshotMetaNamesWhatIsMissing(t *testing.T) {
	_, err := parseSnapshotMeta(map[string]string{node.MetaSamples: "12", node.MetaBusyNanos: "x"})
	if err == nil || !strings.Contains(err.Error(), node.MetaBusyNanos) || !strings.Contains(err.Error(), node.MetaTimeUnixNano) {
		t.Errorf("got %v", err)
	}
}

func TestWriteAllWritesReportAndPlots(t *testing.T) {
	res := fakeResults()
	dir := t.TempDir()
	if err := WriteAll(dir, res); err != nil {
		t.Fatal(err)
	}
	back, err := ReadResultsFile(filepath.Join(dir, ResultsFile))
	if err != nil || !reflect.DeepEqual(back, res) {
		t.Fatalf("results.json: %v", err)
	}
	report, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"meshtrain bench --fake", "2 CPUs", "8.0 GiB", "| gossip | 2.25 s", "not reached",
		BarGossipOverIdeal, "failed: testnet: bench: node 1 exited", AccuracyPlot} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, name := range []string{AccuracyPlot, BusyPlot, TimePlot} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 300 {
			t.Errorf("%s: not a plot (%v)", name, err)
		}
	}
}

func TestCurveIsTheMedianOverSeeds(t *testing.T) {
	runs := []Run{
		{Mode: ModeGossip, Traces: []Trace{{Points: pts([]float64{0, 1}, []float64{0.2, 0.8})}, {Points: pts([]float64{0, 1}, []float64{0.4, 0.6})}}},
		{Mode: ModeGossip, Traces: []Trace{{Points: pts([]float64{0, 1}, []float64{0.5, 0.9})}, {Points: pts([]float64{0, 1}, []float64{0.5, 0.9})}}},
		{Mode: ModeSync, Traces: []Trace{{Points: pts([]float64{0}, []float64{1})}}},
	}
	c := Curve(runs, ModeGossip, 1, 0.5)
	if !reflect.DeepEqual(c.T, []float64{0, 0.5, 1}) {
		t.Fatalf("times %v", c.T)
	}
	if !near(c.Mean[0], 0.4) || !near(c.Mean[2], 0.8) || !near(c.Worst[0], 0.35) || !near(c.Worst[2], 0.75) {
		t.Errorf("mean %v worst %v", c.Mean, c.Worst)
	}
}
