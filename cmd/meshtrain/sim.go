package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/sim"
	"github.com/meshtrain/meshtrain/testnet"
)

func runSim(ctx context.Context, e *env, args []string) int {
	cfg, out, code, ok := simConfig(e, args)
	if !ok {
		return code
	}
	pop := fmt.Sprintf("%d nodes", cfg.Nodes)
	if cfg.Trace != nil {
		pop = fmt.Sprintf("%d trace sessions", len(cfg.Trace))
	}
	fmt.Fprintf(e.stdout, "simulating %s for %v of virtual time (%s, churn %s, step %v, seed %d); writing to %s\n",
		pop, cfg.Duration, cfg.Model, sim.SettingsOf(cfg).Churn, cfg.StepMedian, cfg.Seed, out)
	start := time.Now()
	res, err := sim.Run(ctx, cfg, func(p sim.Point) {
		fmt.Fprintf(e.stderr, "t=%6.0fs live=%5d avg-model=%5.1f%% nodes=%5.1f%% (worst %5.1f%%) consensus=%.3g lost=%d bytes/node/s=%.0f (%s real)\n",
			p.T, p.Live, 100*p.AverageAccuracy, 100*p.NodeAccuracyMean, 100*p.NodeAccuracyMin, p.ConsensusDistance,
			p.LostSamples, p.BytesPerNodeS, time.Since(start).Round(time.Second))
	})
	if err != nil {
		return failure(e, err)
	}
	wall := time.Since(start)
	if err := sim.Write(out, cfg, res, wall); err != nil {
		return failure(e, err)
	}
	f := res.Final()
	fmt.Fprintf(e.stdout, "at %.0f s: %d live, average model %.2f%%, nodes %.2f%% (worst %.2f%%), consensus distance %.3g, "+
		"%d of %d samples lost to churn; %d steps, %d merges, %d events in %s\n",
		res.EndS, f.Live, 100*f.AverageAccuracy, 100*f.NodeAccuracyMean, 100*f.NodeAccuracyMin, f.ConsensusDistance,
		res.LostSamples, res.Samples, res.Steps, res.Merges, res.Events, wall.Round(100*time.Millisecond))
	fmt.Fprintf(e.stdout, "wrote %s/{%s,%s,*.png}\n", out, sim.ResultsFile, sim.ReportFile)
	return exitOK
}

// simConfig maps sim's flags onto sim.Config. ok=false means exit with
// code (a usage error or --help).
func simConfig(e *env, args []string) (cfg sim.Config, out string, code int, ok bool) {
	fs := newFlags(e, "[flags]")
	d := sim.DefaultConfig()
	outDir := fs.String("out", "sim-out", "folder for results.json, report.md and the plots")
	nodes := fs.Int("nodes", d.Nodes, "population at the start, kept about constant under churn")
	duration := fs.Duration("duration", d.Duration, "virtual time to simulate")
	seed := fs.Uint64("seed", d.Seed, "seed of every random draw: the same seed gives the same run")
	dataset := fs.String("dataset", d.Dataset, "dataset: mnist (built in) or synthetic")
	model := fs.String("model", d.Model, "model: softmax or mlp:H1,H2,...")
	batch := fs.Int("batch", d.Batch, "samples per step")
	lr := fs.Float64("lr", d.LR, "base learning rate (default: the node's)")
	schedule := fs.String("schedule", d.Schedule, "LR schedule over the run clock (default: the node's)")
	epochs := fs.Float64("epochs", d.Epochs, "run length in passes over the training set by the whole swarm; the simulation ends there (0: no end)")
	shards := fs.Int("shards", d.Shards, "disjoint iid shards of the training set; node i trains shard i mod N (0: one per starting node, 1: all of it)")
	step := fs.Duration("step", d.StepMedian, "median virtual step time")
	spread := fs.Float64("step-spread", d.StepSpread, "lognormal sigma of the nodes' step times (0: all alike)")
	slowdowns := fs.String("slowdowns", "", "per-node step time multipliers instead of the lognormal draw, repeating (e.g. 2,2,4,8)")
	avgInterval := fs.Duration("avg-interval", d.AvgInterval, "shortest virtual time between the exchanges a node starts (default: the node's)")
	peers := fs.Int("peers", d.Peers, "live nodes a node knows when it picks a partner, sampled afresh each round (0: all)")
	alpha := fs.Float64("alpha", d.Merger.Alpha, "base merge weight (default: the node's)")
	staleness := fs.String("staleness", d.Merger.Staleness.String(), "staleness decay: const, poly:P, exp:D or hinge:A,B (default: the node's)")
	lag := fs.String("staleness-lag", d.Merger.Lag.String(), "staleness measure: relative, steps or age (default: the node's)")
	momentum := fs.String("momentum-policy", d.Merger.Momentum.String(), "momentum on merge: keep, reset or mix (default: the node's)")
	ahead := fs.String("staleness-ahead", d.Merger.Ahead.String(), "weight of a model ahead of ours: fresh or pull (default: the node's)")
	catchUp := fs.Float64("catch-up", d.CatchUp, "pull the model of the second most advanced peer when it is ahead by more than this many samples (0: never; default: the node's)")
	lrScaling := fs.String("lr-scaling", d.LRScaling, "merges (each node scales its learning rate by sqrt(48 / its steps per merge), within [1, 2]) or none (default: the node's)")
	outerEvery := fs.Int("outer-every", d.OuterEvery, "local steps between two slow-momentum steps of a node (0: none; default: the node's)")
	outerLR := fs.Float64("outer-lr", d.OuterLR, "slow momentum: outer learning rate (default: the node's)")
	outerMomentum := fs.Float64("outer-momentum", d.OuterMomentum, "slow momentum: outer Nesterov momentum, in [0,1) (default: the node's)")
	ema := fs.Float64("ema", d.EMA, "decay per step of the moving average of its weights each node reports and is scored on (0: the weights; default: the node's)")
	emaPeers := fs.Float64("ema-peers", d.EMAPeers, "weight in [0,1] with which that average also takes in each peer's model a node merges (default: the node's)")
	netFlag := fs.String("net", fmt.Sprintf("wan:%v,%gmbit", 2*d.Latency, d.Bandwidth*8/1e6),
		"link between any two nodes: wan:RTT,RATE (latency RTT/2 each way, RATE per node, e.g. wan:100ms,10mbit)")
	wire := fs.String("wire-dtype", "fp16", "precision of models on the wire: fp16 or fp32 (sets the bytes sent)")
	churn := fs.String("churn", sim.ChurnString(d.Churn), "session lengths: none, weibull:SHAPE,SCALE or pareto:SHAPE,SCALE (scale in s)")
	never := fs.Float64("never-return", d.Churn.NeverReturn, "share of leaving nodes that never come back, in [0,1]")
	trace := fs.String("trace", "", "CSV of sessions node_id,join_s,leave_s to replay instead of --nodes and --churn")
	reportEvery := fs.Duration("report-every", d.ReportEvery, "virtual time between report points")
	evalNodes := fs.Int("eval-nodes", d.EvalNodes, "random live nodes whose own models are scored at each point")
	evalSamples := fs.Int("eval-samples", d.EvalSamples, "size of the fixed test subset models are scored on")
	threads := fs.Int("threads", d.Threads, "goroutines that score models (the simulation itself is one)")
	if code, ok := parse(e, fs, args); !ok {
		return cfg, "", code, false
	}
	if fs.NArg() > 0 {
		return cfg, "", usageError(e, "unexpected argument %q", fs.Arg(0)), false
	}
	cfg = d
	cfg.Nodes, cfg.Duration, cfg.Seed, cfg.Dataset, cfg.Model = *nodes, *duration, *seed, *dataset, *model
	cfg.Batch, cfg.LR, cfg.Schedule, cfg.Epochs, cfg.Shards = *batch, *lr, *schedule, *epochs, *shards
	cfg.StepMedian, cfg.StepSpread, cfg.AvgInterval, cfg.Peers, cfg.CatchUp = *step, *spread, *avgInterval, *peers, *catchUp
	cfg.ReportEvery, cfg.EvalNodes, cfg.EvalSamples, cfg.Threads = *reportEvery, *evalNodes, *evalSamples, *threads
	cfg.Churn.NeverReturn = *never
	cfg.OuterEvery, cfg.OuterLR, cfg.OuterMomentum = *outerEvery, *outerLR, *outerMomentum
	cfg.EMA, cfg.EMAPeers = *ema, *emaPeers
	cfg.LRScaling = *lrScaling
	cfg.Merger.Alpha = *alpha
	var errs []error
	if *slowdowns != "" {
		s, err := parseFloats("slowdowns", *slowdowns)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.Slowdowns = s
	}
	if s, err := averaging.ParseStaleness(*staleness); err != nil {
		errs = append(errs, err)
	} else {
		cfg.Merger.Staleness = s
	}
	if l, err := averaging.ParseLag(*lag); err != nil {
		errs = append(errs, err)
	} else {
		cfg.Merger.Lag = l
	}
	if a, err := averaging.ParseAhead(*ahead); err != nil {
		errs = append(errs, err)
	} else {
		cfg.Merger.Ahead = a
	}
	if m, err := averaging.ParseMomentumPolicy(*momentum); err != nil {
		errs = append(errs, err)
	} else {
		cfg.Merger.Momentum = m
	}
	if n, err := testnet.ParseNet(*netFlag); err != nil || n.Kind != testnet.NetWAN || n.WAN.Loss != 0 {
		// The bench's parser names its own command; say it for ours.
		errs = append(errs, fmt.Errorf("net %q: want wan:RTT,RATE such as wan:100ms,10mbit (no loss: it is not simulated)", *netFlag))
	} else {
		cfg.Latency, cfg.Bandwidth = n.WAN.RTT/2, n.WAN.Rate/8
	}
	switch *wire {
	case "fp16":
		cfg.WireBytes = 2
	case "fp32":
		cfg.WireBytes = 4
	default:
		errs = append(errs, fmt.Errorf("wire-dtype %q: want fp16 or fp32", *wire))
	}
	if err := sim.ParseChurn(*churn, &cfg.Churn); err != nil {
		errs = append(errs, err)
	}
	if *trace != "" {
		if t, err := sim.ReadTraceFile(*trace); err != nil {
			errs = append(errs, err)
		} else {
			cfg.Trace = t
		}
	}
	// A flag that did not parse left its default in cfg, so Validate
	// still reports every other bad field with it.
	if err := cfg.Validate(); err != nil {
		errs = append(errs, errors.New(strings.ReplaceAll(err.Error(), "sim: bad config: ", "")))
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, "", usageError(e, "%v", err), false
	}
	return cfg, *outDir, 0, true
}
