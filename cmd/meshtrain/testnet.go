package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/testnet"
)

func runTestnet(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprintln(e.stdout, "Usage: meshtrain testnet up [flags] [-- node flags]   start a local swarm on 127.0.0.1")
		fmt.Fprintln(e.stdout, "       meshtrain testnet down [--dir DIR]          stop a detached one")
		fmt.Fprintln(e.stdout, "       meshtrain testnet attack [flags]            "+attackSummary)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	sub := &env{stdout: e.stdout, stderr: e.stderr, name: e.name + " " + args[0]}
	switch args[0] {
	case "up":
		return testnetUp(ctx, sub, args[1:])
	case "down":
		return testnetDown(sub, args[1:])
	case "attack":
		return testnetAttack(ctx, sub, args[1:])
	}
	return usageError(e, "unknown subcommand %q (want up, down or attack)", args[0])
}

func testnetUp(ctx context.Context, e *env, args []string) int {
	fs := newFlags(e, "[flags] [-- node flags]")
	nodes := fs.Int("nodes", 4, fmt.Sprintf("number of node processes (at most %d)", testnet.MaxNodes))
	slow := fs.String("slowdowns", "2,2,4,8", "per-node slowdown factors (a shorter list repeats; empty: all 1)")
	dir := fs.String("dir", "./meshtrain-testnet", "folder for the nodes' data dirs, logs and state")
	detach := fs.Bool("detach", false, "start the nodes in the background and return; stop them with 'meshtrain testnet down'")
	resume := fs.Bool("resume", false, "resume the runs the nodes' data dirs hold (default: every node starts a fresh run)")
	every := fs.Duration("every", 2*time.Second, "refresh interval of the summary table")
	settle := fs.Duration("settle", 30*time.Second, "longest wait for the nodes to find each other before training starts")
	duration := fs.Duration("duration", 0, "stop every node after this long of training, as Ctrl-C does (0: when the run ends, or on Ctrl-C)")
	churnRate := fs.String("churn", "0",
		"share of the live nodes replaced per minute, e.g. 0.2 or 20% (0: no churn); a replacement stops a random live node (SIGTERM, SIGKILL after --churn-grace) and starts a returning or a new one")
	neverReturn := fs.String("never-return", "30%",
		"with --churn: share of the stopped nodes that never come back; the others may be started again later on their data dir and resume")
	churnSeed := fs.Uint64("churn-seed", 1, "with --churn: seed of its draws (when, who leaves, who joins)")
	churnGrace := fs.Duration("churn-grace", testnet.DefaultChurnGrace, "with --churn: how long a stopped node has to write its final checkpoint and exit before SIGKILL")
	target := fs.String("target", "90%", "test accuracy whose first crossing the sessions record times, e.g. 0.9 or 90%")
	minSession := fs.Duration("min-session", 2*time.Minute,
		"with --churn: every session (a node's process, start to exit) that lasts this long must reach --target, or the command fails")
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	// Every bad flag is reported at once.
	var errs []error
	slowdowns, err := testnet.ParseSlowdowns(*slow)
	if err != nil {
		errs = append(errs, err)
	}
	if *every <= 0 || *settle <= 0 {
		errs = append(errs, errors.New("--every and --settle must be > 0"))
	}
	if *duration < 0 {
		errs = append(errs, fmt.Errorf("--duration %v: must be >= 0", *duration))
	}
	if *duration > 0 && *detach {
		errs = append(errs, errors.New("--duration needs this process to stop the nodes: not with --detach"))
	}
	if *minSession <= 0 {
		errs = append(errs, fmt.Errorf("--min-session %v: must be > 0", *minSession))
	}
	share := func(flag, s string) (float64, bool) {
		v, err := testnet.ParseShare(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", flag, err))
		}
		return v, err == nil
	}
	var churn testnet.ChurnConfig
	churn.Rate, _ = share("churn", *churnRate)
	churn.NeverReturn, _ = share("never-return", *neverReturn)
	churn.Seed, churn.Grace = *churnSeed, *churnGrace
	acc, ok := share("target", *target)
	if ok && acc <= 0 {
		errs = append(errs, fmt.Errorf("--target %s: must be > 0", *target))
	}
	exe, err := os.Executable()
	if err != nil {
		return failure(e, err)
	}
	cfg := testnet.Config{Binary: exe, Dir: *dir, Nodes: *nodes, Slowdowns: slowdowns, NodeArgs: fs.Args(), Detach: *detach,
		Gate: true, Fresh: !*resume, Threads: 1, Churn: churn, Target: acc}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return usageError(e, "%v", err)
	}
	if testnet.RunningDetached(*dir) {
		return failure(e, fmt.Errorf("a testnet started with --detach still runs in %s: stop it with 'meshtrain testnet down --dir %s' "+
			"or pick another --dir", *dir, *dir))
	}
	if _, given := flagValue(cfg.NodeArgs, "base-step"); !given && len(slowdowns) > 0 {
		// One base step for every node, measured alone before they start,
		// so the slowdowns are the speed ratios they say (as in the bench).
		dataset, _ := flagValue(cfg.NodeArgs, "dataset")
		dataPath, _ := flagValue(cfg.NodeArgs, "data")
		model, _ := flagValue(cfg.NodeArgs, "model")
		batchFlag, _ := flagValue(cfg.NodeArgs, "batch")
		d := node.DefaultConfig()
		batch, err := strconv.Atoi(cmp.Or(batchFlag, strconv.Itoa(d.Train.Batch)))
		if err != nil {
			return usageError(e, "--batch %q: %v", batchFlag, err)
		}
		fmt.Fprintf(e.stdout, "calibrating the base step the slowdowns multiply (one thread, alone)...\n")
		if cfg.BaseStep, err = testnet.CalibrateBaseStep(cmp.Or(dataset, d.Dataset), dataPath, cmp.Or(model, d.Train.Model), batch); err != nil {
			return failure(e, err)
		}
	}
	what := "fresh runs"
	if *resume {
		what = "resuming their data dirs"
	}
	base := cfg.BaseStep.Round(time.Microsecond).String()
	if v, given := flagValue(cfg.NodeArgs, "base-step"); given {
		base = v + " (--base-step)"
	}
	fmt.Fprintf(e.stdout, "starting %d nodes in %s, %s (logs: %s/node-N.log); base step %s\n", *nodes, *dir, what, *dir, base)
	tn, err := testnet.Up(ctx, cfg)
	if err != nil {
		return failure(e, err)
	}
	for _, m := range tn.Members {
		fmt.Fprintf(e.stdout, "node %d  %s  slowdown %gx  API http://%s\n", m.Index, m.PeerID, m.Slowdown, m.API)
	}
	seen, err := tn.Release(ctx, *settle)
	if err != nil {
		if !*detach {
			tn.Stop(30 * time.Second)
		}
		return failure(e, err)
	}
	var short []string
	for i, k := range seen {
		if k < *nodes-1 {
			short = append(short, fmt.Sprintf("node %d sees %d", i, k))
		}
	}
	if len(short) > 0 {
		fmt.Fprintf(e.stdout, "training starts although not every node sees the others after %v (%s)\n", *settle, strings.Join(short, ", "))
	} else {
		fmt.Fprintf(e.stdout, "every node sees the other %d: training starts\n", *nodes-1)
	}
	if *detach {
		fmt.Fprintf(e.stdout, "detached; dashboards at the API addresses above; stop with: meshtrain testnet down --dir %s\n", *dir)
		return exitOK
	}
	fmt.Fprintln(e.stdout, "Ctrl-C stops every node (each writes a final checkpoint)")
	if churn.Rate > 0 {
		fmt.Fprintf(e.stdout, "churn: %s of the live nodes replaced per minute, %s of the leavers never return (seed %d)\n",
			*churnRate, *neverReturn, churn.Seed)
	}
	tn.StartChurn(ctx)
	done := tn.Done()
	tick := time.NewTicker(*every)
	defer tick.Stop()
	var stopAt <-chan time.Time
	if *duration > 0 {
		t := time.NewTimer(*duration)
		defer t.Stop()
		stopAt = t.C
	}
	interrupted := false
loop:
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(e.stdout, "stopping...")
			tn.Stop(30 * time.Second)
			interrupted = true
			break loop
		case <-stopAt:
			fmt.Fprintf(e.stdout, "--duration %v reached: stopping...\n", *duration)
			tn.Stop(30 * time.Second)
			interrupted = true
			break loop
		case <-done:
			break loop
		case <-tick.C:
			fmt.Fprintln(e.stdout)
			testnet.WriteTable(e.stdout, tn.Summary())
		}
	}
	<-done
	fmt.Fprintln(e.stdout)
	testnet.WriteTable(e.stdout, tn.Summary())
	fmt.Fprintln(e.stdout)
	report := testnet.Summarize(tn.Sessions(), cfg.Target, *minSession)
	if churn.Rate > 0 {
		c := tn.Churn()
		report.Churn = &c
	}
	if err := testnet.WriteSessionsFile(*dir, report); err != nil {
		return failure(e, err)
	}
	if churn.Rate > 0 {
		// The sessions are the verdict: a node's one outcome means
		// little when it came and went.
		testnet.WriteSessions(e.stdout, report)
		fmt.Fprintf(e.stdout, "sessions record: %s\n", filepath.Join(*dir, testnet.SessionsFile))
		if !report.OK() {
			return failure(e, fmt.Errorf("%d long sessions missed %s and %d sessions failed; see %s",
				len(report.Missed), *target, len(report.Failed), filepath.Join(*dir, testnet.SessionsFile)))
		}
		return exitOK
	}
	outs := tn.Outcomes(interrupted)
	testnet.WriteOutcomes(e.stdout, outs)
	var failed []string
	for _, o := range outs {
		if !o.OK() {
			failed = append(failed, fmt.Sprintf("node %d %s", o.Index, o.Problem))
		}
	}
	switch {
	case len(failed) > 0:
		return failure(e, fmt.Errorf("%d of %d nodes did not end well: %s", len(failed), len(outs), strings.Join(failed, "; ")))
	case interrupted:
		fmt.Fprintf(e.stdout, "interrupted: every node saved its progress; 'meshtrain testnet up --resume' continues the run\n")
	default:
		fmt.Fprintf(e.stdout, "every node finished the run\n")
	}
	return exitOK
}

// flagValue finds --name V or --name=V (one or two dashes) in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func testnetDown(e *env, args []string) int {
	fs := newFlags(e, "[flags]")
	dir := fs.String("dir", "./meshtrain-testnet", "folder of the detached testnet")
	grace := fs.Duration("grace", 30*time.Second, "how long nodes get to write their final checkpoint before they are killed")
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(e, "unexpected argument %q", fs.Arg(0))
	}
	n, err := testnet.Down(*dir, *grace)
	if err != nil {
		return failure(e, err)
	}
	fmt.Fprintf(e.stdout, "stopped %d nodes\n", n)
	return exitOK
}
