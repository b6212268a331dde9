package sim

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Files Write makes in its folder.
const (
	ResultsFile = "results.json"
	ReportFile  = "report.md"
)

// Settings is a Config as results.json records it: durations in seconds,
// the merge rule by name.
type Settings struct {
	Nodes          int       `json:"nodes"`
	DurationS      float64   `json:"duration_s"`
	Seed           uint64    `json:"seed"`
	Dataset        string    `json:"dataset"`
	Model          string    `json:"model"`
	Batch          int       `json:"batch"`
	LR             float64   `json:"lr"`
	Schedule       string    `json:"schedule"`
	Momentum       float64   `json:"momentum"`
	WeightDecay    float64   `json:"weight_decay"`
	Epochs         float64   `json:"epochs"`
	Shards         int       `json:"shards"`
	StepMedianS    float64   `json:"step_median_s"`
	StepSpread     float64   `json:"step_spread"`
	Slowdowns      []float64 `json:"slowdowns,omitempty"`
	AvgIntervalS   float64   `json:"avg_interval_s"`
	Peers          int       `json:"peers"`
	Alpha          float64   `json:"alpha"`
	Staleness      string    `json:"staleness"`
	StalenessLag   string    `json:"staleness_lag"`
	StalenessAhead string    `json:"staleness_ahead"`
	MomentumPolicy string    `json:"momentum_policy"`
	CatchUp        float64   `json:"catch_up"`
	LatencyS       float64   `json:"latency_s"`
	Bandwidth      float64   `json:"bandwidth_bytes_s"`
	WireBytes      int       `json:"wire_bytes"`
	Churn          string    `json:"churn"`
	NeverReturn    float64   `json:"never_return"`
	TraceSessions  int       `json:"trace_sessions,omitempty"`
	ReportEveryS   float64   `json:"report_every_s"`
	EvalNodes      int       `json:"eval_nodes"`
	EvalSamples    int       `json:"eval_samples"`
}

// SettingsOf is cfg as results.json records it.
func SettingsOf(cfg Config) Settings {
	s := Settings{
		Nodes: cfg.Nodes, DurationS: cfg.Duration.Seconds(), Seed: cfg.Seed, Dataset: cfg.Dataset, Model: cfg.Model,
		Batch: cfg.Batch, LR: cfg.LR, Schedule: cfg.Schedule, Momentum: cfg.Momentum, WeightDecay: cfg.WeightDecay,
		Epochs: cfg.Epochs, Shards: cfg.Shards, StepMedianS: cfg.StepMedian.Seconds(), StepSpread: cfg.StepSpread,
		Slowdowns: cfg.Slowdowns, AvgIntervalS: cfg.AvgInterval.Seconds(), Peers: cfg.Peers, Alpha: cfg.Merger.Alpha,
		StalenessLag: cfg.Merger.Lag.String(), StalenessAhead: cfg.Merger.Ahead.String(), MomentumPolicy: cfg.Merger.Momentum.String(), CatchUp: cfg.CatchUp,
		LatencyS: cfg.Latency.Seconds(), Bandwidth: cfg.Bandwidth, WireBytes: cfg.WireBytes,
		Churn: ChurnString(cfg.Churn), NeverReturn: cfg.Churn.NeverReturn, ReportEveryS: cfg.ReportEvery.Seconds(),
		EvalNodes: cfg.EvalNodes, EvalSamples: cfg.EvalSamples,
	}
	if cfg.Merger.Staleness != nil {
		s.Staleness = cfg.Merger.Staleness.String()
	}
	if cfg.Trace != nil {
		s.Nodes, s.Churn, s.NeverReturn, s.TraceSessions = 0, "trace", 0, len(cfg.Trace)
	}
	return s
}

// ChurnString is the lifetime model as the --churn flag reads it:
// "none", "weibull:SHAPE,SCALEs" or "pareto:SHAPE,SCALEs".
func ChurnString(c Churn) string {
	if c.Lifetime == LifetimeNone || c.Lifetime == "" {
		return LifetimeNone
	}
	return fmt.Sprintf("%s:%s,%ss", c.Lifetime, strconv.FormatFloat(c.Shape, 'g', -1, 64), strconv.FormatFloat(c.Scale, 'g', -1, 64))
}

// ParseChurn reads ChurnString's form into c's Lifetime, Shape and Scale
// (NeverReturn is left alone). The values are checked by Validate.
func ParseChurn(s string, c *Churn) error {
	if s == LifetimeNone {
		c.Lifetime, c.Shape, c.Scale = LifetimeNone, 0, 0
		return nil
	}
	kind, args, ok := strings.Cut(s, ":")
	if !ok || (kind != LifetimeWeibull && kind != LifetimePareto) {
		return fmt.Errorf("sim: churn %q: want none, weibull:SHAPE,SCALE or pareto:SHAPE,SCALE (scale in seconds, e.g. weibull:0.6,600s)", s)
	}
	a, b, ok := strings.Cut(args, ",")
	if !ok {
		return fmt.Errorf("sim: churn %q: want %s:SHAPE,SCALE", s, kind)
	}
	shape, err := strconv.ParseFloat(a, 64)
	if err != nil {
		return fmt.Errorf("sim: churn %q: shape %q is not a number", s, a)
	}
	scale, err := time.ParseDuration(b)
	if err != nil {
		f, ferr := strconv.ParseFloat(b, 64)
		if ferr != nil {
			return fmt.Errorf("sim: churn %q: scale %q is not a duration (600s, 10m) or a number of seconds", s, b)
		}
		scale = time.Duration(f * float64(time.Second))
	}
	c.Lifetime, c.Shape, c.Scale = kind, shape, scale.Seconds()
	return nil
}

// output is results.json.
type output struct {
	Settings Settings `json:"settings"`
	// WallS is the real time the run took (measured by the caller).
	WallS  float64 `json:"wall_s"`
	Result *Result `json:"result"`
}

// Write writes results.json, report.md and the plots (accuracy.png,
// consensus.png, churn.png, lost.png, traffic.png) into dir, creating it. wall is
// the real time the run took, as the caller measured it.
func Write(dir string, cfg Config, res *Result, wall time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	b, err := json.MarshalIndent(output{Settings: SettingsOf(cfg), WallS: wall.Seconds(), Result: res}, "", "  ")
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ReportFile), []byte(Report(cfg, res, wall)), 0o644); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return writePlots(dir, cfg, res)
}

// Report is report.md: the settings, the totals and one row per point.
func Report(cfg Config, res *Result, wall time.Duration) string {
	var b strings.Builder
	s := SettingsOf(cfg)
	fmt.Fprintf(&b, "# Simulated swarm: %s\n\n", headline(cfg))
	fmt.Fprintf(&b, "%s on %s, batch %d, lr %g (%s over %g epochs of the run clock), momentum %g. ",
		cfg.Model, cfg.Dataset, cfg.Batch, cfg.LR, cfg.Schedule, cfg.Epochs, cfg.Momentum)
	speed := fmt.Sprintf("lognormal step time, median %v, sigma %g", cfg.StepMedian, cfg.StepSpread)
	if len(cfg.Slowdowns) > 0 {
		speed = fmt.Sprintf("step time %v times slowdowns %s", cfg.StepMedian, joinG(cfg.Slowdowns))
	}
	fmt.Fprintf(&b, "Data: %d iid shards of the training set. Speeds: %s. ", res.Shards, speed)
	peers := "every live node"
	if cfg.Peers > 0 {
		peers = fmt.Sprintf("a random %d live nodes per round", cfg.Peers)
	}
	fmt.Fprintf(&b, "Merge rule: alpha %g, staleness %s (%s; models ahead: %s), momentum %s, catch-up %g samples; partners among %s; pace floor %v. ",
		s.Alpha, s.Staleness, s.StalenessLag, s.StalenessAhead, s.MomentumPolicy, cfg.CatchUp, peers, cfg.AvgInterval)
	fmt.Fprintf(&b, "Links: %v one way, %g Mbit/s, %d bytes per value (%d bytes per model). ",
		cfg.Latency, cfg.Bandwidth*8/1e6, cfg.WireBytes, res.ModelBytes)
	if cfg.Trace != nil {
		fmt.Fprintf(&b, "Sessions from a trace (%d sessions).\n\n", len(cfg.Trace))
	} else {
		fmt.Fprintf(&b, "Churn: %s, %g%% of leavers never return. Seed %d.\n\n", s.Churn, 100*cfg.Churn.NeverReturn, cfg.Seed)
	}
	end := "the duration"
	if res.RunComplete {
		end = "the run's end (epochs complete)"
	}
	fmt.Fprintf(&b, "Ended at %.1f s of virtual time (%s) after %s of real time: %d events, %d steps, %d samples.\n\n",
		res.EndS, end, wall.Round(100*time.Millisecond), res.Events, res.Steps, res.Samples)
	fmt.Fprintf(&b, "| nodes ever online | sessions | returns | newcomers | leaves | never returned | merges | catch-ups | exchanges | failed | samples lost to churn | held offline |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d (%.2f%%) | %d |\n\n",
		res.Nodes, res.Joins, res.Returns, res.Newcomers, res.Leaves, res.Gone, res.Merges, res.CatchUps, res.Exchanges, res.Failed,
		res.LostSamples, pct(res.LostSamples, res.Samples), res.OfflineSamples)
	fmt.Fprintf(&b, "| t (s) | live | consensus distance | average model acc | nodes' acc mean (min–max, n) | bytes/node/s | samples | lost | lr |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range res.Points {
		fmt.Fprintf(&b, "| %.0f | %d | %.4g | %.2f%% | %.2f%% (%.2f–%.2f%%, %d) | %.0f | %d | %d | %.4g |\n",
			p.T, p.Live, p.ConsensusDistance, 100*p.AverageAccuracy, 100*p.NodeAccuracyMean, 100*p.NodeAccuracyMin,
			100*p.NodeAccuracyMax, p.NodesScored, p.BytesPerNodeS, p.Samples, p.LostSamples, p.LR)
	}
	fmt.Fprintf(&b, "\nConsensus distance: the mean over live nodes of the squared L2 distance of their model to the live models' average. "+
		"Accuracies on a fixed %d-image subset of the test set. Samples lost to churn: samples a node that never returned "+
		"trained after the last snapshot of its model that a peer merged.\n", cfg.EvalSamples)
	return b.String()
}

// headline names the swarm in a title.
func headline(cfg Config) string {
	pop := fmt.Sprintf("%d nodes", cfg.Nodes)
	if cfg.Trace != nil {
		pop = fmt.Sprintf("a trace of %d sessions", len(cfg.Trace))
	}
	return fmt.Sprintf("%s, %g s of virtual time", pop, cfg.Duration.Seconds())
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func joinG(v []float64) string {
	s := make([]string, len(v))
	for i, f := range v {
		s[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

var (
	blue   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	grey   = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
	red    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

// series is one line of a plot.
type series struct {
	name   string
	y      []float64
	color  color.Color
	dashed bool
}

func writePlots(dir string, cfg Config, res *Result) error {
	n := len(res.Points)
	t := make([]float64, n)
	col := func(f func(Point) float64) []float64 {
		y := make([]float64, n)
		for i, p := range res.Points {
			y[i] = f(p)
		}
		return y
	}
	for i, p := range res.Points {
		t[i] = p.T
	}
	sub := fmt.Sprintf("(%s, churn %s, seed %d)", headline(cfg), SettingsOf(cfg).Churn, cfg.Seed)
	scored := col(func(p Point) float64 {
		if p.NodesScored == 0 {
			return math.NaN()
		}
		return p.NodeAccuracyMean
	})
	plots := []struct {
		file, title, ylabel string
		logY                bool
		lines               []series
	}{
		{"accuracy.png", "Test accuracy vs virtual time", "test accuracy", false, []series{
			{"average of the live models", col(func(p Point) float64 { return p.AverageAccuracy }), blue, false},
			{"sampled nodes' own models (mean)", scored, orange, false},
			{"sampled nodes' own models (min)", col(func(p Point) float64 {
				if p.NodesScored == 0 {
					return math.NaN()
				}
				return p.NodeAccuracyMin
			}), orange, true},
		}},
		{"consensus.png", "Consensus distance vs virtual time", "mean squared distance to the average (log scale)", true, []series{
			{"consensus distance", col(func(p Point) float64 { return p.ConsensusDistance }), blue, false},
		}},
		{"churn.png", "Live nodes vs virtual time", "live nodes", false, []series{
			{"live nodes", col(func(p Point) float64 { return float64(p.Live) }), blue, false},
		}},
		{"lost.png", "Samples lost to churn (cumulative) vs virtual time", "samples", false, []series{
			{"samples lost to churn", col(func(p Point) float64 { return float64(p.LostSamples) }), red, false},
		}},
		{"traffic.png", "Model bytes sent per live node per second vs virtual time", "bytes/s per node", false, []series{
			{"bytes sent per live node per second", col(func(p Point) float64 { return p.BytesPerNodeS }), grey, false},
		}},
	}
	for _, pl := range plots {
		p := plot.New()
		p.Title.Text = pl.title + "\n" + sub
		p.X.Label.Text = "virtual time (s)"
		p.Y.Label.Text = pl.ylabel
		if pl.logY && !anyPositive(pl.lines) {
			// A log axis has no room for a swarm whose models all agree
			// (the distance is 0 throughout): plot it linear instead.
			pl.logY = false
			p.Y.Label.Text = strings.TrimSuffix(pl.ylabel, " (log scale)")
		}
		if pl.logY {
			p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		}
		// The lines run along the top (or, for the distance, fall from
		// the top left): the legend goes where they are not.
		p.Legend.Top = pl.file == "consensus.png"
		for _, s := range pl.lines {
			xy := make(plotter.XYs, 0, n)
			for i := range t {
				if math.IsNaN(s.y[i]) || (pl.logY && s.y[i] <= 0) {
					continue // a log axis has no 0; a point with nothing scored has no value
				}
				xy = append(xy, plotter.XY{X: t[i], Y: s.y[i]})
			}
			if len(xy) == 0 {
				continue
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return fmt.Errorf("sim: plot %s: %w", pl.file, err)
			}
			l.Color, l.Width = s.color, vg.Points(1.5)
			if s.dashed {
				l.Width, l.Dashes = vg.Points(0.8), []vg.Length{vg.Points(4), vg.Points(2)}
			}
			p.Add(l)
			p.Legend.Add(s.name, l)
		}
		p.Add(plotter.NewGrid())
		if pl.logY && p.Y.Min >= p.Y.Max {
			// One distinct value: the axis would pad it by ±1, below 0,
			// which a log scale cannot draw.
			p.Y.Min, p.Y.Max = p.Y.Min/2, p.Y.Max*2
		}
		if err := p.Save(9*vg.Inch, 5*vg.Inch, filepath.Join(dir, pl.file)); err != nil {
			return fmt.Errorf("sim: plot %s: %w", pl.file, err)
		}
	}
	return nil
}

func anyPositive(lines []series) bool {
	for _, l := range lines {
		for _, v := range l.y {
			if v > 0 {
				return true
			}
		}
	}
	return false
}
