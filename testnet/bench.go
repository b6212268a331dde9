package testnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/train"
)

// BenchConfig describes a benchmark: one swarm shape, every mode, several
// seeds, on this machine. DefaultBenchConfig fills every field; Validate
// reports every bad one at once.
type BenchConfig struct {
	// Binary is the meshtrain executable the nodes run.
	Binary string
	// Out receives results.json, report.md and the plots; Work the nodes'
	// logs and snapshots ("" means Out/work).
	Out, Work string
	// Nodes and their Slowdowns (one per node, or a shorter list that
	// repeats, as in a testnet).
	Nodes     int
	Slowdowns []float64
	// Target is the test accuracy the times to target are measured at.
	Target float64
	// Seeds is how many seeds the report covers (1, 2, ...). TuneSeed is
	// the separate seed the learning rates are chosen on.
	Seeds    int
	TuneSeed uint64
	// Dataset (mnist or synthetic), an optional IDX folder, and the
	// Dirichlet alpha of label-skewed shards (0: iid).
	Dataset, DataPath string
	NonIID            float64
	// Model, Batch and Schedule are the trainer's, the same for every mode.
	Model    string
	Batch    int
	Schedule string
	// Anneal: the report runs decay each mode's learning rate to zero at
	// the end of the run (cosine over the progress the mode's tuning run
	// had reached by then), as a training budgeted to Duration would; the
	// tuning runs use Schedule. Only tuned modes can be annealed.
	Anneal bool
	// Modes to run, of AllModes.
	Modes []string
	// LRGrid is the learning rates tried for every mode but sync, which
	// tries SyncLRGrid (its effective batch is Nodes x Batch). A mode in
	// FixedLR skips tuning.
	LRGrid, SyncLRGrid []float64
	FixedLR            map[string]float64
	// Duration is each run's wall time from the common start; the final
	// accuracy is read there.
	Duration time.Duration
	// BaseStep is the step time every slowdown multiplies; 0 calibrates it
	// once, solo, at the start.
	BaseStep time.Duration
	// SnapshotEvery is the time resolution of every measurement.
	SnapshotEvery time.Duration
	// Gossip settings: merge interval, base weight, staleness decay and the
	// precision of the models sent (fp32 or fp16).
	AvgInterval time.Duration
	Alpha       float64
	Staleness   string
	WireDType   string
	// Threads per node (GOMAXPROCS): 1 keeps the swarm's CPU demand within
	// the cores the profile assumes.
	Threads int
	// Settle is the wait between the last node starting and the common
	// start, for announcements to reach every peer.
	Settle time.Duration
	// NodeArgs are passed to every node after the benchmark's own.
	NodeArgs []string
	// KeepSnapshots keeps the snapshot files after they are scored.
	KeepSnapshots bool
	// Quick marks a short smoke run (the report says so).
	Quick bool
	// Command is the command line, for the report.
	Command string
	// Progress receives one line per finished run ("" discards).
	Progress io.Writer
}

// DefaultBenchConfig is the full benchmark: MNIST, 4 nodes at 2,2,4,8,
// 97% test accuracy, 3 seeds, every mode.
func DefaultBenchConfig() BenchConfig {
	d := train.DefaultConfig()
	return BenchConfig{
		Out:           "meshtrain-bench",
		Nodes:         4,
		Slowdowns:     []float64{2, 2, 4, 8},
		Target:        0.97,
		Seeds:         3,
		TuneSeed:      1000,
		Dataset:       node.DatasetMNIST,
		Model:         d.Model,
		Batch:         d.Batch,
		Schedule:      "const",
		Anneal:        true,
		Modes:         slices.Clone(AllModes),
		LRGrid:        []float64{0.05, 0.1, 0.2},
		SyncLRGrid:    []float64{0.1, 0.2, 0.4},
		Duration:      90 * time.Second,
		SnapshotEvery: 250 * time.Millisecond,
		AvgInterval:   50 * time.Millisecond,
		Alpha:         averaging.DefaultAlpha,
		Staleness:     averaging.DefaultStaleness,
		WireDType:     "fp16",
		Threads:       1,
		Settle:        3 * time.Second,
	}
}

// QuickBenchConfig is a smoke run for CI: one seed, learning rates fixed
// instead of tuned, a lower target and short runs (a few minutes on two
// cores).
func QuickBenchConfig() BenchConfig {
	c := DefaultBenchConfig()
	c.Quick = true
	c.Seeds = 1
	c.Target = 0.95
	c.Duration = 15 * time.Second
	c.FixedLR = map[string]float64{ModeGossip: 0.1, ModeGossipConst: 0.1, ModeSync: 0.1, ModeLocal: 0.1}
	c.Anneal = false
	return c
}

// Validate reports every bad field at once.
func (c BenchConfig) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBench}, a...)...))
	}
	if c.Binary == "" {
		bad("no binary")
	}
	if c.Out == "" {
		bad("no output dir")
	}
	if c.Nodes < 1 || c.Nodes > 64 {
		bad("nodes %d not in [1,64]", c.Nodes)
	}
	if len(c.Slowdowns) == 0 {
		bad("no slowdowns")
	}
	for _, s := range c.Slowdowns {
		if !(s >= 1 && s <= 1000) {
			bad("slowdown %v not in [1,1000]", s)
		}
	}
	if !(c.Target > 0 && c.Target <= 1) {
		bad("target %v not in (0,1]", c.Target)
	}
	if c.Seeds < 1 || c.Seeds > 100 {
		bad("seeds %d not in [1,100]", c.Seeds)
	}
	if c.TuneSeed >= 1 && c.TuneSeed <= uint64(max(c.Seeds, 0)) {
		bad("tune seed %d is one of the report seeds 1..%d", c.TuneSeed, c.Seeds)
	}
	if _, _, err := node.Shape(c.Dataset); err != nil || c.Dataset == "" {
		bad("dataset %q: want mnist or synthetic", c.Dataset)
	}
	if !(c.NonIID >= 0) || math.IsInf(c.NonIID, 0) {
		bad("non-iid alpha %v must be finite and >= 0", c.NonIID)
	}
	tc := train.DefaultConfig()
	tc.Model, tc.Batch, tc.Schedule, tc.Epochs = c.Model, c.Batch, c.Schedule, 0
	if err := tc.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrBench, err))
	}
	if len(c.Modes) == 0 {
		bad("no modes")
	}
	for _, m := range c.Modes {
		if !slices.Contains(AllModes, m) {
			bad("mode %q: want %s", m, strings.Join(AllModes, ", "))
		}
	}
	for m, lr := range c.FixedLR {
		if !slices.Contains(AllModes, m) {
			bad("learning rate for unknown mode %q", m)
		}
		if !(lr > 0 && lr <= 100) {
			bad("learning rate %v for %s not in (0,100]", lr, m)
		}
	}
	for _, grid := range [][]float64{c.LRGrid, c.SyncLRGrid} {
		for _, lr := range grid {
			if !(lr > 0 && lr <= 100) {
				bad("learning rate %v in a grid not in (0,100]", lr)
			}
		}
	}
	for _, m := range c.Modes {
		_, fixed := c.FixedLR[m]
		if !fixed && len(c.grid(m)) == 0 {
			bad("mode %s has neither a fixed learning rate nor a grid", m)
		}
		if fixed && c.Anneal {
			bad("mode %s: annealing needs the mode's tuning runs, not a fixed learning rate", m)
		}
	}
	if c.Duration < time.Second || c.Duration > 24*time.Hour {
		bad("duration %v not in [1s,24h]", c.Duration)
	}
	if c.BaseStep < 0 || c.BaseStep > time.Minute {
		bad("base step %v not in [0,1m]", c.BaseStep)
	}
	if c.SnapshotEvery < 10*time.Millisecond || c.SnapshotEvery > c.Duration {
		bad("snapshot interval %v not in [10ms, duration]", c.SnapshotEvery)
	}
	if c.AvgInterval <= 0 {
		bad("averaging interval %v must be > 0", c.AvgInterval)
	}
	if !(c.Alpha > 0 && c.Alpha <= 1) {
		bad("alpha %v not in (0,1]", c.Alpha)
	}
	if _, err := averaging.ParseStaleness(c.Staleness); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrBench, err))
	}
	if _, err := gossip.ParseDType(c.WireDType); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrBench, err))
	}
	if c.Threads < 1 || c.Threads > 256 {
		bad("threads %d not in [1,256]", c.Threads)
	}
	if c.Settle < 0 || c.Settle > 10*time.Minute {
		bad("settle %v not in [0,10m]", c.Settle)
	}
	return errors.Join(errs...)
}

// grid is the learning rates a mode is tuned over.
func (c BenchConfig) grid(mode string) []float64 {
	if mode == ModeSync {
		return c.SyncLRGrid
	}
	return c.LRGrid
}

// slowdowns is one slowdown per node (a shorter list repeats).
func (c BenchConfig) slowdowns() []float64 {
	out := make([]float64, c.Nodes)
	for i := range out {
		out[i] = c.Slowdowns[i%len(c.Slowdowns)]
	}
	return out
}

// reportSeeds are 1..Seeds.
func (c BenchConfig) reportSeeds() []uint64 {
	out := make([]uint64, c.Seeds)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// job is one run to do.
type job struct {
	tune     bool
	mode     string
	seed     uint64
	lr       float64
	schedule string // "" means BenchConfig.Schedule
}

func (j job) name() string {
	kind := "run"
	if j.tune {
		kind = "tune"
	}
	return fmt.Sprintf("%s-%s-s%d-lr%s", kind, j.mode, j.seed, strconv.FormatFloat(j.lr, 'g', -1, 64))
}

// bench is one benchmark in progress.
type bench struct {
	cfg     BenchConfig
	base    time.Duration
	solo    []float64
	test    map[uint64]*train.Dataset
	started time.Time
	done    int
	total   int
	spent   time.Duration // wall time of the runs done so far
	netID   string
}

// RunBench calibrates the base step (unless given), tunes each mode's
// learning rate on the tuning seed, runs every mode on every report seed,
// and returns the results. It writes nothing to cfg.Out: see WriteAll.
func RunBench(ctx context.Context, cfg BenchConfig) (*Results, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Work == "" {
		cfg.Work = filepath.Join(cfg.Out, "work")
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	b := &bench{cfg: cfg, started: time.Now(), test: map[uint64]*train.Dataset{},
		netID: strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}
	res := &Results{Schema: ResultsSchema, Command: cfg.Command, Started: b.started.UTC(), Machine: machineInfo(),
		LR: map[string]float64{}}
	res.Settings = settings(cfg)
	b.base = cfg.BaseStep
	if b.base == 0 {
		fmt.Fprintf(cfg.Progress, "calibrating the base step (solo, 1 thread, %s, batch %d)...\n", cfg.Model, cfg.Batch)
		var err error
		if b.base, err = CalibrateBaseStep(cfg.Dataset, cfg.DataPath, cfg.Model, cfg.Batch); err != nil {
			return nil, err
		}
		res.Settings.Heterogeneity += fmt.Sprintf("; base step calibrated solo at start: %v", b.base)
	} else {
		res.Settings.Heterogeneity += fmt.Sprintf("; base step given: %v", b.base)
	}
	res.BaseStepS = b.base.Seconds()
	b.solo = SoloRates(cfg.Batch, res.BaseStepS, cfg.slowdowns())
	res.SoloSamplesPerS, res.SoloSamplesPerSSum = b.solo, Sum(b.solo)
	fmt.Fprintf(cfg.Progress, "base step %v: solo rates %s samples/s (sum %.0f)\n", b.base, fmtRates(b.solo), Sum(b.solo))

	var tune []job
	for _, m := range cfg.Modes {
		if lr, ok := cfg.FixedLR[m]; ok {
			res.LR[m] = lr
			continue
		}
		for _, lr := range cfg.grid(m) {
			tune = append(tune, job{tune: true, mode: m, seed: cfg.TuneSeed, lr: lr})
		}
	}
	b.total = len(tune) + len(cfg.Modes)*cfg.Seeds
	for _, j := range tune {
		run, err := b.run(ctx, j)
		if err != nil {
			return nil, err
		}
		res.Tuning = append(res.Tuning, run)
	}
	for _, m := range cfg.Modes {
		if _, ok := res.LR[m]; !ok {
			res.LR[m] = BestLR(res.Tuning, m)
			fmt.Fprintf(cfg.Progress, "%s: learning rate %g chosen on seed %d\n", m, res.LR[m], cfg.TuneSeed)
		}
	}
	res.Schedule = map[string]string{}
	for _, m := range cfg.Modes {
		res.Schedule[m] = cfg.Schedule
		if !cfg.Anneal {
			continue
		}
		if total := AnnealTotal(res.Tuning, m, res.LR[m], cfg.Duration.Seconds()); total > 0 {
			res.Schedule[m] = fmt.Sprintf("cosine:total=%.0f", total)
		}
		fmt.Fprintf(cfg.Progress, "%s: schedule %s\n", m, res.Schedule[m])
	}
	// Modes alternate within each seed, so a change in the machine's load
	// during the benchmark falls on every mode alike.
	for _, seed := range cfg.reportSeeds() {
		for _, m := range cfg.Modes {
			run, err := b.run(ctx, job{mode: m, seed: seed, lr: res.LR[m], schedule: res.Schedule[m]})
			if err != nil {
				return nil, err
			}
			res.Runs = append(res.Runs, run)
		}
	}
	summarize(res)
	res.RunTimeS = time.Since(b.started).Seconds()
	return res, nil
}

// AnnealTotal is the progress a mode's tuning run at lr had reached at
// wall time t, averaged over its nodes: a cosine schedule with this total
// brings the mode's learning rate to zero at about t. 0 when there is no
// such run.
func AnnealTotal(tuning []Run, mode string, lr, t float64) float64 {
	for _, r := range tuning {
		if r.Mode != mode || r.LR != lr || r.Error != "" || len(r.Traces) == 0 {
			continue
		}
		var sum float64
		for _, tr := range r.Traces {
			sum += interp(tr.Points, t, func(p Point) float64 { return p.Progress })
		}
		return sum / float64(len(r.Traces))
	}
	return 0
}

// BestLR picks a mode's learning rate from its tuning runs: the shortest
// time to target with every node; if none reached it, the best final mean
// accuracy. Ties go to the smaller rate.
func BestLR(tuning []Run, mode string) float64 {
	var best *Run
	better := func(r, b *Run) bool {
		switch {
		case r.Error != "":
			return false
		case b == nil:
			return true
		case r.TimeToTargetS != nil && b.TimeToTargetS == nil:
			return true
		case r.TimeToTargetS == nil && b.TimeToTargetS != nil:
			return false
		case r.TimeToTargetS != nil && *r.TimeToTargetS != *b.TimeToTargetS:
			return *r.TimeToTargetS < *b.TimeToTargetS
		case r.TimeToTargetS == nil && r.FinalAccuracyMean != b.FinalAccuracyMean:
			return r.FinalAccuracyMean > b.FinalAccuracyMean
		}
		return r.LR < b.LR
	}
	for i := range tuning {
		r := &tuning[i]
		if r.Mode == mode && better(r, best) {
			best = r
		}
	}
	if best == nil {
		return 0
	}
	return best.LR
}

// run does one job and reports it on the progress line. A run whose swarm
// fails is recorded with its error; only cancellation stops the benchmark.
func (b *bench) run(ctx context.Context, j job) (Run, error) {
	began := time.Now()
	run, err := b.swarm(ctx, j)
	if ctx.Err() != nil {
		return Run{}, ctx.Err()
	}
	if err != nil {
		run = Run{Mode: j.mode, Seed: j.seed, LR: j.lr, Schedule: cmp.Or(j.schedule, b.cfg.Schedule), Error: err.Error()}
	}
	b.done++
	b.spent += time.Since(began)
	eta := time.Duration(float64(b.spent) / float64(b.done) * float64(b.total-b.done))
	fmt.Fprintf(b.cfg.Progress, "[%2d/%d] %-28s %s | load %.1f, setup %.0fs, scoring %.0fs | elapsed %s, ETA %s\n", b.done,
		b.total, j.name(), runLine(run, b.cfg.Target), run.LoadAvg, run.SetupS, run.ScoringS, time.Since(b.started).Round(time.Second),
		eta.Round(time.Second))
	return run, nil
}

// runLine is a finished run in one line.
func runLine(r Run, target float64) string {
	if r.Error != "" {
		return "FAILED: " + r.Error
	}
	all, first := "not reached", "not reached"
	if r.TimeToTargetS != nil {
		all = fmt.Sprintf("%.1fs", *r.TimeToTargetS)
	}
	if r.FirstNodeTimeS != nil {
		first = fmt.Sprintf("%.1fs", *r.FirstNodeTimeS)
	}
	return fmt.Sprintf("%.1f%%: all %s, first %s; final %.2f%%; %.0f samples/s; busy %s", 100*target, all, first,
		100*r.FinalAccuracyMean, r.SamplesPerS, fmtFracs(r.BusyFraction))
}

func fmtRates(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(s, ",")
}

func fmtFracs(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, ",")
}

// modeArgs are the node flags that make a mode.
func (c BenchConfig) modeArgs(mode string) []string {
	gossip := []string{"--mode", "gossip", "--alpha", strconv.FormatFloat(c.Alpha, 'g', -1, 64),
		"--avg-interval", c.AvgInterval.String(), "--wire-dtype", c.WireDType}
	switch mode {
	case ModeGossip:
		return append(gossip, "--staleness", c.Staleness)
	case ModeGossipConst:
		return append(gossip, "--staleness", "const")
	}
	return []string{"--mode", mode}
}

// nodeArgs are every node's flags for a job.
func (b *bench) nodeArgs(j job, net, snapDir, startFile string) []string {
	c := b.cfg
	args := []string{"--no-data-dir", "--log-level", "warn",
		"--network", net, "--seed", strconv.FormatUint(j.seed, 10),
		"--dataset", c.Dataset, "--model", c.Model, "--batch", strconv.Itoa(c.Batch),
		"--lr", strconv.FormatFloat(j.lr, 'g', -1, 64), "--schedule", cmp.Or(j.schedule, c.Schedule), "--epochs", "0",
		"--threads", strconv.Itoa(c.Threads), "--base-step", b.base.String(),
		"--announce-interval", "1s", "--no-eval", "--checkpoint-every", "0",
		"--snapshot-dir", snapDir, "--snapshot-every", c.SnapshotEvery.String(), "--start-file", startFile}
	if c.DataPath != "" {
		args = append(args, "--data", c.DataPath)
	}
	if c.NonIID > 0 {
		args = append(args, "--non-iid", strconv.FormatFloat(c.NonIID, 'g', -1, 64))
	}
	args = append(args, c.modeArgs(j.mode)...)
	return append(args, c.NodeArgs...)
}

// swarm runs one job: start the nodes, release them together, stop them
// after Duration, then score their snapshots.
func (b *bench) swarm(ctx context.Context, j job) (Run, error) {
	c := b.cfg
	run := Run{Mode: j.mode, Seed: j.seed, LR: j.lr, Schedule: cmp.Or(j.schedule, c.Schedule)}
	dir := filepath.Join(c.Work, j.name())
	if err := os.RemoveAll(dir); err != nil {
		return run, err
	}
	snapDir := filepath.Join(dir, "snapshots")
	startFile := filepath.Join(dir, "start")
	if err := os.MkdirAll(snapDir, 0o755); err != nil {
		return run, err
	}
	// A network name of its own per run: a straggler from an earlier run
	// can never merge into this one.
	net := fmt.Sprintf("bench-%s-%d", b.netID, b.done)
	began := time.Now()
	tn, err := Up(ctx, Config{Binary: c.Binary, Dir: dir, Nodes: c.Nodes, Slowdowns: c.Slowdowns,
		NodeArgs: b.nodeArgs(j, net, snapDir, startFile)})
	if err != nil {
		return run, err
	}
	stopped := false
	defer func() {
		if !stopped {
			tn.Stop(10 * time.Second)
		}
	}()
	if err := sleepCtx(ctx, c.Settle); err != nil {
		return run, err
	}
	t0 := time.Now()
	run.SetupS = t0.Sub(began).Seconds()
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		return run, err
	}
	done := tn.Done()
	select {
	case <-ctx.Done():
		return run, ctx.Err()
	case <-done:
		return run, fmt.Errorf("%w: every node exited before the end; see the logs in %s", ErrBench, dir)
	case <-time.After(time.Until(t0.Add(c.Duration))):
	}
	run.LoadAvg = loadAvg1()
	var dead []string
	for _, r := range tn.Summary() {
		if !r.Alive {
			dead = append(dead, strconv.Itoa(r.Index))
		}
	}
	tn.Stop(30 * time.Second)
	stopped = true
	if len(dead) > 0 {
		return run, fmt.Errorf("%w: node %s exited before the end; see the logs in %s", ErrBench, strings.Join(dead, ","), dir)
	}
	peers := make(map[string]int, len(tn.Members))
	for _, m := range tn.Members {
		peers[m.PeerID] = m.Index
	}
	test, err := b.testSet(j.seed)
	if err != nil {
		return run, err
	}
	scoring := time.Now()
	traces, err := ScoreSnapshots(ctx, snapDir, peers, c.Nodes, test, t0, runtime.NumCPU())
	if err != nil {
		return run, err
	}
	run.ScoringS = time.Since(scoring).Seconds()
	if !c.KeepSnapshots {
		_ = os.RemoveAll(snapDir)
	}
	for i := range traces {
		traces[i].Slowdown = c.slowdowns()[i]
	}
	run.Traces = traces
	analyzeRun(&run, c.Target, c.Duration.Seconds(), b.solo)
	return run, nil
}

// testSet loads (once per seed; MNIST's does not depend on it) the test
// split the snapshots are scored on.
func (b *bench) testSet(seed uint64) (*train.Dataset, error) {
	if b.cfg.Dataset == node.DatasetMNIST {
		seed = 0
	}
	if d, ok := b.test[seed]; ok {
		return d, nil
	}
	_, test, err := node.LoadData(b.cfg.Dataset, b.cfg.DataPath, seed)
	if err != nil {
		return nil, err
	}
	b.test[seed] = test
	return test, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// CalibrateBaseStep measures the solo step time of model on dataset at
// batch, on one thread: the median compute time of 300 steps after 30 of
// warm-up. Run it on a quiet machine: it is the unit every slowdown
// multiplies.
func CalibrateBaseStep(dataset, dataPath, model string, batch int) (time.Duration, error) {
	trainSet, _, err := node.LoadData(dataset, dataPath, 1)
	if err != nil {
		return 0, err
	}
	tc := train.DefaultConfig()
	tc.Model, tc.Batch, tc.Epochs, tc.Schedule = model, batch, 0, "const"
	t, err := train.New(tc, trainSet)
	if err != nil {
		return 0, err
	}
	const warmup, measured = 30, 300
	times := make([]time.Duration, 0, measured)
	for i := range warmup + measured {
		s, err := t.Step(context.Background())
		if err != nil {
			return 0, fmt.Errorf("%w: calibration step: %w", ErrBench, err)
		}
		if i >= warmup {
			times = append(times, s.Compute)
		}
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

// settings records the benchmark's inputs in the results.
func settings(c BenchConfig) Settings {
	return Settings{Nodes: c.Nodes, Slowdowns: c.slowdowns(), Target: c.Target, Seeds: c.reportSeeds(), TuneSeed: c.TuneSeed,
		Dataset: c.Dataset, NonIID: c.NonIID, Model: c.Model, Batch: c.Batch, Schedule: c.Schedule, Modes: c.Modes,
		LRGrid: c.LRGrid, SyncLRGrid: c.SyncLRGrid, DurationS: c.Duration.Seconds(), FixedWallS: c.Duration.Seconds(),
		SnapshotS: c.SnapshotEvery.Seconds(), AvgIntervalS: c.AvgInterval.Seconds(), Alpha: c.Alpha, Staleness: c.Staleness,
		WireDType: c.WireDType, Anneal: c.Anneal,
		Threads: c.Threads, NodeArgs: c.NodeArgs, Quick: c.Quick,
		Heterogeneity: "emulated: each step lasts slowdown x base step (sleeping after the compute; the sleep counts as busy), " +
			fmt.Sprintf("%d thread(s) per node", c.Threads)}
}

// loadAvg1 is the 1-minute load average (0 where unknown).
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// machineInfo describes this machine (Linux details when available).
func machineInfo() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version(),
		Version: node.Version()}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseUint(f[1], 10, 64); err == nil {
					m.MemoryBytes = kb * 1024
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}
