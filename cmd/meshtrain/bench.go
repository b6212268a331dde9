package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshtrain/meshtrain/testnet"
)

func runBench(ctx context.Context, e *env, args []string) int {
	fs := newFlags(e, "[flags] [-- node flags]")
	d := testnet.DefaultBenchConfig()
	out := fs.String("out", d.Out, "folder for results.json, report.md and the plots (the nodes' logs go to OUT/work)")
	work := fs.String("work", "", "folder for the nodes' logs and snapshots (default OUT/work)")
	nodes := fs.Int("nodes", d.Nodes, "number of node processes")
	slow := fs.String("slowdowns", "2,2,4,8", "per-node slowdown factors (a shorter list repeats)")
	target := fs.Float64("target", d.Target, "test accuracy the times to target are measured at, in (0,1]")
	seeds := fs.Int("seeds", d.Seeds, "seeds in the report (1..N)")
	tuneSeed := fs.Uint64("tune-seed", d.TuneSeed, "seed the learning rates are chosen on (not a report seed)")
	dataset := fs.String("dataset", d.Dataset, "dataset: mnist or synthetic")
	dataPath := fs.String("data", "", "folder of MNIST IDX files (default: the copy built into the binary)")
	nonIID := fs.Float64("non-iid", 0, "Dirichlet alpha for label-skewed shards (0: iid)")
	model := fs.String("model", d.Model, "model: softmax or mlp:H1,H2,...")
	batch := fs.Int("batch", d.Batch, "samples per step and node")
	schedule := fs.String("schedule", d.Schedule, "LR schedule, the same for every mode (of the tuning runs, with --anneal)")
	anneal := fs.Bool("anneal", d.Anneal, "decay each mode's learning rate to zero at the end of its report runs (needs tuning)")
	modes := fs.String("modes", strings.Join(d.Modes, ","), "modes to compare: gossip, gossip-const, sync, local")
	lrGrid := fs.String("lr-grid", joinFloats(d.LRGrid), "learning rates tried for every mode but sync")
	syncGrid := fs.String("sync-lr-grid", joinFloats(d.SyncLRGrid), "learning rates tried for sync (its batch is nodes x batch)")
	lrs := fs.String("lr", "", "fixed learning rates, MODE=LR,... (those modes skip tuning)")
	duration := fs.Duration("duration", d.Duration, "wall time of each run; the final accuracy is read there")
	baseStep := fs.Duration("base-step", 0, "base step time the slowdowns multiply (0: calibrate solo at start)")
	snapEvery := fs.Duration("snapshot-every", d.SnapshotEvery, "time resolution: wall time between model snapshots")
	avgInterval := fs.Duration("avg-interval", d.AvgInterval, "gossip: wall time between the merges a node starts")
	alpha := fs.Float64("alpha", d.Alpha, "gossip: base merge weight")
	staleness := fs.String("staleness", d.Staleness, "gossip: staleness decay (gossip-const uses const)")
	wire := fs.String("wire-dtype", d.WireDType, "gossip: precision of the models sent, fp32 or fp16")
	threads := fs.Int("threads", d.Threads, "cores per node")
	settle := fs.Duration("settle", d.Settle, "wait after the nodes are up, before the common start")
	keep := fs.Bool("keep-snapshots", false, "keep the snapshot files after scoring them")
	render := fs.String("render", "", "run nothing: rewrite report.md and the plots of DIR from its results.json")
	quick := fs.Bool("quick", false, "a short smoke run: 1 seed, fixed learning rates, no annealing, target 95%, 15 s runs (explicit flags still win)")
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 && !slices.Contains(args, "--") {
		return usageError(e, "unexpected argument %q (node flags go after --)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *render != "" {
		res, err := testnet.ReadResultsFile(filepath.Join(*render, testnet.ResultsFile))
		if err != nil {
			return failure(e, err)
		}
		if err := testnet.WriteAll(*render, res); err != nil {
			return failure(e, err)
		}
		testnet.WriteSummary(e.stdout, res)
		return exitOK
	}
	cfg := d
	if *quick {
		cfg = testnet.QuickBenchConfig()
	}
	// Explicit flags override the defaults or --quick's choices.
	pick := func(name string, apply func()) {
		if set[name] || !*quick {
			apply()
		}
	}
	var errs []string
	fail := func(err error) { errs = append(errs, err.Error()) }
	cfg.Out, cfg.Work, cfg.Nodes = *out, *work, *nodes
	if s, err := testnet.ParseSlowdowns(*slow); err != nil {
		fail(err)
	} else {
		cfg.Slowdowns = s
	}
	pick("target", func() { cfg.Target = *target })
	pick("seeds", func() { cfg.Seeds = *seeds })
	pick("duration", func() { cfg.Duration = *duration })
	pick("anneal", func() { cfg.Anneal = *anneal })
	cfg.TuneSeed, cfg.Dataset, cfg.DataPath, cfg.NonIID = *tuneSeed, *dataset, *dataPath, *nonIID
	cfg.Model, cfg.Batch, cfg.Schedule = *model, *batch, *schedule
	cfg.Modes = splitList(*modes)
	var err error
	if cfg.LRGrid, err = parseFloats("--lr-grid", *lrGrid); err != nil {
		fail(err)
	}
	if cfg.SyncLRGrid, err = parseFloats("--sync-lr-grid", *syncGrid); err != nil {
		fail(err)
	}
	if set["lr-grid"] || set["sync-lr-grid"] {
		// Asking for a grid means tuning, even in a quick run.
		cfg.FixedLR = nil
	}
	if *lrs != "" {
		fixed, err := parseModeLRs(*lrs)
		if err != nil {
			fail(err)
		}
		if cfg.FixedLR == nil {
			cfg.FixedLR = map[string]float64{}
		}
		for m, lr := range fixed {
			cfg.FixedLR[m] = lr
		}
	}
	cfg.BaseStep, cfg.SnapshotEvery, cfg.AvgInterval = *baseStep, *snapEvery, *avgInterval
	cfg.Alpha, cfg.Staleness, cfg.WireDType, cfg.Threads, cfg.Settle = *alpha, *staleness, *wire, *threads, *settle
	cfg.KeepSnapshots, cfg.NodeArgs = *keep, fs.Args()
	cfg.Command = "meshtrain bench " + strings.Join(args, " ")
	cfg.Progress = e.stdout
	exe, err := os.Executable()
	if err != nil {
		return failure(e, err)
	}
	cfg.Binary = exe
	if err := cfg.Validate(); err != nil {
		fail(err)
	}
	if len(errs) > 0 {
		return usageError(e, "%s", strings.Join(errs, "; "))
	}
	fmt.Fprintf(e.stdout, "benchmark: %d nodes at %s, target %.1f%%, %d seed(s), modes %s, %v per run; writing to %s\n",
		cfg.Nodes, *slow, 100*cfg.Target, cfg.Seeds, strings.Join(cfg.Modes, ","), cfg.Duration, cfg.Out)
	res, err := testnet.RunBench(ctx, cfg)
	if err != nil {
		return failure(e, err)
	}
	if err := testnet.WriteAll(cfg.Out, res); err != nil {
		return failure(e, err)
	}
	testnet.WriteSummary(e.stdout, res)
	fmt.Fprintf(e.stdout, "wrote %s/{results.json,report.md,*.png} in %s\n", cfg.Out,
		(time.Duration(res.RunTimeS * float64(time.Second))).Round(time.Second))
	return exitOK
}

func joinFloats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseFloats(name, s string) ([]float64, error) {
	var out []float64
	for _, f := range splitList(s) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a number", name, f)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseModeLRs reads "gossip=0.1,sync=0.4".
func parseModeLRs(s string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		lr, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("--lr: %q is not MODE=LR", kv)
		}
		out[strings.TrimSpace(k)] = lr
	}
	return out, nil
}
