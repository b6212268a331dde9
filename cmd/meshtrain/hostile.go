//go:build testhooks

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/testnet"
)

// testnetAttack runs the hostile-swarm suite: `meshtrain testnet attack`.
func testnetAttack(ctx context.Context, e *env, args []string) int {
	fs := newFlags(e, "[flags] [-- node flags]")
	d := testnet.DefaultHostileConfig()
	attacks := fs.String("attacks", strings.Join(d.Attacks, ","), "adversary kinds to run, one swarm each: "+strings.Join(node.AdversaryKinds, ", "))
	strengths := fs.String("strength", "", "strengths other than each kind's default, KIND=X,... (see 'meshtrain node --help', --adversary)")
	nodes := fs.Int("nodes", d.Nodes, "node processes per swarm, attackers included")
	attackers := fs.Int("attackers", d.Attackers, "how many of them (the last ones) attack")
	duration := fs.Duration("duration", d.Duration, "training time of each swarm, from a common start")
	out := fs.String("out", d.Out, "folder for results.json and report.md (the nodes' logs go to OUT/work)")
	work := fs.String("work", "", "folder for the nodes' data dirs and logs (default OUT/work)")
	noBaseline := fs.Bool("no-baseline", false, "skip the all-honest swarm the accuracies are compared with")
	dataset := fs.String("dataset", d.Dataset, "dataset: mnist or synthetic")
	dataPath := fs.String("data", "", "folder of MNIST IDX files (default: the copy built into the binary)")
	model := fs.String("model", d.Model, "model: softmax or mlp:H1,H2,...")
	avgInterval := fs.Duration("avg-interval", d.AvgInterval, "wall time between the merges a node starts")
	threads := fs.Int("threads", d.Threads, "cores per node")
	settle := fs.Duration("settle", d.Settle, "wait after the nodes are up, before the common start")
	poll := fs.Duration("poll", d.PollEvery, "how often each honest node's /v1/peers is read")
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 && !slices.Contains(args, "--") {
		return usageError(e, "unexpected argument %q (node flags go after --)", fs.Arg(0))
	}
	cfg := d
	cfg.Attacks, cfg.Nodes, cfg.Attackers, cfg.Duration = splitList(*attacks), *nodes, *attackers, *duration
	cfg.Out, cfg.Work, cfg.Baseline = *out, *work, !*noBaseline
	cfg.Dataset, cfg.DataPath, cfg.Model = *dataset, *dataPath, *model
	cfg.AvgInterval, cfg.Threads, cfg.Settle, cfg.PollEvery = *avgInterval, *threads, *settle, *poll
	cfg.NodeArgs = fs.Args()
	cfg.Command = "meshtrain testnet attack " + strings.Join(args, " ")
	cfg.Progress = e.stdout
	var errs []string
	if s, err := parseStrengths(*strengths); err != nil {
		errs = append(errs, err.Error())
	} else {
		cfg.Strengths = s
	}
	exe, err := os.Executable()
	if err != nil {
		return failure(e, err)
	}
	cfg.Binary = exe
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return usageError(e, "%s", strings.Join(errs, "; "))
	}
	fmt.Fprintf(e.stdout, "hostile swarm: %d nodes, the last %d attacking; attacks %s; %v per swarm; writing to %s\n",
		cfg.Nodes, cfg.Attackers, strings.Join(cfg.Attacks, ","), cfg.Duration, cfg.Out)
	res, err := testnet.RunHostile(ctx, cfg)
	if err != nil {
		return failure(e, err)
	}
	if err := testnet.WriteHostile(cfg.Out, res); err != nil {
		return failure(e, err)
	}
	fmt.Fprintf(e.stdout, "wrote %s/{results.json,report.md} in %s\n", cfg.Out,
		time.Duration(res.RunTimeS*float64(time.Second)).Round(time.Second))
	return exitOK
}

// parseStrengths reads "scale=100,noise=0.5".
func parseStrengths(s string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("--strength: %q is not KIND=X", kv)
		}
		kind := strings.TrimSpace(k)
		if _, err := node.ParseAdversary(kind, strings.TrimSpace(v)); err != nil {
			return nil, fmt.Errorf("--strength %s: %w", kv, err)
		}
		out[kind] = x
	}
	return out, nil
}
