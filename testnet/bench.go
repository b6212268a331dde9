package testnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/train"
)

// BenchConfig describes a benchmark: one swarm shape, every mode, several
// seeds, on this machine. DefaultBenchConfig fills every field; Validate
// reports every bad one at once.
//
// Gossip runs as a node does by default: the training and gossip settings
// below start at node.DefaultConfig's values, and a node is given a flag for
// one of them only when it differs from that default, so a default
// benchmark measures exactly what `meshtrain node` does. gossip-const is the
// same with --staleness const, local the same with --mode local. Every such
// run ends by itself (the node's --epochs, counted on the run clock). Its
// wall time on the tuning seed, W, is the budget of sync, which keeps a
// learning rate and a run length of its own (see RunBench).
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
	// the separate seed the learning rates and W are measured on.
	Seeds    int
	TuneSeed uint64
	// Dataset (mnist or synthetic), an optional IDX folder, and the
	// Dirichlet alpha of label-skewed shards (0: iid).
	Dataset, DataPath string
	NonIID            float64
	// Model and Batch are the trainer's, the same for every mode.
	Model string
	Batch int
	// Modes to run, of AllModes.
	Modes []string
	// Networks are the networks the whole benchmark runs on, one after
	// another (default: loopback only); each gets its own W, tuning and
	// report runs.
	Networks []Net

	// LR is the learning rate of every mode but sync that is neither
	// tuned (Tune) nor fixed (FixedLR): the node's default.
	LR float64
	// Epochs is the length of every run that ends by itself (node
	// --epochs): passes over the whole training set on the run clock, every
	// node's samples added up. > 0: gossip's run must end for W to exist.
	Epochs float64
	// Schedule is the learning-rate schedule over such a run, sync's
	// report runs included; sync's tuning runs use a constant rate.
	Schedule string
	// Gossip settings: merge interval, base weight, staleness decay and the
	// precision of the models sent (--wire-dtype: auto, fp32, fp16 or
	// int8). Sync and local ignore them.
	AvgInterval time.Duration
	Alpha       float64
	Staleness   string
	WireDType   string

	// LRGrid is the learning rates a mode in Tune (not sync) is tried at;
	// sync is tried at SyncLRGrid (its effective batch is Nodes x Batch).
	// A mode in FixedLR uses that rate instead; sync then still makes one
	// tuning run at it when BudgetSync, to measure its run clock at W.
	LRGrid, SyncLRGrid []float64
	Tune               []string
	FixedLR            map[string]float64
	// BudgetSync: sync's report runs are budgeted to W: their --epochs is
	// the run clock sync's tuning run at the chosen rate had reached at W,
	// with Schedule over it. Without (a quick run), sync's report runs run
	// as its tuning runs do: a constant rate, no end, stopped at W.
	BudgetSync bool

	// Cap bounds every run's wall time from the common start: the nodes
	// still running then are stopped and the run is recorded as capped. A
	// run that ends by itself normally ends well before.
	Cap time.Duration
	// BaseStep is the step time every slowdown multiplies; 0 calibrates it
	// once, solo, at the start.
	BaseStep time.Duration
	// SnapshotEvery is the time resolution of every measurement.
	SnapshotEvery time.Duration
	// Threads per node (GOMAXPROCS); 0 leaves the node's default, every
	// core, as a user's node runs. The training step is single-threaded
	// either way (the swarm's compute demand is the profile's); more
	// threads let a node's network and merge work run beside its step
	// instead of queueing behind it.
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

// QuickEpochs is a quick run's length: about 10 s for the 4-node profile on
// 2 cores, long enough to pass 95%.
const QuickEpochs = 8

// DefaultBenchConfig is the full benchmark: MNIST, 4 nodes at 2,2,4,8,
// 97% test accuracy, 3 seeds, every mode, gossip with the node's defaults.
func DefaultBenchConfig() BenchConfig {
	d := node.DefaultConfig()
	return BenchConfig{
		Out:           "meshtrain-bench",
		Nodes:         4,
		Slowdowns:     []float64{2, 2, 4, 8},
		Target:        0.97,
		Seeds:         3,
		TuneSeed:      1000,
		Dataset:       d.Dataset,
		Model:         d.Train.Model,
		Batch:         d.Train.Batch,
		Modes:         slices.Clone(AllModes),
		Networks:      []Net{Loopback},
		LR:            d.Train.LR,
		Epochs:        d.Epochs,
		Schedule:      d.Train.Schedule,
		AvgInterval:   d.AvgInterval,
		Alpha:         d.Merger.Alpha,
		Staleness:     d.Merger.Staleness.String(),
		WireDType:     d.WireName(),
		LRGrid:        []float64{0.05, 0.1, 0.2},
		SyncLRGrid:    []float64{0.1, 0.2, 0.4},
		BudgetSync:    true,
		Cap:           120 * time.Second,
		SnapshotEvery: 250 * time.Millisecond,
		Threads:       0,
		Settle:        3 * time.Second,
	}
}

// QuickBenchConfig is a smoke run for CI: one seed, no tuning (gossip at
// the node's defaults but a short run, sync at a fixed rate stopped at
// gossip's wall time), a lower target (a minute or two on two cores).
func QuickBenchConfig() BenchConfig {
	c := DefaultBenchConfig()
	c.Quick = true
	c.Seeds = 1
	c.Target = 0.95
	c.Epochs = QuickEpochs
	c.FixedLR = map[string]float64{ModeSync: 0.1}
	c.BudgetSync = false
	c.Cap = time.Minute
	c.Modes = slices.Clone(QuickModes)
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
	if _, _, err := train.Shape(c.Dataset); err != nil || c.Dataset == "" {
		bad("dataset %q: want mnist or synthetic", c.Dataset)
	}
	if !(c.NonIID >= 0) || math.IsInf(c.NonIID, 0) {
		bad("non-iid alpha %v must be finite and >= 0", c.NonIID)
	}
	if !(c.Epochs > 0 && c.Epochs <= 1e6) {
		bad("epochs %v not in (0,1000000]: gossip's run must end by itself", c.Epochs)
	}
	// The trainer checks the model, batch, rate and schedule; a run that
	// ends by itself gives the schedule its total (a stand-in here, as in
	// node.Config.Validate).
	tc := train.DefaultConfig()
	tc.Model, tc.Batch, tc.Schedule, tc.Epochs, tc.RunSamples, tc.LR = c.Model, c.Batch, c.Schedule, 0, max(c.Epochs, 0), c.LR
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
	if len(c.Networks) == 0 {
		bad("no networks")
	}
	seenNet := map[string]bool{}
	for _, n := range c.Networks {
		switch {
		case n.Kind == NetWAN:
			if err := n.WAN.Validate(); err != nil {
				errs = append(errs, err)
			}
		case n.Kind != NetLoopback:
			bad("network kind %q: want %s or %s", n.Kind, NetLoopback, NetWAN)
		}
		if seenNet[n.String()] {
			bad("network %s given twice", n)
		}
		seenNet[n.String()] = true
	}
	for m, lr := range c.FixedLR {
		if !slices.Contains(AllModes, m) {
			bad("learning rate for unknown mode %q", m)
		}
		if !(lr > 0 && lr <= 100) {
			bad("learning rate %v for %s not in (0,100]", lr, m)
		}
	}
	for _, m := range c.Tune {
		_, fixed := c.FixedLR[m]
		switch {
		case m == ModeSync:
			bad("tune %s: sync is always tuned (on its own grid) unless its rate is fixed", m)
		case !slices.Contains(AllModes, m):
			bad("tune: unknown mode %q", m)
		case fixed:
			bad("mode %s is both tuned and given a fixed learning rate", m)
		case len(c.LRGrid) == 0:
			bad("mode %s is tuned on an empty grid", m)
		}
	}
	for _, grid := range [][]float64{c.LRGrid, c.SyncLRGrid} {
		for _, lr := range grid {
			if !(lr > 0 && lr <= 100) {
				bad("learning rate %v in a grid not in (0,100]", lr)
			}
		}
	}
	if _, fixed := c.FixedLR[ModeSync]; slices.Contains(c.Modes, ModeSync) && !fixed && len(c.SyncLRGrid) == 0 {
		bad("sync has neither a fixed learning rate nor a grid")
	}
	if c.Cap < time.Second || c.Cap > 24*time.Hour {
		bad("cap %v not in [1s,24h]", c.Cap)
	}
	if c.BaseStep < 0 || c.BaseStep > time.Minute {
		bad("base step %v not in [0,1m]", c.BaseStep)
	}
	if c.SnapshotEvery < 10*time.Millisecond || c.SnapshotEvery > c.Cap {
		bad("snapshot interval %v not in [10ms, cap]", c.SnapshotEvery)
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
	if _, _, err := node.ParseWire(c.WireDType); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrBench, err))
	}
	if c.Threads < 0 || c.Threads > 256 {
		bad("threads %d not in [0,256]", c.Threads)
	}
	if c.Settle < 0 || c.Settle > 10*time.Minute {
		bad("settle %v not in [0,10m]", c.Settle)
	}
	return errors.Join(errs...)
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

// tuned reports whether a mode's learning rate is chosen on a grid.
func (c BenchConfig) tuned(mode string) bool {
	if _, fixed := c.FixedLR[mode]; fixed {
		return false
	}
	return mode == ModeSync || slices.Contains(c.Tune, mode)
}

// modeLR is the learning rate of a mode that is not tuned.
func (c BenchConfig) modeLR(mode string) float64 {
	if lr, ok := c.FixedLR[mode]; ok {
		return lr
	}
	return c.LR
}

// syncTuneLRs are the rates sync's tuning runs are made at.
func (c BenchConfig) syncTuneLRs() []float64 {
	if !slices.Contains(c.Modes, ModeSync) {
		return nil
	}
	if lr, fixed := c.FixedLR[ModeSync]; fixed {
		if c.BudgetSync {
			return []float64{lr}
		}
		return nil
	}
	return c.SyncLRGrid
}

// job is one run to do.
type job struct {
	tune     bool
	mode     string
	seed     uint64
	lr       float64
	epochs   float64 // the run's --epochs (0: no end)
	schedule string
	// stopAt, when > 0, is when the harness stops the run (sync's runs
	// with no end); 0: the run ends by itself, within the cap.
	stopAt time.Duration
	// fixedWall is where the run's accuracy is read, in seconds since the
	// common start (0: at the run's own end).
	fixedWall float64
}

func (j job) name() string {
	kind := "run"
	if j.tune {
		kind = "tune"
	}
	return fmt.Sprintf("%s-%s-s%d-lr%s", kind, j.mode, j.seed, strconv.FormatFloat(j.lr, 'g', -1, 64))
}

// ending is a job that ends by itself: Epochs long, Schedule over it.
func (c BenchConfig) ending(tune bool, mode string, seed uint64, lr float64) job {
	return job{tune: tune, mode: mode, seed: seed, lr: lr, epochs: c.Epochs, schedule: c.Schedule}
}

// stopped is a job at a constant rate with no end, stopped at w seconds
// (sync's tuning runs).
func stopped(tune bool, mode string, seed uint64, lr, w float64) job {
	return job{tune: tune, mode: mode, seed: seed, lr: lr, schedule: "const", stopAt: seconds(w), fixedWall: w}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// flagArg is one node flag with its value.
type flagArg struct{ name, value string }

func flagList(fs []flagArg) []string {
	out := make([]string, 0, 2*len(fs))
	for _, f := range fs {
		out = append(out, f.name, f.value)
	}
	return out
}

func fmtG(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// nodeMode is the node's --mode for a benchmark mode.
func nodeMode(mode string) node.Mode {
	switch mode {
	case ModeGossipConst:
		return node.ModeGossip
	case ModeDilocoSpeed:
		return node.ModeDiloco
	}
	return node.Mode(mode)
}

// runFlags are a job's training and gossip flags that differ from a node's
// defaults (node.DefaultConfig): what its nodes get beyond the harness's
// flags, NodeArgs aside. Settings are compared by value, so "poly:0.50" is
// the default "poly:0.5".
func (c BenchConfig) runFlags(j job) []flagArg {
	d := node.DefaultConfig()
	var out []flagArg
	add := func(differs bool, name, value string) {
		if differs {
			out = append(out, flagArg{name, value})
		}
	}
	mode := nodeMode(j.mode)
	add(mode != d.Mode, "--mode", string(mode))
	add(c.Dataset != d.Dataset, "--dataset", c.Dataset)
	add(c.DataPath != "", "--data", c.DataPath)
	add(c.NonIID != 0, "--non-iid", fmtG(c.NonIID))
	add(c.Model != d.Train.Model, "--model", c.Model)
	add(c.Batch != d.Train.Batch, "--batch", strconv.Itoa(c.Batch))
	add(j.lr != d.Train.LR, "--lr", fmtG(j.lr))
	add(!sameSchedule(j.schedule, d.Train.Schedule), "--schedule", j.schedule)
	add(j.epochs != d.Epochs, "--epochs", fmtG(j.epochs))
	if mode == node.ModeGossip {
		staleness := c.Staleness
		if j.mode == ModeGossipConst {
			staleness = "const"
		}
		add(c.AvgInterval != d.AvgInterval, "--avg-interval", c.AvgInterval.String())
		add(c.Alpha != d.Merger.Alpha, "--alpha", fmtG(c.Alpha))
		add(!sameStaleness(staleness, d.Merger.Staleness), "--staleness", staleness)
	}
	// Gossip's models, sync's and diloco's updates.
	add(mode != node.ModeLocal && !sameWire(c.WireDType, d), "--wire-dtype", c.WireDType)
	if j.mode == ModeDilocoSpeed {
		add(d.InnerScaling != node.InnerScalingSpeed, "--inner-steps-scaling", node.InnerScalingSpeed)
	}
	return out
}

func sameSchedule(s, def string) bool {
	a, errA := train.ParseSchedule(s)
	b, errB := train.ParseSchedule(def)
	return errA == nil && errB == nil && a.String() == b.String()
}

func sameStaleness(s string, def averaging.Staleness) bool {
	f, err := averaging.ParseStaleness(s)
	return err == nil && f.String() == def.String()
}

func sameWire(s string, def node.Config) bool {
	t, auto, err := node.ParseWire(s)
	return err == nil && t == def.Exchange.SendDType && auto == def.WireAuto
}

// differs is a job's flags beyond the harness's own, one "flag value"
// string each, NodeArgs last as one string: the settings in which its
// nodes differ from a node's defaults. Never nil.
func (c BenchConfig) differs(j job) []string {
	out := []string{}
	for _, f := range c.runFlags(j) {
		out = append(out, f.name+" "+f.value)
	}
	if len(c.NodeArgs) > 0 {
		out = append(out, strings.Join(c.NodeArgs, " "))
	}
	return out
}

// ModeFlags are the settings, one "flag value" string each, in which a
// mode's nodes differ from a node's defaults when the mode runs at its
// configured rate (its fixed one, or LR), for Epochs, before any tuning:
// none for gossip on a default benchmark. Sync's report runs get the
// rate and run length RunBench chooses instead (Settings.DiffersFromDefaults).
func (c BenchConfig) ModeFlags(mode string) []string {
	return c.differs(c.ending(false, mode, 1, c.modeLR(mode)))
}

// harnessFlags are the flags the benchmark gives every node of a job
// besides those testnet.Up adds (see HarnessFlags for why); a bool flag
// has no value.
func (b *bench) harnessFlags(j job, net, snapDir, startFile string) []flagArg {
	out := []flagArg{{"--no-data-dir", ""}, {"--checkpoint-every", "0"}, {"--no-eval", ""},
		{"--snapshot-dir", snapDir}, {"--snapshot-every", b.cfg.SnapshotEvery.String()},
		{"--base-step", b.base.String()}, {"--log-level", "warn"},
		{"--network", net}, {"--seed", strconv.FormatUint(j.seed, 10)}, {"--start-file", startFile}}
	if b.cfg.Threads > 0 {
		out = append(out, flagArg{"--threads", strconv.Itoa(b.cfg.Threads)})
	}
	return out
}

// nodeArgs are every node's flags for a job: the harness's, the job's own
// (runFlags), then NodeArgs (the last of a repeated flag wins).
func (b *bench) nodeArgs(j job, net, snapDir, startFile string) []string {
	var args []string
	for _, f := range b.harnessFlags(j, net, snapDir, startFile) {
		if f.value == "" {
			args = append(args, f.name) // a bool flag
			continue
		}
		args = append(args, f.name, f.value)
	}
	args = append(args, flagList(b.cfg.runFlags(j))...)
	return append(args, b.cfg.NodeArgs...)
}

// HarnessFlags are the settings every node of every run gets from the
// harness, whatever the mode, and why: none of them changes what a node
// learns, only how it is started, isolated and observed.
func HarnessFlags(c BenchConfig, n Net) []HarnessFlag {
	out := []HarnessFlag{
		{"--profile local --api ADDR --bootstrap NODE0", "loopback only, a free API port, every node joins through node 0 (testnet.Up)"},
		{"--json", "the harness reads each node's events (its final event says whether it finished its run)"},
		{"--shard i/n", "each node trains on its own shard of the training set, as in a real swarm"},
		{"--slowdown F", "the emulated hardware: each step lasts F x the base step (the sleep counts as busy time)"},
		{"--base-step D", "calibrated once, solo, at the start, so every slowdown multiplies the same unit rather than one each node measures while the others start up"},
		{"--no-data-dir", "nothing on disk: every run starts fresh (no resumed checkpoint, a new identity) and leaves nothing behind"},
		{"--checkpoint-every 0", "no periodic checkpoint writes competing with training (without a data dir there is nowhere to write them anyway)"},
		{"--no-eval", "no test-set evaluation on the nodes' cores while they train; instead every node snapshots its model and counters, and the snapshots are scored after the run, outside the nodes' busy time"},
		{fmt.Sprintf("--snapshot-dir DIR --snapshot-every %v", c.SnapshotEvery), "the time resolution of every figure; a node also snapshots as it starts and as it stops (its final model)"},
		{"--log-level warn", "small logs (they stay in the work dir)"},
		{"--network bench-ID-N", "a network name of its own per run, so a straggler from an earlier run can never merge into this one"},
		{"--seed N", "the run's seed (initial model and shard split): the tuning seed or a report seed"},
		{"--start-file F", "every node holds training until the harness releases them all at once, after the settle time: the common start, time 0"},
	}
	if n.Kind == NetWAN {
		out = append(out, HarnessFlag{"--listen /ip4/127.0.0.1/udp/PORT/quic-v1 --announce /ip4/127.0.0.1/udp/PUBLIC/quic-v1",
			"the emulated WAN: each node listens for QUIC only, on a port the relay knows, and tells its peers the relay's public address for it (node 0's is every node's bootstrap address), so every packet between nodes crosses the emulated network"})
	}
	return out
}

// bench is one benchmark in progress.
type bench struct {
	cfg     BenchConfig
	network Net
	base    time.Duration
	solo    []float64
	test    map[uint64]*train.Dataset
	started time.Time
	done    int
	total   int
	spent   time.Duration // wall time of the runs done so far
	netID   string
	// runSwarm does one run: (*bench).swarm, or a stand-in in tests.
	runSwarm func(*bench, context.Context, job) (Run, error)
}

// RunBench calibrates the base step (unless given), then on each network
// in turn, with that one base step: on the tuning seed runs gossip as
// configured (each rate of LRGrid when gossip is in Tune) and takes its
// wall time W, common start to the last node's exit, at the chosen rate
// (with nothing to tune at all, W is the first report seed's gossip run's
// instead, and the tuning seed is not used); tunes the modes in Tune the
// same way; runs sync at each rate of SyncLRGrid with a constant rate and
// no end, stopped at W, and picks the fastest to target (BestLR); budgets
// sync's report runs to the run clock that run had reached at W
// (SyncEpochs). Then it runs every mode on every report seed, reading
// every mode's accuracy at W. It writes nothing to cfg.Out: see WriteAll.
func RunBench(ctx context.Context, cfg BenchConfig) (*BenchResults, error) {
	return runBench(ctx, cfg, (*bench).swarm)
}

// runBench is RunBench with the runs done by swarm.
func runBench(ctx context.Context, cfg BenchConfig, swarm func(*bench, context.Context, job) (Run, error)) (*BenchResults, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Work == "" {
		cfg.Work = filepath.Join(cfg.Out, "work")
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	started := time.Now()
	out := &BenchResults{Schema: ResultsSchema, Command: cfg.Command, Started: started.UTC(), Machine: machineInfo()}
	trainSet, _, err := train.LoadData(cfg.Dataset, cfg.DataPath, cfg.TuneSeed)
	if err != nil {
		return nil, err
	}
	base, heterogeneity := cfg.BaseStep, fmt.Sprintf("; base step given: %v", cfg.BaseStep)
	if base == 0 {
		fmt.Fprintf(cfg.Progress, "calibrating the base step (solo, 1 thread, %s, batch %d)...\n", cfg.Model, cfg.Batch)
		if base, err = CalibrateBaseStep(cfg.Dataset, cfg.DataPath, cfg.Model, cfg.Batch); err != nil {
			return nil, err
		}
		heterogeneity = fmt.Sprintf("; base step calibrated solo at start: %v", base)
	}
	// Networks one after another, each a whole benchmark; every node's
	// step is the same unit on all of them.
	for i, n := range cfg.Networks {
		if len(cfg.Networks) > 1 {
			fmt.Fprintf(cfg.Progress, "network %d of %d: %s\n", i+1, len(cfg.Networks), n)
		}
		b := &bench{cfg: cfg, network: n, base: base, started: time.Now(), test: map[uint64]*train.Dataset{},
			netID: strconv.FormatInt(time.Now().UnixNano()%1e9, 36), runSwarm: swarm}
		res, err := b.runNetwork(ctx, trainSet.N, heterogeneity)
		if err != nil {
			return nil, err
		}
		out.Networks = append(out.Networks, res)
	}
	out.RunTimeS = time.Since(started).Seconds()
	return out, nil
}

// runNetwork is the benchmark on one network: W, the tuning and the report
// runs (see RunBench).
func (b *bench) runNetwork(ctx context.Context, trainSamples int, heterogeneity string) (*Results, error) {
	cfg := b.cfg
	res := &Results{Network: networkInfo(b.network), Started: b.started.UTC(),
		LR: map[string]float64{}, Schedule: map[string]string{}, Epochs: map[string]float64{}}
	res.Settings = settings(cfg, b.network)
	res.Settings.TrainSamples = trainSamples
	res.Settings.Heterogeneity += heterogeneity
	res.BaseStepS = b.base.Seconds()
	b.solo = SoloRates(cfg.Batch, res.BaseStepS, cfg.slowdowns())
	res.SoloSamplesPerS, res.SoloSamplesPerSSum = b.solo, Sum(b.solo)
	fmt.Fprintf(cfg.Progress, "base step %v: solo rates %s samples/s (sum %.0f)\n", b.base, fmtRates(b.solo), Sum(b.solo))

	// Plan every run up front, for the progress line's ETA.
	lrsOf := func(mode string) []float64 {
		if cfg.tuned(mode) {
			return cfg.LRGrid
		}
		return []float64{cfg.modeLR(mode)}
	}
	var others []string // tuned modes besides gossip and sync
	for _, m := range cfg.Modes {
		if m != ModeGossip && m != ModeSync && cfg.tuned(m) {
			others = append(others, m)
		}
	}
	// With nothing to tune (a quick run), no run is made on the tuning
	// seed: W is measured by the first report seed's gossip run, which
	// runs first and is that seed's gossip report run.
	untuned := len(cfg.syncTuneLRs()) == 0 && len(others) == 0 && !cfg.tuned(ModeGossip) && slices.Contains(cfg.Modes, ModeGossip)
	b.total = len(lrsOf(ModeGossip)) + len(others)*len(cfg.LRGrid) + len(cfg.syncTuneLRs()) + len(cfg.Modes)*cfg.Seeds
	wSeed := cfg.TuneSeed
	if untuned {
		b.total--
		wSeed = cfg.reportSeeds()[0]
	}
	res.Settings.WSeed = wSeed

	// Gossip first: its wall time is every mode's budget. A run that ends
	// by itself is scored at its own end.
	gossipLR := lrsOf(ModeGossip)[0]
	var ref, firstRun *Run
	if untuned {
		run, err := b.run(ctx, cfg.ending(false, ModeGossip, wSeed, gossipLR))
		if err != nil {
			return nil, err
		}
		ref, firstRun = &run, &run
	} else {
		for _, lr := range lrsOf(ModeGossip) {
			run, err := b.run(ctx, cfg.ending(true, ModeGossip, wSeed, lr))
			if err != nil {
				return nil, err
			}
			res.Tuning = append(res.Tuning, run)
		}
		if cfg.tuned(ModeGossip) {
			gossipLR = BestLR(res.Tuning, ModeGossip)
		}
		ref = findRun(res.Tuning, ModeGossip, gossipLR)
	}
	if ref == nil || ref.Error != "" {
		why := "every run failed"
		if ref != nil {
			why = ref.Error
		}
		return nil, fmt.Errorf("%w: gossip on seed %d, whose wall time is every mode's budget: %s", ErrBench, wSeed, why)
	}
	w := ref.WallS
	res.Settings.FixedWallS = w
	fmt.Fprintf(cfg.Progress, "gossip: learning rate %g; wall time W = %.2f s on seed %d (%s): every mode's budget\n",
		gossipLR, w, wSeed, ref.End)
	chosen := map[string]float64{ModeGossip: gossipLR}
	for _, m := range others {
		for _, lr := range cfg.LRGrid {
			run, err := b.run(ctx, cfg.ending(true, m, cfg.TuneSeed, lr))
			if err != nil {
				return nil, err
			}
			res.Tuning = append(res.Tuning, run)
		}
		if chosen[m] = BestLR(res.Tuning, m); chosen[m] == 0 {
			return nil, fmt.Errorf("%w: every tuning run of %s failed", ErrBench, m)
		}
		fmt.Fprintf(cfg.Progress, "%s: learning rate %g chosen on seed %d\n", m, chosen[m], cfg.TuneSeed)
	}
	for _, lr := range cfg.syncTuneLRs() {
		run, err := b.run(ctx, stopped(true, ModeSync, cfg.TuneSeed, lr, w))
		if err != nil {
			return nil, err
		}
		res.Tuning = append(res.Tuning, run)
	}

	// The report runs' jobs, one per mode (the seed aside).
	report := map[string]job{}
	for _, m := range cfg.Modes {
		if m != ModeSync {
			lr, ok := chosen[m]
			if !ok {
				lr = cfg.modeLR(m)
			}
			j := cfg.ending(false, m, 0, lr)
			j.fixedWall = w
			report[m] = j
			continue
		}
		lr, fixed := cfg.FixedLR[ModeSync]
		if !fixed {
			if lr = BestLR(res.Tuning, ModeSync); lr == 0 {
				return nil, fmt.Errorf("%w: every tuning run of sync failed", ErrBench)
			}
			fmt.Fprintf(cfg.Progress, "sync: learning rate %g chosen on seed %d\n", lr, cfg.TuneSeed)
		}
		if !cfg.BudgetSync {
			report[m] = stopped(false, ModeSync, 0, lr, w)
			fmt.Fprintf(cfg.Progress, "sync: learning rate %g, constant, no end, stopped at W = %.2f s\n", lr, w)
			continue
		}
		epochs, clock := SyncEpochs(res.Tuning, lr, w, trainSamples)
		if epochs == 0 {
			return nil, fmt.Errorf("%w: sync's tuning run at learning rate %g has no run clock at W = %.2f s", ErrBench, lr, w)
		}
		j := cfg.ending(false, ModeSync, 0, lr)
		j.epochs, j.fixedWall = epochs, w
		report[m] = j
		fmt.Fprintf(cfg.Progress, "sync: its tuning run at %g had trained %.0f samples at W = %.2f s: --epochs %g, schedule %s\n",
			lr, clock, w, epochs, cfg.Schedule)
	}
	res.Settings.DiffersFromDefaults = map[string][]string{}
	for m, j := range report {
		res.LR[m], res.Schedule[m], res.Epochs[m] = j.lr, j.schedule, j.epochs
		res.Settings.DiffersFromDefaults[m] = cfg.differs(j)
	}
	// Modes alternate within each seed, so a change in the machine's load
	// during the benchmark falls on every mode alike.
	for _, seed := range cfg.reportSeeds() {
		for _, m := range cfg.Modes {
			if firstRun != nil && seed == wSeed && m == ModeGossip {
				res.Runs = append(res.Runs, *firstRun)
				continue
			}
			j := report[m]
			j.seed = seed
			run, err := b.run(ctx, j)
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

// findRun is the first run of mode at lr (nil if none).
func findRun(runs []Run, mode string, lr float64) *Run {
	for i := range runs {
		if runs[i].Mode == mode && runs[i].LR == lr {
			return &runs[i]
		}
	}
	return nil
}

// RunClockAt is the run clock a run had reached at wall time t: what its
// nodes count the run's length on. For sync, the group model's progress
// (every member's batch of every round, the same on every member after a
// round; the median over nodes, should one have dropped out); for the
// other modes, every node's samples added up.
func RunClockAt(r Run, t float64) float64 {
	if r.Mode != ModeSync {
		return SamplesAt(r.Traces, t)
	}
	xs := make([]float64, 0, len(r.Traces))
	for _, tr := range r.Traces {
		xs = append(xs, interp(tr.Points, t, func(p Point) float64 { return p.Progress }))
	}
	if len(xs) == 0 {
		return 0
	}
	return Median(xs)
}

// SyncEpochs is the run length that budgets sync's report runs to wall
// time w: the run clock its tuning run at lr had reached at w, in passes
// over a training set of trainSamples (rounded to 0.001), and that clock.
// 0 when there is no such run.
func SyncEpochs(tuning []Run, lr, w float64, trainSamples int) (epochs, clock float64) {
	for _, r := range tuning {
		if r.Mode != ModeSync || r.LR != lr || r.Error != "" || len(r.Traces) == 0 || trainSamples <= 0 {
			continue
		}
		clock = RunClockAt(r, w)
		return math.Round(1000*clock/float64(trainSamples)) / 1000, clock
	}
	return 0, 0
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
	run, err := b.runSwarm(b, ctx, j)
	if ctx.Err() != nil {
		return Run{}, ctx.Err()
	}
	if err != nil {
		run = b.newRun(j)
		run.Error = err.Error()
	}
	b.done++
	b.spent += time.Since(began)
	eta := time.Duration(float64(b.spent) / float64(b.done) * float64(b.total-b.done))
	fmt.Fprintf(b.cfg.Progress, "[%2d/%d] %-28s %s | load %.1f, setup %.0fs, scoring %.0fs | elapsed %s, ETA %s\n", b.done,
		b.total, j.name(), runLine(run, b.cfg.Target), run.LoadAvg, run.SetupS, run.ScoringS, time.Since(b.started).Round(time.Second),
		eta.Round(time.Second))
	return run, nil
}

// newRun is a job's run before it is measured.
func (b *bench) newRun(j job) Run {
	return Run{Mode: j.mode, Seed: j.seed, LR: j.lr, Schedule: j.schedule, Epochs: j.epochs, Flags: b.cfg.differs(j),
		StopAtS: j.stopAt.Seconds()}
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
	return fmt.Sprintf("%.1f%%: all %s, first %s; %s at %.1fs; accuracy %.2f%% at %.1fs; %.0f samples/s; busy %s", 100*target,
		all, first, r.End, r.WallS, 100*r.FinalAccuracyMean, r.FixedWallS, r.SamplesPerS, fmtFracs(r.BusyFraction))
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

// nodeExit is how one node's process ended.
type nodeExit struct {
	node int
	at   time.Time
	// finished: it ended its run by itself (see endProblem); problem says
	// why not.
	finished bool
	problem  string
}

// runCompletePrefix starts the final event's message of a node that ended
// its run (node.StopRunComplete).
const runCompletePrefix = "run complete"

// endProblem says why a node that exited did not finish its run: "" when
// it exited with code 0 after a final event saying the run is complete.
func endProblem(exit error, final *FinalEvent) string {
	switch {
	case exit != nil:
		return fmt.Sprintf("exited with %v", exit)
	case final == nil:
		return "exited without a final event"
	case !strings.HasPrefix(final.Message, runCompletePrefix):
		return fmt.Sprintf("stopped before its run ended (%q)", final.Message)
	}
	return ""
}

// runEnd is how a swarm's nodes ended.
type runEnd struct {
	exitAt   []time.Time
	finished []bool
	// deadline: the deadline came while a node still ran, and stop was
	// called.
	deadline bool
}

// kind is how the run ended: complete when every node finished its run,
// else stopped at its planned stop time or capped.
func (e runEnd) kind(planned bool) string {
	switch {
	case !slices.Contains(e.finished, false):
		return EndComplete
	case planned:
		return EndStopped
	}
	return EndCap
}

// awaitRun waits for n nodes to exit, each reported once on exits. A node
// that exits before the deadline without finishing its run fails the run
// at once; one that finished is done, and the others go on. When the
// deadline fires, stop must make every node still running exit; those
// count as stopped, whatever they say.
func awaitRun(ctx context.Context, n int, exits <-chan nodeExit, deadline <-chan time.Time, stop func()) (runEnd, error) {
	end := runEnd{exitAt: make([]time.Time, n), finished: make([]bool, n)}
	for left := n; left > 0; {
		select {
		case <-ctx.Done():
			return end, ctx.Err()
		case e := <-exits:
			left--
			end.exitAt[e.node], end.finished[e.node] = e.at, e.finished
			if !e.finished && !end.deadline {
				return end, fmt.Errorf("%w: node %d %s", ErrBench, e.node, e.problem)
			}
		case <-deadline:
			deadline = nil
			end.deadline = true
			stop()
		}
	}
	return end, nil
}

// swarm runs one job: start the nodes, release them together, wait until
// every node has ended its run (or, at the job's stop time or the cap,
// stop what still runs), then score their snapshots.
func (b *bench) swarm(ctx context.Context, j job) (Run, error) {
	c := b.cfg
	run := b.newRun(j)
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
	// A WAN of its own per run: fresh queues and counters.
	var wan *WAN
	if b.network.Kind == NetWAN {
		var err error
		if wan, err = StartWAN(b.network.WAN, j.seed); err != nil {
			return run, err
		}
		defer wan.Close()
	}
	tn, err := Up(ctx, Config{Binary: c.Binary, Dir: dir, Nodes: c.Nodes, Slowdowns: c.Slowdowns,
		NodeArgs: b.nodeArgs(j, net, snapDir, startFile), WAN: wan})
	if err != nil {
		return run, err
	}
	stoppedAll := false
	defer func() {
		if !stoppedAll {
			tn.Stop(10 * time.Second)
		}
	}()
	if err := sleepCtx(ctx, c.Settle); err != nil {
		return run, err
	}
	t0, cpu0 := time.Now(), processCPU()
	run.SetupS = t0.Sub(began).Seconds()
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		return run, err
	}
	exits := make(chan nodeExit, len(tn.Members))
	for i, m := range tn.Members {
		go func() {
			<-m.done // m.exit is set before done is closed
			m.mu.Lock()
			final := m.final
			m.mu.Unlock()
			e := nodeExit{node: i, at: time.Now(), problem: endProblem(m.exit, final)}
			if e.finished = e.problem == ""; !e.finished {
				e.problem += "; see " + m.Log
			}
			exits <- e
		}()
	}
	limit := c.Cap
	if j.stopAt > 0 && j.stopAt < limit {
		limit = j.stopAt
	}
	timer := time.NewTimer(time.Until(t0.Add(limit)))
	defer timer.Stop()
	end, err := awaitRun(ctx, len(tn.Members), exits, timer.C, func() {
		run.LoadAvg = loadAvg1()
		tn.Stop(30 * time.Second)
	})
	if err != nil {
		return run, err
	}
	stoppedAll = true
	if wall, cpu := time.Since(t0), processCPU(); cpu0 > 0 && cpu > cpu0 && wall > 0 {
		run.BenchCores = (cpu - cpu0).Seconds() / wall.Seconds()
	}
	if !end.deadline {
		run.LoadAvg = loadAvg1()
	}
	if wan != nil {
		run.Link = runLink(wan.Stats(), c.Nodes)
	}
	run.End = end.kind(j.stopAt > 0 && j.stopAt < c.Cap)
	run.NodeFinished = end.finished
	run.NodeExitS = make([]float64, len(end.exitAt))
	for i, at := range end.exitAt {
		run.NodeExitS[i] = at.Sub(t0).Seconds()
		run.WallS = max(run.WallS, run.NodeExitS[i])
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
	traces, consensus, err := ScoreSnapshots(ctx, snapDir, peers, c.Nodes, test, t0, runtime.NumCPU(), c.Target)
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
	run.Traces, run.Consensus = traces, consensus
	fixed := j.fixedWall
	if fixed == 0 {
		fixed = run.WallS
	}
	analyzeRun(&run, c.Target, fixed, b.solo)
	return run, nil
}

// testSet loads (once per seed; MNIST's does not depend on it) the test
// split the snapshots are scored on.
func (b *bench) testSet(seed uint64) (*train.Dataset, error) {
	if b.cfg.Dataset == train.DatasetMNIST {
		seed = 0
	}
	if d, ok := b.test[seed]; ok {
		return d, nil
	}
	_, test, err := train.LoadData(b.cfg.Dataset, b.cfg.DataPath, seed)
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
	trainSet, _, err := train.LoadData(dataset, dataPath, 1)
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

// settings records the benchmark's inputs on network n in the results;
// RunBench adds what it measures on the way (the training set's size, W,
// the flags every mode's report runs differ from a node's defaults by).
func settings(c BenchConfig, n Net) Settings {
	var fixed map[string]float64
	if len(c.FixedLR) > 0 {
		fixed = maps.Clone(c.FixedLR)
	}
	return Settings{Nodes: c.Nodes, Slowdowns: c.slowdowns(), Target: c.Target, Seeds: c.reportSeeds(), TuneSeed: c.TuneSeed,
		Dataset: c.Dataset, NonIID: c.NonIID, Model: c.Model, Batch: c.Batch, Modes: c.Modes,
		LR: c.LR, Epochs: c.Epochs, Schedule: c.Schedule, AvgIntervalS: c.AvgInterval.Seconds(), Alpha: c.Alpha,
		Staleness: c.Staleness, WireDType: c.WireDType, EMA: node.DefaultConfig().Train.EMA,
		EMAPeers: node.DefaultConfig().Train.EMAPeers,
		LRGrid:   c.LRGrid, SyncLRGrid: c.SyncLRGrid, Tune: c.Tune, FixedLR: fixed, BudgetSync: c.BudgetSync,
		CapS: c.Cap.Seconds(), SnapshotS: c.SnapshotEvery.Seconds(),
		Threads: c.Threads, NodeArgs: c.NodeArgs, Quick: c.Quick, Harness: HarnessFlags(c, n),
		Heterogeneity: "emulated: each step lasts slowdown x base step (sleeping after the compute; the sleep counts as busy), " +
			threadsNote(c.Threads)}
}

// threadsNote says how many threads each node ran with.
func threadsNote(threads int) string {
	if threads == 0 {
		return "each node on every core (the node's default; its training step is single-threaded)"
	}
	return fmt.Sprintf("%d thread(s) per node", threads)
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
