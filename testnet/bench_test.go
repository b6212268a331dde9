package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
			Samples: int64(rate * t), BusyS: busy * t, BytesSent: uint64(1000 * t), Merges: int64(t), Progress: 3 * rate * t})
	}
	return tr
}

// fakeRun is a run whose nodes all ended their runs at wall seconds.
func fakeRun(mode string, seed uint64, reaches []float64, rate, busy, wall float64) Run {
	r := Run{Mode: mode, Seed: seed, LR: 0.1, Schedule: "cosine:warmup=4%", Epochs: 40, Flags: []string{}, End: EndComplete,
		WallS: wall}
	for i, reach := range reaches {
		r.Traces = append(r.Traces, fakeTrace(i, reach, rate, busy, wall))
		r.NodeExitS, r.NodeFinished = append(r.NodeExitS, wall), append(r.NodeFinished, true)
	}
	r.Consensus = fakeConsensus(mode, float64(seed), wall)
	return r
}

// fakeConsensus is a consensus series every 0.5 s from a common start
// (distance 0): gossip's shrinks as 0.01 seed / (1+t) (gossip-const's
// twice that), local's grows as 0.1 t, sync's stays 0.
func fakeConsensus(mode string, seed, wall float64) []ConsensusPoint {
	var c []ConsensusPoint
	for t := 0.0; t <= wall+1e-9; t += 0.5 {
		var d float64
		switch {
		case t == 0 || mode == ModeSync:
		case mode == ModeGossip:
			d = 0.01 * seed / (1 + t)
		case mode == ModeGossipConst:
			d = 0.02 * seed / (1 + t)
		case mode == ModeLocal:
			d = 0.1 * t
		}
		c = append(c, ConsensusPoint{T: t, Distance: d})
	}
	return c
}

func TestRunCostsArePerSampleProcessedPerNodeAndOverTheSwarm(t *testing.T) {
	// Node 0 processes 1000 samples/s and node 1 250 (fakeTrace sends
	// 1000 bytes/s either way) for 10 s; the WAN carried 30,000 and
	// 20,000 bytes from them.
	r := fakeRun(ModeGossip, 1, []float64{2, 4}, 1000, 1, 10)
	r.Traces[1] = fakeTrace(1, 4, 250, 1, 10)
	r.Link = runLink(WANStats{Endpoints: []WANEndpointStats{
		{LinkCounters: LinkCounters{SentBytes: 30000, RecvBytes: 5, UplinkDrops: 1, DownlinkDrops: 2, Lost: 3}},
		{LinkCounters: LinkCounters{SentBytes: 20000}},
		{Stranger: true, LinkCounters: LinkCounters{SentBytes: 1 << 30}}, // not a node
	}, Strangers: 1, LateMaxS: 0.002, LateMeanS: 0.0001}, 2)
	analyzeRun(&r, 0.97, 10, []float64{1000, 250})
	if !slices.Equal(r.BytesSentPerSample, []float64{1, 4}) || !near(r.ClusterBytesSentPerSample, 20000.0/12500) {
		t.Errorf("bytes per sample %v, cluster %v; want 1 and 4, 1.6", r.BytesSentPerSample, r.ClusterBytesSentPerSample)
	}
	l := r.Link
	if !near(l.WireBytesSentPerSample, 50000.0/12500) || !slices.Equal(l.WireBytesSent, []uint64{30000, 20000}) ||
		!slices.Equal(l.QueueDrops, []uint64{3, 0}) || !slices.Equal(l.Lost, []uint64{3, 0}) || l.Strangers != 1 ||
		l.WireBytesReceived[0] != 5 || l.LateMaxS != 0.002 {
		t.Errorf("link %+v, want the two nodes' figures and 4 wire bytes per sample", l)
	}
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
	// Each node sent 10,000 bytes over its 10,000 samples.
	if !slices.Equal(r.BytesSentPerSample, []float64{1, 1}) || !near(r.ClusterBytesSentPerSample, 1) || r.Link != nil {
		t.Errorf("bytes per sample %v, cluster %v, link %v", r.BytesSentPerSample, r.ClusterBytesSentPerSample, r.Link)
	}
	never := fakeRun(ModeSync, 1, []float64{2, 40}, 1000, 0.5, 10)
	analyzeRun(&never, 0.97, 10, solo)
	if never.TimeToTargetS != nil || never.SamplesToTarget != nil || never.FirstNodeTimeS == nil {
		t.Errorf("a node short of the target: %v %v %v", never.TimeToTargetS, never.SamplesToTarget, never.FirstNodeTimeS)
	}
}

// fakeModes are the modes fakeResults ran.
var fakeModes = []string{ModeGossip, ModeGossipConst, ModeSync, ModeLocal}

// fakeResults is a benchmark of two seeds where gossip is twice as fast as
// sync in samples/s and reaches the target in a third of its time.
func fakeResults() *Results {
	sched := "cosine:warmup=4%"
	res := &Results{Network: networkInfo(Loopback), Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), RunTimeS: 100,
		BaseStepS: 0.002, LR: map[string]float64{ModeGossip: 0.1, ModeGossipConst: 0.1, ModeSync: 0.2, ModeLocal: 0.1},
		Schedule: map[string]string{ModeGossip: sched, ModeGossipConst: sched, ModeSync: sched, ModeLocal: sched},
		Epochs:   map[string]float64{ModeGossip: 40, ModeGossipConst: 40, ModeSync: 2.5, ModeLocal: 40}}
	res.Settings = Settings{Nodes: 2, Slowdowns: []float64{2, 4}, Target: 0.97, Seeds: []uint64{1, 2}, TuneSeed: 1000,
		Dataset: "mnist", Model: "mlp:256,128", Batch: 64, TrainSamples: 60000, Modes: fakeModes, LR: 0.1, Epochs: 40,
		Schedule: sched, AvgIntervalS: 0.05, Alpha: 0.5, Staleness: "poly:0.5", WireDType: "fp16", LRGrid: []float64{0.05, 0.1},
		SyncLRGrid: []float64{0.2, 0.4}, BudgetSync: true, CapS: 120, FixedWallS: 10, WSeed: 1000, SnapshotS: 0.5, Threads: 1,
		Heterogeneity: "emulated", Harness: HarnessFlags(DefaultBenchConfig(), Loopback),
		DiffersFromDefaults: map[string][]string{ModeGossip: {}, ModeGossipConst: {"--staleness const"},
			ModeSync: {"--mode sync", "--lr 0.2", "--epochs 2.5"}, ModeLocal: {"--mode local"}}}
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
	syncTune := fakeRun(ModeSync, 1000, []float64{6, 7}, 2000, 0.5, 10)
	syncTune.LR, syncTune.Epochs, syncTune.Schedule, syncTune.End, syncTune.StopAtS = 0.2, 0, "const", EndStopped, 10
	syncTune.NodeFinished = []bool{false, false}
	syncTune.Flags = []string{"--mode sync", "--lr 0.2", "--schedule const", "--epochs 0"}
	analyzeRun(&syncTune, 0.97, 10, solo)
	res.Tuning = []Run{tune, syncTune, {Mode: ModeSync, Seed: 1000, LR: 0.4, Error: "testnet: bench: node 1 exited"}}
	summarize(res)
	return res
}

// fakeBench is a whole benchmark of the networks' results.
func fakeBench(nets ...*Results) *BenchResults {
	return &BenchResults{Schema: ResultsSchema, Command: "meshtrain bench --fake", Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		RunTimeS: 100, Machine: Machine{NumCPU: 2, MemoryBytes: 8 << 30, OS: "linux", Arch: "amd64", GoVersion: "go1.26"},
		Networks: nets}
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
	// Local processed 2 x 6000 samples/s on the same seed: sync's 24000
	// samples to target in 2 s with no communication at all.
	if s := res.Summary[ModeSync]; s.CoRunIdealTimeS == nil || !near(*s.CoRunIdealTimeS, 2) || !near(*q.GossipOverCoRunIdeal, 2.25/2) {
		t.Errorf("co-run ideal %v, gossip over it %v; want 2 s and 1.125", s.CoRunIdealTimeS, q.GossipOverCoRunIdeal)
	}
	// Local's 12000 samples/s over sync's structural pace, 2 x 8000.
	if c := q.CoRunStructuralThroughput; c == nil || !near(*c, 0.75) {
		t.Errorf("co-run structural ratio %v, want 0.75", c)
	}
	if g := res.Summary[ModeGossip]; !near(*g.BytesSentPerSample, 1000.0/6000) || len(g.BytesSentPerSamplePerNode) != 2 ||
		g.WireBytesSentPerSample != nil {
		t.Errorf("gossip bytes per sample %v, per node %v, wire %v", *g.BytesSentPerSample, g.BytesSentPerSamplePerNode,
			g.WireBytesSentPerSample)
	}
	if BestLR(res.Tuning, ModeGossip) != 0.1 || BestLR(res.Tuning, ModeSync) != 0.2 {
		t.Errorf("best LRs %v %v", BestLR(res.Tuning, ModeGossip), BestLR(res.Tuning, ModeSync))
	}
}

func TestRunClockAtIsGroupProgressForSyncAndSummedSamplesOtherwise(t *testing.T) {
	// Progress is not the samples summed: a sync node's progress is the
	// group model's (every member's batch), the same on every member.
	tr := func(samples, progress int64) Trace {
		return Trace{Points: []Point{{T: 0}, {T: 10, Samples: samples, Progress: float64(progress)},
			{T: 20, Samples: 2 * samples, Progress: float64(2 * progress)}}}
	}
	sync := Run{Mode: ModeSync, Traces: []Trace{tr(100, 400), tr(100, 400), tr(100, 400), tr(100, 396)}}
	if got := RunClockAt(sync, 15); !near(got, 600) {
		t.Errorf("sync clock %v, want the median group progress 600 at 15 s", got)
	}
	gossip := Run{Mode: ModeGossip, Traces: []Trace{tr(100, 7), tr(300, 9)}}
	if got := RunClockAt(gossip, 15); !near(got, 150+450) {
		t.Errorf("gossip clock %v, want every node's samples added up (150 + 450)", got)
	}
	if got := RunClockAt(gossip, 99); !near(got, 200+600) {
		t.Errorf("gossip clock after every node ended %v, want their final counts 800", got)
	}
	if RunClockAt(Run{Mode: ModeSync}, 5) != 0 {
		t.Error("no traces, no clock")
	}
}

func TestSyncEpochsComeFromTheTuningRunsClockAtW(t *testing.T) {
	run := func(lr float64, progress float64) Run {
		r := Run{Mode: ModeSync, LR: lr}
		for range 4 {
			r.Traces = append(r.Traces, Trace{Points: []Point{{T: 0}, {T: 10, Progress: progress, Samples: 1},
				{T: 20, Progress: 2 * progress, Samples: 2}}})
		}
		return r
	}
	tuning := []Run{
		{Mode: ModeSync, LR: 0.1, Error: "failed"},
		run(0.1, 60000), run(0.2, 120000),
		{Mode: ModeGossip, LR: 0.2, Traces: run(0.2, 1).Traces},
	}
	// At W = 12.5 s the run at 0.2 had reached 150,000 samples of group
	// progress: 2.5 passes over 60,000.
	epochs, clock := SyncEpochs(tuning, 0.2, 12.5, 60000)
	if epochs != 2.5 || clock != 150000 {
		t.Errorf("epochs %v from a clock of %v, want 2.5 from 150000", epochs, clock)
	}
	// The failed run at 0.1 is skipped for the one that worked.
	if epochs, _ := SyncEpochs(tuning, 0.1, 15, 60000); epochs != 1.5 {
		t.Errorf("epochs at 0.1: %v, want 90000/60000 = 1.5", epochs)
	}
	// Rounded to 0.001 of an epoch.
	if epochs, _ := SyncEpochs([]Run{run(0.4, 12345)}, 0.4, 10, 60000); epochs != 0.206 {
		t.Errorf("epochs %v, want 12345/60000 rounded to 0.206", epochs)
	}
	if epochs, _ := SyncEpochs(tuning, 0.4, 15, 60000); epochs != 0 {
		t.Errorf("no run at 0.4: %v", epochs)
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
	res := fakeBench(fakeResults())
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
		if err := WriteResults(&buf, fakeBench(res)); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	cases := map[string]func(*Results) []byte{
		"wrong schema": func(r *Results) []byte {
			return bytes.Replace(encode(r), []byte(ResultsSchema), []byte("other/1"), 1)
		},
		"bad network": func(r *Results) []byte { r.Network.Name = "wan:40ms"; return encode(r) },
		"short link": func(r *Results) []byte {
			r.Runs[0].Link = &RunLink{WireBytesSent: []uint64{1}}
			return encode(r)
		},
		"no bytes per sample": func(r *Results) []byte { r.Runs[0].BytesSentPerSample = nil; return encode(r) },
		"missing run":         func(r *Results) []byte { r.Runs = r.Runs[1:]; return encode(r) },
		"duplicate run":       func(r *Results) []byte { r.Runs = append(r.Runs, r.Runs[0]); return encode(r) },
		"short per-node":      func(r *Results) []byte { r.Runs[0].BusyFraction = r.Runs[0].BusyFraction[:1]; return encode(r) },
		"busy above one":      func(r *Results) []byte { r.Runs[0].BusyFraction[0] = 1.5; return encode(r) },
		"no lr":               func(r *Results) []byte { delete(r.LR, ModeSync); return encode(r) },
		"no summary":          func(r *Results) []byte { delete(r.Summary, ModeLocal); return encode(r) },
		"unknown mode":        func(r *Results) []byte { r.Settings.Modes = append(r.Settings.Modes, "async"); return encode(r) },
		"no base step":        func(r *Results) []byte { r.BaseStepS = 0; return encode(r) },
		"time goes back":      func(r *Results) []byte { r.Runs[0].Traces[0].Points[3].T = 0; return encode(r) },
		"reached disagree":    func(r *Results) []byte { r.Runs[0].SamplesToTarget = nil; return encode(r) },
		"unknown end":         func(r *Results) []byte { r.Runs[0].End = "timeout"; return encode(r) },
		"no exits":            func(r *Results) []byte { r.Runs[1].NodeExitS = nil; return encode(r) },
		"no W":                func(r *Results) []byte { r.Settings.FixedWallS = 0; return encode(r) },
		"no run length":       func(r *Results) []byte { delete(r.Epochs, ModeSync); return encode(r) },
		"no differences":      func(r *Results) []byte { delete(r.Settings.DiffersFromDefaults, ModeGossip); return encode(r) },
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
	c := DefaultBenchConfig()
	c.Nodes, c.Target, c.Seeds, c.TuneSeed = 0, 1.5, 3, 2
	c.Modes = []string{"gossip", "async"}
	c.LRGrid = []float64{-1}
	c.Cap, c.SnapshotEvery = 0, 0
	c.Staleness = "poly"
	c.WireDType = "fp8"
	c.Epochs = 0
	c.Tune = []string{ModeSync, ModeLocal, "warp"}
	c.FixedLR = map[string]float64{ModeLocal: 0.1}
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"no binary", "nodes 0", "target 1.5", "tune seed 2", "async", "-1", "cap 0s", "snapshot", "poly",
		"fp8", "epochs 0", "tune sync", "local is both tuned and given a fixed", `unknown mode "warp"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
	if !errors.Is(err, ErrBench) {
		t.Errorf("%v does not wrap ErrBench", err)
	}
}

// writeSnap writes a snapshot file as node.Node does.
func writeSnap(t *testing.T, dir, peer string, seq int, at time.Time, model *train.Model, w []float32, samples int64, final bool) {
	t.Helper()
	meta := map[string]string{
		node.MetaModel: model.Spec(), node.MetaPeerID: peer, node.MetaSnapshotSeq: strconv.Itoa(seq),
		node.MetaTimeUnixNano: strconv.FormatInt(at.UnixNano(), 10), node.MetaSamples: strconv.FormatInt(samples, 10),
		node.MetaBusyNanos: strconv.FormatInt(int64(at.Sub(time.Unix(0, 0))/1000), 10), node.MetaNetWaitNanos: "0",
		node.MetaBytesSent: "0", node.MetaMerges: "0", node.MetaStep: strconv.FormatInt(samples/16, 10),
		node.MetaProgress: strconv.FormatInt(samples, 10), node.MetaFinal: strconv.FormatBool(final),
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
	model, test := consensusModel(t)
	// Two models: zeros (every class tied) and a trained one.
	zero := make([]float32, model.Size())
	trainSet, _, _ := train.LoadData(train.DatasetSynthetic, "", 3)
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
	writeSnap(t, dir, "peerB", 1, t0.Add(2*time.Second), model, trained, 300, true)
	writeSnap(t, dir, "peerA", 0, t0, model, zero, 0, false)
	writeSnap(t, dir, "peerB", 0, t0.Add(time.Second), model, zero, 100, false)
	writeSnap(t, dir, "peerA", 1, t0.Add(1500*time.Millisecond), model, trained, 200, true)
	traces, _, err := ScoreSnapshots(t.Context(), dir, map[string]int{"peerA": 0, "peerB": 1}, 2, test, t0, 2, 0)
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

	// A node that ended holds its final model: its accuracy at any later
	// time is its final snapshot's.
	if got := AccuracyAt(a, 60); got != wantTrained.Accuracy {
		t.Errorf("accuracy a minute after node A ended: %v, want its final snapshot's %v", got, wantTrained.Accuracy)
	}

	// A stranger's snapshot, or a node that left only one, is an error.
	if _, _, err := ScoreSnapshots(t.Context(), dir, map[string]int{"peerA": 0}, 2, test, t0, 1, 0); !errors.Is(err, ErrBench) {
		t.Errorf("unknown writer: %v", err)
	}
	// So is a node whose last snapshot is not the one it took as it
	// stopped: holding it would misstate the model it ended with.
	writeSnap(t, dir, "peerA", 2, t0.Add(1700*time.Millisecond), model, zero, 210, false)
	_, _, err = ScoreSnapshots(t.Context(), dir, map[string]int{"peerA": 0, "peerB": 1}, 2, test, t0, 1, 0)
	if !errors.Is(err, ErrBench) || !strings.Contains(err.Error(), "node 0's last snapshot") {
		t.Errorf("a node with no final snapshot: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "snap-peerA-000002.safetensors")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "snap-peerB-000001.safetensors")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ScoreSnapshots(t.Context(), dir, map[string]int{"peerA": 0, "peerB": 1}, 2, test, t0, 1, 0); !errors.Is(err, ErrBench) {
		t.Errorf("a node with one snapshot: %v", err)
	}
}

func TestParseSnapshotMetaNamesWhatIsMissing(t *testing.T) {
	_, err := parseSnapshotMeta(map[string]string{node.MetaSamples: "12", node.MetaBusyNanos: "x"})
	if err == nil || !strings.Contains(err.Error(), node.MetaBusyNanos) || !strings.Contains(err.Error(), node.MetaTimeUnixNano) {
		t.Errorf("got %v", err)
	}
}

// A snapshot's run clock and learning rate are read when it carries them
// and left at 0 when it does not (a node from before they were written);
// garbled, they are an error like any other counter.
func TestParseSnapshotMetaReadsTheClockWhenThere(t *testing.T) {
	meta := map[string]string{
		node.MetaSnapshotSeq: "0", node.MetaTimeUnixNano: "1", node.MetaSamples: "64", node.MetaBusyNanos: "2",
		node.MetaNetWaitNanos: "0", node.MetaBytesSent: "0", node.MetaMerges: "0", node.MetaStep: "1", node.MetaProgress: "64",
	}
	m, err := parseSnapshotMeta(meta)
	if err != nil || m.point.RunSamples != 0 || m.point.LR != 0 {
		t.Fatalf("without the keys: %+v, %v", m.point, err)
	}
	meta[node.MetaRunSamples], meta[node.MetaLR] = "250.5", "0.125"
	if m, err = parseSnapshotMeta(meta); err != nil || m.point.RunSamples != 250.5 || m.point.LR != 0.125 {
		t.Fatalf("with them: %+v, %v", m.point, err)
	}
	meta[node.MetaLR] = "fast"
	if _, err := parseSnapshotMeta(meta); err == nil || !strings.Contains(err.Error(), node.MetaLR) {
		t.Errorf("a garbled rate: %v", err)
	}
}

// ClockShare reads, at each instant, every node's clock at its first
// snapshot from then on against the swarm's samples at that snapshot's
// time, and keeps the lowest node's.
func TestClockShareIsTheLowestNodesCountOverTheSwarms(t *testing.T) {
	// Two nodes at 100 and 300 samples a second. Node 0 hears node 1 from
	// 1 s on; node 1 hears node 0 from the start.
	var a, b Trace
	for _, ts := range []float64{0, 0.5, 1, 1.5, 2} {
		sa, sb := 100*ts, 300*ts
		ca := sa
		if ts >= 1 {
			ca = sa + sb
		}
		a.Points = append(a.Points, Point{T: ts, Samples: int64(sa), RunSamples: ca})
		b.Points = append(b.Points, Point{T: ts + 0.1, Samples: int64(300 * (ts + 0.1)), RunSamples: 400 * (ts + 0.1)})
	}
	got := ClockShare([]Trace{a, b}, []float64{0.5, 1.2})
	// At 0.5 s: node 0 at 0.5 s counts 50 of 50 + 150 = 200 (0.25); node 1
	// at 0.6 s counts all. At 1.2 s: node 0 at 1.5 s counts all; node 1 at
	// 1.6 s too.
	if len(got) != 2 || math.Abs(got[0]-0.25) > 1e-9 || math.Abs(got[1]-1) > 1e-9 {
		t.Errorf("ClockShare = %v, want [0.25 1]", got)
	}
	// No snapshot that late, or none that carries a clock: nothing to say.
	if got := ClockShare([]Trace{a, b}, []float64{5}); got != nil {
		t.Errorf("past every snapshot: %v, want nil", got)
	}
	old := Trace{Points: []Point{{T: 0}, {T: 1, Samples: 100}}}
	if got := ClockShare([]Trace{old, b}, []float64{0.5}); got != nil {
		t.Errorf("snapshots without a clock: %v, want nil", got)
	}
}

// The report's run-clock line gives each gossip mode's median over seeds
// at every instant, and says nothing of modes without a clock share.
func TestReportGivesTheMedianClockShare(t *testing.T) {
	r := &Results{Settings: Settings{Nodes: 4, Modes: []string{ModeGossip, ModeSync}}}
	for _, s := range [][]float64{{0.3, 0.5, 0.9, 1}, {0.5, 0.7, 1, 1}, {0.4, 0.9, 0.95, 1}} {
		r.Runs = append(r.Runs, Run{Mode: ModeGossip, ClockShare: s})
	}
	r.Runs = append(r.Runs, Run{Mode: ModeGossip, Error: "failed", ClockShare: []float64{0, 0, 0, 0}}, Run{Mode: ModeSync})
	var b strings.Builder
	writeClockShare(&b, r)
	want := "1/4 a node counting only itself), median over seeds: gossip 0.40 at 0.25 s, 0.70 at 0.5 s, 0.95 at 1 s, 1.00 at 2 s."
	if !strings.Contains(b.String(), want) || strings.Contains(b.String(), "sync") {
		t.Errorf("report line %q, want it to end %q and not name sync", b.String(), want)
	}
}

func TestWriteAllWritesReportAndPlots(t *testing.T) {
	res := fakeBench(fakeResults())
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
		BarGossipOverIdeal, "failed: testnet: bench: node 1 exited", AccuracyPlot, "![consensus distance vs wall time](consensus.png)"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, name := range []string{AccuracyPlot, BusyPlot, TimePlot, ConsensusPlot} {
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

// gossipFlags are the training and gossip flags a node takes its defaults
// for (node.DefaultConfig): a default benchmark must pass none to gossip.
var gossipFlags = []string{"--avg-interval", "--alpha", "--staleness", "--wire-dtype", "--announce-interval", "--lr",
	"--schedule", "--epochs", "--mode", "--model", "--batch", "--dataset", "--momentum", "--weight-decay", "--ema", "--ema-peers",
	"--lr-scaling"}

func TestDefaultBenchRunsGossipWithTheNodeDefaults(t *testing.T) {
	c := DefaultBenchConfig()
	d := node.DefaultConfig()
	if c.LR != d.Train.LR || c.Epochs != d.Epochs || c.Schedule != d.Train.Schedule || c.AvgInterval != d.AvgInterval ||
		c.Alpha != d.Merger.Alpha || c.Staleness != d.Merger.Staleness.String() || c.WireDType != d.WireName() ||
		c.Model != d.Train.Model || c.Batch != d.Train.Batch || c.Dataset != d.Dataset {
		t.Errorf("bench defaults %+v are not the node's", c)
	}
	b := &bench{cfg: c, base: 1500 * time.Microsecond}
	args := b.nodeArgs(c.ending(false, ModeGossip, 1, c.LR), "bench-x-0", "/snaps", "/start")
	for _, f := range gossipFlags {
		if slices.Contains(args, f) {
			t.Errorf("a default gossip node gets %s: %q", f, args)
		}
	}
	// No --threads: a node runs on every core by default, and so do the
	// benchmark's.
	want := []string{"--no-data-dir", "--checkpoint-every", "0", "--no-eval", "--snapshot-dir", "/snaps", "--snapshot-every", "250ms",
		"--base-step", "1.5ms", "--log-level", "warn", "--network", "bench-x-0", "--seed", "1", "--start-file", "/start"}
	if !slices.Equal(args, want) {
		t.Errorf("default gossip node args\n%q, want the harness's only\n%q", args, want)
	}
	if got := c.ModeFlags(ModeGossip); got == nil || len(got) != 0 {
		t.Errorf("gossip differs from the node's defaults by %q, want an empty list", got)
	}
}

func TestModeFlagsListOnlyWhatDiffersFromANodesDefaults(t *testing.T) {
	c := DefaultBenchConfig()
	check := func(name string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	check("gossip-const", c.ModeFlags(ModeGossipConst), "--staleness const")
	check("local", c.ModeFlags(ModeLocal), "--mode local")
	check("sync's tuning run", c.differs(stopped(true, ModeSync, 1000, 0.2, 54.3)),
		"--mode sync", "--lr 0.2", "--schedule const", "--epochs 0")
	report := c.ending(false, ModeSync, 1, 0.4)
	report.epochs = 6.417
	check("sync's budgeted run", c.differs(report), "--mode sync", "--lr 0.4", "--epochs 6.417")
	// Values, not spellings: poly:0.50 is the default decay (auto the
	// default precision, cosine:warmup=0 the default schedule); the gossip
	// settings mean nothing to local and sync.
	c.Staleness, c.WireDType, c.AvgInterval, c.Alpha = "poly:0.50", "auto", 100*time.Millisecond, 0.3
	c.Schedule, c.NonIID, c.NodeArgs = "cosine:warmup=0", 0.5, []string{"--holdout", "500"}
	check("gossip with overrides", c.ModeFlags(ModeGossip), "--non-iid 0.5", "--avg-interval 100ms", "--alpha 0.3", "--holdout 500")
	check("local with overrides", c.ModeFlags(ModeLocal), "--mode local", "--non-iid 0.5", "--holdout 500")
	c = QuickBenchConfig()
	check("quick gossip", c.ModeFlags(ModeGossip), "--epochs 8")
	c.FixedLR = map[string]float64{ModeGossip: 2 * node.DefaultLR}
	check("fixed gossip rate", c.ModeFlags(ModeGossip), "--lr "+strconv.FormatFloat(2*node.DefaultLR, 'g', -1, 64), "--epochs 8")
	// The wire's precision is sync's and diloco's too (their updates), and
	// nothing to local, which sends no model.
	c = DefaultBenchConfig()
	c.WireDType = "fp32"
	check("sync at fp32", c.differs(report), "--mode sync", "--lr 0.4", "--epochs 6.417", "--wire-dtype fp32")
	check("diloco at fp32", c.ModeFlags(ModeDiloco), "--mode diloco", "--wire-dtype fp32")
	check("local at fp32", c.ModeFlags(ModeLocal), "--mode local")
	// fp16 throughout is not the default, which may switch to int8.
	c.WireDType = "fp16"
	check("gossip at fp16", c.ModeFlags(ModeGossip), "--wire-dtype fp16")
}

func TestEndProblemAcceptsOnlyAFinishedRun(t *testing.T) {
	done := &FinalEvent{Message: "run complete: 2400000 samples trained by the swarm (40 epochs)"}
	if p := endProblem(nil, done); p != "" {
		t.Errorf("a node that exited 0 after finishing its run: %q, want no problem", p)
	}
	for name, c := range map[string]struct {
		exit  error
		final *FinalEvent
		want  string
	}{
		"crashed":      {errors.New("exit status 1"), nil, "exit status 1"},
		"crashed late": {errors.New("exit status 2"), done, "exit status 2"},
		"no final":     {nil, nil, "without a final event"},
		"interrupted":  {nil, &FinalEvent{Message: "interrupted: progress is saved"}, "before its run ended"},
		"other stop":   {nil, &FinalEvent{Message: "stopped: --max-steps reached"}, "before its run ended"},
	} {
		if p := endProblem(c.exit, c.final); !strings.Contains(p, c.want) {
			t.Errorf("%s: %q, want it to say %q", name, p, c.want)
		}
	}
}

func TestAwaitRunWaitsForEveryNodeToFinish(t *testing.T) {
	at := time.Unix(100, 0)
	exits := make(chan nodeExit, 3)
	for i := range 3 {
		exits <- nodeExit{node: 2 - i, at: at.Add(time.Duration(i) * time.Second), finished: true}
	}
	stops := 0
	end, err := awaitRun(t.Context(), 3, exits, nil, func() { stops++ })
	if err != nil || end.deadline || stops != 0 {
		t.Fatalf("three finished nodes: %v, deadline %v, %d stops", err, end.deadline, stops)
	}
	if !slices.Equal(end.finished, []bool{true, true, true}) || !end.exitAt[0].Equal(at.Add(2*time.Second)) {
		t.Errorf("finished %v, exits %v", end.finished, end.exitAt)
	}
	if end.kind(false) != EndComplete || end.kind(true) != EndComplete {
		t.Errorf("every node finished: %s / %s, want %s", end.kind(false), end.kind(true), EndComplete)
	}
}

func TestAwaitRunStopsWhatStillRunsAtTheDeadline(t *testing.T) {
	// Node 0 finished; the deadline comes (in either order: select picks
	// at random among ready cases); stop makes the others exit, and they
	// say they were interrupted. None of that is an error.
	exits := make(chan nodeExit, 3)
	exits <- nodeExit{node: 0, finished: true}
	deadline := make(chan time.Time, 1)
	deadline <- time.Time{}
	stops := 0
	end, err := awaitRun(t.Context(), 3, exits, deadline, func() {
		stops++
		exits <- nodeExit{node: 1, problem: "stopped before its run ended"}
		exits <- nodeExit{node: 2, problem: "stopped before its run ended"}
	})
	if err != nil || !end.deadline || stops != 1 {
		t.Fatalf("%v, deadline %v, %d stops", err, end.deadline, stops)
	}
	if !slices.Equal(end.finished, []bool{true, false, false}) {
		t.Errorf("finished %v", end.finished)
	}
	if end.kind(false) != EndCap || end.kind(true) != EndStopped {
		t.Errorf("kinds %s / %s, want %s at the cap and %s at a planned stop", end.kind(false), end.kind(true), EndCap, EndStopped)
	}
}

func TestAwaitRunFailsOnANodeThatDiesEarly(t *testing.T) {
	exits := make(chan nodeExit, 2)
	exits <- nodeExit{node: 1, problem: "exited with exit status 1"}
	_, err := awaitRun(t.Context(), 2, exits, nil, func() { t.Error("stop called") })
	if !errors.Is(err, ErrBench) || !strings.Contains(err.Error(), "node 1 exited with exit status 1") {
		t.Errorf("got %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := awaitRun(ctx, 2, make(chan nodeExit), nil, func() {}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestAnalyzeRunHoldsAnEndedNodesFinalModel(t *testing.T) {
	// Node 1 ended its run at 4 s with its final model at 0.95 and 4000
	// samples; W is 10 s.
	r := fakeRun(ModeGossip, 1, []float64{2, 50}, 1000, 1, 10)
	r.Traces[1].Points = r.Traces[1].Points[:9]
	r.Traces[1].Points[8].Accuracy = 0.95
	analyzeRun(&r, 0.97, 10, []float64{1000, 1000})
	if r.FinalAccuracy[1] != 0.95 || r.NodeSamplesPerS[1] != 400 || r.FinalAccuracy[0] != 0.99 {
		t.Errorf("accuracy %v, samples/s %v: want node 1's final 0.95 and 4000 samples over 10 s", r.FinalAccuracy, r.NodeSamplesPerS)
	}
	if r.RunClockAtFixedWall != 10000+4000 || r.FixedWallS != 10 {
		t.Errorf("run clock at W %v, want 14000", r.RunClockAtFixedWall)
	}
}

// fakeSwarm stands in for (*bench).swarm: gossip-like runs end by
// themselves after wall(lr) seconds, runs with a stop time end there; sync
// trains 1000 samples/s per node and reaches the target sooner at 0.2.
type fakeSwarm struct {
	jobs []job
	wall func(mode string, lr float64) float64
}

func (f *fakeSwarm) swarm(b *bench, _ context.Context, j job) (Run, error) {
	f.jobs = append(f.jobs, j)
	run := b.newRun(j)
	wall, end := f.wall(j.mode, j.lr), EndComplete
	if j.stopAt > 0 {
		wall, end = j.stopAt.Seconds(), EndStopped
	}
	reach, rate := 3+10*j.lr, 6000.0
	if j.mode == ModeSync {
		reach, rate = 5+10*math.Abs(j.lr-0.2), 1000
	}
	for i := range b.cfg.Nodes {
		run.Traces = append(run.Traces, fakeTrace(i, reach, rate, 0.99, wall))
		run.NodeExitS, run.NodeFinished = append(run.NodeExitS, wall), append(run.NodeFinished, end == EndComplete)
	}
	run.End, run.WallS = end, wall
	fixed := j.fixedWall
	if fixed == 0 {
		fixed = wall
	}
	analyzeRun(&run, b.cfg.Target, fixed, b.solo)
	return run, nil
}

func fakeBenchConfig() BenchConfig {
	c := DefaultBenchConfig()
	c.Binary, c.Out, c.BaseStep, c.Nodes, c.Slowdowns, c.Seeds = "meshtrain", "unused", 2*time.Millisecond, 2, []float64{2, 4}, 1
	c.Dataset = train.DatasetSynthetic // 2000 training samples, loaded in no time
	return c
}

func TestRunBenchMeasuresWOnGossipAndBudgetsSyncToIt(t *testing.T) {
	f := &fakeSwarm{wall: func(string, float64) float64 { return 20 }}
	br, err := runBench(t.Context(), fakeBenchConfig(), f.swarm)
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Validate(); err != nil {
		t.Fatalf("results: %v", err)
	}
	res := br.Networks[0]
	d := node.DefaultConfig()
	first := f.jobs[0]
	if !first.tune || first.mode != ModeGossip || first.lr != d.Train.LR || first.epochs != d.Epochs || first.stopAt != 0 {
		t.Errorf("first run %+v, want gossip at the node's defaults on the tuning seed", first)
	}
	if res.Settings.FixedWallS != 20 {
		t.Errorf("W %v, want gossip's wall time 20 s", res.Settings.FixedWallS)
	}
	var syncTune []job
	for _, j := range f.jobs {
		if j.tune && j.mode == ModeSync {
			syncTune = append(syncTune, j)
			if j.epochs != 0 || j.schedule != "const" || j.stopAt != 20*time.Second || j.fixedWall != 20 {
				t.Errorf("sync tuning run %+v, want no end, a constant rate, stopped at W", j)
			}
		}
	}
	if want := 1 + 3 + len(AllModes); len(syncTune) != 3 || len(f.jobs) != want {
		t.Fatalf("%d sync tuning runs of %d, want 3 of %d", len(syncTune), len(f.jobs), want)
	}
	// The tuning run at 0.2 reached the target first; at W its group
	// progress was 3 x 1000 x 20 samples (fakeTrace), 30 passes over the
	// 2000 synthetic samples.
	if res.LR[ModeSync] != 0.2 || res.Epochs[ModeSync] != 30 || res.Schedule[ModeSync] != d.Train.Schedule {
		t.Errorf("sync lr %v, epochs %v, schedule %q; want 0.2, 30, %q", res.LR[ModeSync], res.Epochs[ModeSync],
			res.Schedule[ModeSync], d.Train.Schedule)
	}
	for _, r := range res.Runs {
		if r.FixedWallS != 20 {
			t.Errorf("%s: accuracy read at %v s, want W", r.Mode, r.FixedWallS)
		}
		if r.Mode == ModeSync && (r.Epochs != 30 || r.StopAtS != 0 || r.LR != 0.2) {
			t.Errorf("sync report run: %v epochs at %v, stop at %v s; want 30 epochs at 0.2, ending by itself", r.Epochs, r.LR, r.StopAtS)
		}
	}
	want := map[string][]string{
		ModeGossip:      {"--dataset synthetic"},
		ModeGossipConst: {"--dataset synthetic", "--staleness const"},
		ModeSync:        {"--mode sync", "--dataset synthetic", "--lr 0.2", "--epochs 30"},
		ModeDiloco:      {"--mode diloco", "--dataset synthetic"},
		ModeDilocoSpeed: {"--mode diloco", "--dataset synthetic", "--inner-steps-scaling speed"},
		ModeLocal:       {"--mode local", "--dataset synthetic"},
	}
	if !reflect.DeepEqual(res.Settings.DiffersFromDefaults, want) {
		t.Errorf("differs from defaults %q, want %q", res.Settings.DiffersFromDefaults, want)
	}
	if res.Settings.TrainSamples != 2000 {
		t.Errorf("training set %d", res.Settings.TrainSamples)
	}
}

func TestRunBenchTunesGossipAndTakesWAtTheChosenRate(t *testing.T) {
	c := fakeBenchConfig()
	c.Tune, c.Modes = []string{ModeGossip}, []string{ModeGossip, ModeSync}
	c.FixedLR = map[string]float64{ModeSync: 0.4}
	c.LRGrid = []float64{0.03, 0.1, 0.2} // the lowest (chosen) is not the node's default
	// Lower rates reach the target sooner here (3 + 10 lr s); each rate's
	// run takes a different time.
	f := &fakeSwarm{wall: func(_ string, lr float64) float64 { return 20 + 100*lr }}
	br, err := runBench(t.Context(), c, f.swarm)
	if err != nil {
		t.Fatal(err)
	}
	res := br.Networks[0]
	if res.LR[ModeGossip] != 0.03 || res.Settings.FixedWallS != 23 {
		t.Errorf("gossip lr %v, W %v; want 0.03 and its run's 23 s", res.LR[ModeGossip], res.Settings.FixedWallS)
	}
	// A fixed sync rate still gets one tuning run, for its clock at W.
	var lrs []float64
	for _, j := range f.jobs {
		if j.tune && j.mode == ModeSync {
			lrs = append(lrs, j.lr)
		}
	}
	if !slices.Equal(lrs, []float64{0.4}) || res.Epochs[ModeSync] != 3*1000*23/2000.0 {
		t.Errorf("sync tuned at %v, epochs %v; want one run at 0.4 and 34.5 epochs", lrs, res.Epochs[ModeSync])
	}
	if got := res.Settings.DiffersFromDefaults[ModeGossip]; !slices.Equal(got, []string{"--dataset synthetic", "--lr 0.03"}) {
		t.Errorf("tuned gossip differs by %q", got)
	}
}

func TestRunBenchQuickStopsSyncAtWWithoutTuning(t *testing.T) {
	c := QuickBenchConfig()
	q := fakeBenchConfig()
	c.Binary, c.Out, c.BaseStep, c.Nodes, c.Slowdowns, c.Dataset = q.Binary, q.Out, q.BaseStep, q.Nodes, q.Slowdowns, q.Dataset
	c.Modes = []string{ModeSync, ModeGossip, ModeLocal}
	f := &fakeSwarm{wall: func(string, float64) float64 { return 11 }}
	br, err := runBench(t.Context(), c, f.swarm)
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Validate(); err != nil {
		t.Fatalf("results: %v", err)
	}
	res := br.Networks[0]
	// Nothing is tuned: W comes from seed 1's gossip run, made first and
	// reported once.
	if len(res.Tuning) != 0 || len(f.jobs) != 3 || len(res.Runs) != 3 {
		t.Fatalf("%d tuning runs, %d runs done, %d reported; want 0, 3, 3", len(res.Tuning), len(f.jobs), len(res.Runs))
	}
	if j := f.jobs[0]; j.mode != ModeGossip || j.tune || j.seed != 1 || res.Settings.WSeed != 1 || res.Settings.FixedWallS != 11 {
		t.Errorf("first run %s seed %d (tune %v), W %v on seed %d; want gossip's seed-1 run, W = 11 s", j.mode, j.seed, j.tune,
			res.Settings.FixedWallS, res.Settings.WSeed)
	}
	if res.Runs[1].Mode != ModeGossip || res.Runs[1].FixedWallS != 11 {
		t.Errorf("runs in %s, %s, %s order; gossip read at %v s", res.Runs[0].Mode, res.Runs[1].Mode, res.Runs[2].Mode,
			res.Runs[1].FixedWallS)
	}
	sync := res.Runs[0]
	if sync.LR != 0.1 || sync.Epochs != 0 || sync.Schedule != "const" || sync.StopAtS != 11 || sync.End != EndStopped {
		t.Errorf("quick sync run: lr %v, epochs %v, %q, stop at %v s, %s; want lr 0.1, constant, no end, stopped at W = 11 s",
			sync.LR, sync.Epochs, sync.Schedule, sync.StopAtS, sync.End)
	}
	if got := res.Settings.DiffersFromDefaults[ModeGossip]; !slices.Equal(got, []string{"--dataset synthetic", "--epochs 8"}) {
		t.Errorf("quick gossip differs by %q", got)
	}
	var buf bytes.Buffer
	if err := WriteReport(&buf, br); err != nil || !strings.Contains(buf.String(), "the first report seed (nothing is tuned") {
		t.Errorf("the report does not say where W was measured (%v)", err)
	}
}

func TestReportSaysHowEachModeDiffersFromANodesDefaults(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteReport(&buf, fakeBench(fakeResults())); err != nil {
		t.Fatal(err)
	}
	report := buf.String()
	for _, want := range []string{
		"**gossip** runs with a node's defaults (no training or gossip flag beyond the harness's): every node starts a merge with one random peer every 50 ms at most",
		"**W = 10.00 s**",
		"| gossip | none |",
		"| gossip-const | `--staleness const` |",
		"| sync | `--mode sync --lr 0.2 --epochs 2.5` |",
		"| local | `--mode local` |",
		"budgeted to W", "`--epochs 2.5`",
		"| `--no-data-dir` |", "| `--no-eval` |", "| `--base-step D` |", "| `--start-file F` |",
		"| `--network bench-ID-N` |", "| `--checkpoint-every 0` |", "| `--log-level warn` |", "| `--seed N` |",
		"| `--shard i/n` |", "| `--slowdown F` |",
		"accuracy at W (10.00 s)",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	var sum bytes.Buffer
	WriteSummary(&sum, fakeBench(fakeResults()))
	if !strings.Contains(sum.String(), "on loopback: W (gossip's wall time on seed 1000) = 10.00 s") || !strings.Contains(sum.String(), "none") {
		t.Errorf("summary:\n%s", sum.String())
	}
}

// fakeWANResults is fakeResults on an emulated WAN: every run carries
// its link's figures.
func fakeWANResults(t *testing.T) *Results {
	t.Helper()
	n, err := ParseNet("wan:40ms,100mbit,0.5%")
	if err != nil {
		t.Fatal(err)
	}
	res := fakeResults()
	res.Network, res.Settings.Harness = networkInfo(n), HarnessFlags(DefaultBenchConfig(), n)
	for _, runs := range [][]Run{res.Runs, res.Tuning} {
		for i := range runs {
			if runs[i].Error != "" {
				continue
			}
			runs[i].Link = runLink(WANStats{Endpoints: []WANEndpointStats{
				{LinkCounters: LinkCounters{SentBytes: 60000, Lost: 2}}, {LinkCounters: LinkCounters{SentBytes: 60000, UplinkDrops: 1}},
			}, LateMeanS: 0.0003, LateMaxS: 0.004}, 2)
			runs[i].BenchCores = 0.25
			runCosts(&runs[i])
		}
	}
	summarize(res)
	return res
}

func TestEveryNetworkSideBySide(t *testing.T) {
	br := fakeBench(fakeResults(), fakeWANResults(t))
	dir := t.TempDir()
	if err := WriteAll(dir, br); err != nil {
		t.Fatal(err)
	}
	back, err := ReadResultsFile(filepath.Join(dir, ResultsFile))
	if err != nil || !reflect.DeepEqual(back, br) {
		t.Fatalf("results.json round trip: %v", err)
	}
	wan := back.Networks[1]
	if wan.Network.RTTS != 0.04 || wan.Network.RateBits != 1e8 || wan.Network.Loss != 0.005 || wan.Network.QueueBytes != 500_000 ||
		!strings.Contains(wan.Network.Emulation, "--announce") {
		t.Errorf("WAN network %+v", wan.Network)
	}
	// 120,000 wire bytes over gossip's 2 x 6000 x 10 samples.
	if w := wan.Summary[ModeGossip].WireBytesSentPerSample; w == nil || !near(*w, 1) {
		t.Errorf("gossip's wire bytes per sample %v, want 1", w)
	}
	report, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Networks", "- **loopback**: the nodes talk over 127.0.0.1 directly",
		"- **wan:40ms,100mbit,0.5%**: emulated WAN in user space", "RTT 40ms", "random loss of 0.5% per packet",
		"## Every mode on every network",
		"| loopback | gossip | 2.25 s | 1.50 s |", "| wan:40ms,100mbit,0.5% | gossip | 2.25 s | 1.50 s |",
		"| loopback | local | not reached (0 of 2 reached) |",
		"## On loopback", "## On wan:40ms,100mbit,0.5%", "### Method", "#### Settings that differ",
		"on an emulated WAN, wan:40ms,100mbit,0.5%", "| `--listen /ip4/127.0.0.1/udp/PORT/quic-v1 --announce",
		"On the emulated WAN: wire bytes sent per sample", "10 packets dropped at full queues, 20 lost at random, 0 senders that were no node",
		"the benchmark process, its relay mostly, took 0.25 of the machine's cores on average",
		"Co-run ideal", "(wan-40ms-100mbit-0.5pct-accuracy.png)", "(loopback-accuracy.png)",
	} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Count(string(report), "--listen /ip4/127.0.0.1/udp/PORT") != 1 {
		t.Error("the WAN's harness flags are not the WAN's alone")
	}
	for _, slug := range []string{"loopback", "wan-40ms-100mbit-0.5pct"} {
		for _, name := range []string{AccuracyPlot, BusyPlot, TimePlot, ConsensusPlot} {
			if st, err := os.Stat(filepath.Join(dir, slug+"-"+name)); err != nil || st.Size() == 0 {
				t.Errorf("%s-%s: %v", slug, name, err)
			}
		}
	}
	var sum bytes.Buffer
	WriteSummary(&sum, br)
	if !strings.Contains(sum.String(), "on loopback: W") || !strings.Contains(sum.String(), "on wan:40ms,100mbit,0.5%: W") {
		t.Errorf("summary:\n%s", sum.String())
	}
	twice := fakeBench(fakeResults(), fakeResults())
	if err := twice.Validate(); err == nil || !strings.Contains(err.Error(), "network loopback twice") {
		t.Errorf("the same network twice: %v", err)
	}
}

// TestReadResultsTakesSchema2 reads results.json as it was before
// networks: a loopback benchmark whose bytes per sample are computed from
// its traces.
func TestReadResultsTakesSchema2(t *testing.T) {
	res := fakeResults()
	b, err := json.Marshal(resultsV2{Schema: resultsSchema2, Command: "meshtrain bench --old", Machine: Machine{NumCPU: 2}, Results: *res})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "network")
	for _, key := range []string{"runs", "tuning"} {
		for _, r := range m[key].([]any) {
			run := r.(map[string]any)
			for _, f := range []string{"bytes_sent_per_sample", "cluster_bytes_sent_per_sample", "co_run_ideal_time_to_target_s"} {
				delete(run, f)
			}
		}
	}
	for _, s := range m["summary"].(map[string]any) {
		for _, f := range []string{"bytes_sent_per_sample", "bytes_sent_per_sample_per_node", "co_run_ideal_time_to_target_s"} {
			delete(s.(map[string]any), f)
		}
	}
	old, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(old), "per_sample") || strings.Contains(string(old), `"network"`) {
		t.Fatal("the old layout still has new fields")
	}
	br, err := ReadResults(bytes.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	if br.Schema != ResultsSchema || br.Command != "meshtrain bench --old" || len(br.Networks) != 1 {
		t.Fatalf("read %+v", br)
	}
	got := br.Networks[0]
	if got.Network.Name != NetLoopback || !reflect.DeepEqual(got.Runs, res.Runs) || !reflect.DeepEqual(got.Summary, res.Summary) {
		t.Errorf("the /2 results did not read back as they were computed: network %q", got.Network.Name)
	}
}

func TestEveryModeHasItsOwnColour(t *testing.T) {
	seen := map[color.Color]string{}
	for _, m := range append(slices.Clone(AllModes), "mode-x", "mode-y") {
		c := modeColor(m)
		if c == nil {
			t.Fatalf("%s: no colour", m)
		}
		if other, dup := seen[c]; dup && slices.Contains(AllModes, m) {
			t.Errorf("%s and %s share a colour", m, other)
		}
		seen[c] = m
	}
}
