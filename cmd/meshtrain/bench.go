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
	cfg, render, code, ok := benchConfig(e, args)
	if !ok {
		return code
	}
	if render != "" {
		res, err := testnet.ReadResultsFile(filepath.Join(render, testnet.ResultsFile))
		if err != nil {
			return failure(e, err)
		}
		if err := testnet.WriteAll(render, res); err != nil {
			return failure(e, err)
		}
		testnet.WriteSummary(e.stdout, res)
		return exitOK
	}
	names := make([]string, len(cfg.Networks))
	for i, n := range cfg.Networks {
		names[i] = n.String()
	}
	fmt.Fprintf(e.stdout, "benchmark: %d nodes at %s, target %.1f%%, %d seed(s), modes %s, gossip %g epochs (cap %v per run), on %s; writing to %s\n",
		cfg.Nodes, joinFloats(cfg.Slowdowns), 100*cfg.Target, cfg.Seeds, strings.Join(cfg.Modes, ","), cfg.Epochs, cfg.Cap,
		strings.Join(names, " then "), cfg.Out)
	for _, m := range cfg.Modes {
		if m == testnet.ModeSync {
			continue // its rate and run length come from its tuning runs
		}
		diff := strings.Join(cfg.ModeFlags(m), " ")
		if diff == "" {
			diff = "none"
		}
		fmt.Fprintf(e.stdout, "  %s differs from a node's defaults by: %s\n", m, diff)
	}
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

// benchConfig reads bench's flags: the benchmark to run, or the results
// dir to render. ok=false means exit with code (a usage error or --help).
func benchConfig(e *env, args []string) (cfg testnet.BenchConfig, render string, code int, ok bool) {
	fs := newFlags(e, "[flags] [-- node flags]")
	d := testnet.DefaultBenchConfig()
	out := fs.String("out", d.Out, "folder for results.json, report.md and the plots (the nodes' logs go to OUT/work)")
	work := fs.String("work", "", "folder for the nodes' logs and snapshots (default OUT/work)")
	nodes := fs.Int("nodes", d.Nodes, "number of node processes")
	slow := fs.String("slowdowns", joinFloats(d.Slowdowns), "per-node slowdown factors (a shorter list repeats)")
	target := fs.Float64("target", d.Target, "test accuracy the times to target are measured at, in (0,1]")
	seeds := fs.Int("seeds", d.Seeds, "seeds in the report (1..N)")
	tuneSeed := fs.Uint64("tune-seed", d.TuneSeed, "seed W and the learning rates are measured on (not a report seed)")
	dataset := fs.String("dataset", d.Dataset, "dataset: mnist or synthetic")
	dataPath := fs.String("data", "", "folder of MNIST IDX files (default: the copy built into the binary)")
	nonIID := fs.Float64("non-iid", 0, "Dirichlet alpha for label-skewed shards (0: iid)")
	model := fs.String("model", d.Model, "model: softmax or mlp:H1,H2,...")
	batch := fs.Int("batch", d.Batch, "samples per step and node")
	epochs := fs.Float64("epochs", d.Epochs,
		"length of gossip's run (and gossip-const's and local's) in passes over the training set on the run clock; every node ends it by itself")
	schedule := fs.String("schedule", d.Schedule, "LR schedule over every run that ends by itself (sync's report runs too)")
	modes := fs.String("modes", strings.Join(d.Modes, ","), "modes to compare: gossip, gossip-const, sync, diloco, diloco-speed, local")
	var nets listFlag
	fs.Var(&nets, "net", "network between the nodes: loopback (default), or wan:RTT,RATE[,LOSS] (e.g. wan:40ms,100mbit,0.1%), "+
		"emulated in user space; repeat it to run the whole benchmark on each network in turn")
	tune := fs.String("tune", "", "modes besides sync whose learning rate is tuned on --lr-grid, e.g. gossip (to choose the node's default)")
	lrGrid := fs.String("lr-grid", joinFloats(d.LRGrid), "learning rates tried for the modes in --tune")
	syncGrid := fs.String("sync-lr-grid", joinFloats(d.SyncLRGrid), "learning rates tried for sync (its batch is nodes x batch)")
	lrs := fs.String("lr", "", fmt.Sprintf("fixed learning rates, MODE=LR,... (default: the node's %g; sync: tuned)", d.LR))
	capFlag := fs.Duration("cap", d.Cap, "longest wall time of a run: what still runs then is stopped and the run marked capped")
	baseStep := fs.Duration("base-step", 0, "base step time the slowdowns multiply (0: calibrate solo at start)")
	snapEvery := fs.Duration("snapshot-every", d.SnapshotEvery, "time resolution: wall time between model snapshots")
	avgInterval := fs.Duration("avg-interval", d.AvgInterval, "gossip: wall time between the merges a node starts (default: the node's)")
	alpha := fs.Float64("alpha", d.Alpha, "gossip: base merge weight (default: the node's)")
	staleness := fs.String("staleness", d.Staleness, "gossip: staleness decay (gossip-const uses const; default: the node's)")
	wire := fs.String("wire-dtype", d.WireDType, "precision of what the nodes send (gossip's models; sync's and diloco's all-reduced updates): auto, fp32, fp16 or int8 (default: the node's)")
	threads := fs.Int("threads", d.Threads, "cores per node (0: the node's default, every core)")
	settle := fs.Duration("settle", d.Settle, "wait after the nodes are up, before the common start")
	keep := fs.Bool("keep-snapshots", false, "keep the snapshot files after scoring them")
	renderDir := fs.String("render", "", "run nothing: rewrite report.md and the plots of DIR from its results.json")
	quick := fs.Bool("quick", false, fmt.Sprintf("a short smoke run: 1 seed, no tuning (gossip at the node's defaults but --epochs %d, "+
		"sync at lr 0.1 with no end, stopped at gossip's wall time, every mode but diloco-speed), target 95%%; explicit flags still win", testnet.QuickEpochs))
	if code, ok := parse(e, fs, args); !ok {
		return cfg, "", code, false
	}
	if fs.NArg() > 0 && !slices.Contains(args, "--") {
		return cfg, "", usageError(e, "unexpected argument %q (node flags go after --)", fs.Arg(0)), false
	}
	if *renderDir != "" {
		return cfg, *renderDir, 0, true
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg = d
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
	pick("cap", func() { cfg.Cap = *capFlag })
	pick("epochs", func() { cfg.Epochs = *epochs })
	cfg.TuneSeed, cfg.Dataset, cfg.DataPath, cfg.NonIID = *tuneSeed, *dataset, *dataPath, *nonIID
	cfg.Model, cfg.Batch, cfg.Schedule = *model, *batch, *schedule
	cfg.Tune = splitList(*tune)
	pick("modes", func() { cfg.Modes = splitList(*modes) })
	if len(nets) > 0 {
		cfg.Networks = nil
		for _, s := range nets {
			n, err := testnet.ParseNet(s)
			if err != nil {
				fail(err)
				continue
			}
			cfg.Networks = append(cfg.Networks, n)
		}
	}
	var err error
	if cfg.LRGrid, err = parseFloats("--lr-grid", *lrGrid); err != nil {
		fail(err)
	}
	if cfg.SyncLRGrid, err = parseFloats("--sync-lr-grid", *syncGrid); err != nil {
		fail(err)
	}
	if set["sync-lr-grid"] && cfg.FixedLR != nil {
		// Asking for sync's grid means tuning it, even in a quick run, and
		// then its report runs can be budgeted to W.
		delete(cfg.FixedLR, testnet.ModeSync)
		cfg.BudgetSync = true
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
		return cfg, "", failure(e, err), false
	}
	cfg.Binary = exe
	if err := cfg.Validate(); err != nil {
		fail(err)
	}
	if len(errs) > 0 {
		return cfg, "", usageError(e, "%s", strings.Join(errs, "; ")), false
	}
	return cfg, "", 0, true
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
