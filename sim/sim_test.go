package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/merge"
	"github.com/meshtrain/meshtrain/train"
)

// mnist loads the embedded MNIST once for every test of the package.
var mnist = sync.OnceValues(func() ([2]*train.Dataset, error) {
	tr, te, err := train.LoadData(train.DatasetMNIST, "", 1)
	return [2]*train.Dataset{tr, te}, err
})

// simulate runs cfg to its end and returns the simulation, for tests that
// look at the nodes too.
func simulate(t *testing.T, cfg Config) *simulation {
	t.Helper()
	d, err := mnist()
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSimulation(cfg, d[0], d[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// small is 8 nodes without churn for 30 virtual seconds: well under a
// second of real time.
func small() Config {
	c := DefaultConfig()
	c.Nodes = 8
	c.Duration = 30 * time.Second
	c.Epochs = 1
	c.StepMedian = 500 * time.Millisecond
	c.Churn = Churn{Lifetime: LifetimeNone}
	c.ReportEvery = 5 * time.Second
	c.EvalNodes = 2
	c.EvalSamples = 1000
	c.Threads = 1
	return c
}

func TestSimSanityNoChurn(t *testing.T) {
	res := simulate(t, small()).res
	pts := res.Points
	if len(pts) != 7 || pts[0].T != 0 || pts[len(pts)-1].T != 30 {
		t.Fatalf("points at %v, want every 5 s from 0 to 30", times(pts))
	}
	if pts[0].ConsensusDistance != 0 {
		t.Errorf("distance at the start %v, want 0 (one initial model)", pts[0].ConsensusDistance)
	}
	peak := 0.0
	for _, p := range pts[1:3] {
		peak = max(peak, p.ConsensusDistance)
	}
	last := pts[len(pts)-1]
	if !(peak > 0 && last.ConsensusDistance < peak/2) {
		t.Errorf("consensus distance %v early, %v at the end: want it to fall by half", peak, last.ConsensusDistance)
	}
	if last.AverageAccuracy < 0.85 {
		t.Errorf("average model at %.3f after %v, want >= 0.85", last.AverageAccuracy, last.T)
	}
	if last.NodesScored != 2 || last.NodeAccuracyMin < 0.8 {
		t.Errorf("scored %d nodes, worst %.3f; want 2 above 0.8", last.NodesScored, last.NodeAccuracyMin)
	}
	if res.Merges == 0 || res.Failed != 0 || res.LostSamples != 0 || res.Leaves != 0 || last.Live != 8 {
		t.Errorf("merges %d failed %d lost %d leaves %d live %d: want merges and no churn", res.Merges, res.Failed,
			res.LostSamples, res.Leaves, last.Live)
	}
	// Each exchange sends a model both ways: at one exchange per step a
	// node sends about two models a step.
	perNode := last.BytesPerNodeS
	want := 2 * float64(res.ModelBytes) / 0.5
	if !(perNode > want/3 && perNode < 2*want) {
		t.Errorf("bytes per node per second %v, want about %v", perNode, want)
	}
}

// TestSimScoresEachNode: with EvalNodes covering the population every
// point lists every node's own accuracy in id order, which NodeAccuracy*
// summarise, and TimesToTarget reads each node's first point at target.
func TestSimScoresEachNode(t *testing.T) {
	c := small()
	c.Nodes, c.EvalNodes, c.Duration, c.ReportEvery = 4, 4, 10*time.Second, time.Second
	c.Slowdowns = []float64{1, 2, 4, 8}
	res := simulate(t, c).res
	for _, p := range res.Points {
		if len(p.Scored) != 4 {
			t.Fatalf("t=%v: %d nodes scored, want all 4", p.T, len(p.Scored))
		}
		lo, hi, sum := 1.0, 0.0, 0.0
		for i, s := range p.Scored {
			if s.Node != i {
				t.Fatalf("t=%v: scored %+v, want nodes 0 to 3 in order", p.T, p.Scored)
			}
			lo, hi, sum = min(lo, s.Accuracy), max(hi, s.Accuracy), sum+s.Accuracy
		}
		if lo != p.NodeAccuracyMin || hi != p.NodeAccuracyMax || math.Abs(sum/4-p.NodeAccuracyMean) > 1e-12 {
			t.Fatalf("t=%v: scored %+v, but min %v max %v mean %v", p.T, p.Scored, p.NodeAccuracyMin, p.NodeAccuracyMax,
				p.NodeAccuracyMean)
		}
	}
	// The target is crossed between the first and the last point.
	target := (res.Points[0].NodeAccuracyMax + res.Final().NodeAccuracyMin) / 2
	got := res.TimesToTarget(target)
	if len(got) != 4 {
		t.Fatalf("times to %.3f: %v, want one per node", target, got)
	}
	for id, at := range got {
		for _, p := range res.Points {
			acc := p.Scored[id].Accuracy
			if p.T < at && acc >= target || p.T == at && acc < target {
				t.Errorf("node %d at %.3f by t=%v, but its time to %.3f is %v", id, acc, p.T, target, at)
			}
		}
	}
	if got := res.TimesToTarget(1.01); len(got) != 0 {
		t.Errorf("times to an accuracy above 1: %v, want none", got)
	}
	// A node scored at some points only (EvalNodes below the population)
	// is read at those.
	r := Result{Points: []Point{
		{T: 0, Scored: []NodeScore{{0, 0.1}, {1, 0.1}}},
		{T: 1, Scored: []NodeScore{{1, 0.95}}},
		{T: 2, Scored: []NodeScore{{0, 0.91}, {1, 0.5}}},
	}}
	if got, want := r.TimesToTarget(0.9), map[int]float64{0: 2, 1: 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("times to 0.9: %v, want %v", got, want)
	}
}

// TestSimPaceBeforeFirstStep: a node's pace does not know its step time
// until its first step has ended (a node measures it), so during its first
// step it starts an exchange every avg-interval, and one per step after.
func TestSimPaceBeforeFirstStep(t *testing.T) {
	c := small()
	c.Nodes, c.Duration, c.ReportEvery, c.EvalNodes = 2, 5*time.Second, time.Second, 0
	c.StepMedian, c.StepSpread = time.Second, 0
	c.Latency, c.Bandwidth = time.Millisecond, 1e9
	pts := simulate(t, c).res.Points
	if len(pts) != 6 {
		t.Fatalf("points at %v, want every second from 0 to 5", times(pts))
	}
	// The first second: rounds 12.5 ms x [0.8, 1.2) apart plus the
	// exchange's 2 ms, about 70 per node.
	if first := pts[1].Exchanges; first < 2*50 || first > 2*90 {
		t.Errorf("%d exchanges in the first step, want about 70 per node (every avg-interval)", first)
	}
	// Then one per step: rounds 1 s x [0.8, 1.2) apart.
	if later := pts[5].Exchanges - pts[1].Exchanges; later < 2*3 || later > 2*6 {
		t.Errorf("%d exchanges in the next 4 s, want about 4 per node (one per step)", later)
	}
}

func times(pts []Point) []float64 {
	t := make([]float64, len(pts))
	for i, p := range pts {
		t[i] = p.T
	}
	return t
}

// churny has every kind of session: early leavers, returners, newcomers,
// peer sampling.
func churny(seed uint64) Config {
	c := small()
	c.Nodes = 16
	c.Seed = seed
	c.Peers = 4
	c.StepSpread = 0.5
	c.Churn = Churn{Lifetime: LifetimeWeibull, Shape: 0.6, Scale: 8, NeverReturn: 0.3}
	c.CatchUp = 2000
	return c
}

func TestSimDeterministic(t *testing.T) {
	a := simulate(t, churny(7)).res
	b := simulate(t, churny(7)).res
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
	if a.Leaves == 0 || a.Returns == 0 || a.Newcomers == 0 || a.Gone == 0 || a.CatchUps == 0 {
		t.Errorf("leaves %d returns %d newcomers %d gone %d catch-ups %d: the run should exercise every kind of churn",
			a.Leaves, a.Returns, a.Newcomers, a.Gone, a.CatchUps)
	}
	c := simulate(t, churny(8)).res
	if reflect.DeepEqual(a.Final(), c.Final()) {
		t.Errorf("seeds 7 and 8 ended alike: %+v", c.Final())
	}
}

// TestSimScalesTheRateByTheMerges: with LRScalingMerges a node that
// merges every step or two (steps of 0.5 s, merges paced by them) runs at
// twice the configured rate, one that starts a merge every 200 steps at
// the configured rate, and with LRScalingNone every node
// does.
func TestSimScalesTheRateByTheMerges(t *testing.T) {
	for _, c := range []struct {
		name     string
		scaling  string
		interval time.Duration
		want     float64
	}{
		{"merges every step or two", LRScalingMerges, 0, merge.LRScaleMax},
		{"merges every 200 steps", LRScalingMerges, 100 * time.Second, 1},
		{"scaling off", LRScalingNone, 0, 1},
	} {
		cfg := small()
		cfg.Nodes, cfg.Duration, cfg.StepSpread, cfg.Latency = 4, 300*time.Second, 0, 0
		cfg.LRScaling = c.scaling
		if c.interval > 0 {
			cfg.AvgInterval = c.interval
		}
		s := simulate(t, cfg)
		for _, n := range s.nodes {
			if n.merges == 0 {
				t.Errorf("%s: node %d never merged", c.name, n.id)
			}
			if got := s.lrScale(n); got != c.want {
				t.Errorf("%s: node %d (%d steps, %d merges) scales its rate by %v, want %v",
					c.name, n.id, n.steps, n.merges, got, c.want)
			}
		}
	}
}

// alone is a trace config for nodes that train on their own: one shard of
// every sample, steps of 0.5 s.
func traceConfig(d time.Duration, sessions ...Session) Config {
	c := small()
	c.Duration = d
	c.Shards = 1
	c.StepSpread = 0
	c.Trace = sessions
	c.Latency = 0
	return c
}

func TestSimChurnAccounting(t *testing.T) {
	const s = time.Second
	t.Run("never merged, never returns", func(t *testing.T) {
		// x trains alone for 10 s (steps at 0, 0.5, ..., 9.5 s) and leaves
		// for good before anyone else arrives: all of it is lost.
		sim := simulate(t, traceConfig(30*s, Session{"x", 0, 10 * s}, Session{"y", 20 * s, Open}))
		x, r := sim.nodes[0], sim.res
		if x.samples != 20*64 || r.LostSamples != x.samples || r.Gone != 1 || r.Leaves != 1 {
			t.Errorf("x trained %d, lost %d, gone %d, leaves %d; want 1280 lost by 1 node", x.samples, r.LostSamples, r.Gone, r.Leaves)
		}
		if got := r.Final().LostSamples; got != r.LostSamples {
			t.Errorf("last point's lost samples %d, want %d", got, r.LostSamples)
		}
	})
	t.Run("merged, never returns", func(t *testing.T) {
		// x exchanges with y every step: what it loses is what it trained
		// since its last snapshot y merged, at most a few steps.
		sim := simulate(t, traceConfig(30*s, Session{"x", 0, 10 * s}, Session{"y", 0, Open}))
		x, r := sim.nodes[0], sim.res
		if r.Gone != 1 || x.shared == 0 || r.LostSamples != x.samples-x.shared || r.LostSamples > 3*64 {
			t.Errorf("x trained %d, shared %d, lost %d: want a few steps at most lost", x.samples, x.shared, r.LostSamples)
		}
	})
	t.Run("returns with its progress", func(t *testing.T) {
		// r leaves at 10 s and comes back at 20 s with its checkpoint:
		// 20 steps per session, progress continuing from the first.
		sim := simulate(t, traceConfig(30*s, Session{"r", 0, 10 * s}, Session{"r", 20 * s, Open}))
		n, res := sim.nodes[0], sim.res
		if res.Returns != 1 || res.Gone != 0 || res.LostSamples != 0 {
			t.Errorf("returns %d gone %d lost %d, want 1 return and nothing lost", res.Returns, res.Gone, res.LostSamples)
		}
		if n.samples != 40*64 || float64(n.progress) != 40*64 || n.steps != 40 {
			t.Errorf("r trained %d samples in %d steps, progress %v; want 2560 in 40 and progress 2560 (resumed)", n.samples,
				n.steps, float64(n.progress))
		}
	})
	t.Run("offline at the end", func(t *testing.T) {
		// r is away at the end but will return: held offline, not lost.
		sim := simulate(t, traceConfig(30*s, Session{"r", 0, 10 * s}, Session{"r", 50 * s, Open}))
		res := sim.res
		if res.LostSamples != 0 || res.OfflineSamples != 20*64 || res.Final().Live != 0 {
			t.Errorf("lost %d offline %d live %d, want 0, 1280, 0", res.LostSamples, res.OfflineSamples, res.Final().Live)
		}
	})
}

func TestSimConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	tests := []struct {
		name string
		edit func(*Config)
		want []string // every one must appear in the error
	}{
		{"nodes", func(c *Config) { c.Nodes = 0 }, []string{"nodes 0"}},
		{"duration", func(c *Config) { c.Duration = 0 }, []string{"duration 0s"}},
		{"dataset", func(c *Config) { c.Dataset = "cifar" }, []string{`dataset "cifar"`}},
		{"model", func(c *Config) { c.Model = "mlp:" }, []string{`model "mlp:"`}},
		{"batch", func(c *Config) { c.Batch = 0 }, []string{"batch 0"}},
		{"lr", func(c *Config) { c.LR = -1 }, []string{"learning rate -1"}},
		{"schedule", func(c *Config) { c.Schedule = "linear" }, []string{`schedule "linear"`}},
		{"schedule without a run", func(c *Config) { c.Epochs = 0 }, []string{"with epochs 0"}},
		{"momentum", func(c *Config) { c.Momentum = 1 }, []string{"momentum 1"}},
		{"ema", func(c *Config) { c.EMA = 1 }, []string{"ema 1"}},
		{"ema-peers", func(c *Config) { c.EMAPeers = 1.5 }, []string{"ema-peers 1.5"}},
		{"shards", func(c *Config) { c.Shards = -1 }, []string{"shards -1"}},
		{"step", func(c *Config) { c.StepMedian = 0 }, []string{"step time 0s"}},
		{"spread", func(c *Config) { c.StepSpread = 6 }, []string{"step spread 6"}},
		{"slowdowns", func(c *Config) { c.Slowdowns = []float64{2, 0} }, []string{"slowdown 2 (0)"}},
		{"interval", func(c *Config) { c.AvgInterval = 0 }, []string{"avg-interval 0s"}},
		{"lr scaling", func(c *Config) { c.LRScaling = "speed" }, []string{`lr-scaling "speed"`}},
		{"peers", func(c *Config) { c.Peers = -1 }, []string{"peers -1"}},
		{"merger", func(c *Config) { c.Merger.Alpha = 2 }, []string{"merge rule"}},
		{"catch-up", func(c *Config) { c.CatchUp = -1 }, []string{"catch-up -1"}},
		{"latency", func(c *Config) { c.Latency = -1 }, []string{"latency -1ns"}},
		{"bandwidth", func(c *Config) { c.Bandwidth = 0 }, []string{"bandwidth 0"}},
		{"wire", func(c *Config) { c.WireBytes = 3 }, []string{"wire bytes 3"}},
		{"lifetime", func(c *Config) { c.Churn.Lifetime = "exp" }, []string{`lifetime "exp"`}},
		{"weibull", func(c *Config) { c.Churn.Shape, c.Churn.Scale = 0, 0 }, []string{"weibull shape 0", "lifetime scale 0"}},
		{"pareto", func(c *Config) { c.Churn.Lifetime, c.Churn.Shape = LifetimePareto, 1 }, []string{"pareto shape 1"}},
		{"never return", func(c *Config) { c.Churn.NeverReturn = 1.5 }, []string{"never-return share 1.5"}},
		{"trace", func(c *Config) { c.Trace = []Session{} }, []string{"trace", "no sessions"}},
		{"report", func(c *Config) { c.ReportEvery = 0 }, []string{"report interval 0s"}},
		{"eval", func(c *Config) { c.EvalNodes, c.EvalSamples = -1, 0 }, []string{"eval nodes -1", "eval samples 0"}},
		{"threads", func(c *Config) { c.Threads = 0 }, []string{"threads 0"}},
		{"every bad field at once", func(c *Config) { c.Nodes, c.Batch, c.Bandwidth, c.Threads = 0, 0, -1, 0 },
			[]string{"nodes 0", "batch 0", "bandwidth -1", "threads 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("Validate() = %v, want ErrBadConfig", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestSimReadTrace(t *testing.T) {
	good := "node_id,join_s,leave_s\n# a comment\na,0,10.5\nb, 2 ,\na,20,inf\n\n"
	got, err := ReadTrace(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	want := []Session{{"a", 0, 10500 * time.Millisecond}, {"b", 2 * time.Second, Open}, {"a", 20 * time.Second, Open}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadTrace = %v, want %v", got, want)
	}
	bad := []struct {
		name, in string
		want     []string
	}{
		{"fields", "a,0\n", []string{"line 1", "2 fields"}},
		{"join", "node_id,join_s,leave_s\na,x,10\n", []string{"line 2", `join_s "x"`}},
		{"negative", "a,-1,10\n", []string{"line 1", `join_s "-1"`}},
		{"leave", "a,0,10\nb,5,zz\n", []string{"line 2", `leave_s "zz"`}},
		{"order", "a,0,10\n\nb,5,3\n", []string{"line 3", "not after"}},
		{"empty id", ",0,10\n", []string{"line 1", "empty node_id"}},
		{"every bad line", "a,0\nb,1,2\nc,q,1\n", []string{"line 1", "line 3"}},
		{"overlap", "a,0,10\na,5,20\n", []string{`node "a"`, "overlaps"}},
		{"nothing", "node_id,join_s,leave_s\n", []string{"no sessions"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tt.in))
			if !errors.Is(err, ErrBadTrace) {
				t.Fatalf("ReadTrace = %v, want ErrBadTrace", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ReadTrace = %v, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestSimParseChurn(t *testing.T) {
	for _, s := range []string{"none", "weibull:0.6,600s", "pareto:1.5,30s"} {
		var c Churn
		if err := ParseChurn(s, &c); err != nil {
			t.Errorf("ParseChurn(%q): %v", s, err)
			continue
		}
		if got := ChurnString(c); got != s {
			t.Errorf("ChurnString(ParseChurn(%q)) = %q", s, got)
		}
	}
	var c Churn
	if err := ParseChurn("weibull:0.6,10m", &c); err != nil || c.Scale != 600 {
		t.Errorf("weibull:0.6,10m gave scale %v, %v; want 600 s", c.Scale, err)
	}
	for _, s := range []string{"", "exp:1,2", "weibull:1", "weibull:a,1s", "pareto:2,soon"} {
		if err := ParseChurn(s, &c); err == nil {
			t.Errorf("ParseChurn(%q) accepted", s)
		}
	}
}

// TestSimResidualSessions checks the starting population's sessions
// against the renewal-theory mean of a session in progress seen at a
// random moment, E[L^2] / (2 E[L]), with a fixed seed (so it cannot flake).
func TestSimResidualSessions(t *testing.T) {
	tests := []struct {
		churn Churn
		want  float64 // mean residual, s
	}{
		// Weibull(k, l): E[L^2]/(2E[L]) = l Gamma(1+2/k) / (2 Gamma(1+1/k)).
		{Churn{Lifetime: LifetimeWeibull, Shape: 0.6, Scale: 600}, 600 * math.Gamma(1+2/0.6) / (2 * math.Gamma(1+1/0.6))},
		{Churn{Lifetime: LifetimeWeibull, Shape: 2, Scale: 100}, 100 * math.Gamma(2) / (2 * math.Gamma(1.5))},
		// Pareto(3, x): E[L] = 1.5x, E[L^2] = 3x^2.
		{Churn{Lifetime: LifetimePareto, Shape: 3, Scale: 50}, 50},
	}
	for _, tt := range tests {
		s := &simulation{cfg: Config{Churn: tt.churn}, rng: rand.New(rand.NewPCG(1, 2))}
		const n = 200000
		var sum float64
		for range n {
			sum += s.residual().Seconds()
		}
		if got := sum / n; math.Abs(got-tt.want) > 0.03*tt.want {
			t.Errorf("%s: mean residual session %.1f s, want %.1f s", ChurnString(tt.churn), got, tt.want)
		}
	}
}

func TestSimDefaultShardsHoldABatch(t *testing.T) {
	d, err := mnist()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ nodes, shards, want int }{
		{8, 0, 8}, {1000, 0, 937}, {1000, 1, 1}, {1000, 1000, 1000},
	} {
		c := DefaultConfig()
		c.Nodes, c.Shards = tt.nodes, tt.shards
		s, err := newSimulation(c, d[0], d[1], nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.res.Shards != tt.want || len(s.shards) != tt.want {
			t.Errorf("%d nodes, shards %d: cut into %d, want %d", tt.nodes, tt.shards, s.res.Shards, tt.want)
		}
		if tt.shards == 0 && len(s.shards[len(s.shards)-1]) < c.Batch {
			t.Errorf("%d nodes: a shard of %d samples, want at least a batch", tt.nodes, len(s.shards[len(s.shards)-1]))
		}
	}
}

// TestSimWriteDegenerateRuns: a run that ends at once, or whose models
// always agree, still gets its plots (a log axis cannot show 0, nor pad a
// single value by ±1).
func TestSimWriteDegenerateRuns(t *testing.T) {
	for name, pts := range map[string][]Point{
		"zero distance": {{T: 0}, {T: 10, Live: 2}},
		"one positive":  {{T: 0}, {T: 2, ConsensusDistance: 0.006, NodesScored: 1}},
	} {
		dir := t.TempDir()
		if err := Write(dir, small(), &Result{Points: pts}, time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, f := range []string{ResultsFile, ReportFile, "accuracy.png", "consensus.png", "churn.png", "lost.png", "traffic.png"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

// TestSimByteDataMatchesFloat: the simulation reads MNIST as bytes and
// scales the rows it gathers; a run on the bytes and one on floats scaled
// ahead (float32(b) / 255, as MNIST was once loaded) end bit for bit alike.
func TestSimByteDataMatchesFloat(t *testing.T) {
	d, err := mnist()
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, 6000)
	for i := range idx {
		idx[i] = i
	}
	trainSet, err := d[0].Subset(idx)
	if err != nil {
		t.Fatal(err)
	}
	twin := func(b *train.Dataset) *train.Dataset {
		if b.X != nil {
			t.Fatalf("%s is not a byte dataset", b.Name)
		}
		x := make([]float32, len(b.Pix))
		for i, p := range b.Pix {
			x[i] = float32(p) / 255
		}
		f, err := train.NewDataset(b.Name, x, b.Y, b.Dim, b.Classes)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	c := small()
	c.Duration = 10 * time.Second
	got, err := RunOn(t.Context(), c, trainSet, d[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := RunOn(t.Context(), c, twin(trainSet), twin(d[1]), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Steps == 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("bytes and floats gave different runs:\n%+v\n%+v", got.Final(), want.Final())
	}
}

// The node's slow momentum, in the simulator: it changes the run, the
// swarm still settles (the momentum fades with the schedule) and learns.
func TestSimSlowMomentum(t *testing.T) {
	c := small()
	c.OuterEvery = 20
	on := simulate(t, c).res.Points
	off := simulate(t, small()).res.Points
	last := on[len(on)-1]
	peak := 0.0
	for _, p := range on[1 : len(on)-1] {
		peak = max(peak, p.ConsensusDistance)
	}
	if !(last.ConsensusDistance < peak/2) {
		t.Errorf("consensus distance %v at the end, %v at its peak: want it to fall by half", last.ConsensusDistance, peak)
	}
	if last.AverageAccuracy < 0.85 {
		t.Errorf("average model at %.3f, want >= 0.85", last.AverageAccuracy)
	}
	same := true
	for i := range on {
		same = same && on[i].ConsensusDistance == off[i].ConsensusDistance
	}
	if same {
		t.Error("slow momentum every 20 steps left every point's consensus distance as it is without it")
	}
}

// TestSimScoresTheReportedAverage: a node is scored on the moving average
// of its weights (Config.EMA), as a real node reports it, and the average
// changes nothing else: the same seed with and without it trains the same
// models (the same consensus distance, average model and merges).
func TestSimScoresTheReportedAverage(t *testing.T) {
	c := small()
	c.Nodes, c.EvalNodes, c.Duration, c.ReportEvery = 4, 4, 10*time.Second, time.Second
	with := simulate(t, c).res
	c.EMA = 0
	sameModelsOtherScores(t, "the average", with, simulate(t, c).res)
}

// TestSimAverageTakesInMergedModels: the reported average also takes in
// the peers' models a node merges (Config.EMAPeers), as a real node's
// does, and that too changes only what is scored.
func TestSimAverageTakesInMergedModels(t *testing.T) {
	c := small()
	c.Nodes, c.EvalNodes, c.Duration, c.ReportEvery = 4, 4, 10*time.Second, time.Second
	if c.EMA == 0 || c.EMAPeers == 0 {
		t.Fatalf("the defaults keep no average of the peers' models: ema %v, ema-peers %v", c.EMA, c.EMAPeers)
	}
	with := simulate(t, c).res
	c.EMAPeers = 0
	sameModelsOtherScores(t, "the peers' models in the average", with, simulate(t, c).res)
}

// sameModelsOtherScores fails unless runs a and b, which differ only by
// what their nodes report (what), trained the same models and scored
// them differently.
func sameModelsOtherScores(t *testing.T, what string, a, b Result) {
	t.Helper()
	if len(a.Points) != len(b.Points) || a.Merges != b.Merges || a.Samples != b.Samples {
		t.Fatalf("%s changed the run: %d/%d points, %d/%d merges, %d/%d samples", what, len(a.Points),
			len(b.Points), a.Merges, b.Merges, a.Samples, b.Samples)
	}
	differ := 0
	for i, p := range a.Points {
		q := b.Points[i]
		if p.ConsensusDistance != q.ConsensusDistance || p.AverageAccuracy != q.AverageAccuracy {
			t.Fatalf("t=%v: %s changed the models: distance %v/%v, average model %v/%v", p.T, what,
				p.ConsensusDistance, q.ConsensusDistance, p.AverageAccuracy, q.AverageAccuracy)
		}
		if !reflect.DeepEqual(p.Scored, q.Scored) {
			differ++
		}
	}
	if differ == 0 {
		t.Errorf("the nodes scored the same with and without %s: they are not scored on it", what)
	}
}
