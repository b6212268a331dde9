package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/meshtrain/meshtrain/testnet"
)

func runTestnet(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprintln(e.stdout, "Usage: meshtrain testnet up [flags] [-- node flags]   start a local swarm on 127.0.0.1")
		fmt.Fprintln(e.stdout, "       meshtrain testnet down [--dir DIR]          stop a detached one")
		fmt.Fprintln(e.stdout, "       meshtrain testnet attack [flags]            run swarms with attacking test nodes and report")
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
	nodes := fs.Int("nodes", 4, "number of node processes")
	slow := fs.String("slowdowns", "2,2,4,8", "per-node slowdown factors (a shorter list repeats; empty: all 1)")
	dir := fs.String("dir", "./meshtrain-testnet", "folder for the nodes' data dirs, logs and state")
	detach := fs.Bool("detach", false, "start the nodes in the background and return; stop them with 'meshtrain testnet down'")
	every := fs.Duration("every", 2*time.Second, "refresh interval of the summary table")
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	slowdowns, err := testnet.ParseSlowdowns(*slow)
	if err != nil {
		return usageError(e, "%v", err)
	}
	if *every <= 0 {
		return usageError(e, "--every must be > 0")
	}
	exe, err := os.Executable()
	if err != nil {
		return failure(e, err)
	}
	cfg := testnet.Config{Binary: exe, Dir: *dir, Nodes: *nodes, Slowdowns: slowdowns, NodeArgs: fs.Args(), Detach: *detach}
	if err := cfg.Validate(); err != nil {
		return usageError(e, "%v", err)
	}
	fmt.Fprintf(e.stdout, "starting %d nodes in %s (logs: %s/node-N.log)\n", *nodes, *dir, *dir)
	tn, err := testnet.Up(ctx, cfg)
	if err != nil {
		return failure(e, err)
	}
	for _, m := range tn.Members {
		fmt.Fprintf(e.stdout, "node %d  %s  slowdown %gx  API http://%s\n", m.Index, m.PeerID, m.Slowdown, m.API)
	}
	if *detach {
		fmt.Fprintf(e.stdout, "detached; dashboards at the API addresses above; stop with: meshtrain testnet down --dir %s\n", *dir)
		return exitOK
	}
	fmt.Fprintln(e.stdout, "Ctrl-C stops every node (each writes a final checkpoint)")
	done := tn.Done()
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(e.stdout, "stopping...")
			tn.Stop(30 * time.Second)
			testnet.WriteTable(e.stdout, tn.Summary())
			return exitOK
		case <-done:
			testnet.WriteTable(e.stdout, tn.Summary())
			fmt.Fprintln(e.stdout, "every node has exited")
			return exitOK
		case <-tick.C:
			fmt.Fprintln(e.stdout)
			testnet.WriteTable(e.stdout, tn.Summary())
		}
	}
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
