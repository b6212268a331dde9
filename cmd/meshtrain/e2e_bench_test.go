//go:build e2e

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/testnet"
)

// TestBenchQuick runs `meshtrain bench --quick` (every mode, one seed, no
// tuning, a minute or two on two cores, on loopback) and checks what CI
// relies on: results.json is well-formed; gossip ran with the node's
// defaults but its short run, and every gossip-like (and diloco) run ended
// by itself;
// sync ran until gossip's wall time W; and the throughputs keep to the
// profile's structure (see below).
func TestBenchQuick(t *testing.T) {
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "bench", "--quick", "--out", out)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		t.Fatalf("meshtrain bench --quick: %v\n%s", err, log.String())
	}
	t.Logf("meshtrain bench --quick:\n%s", log.String())
	br, err := testnet.ReadResultsFile(filepath.Join(out, testnet.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(br.Networks) != 1 || br.Networks[0].Network.Name != testnet.NetLoopback {
		t.Fatalf("networks %d, want loopback alone by default", len(br.Networks))
	}
	res := br.Networks[0]
	if !res.Settings.Quick || len(res.Runs) != len(testnet.QuickModes) || len(res.Tuning) != 0 {
		t.Fatalf("quick run with %d runs and %d tuning runs, want one per mode (%d) and none", len(res.Runs),
			len(res.Tuning), len(testnet.QuickModes))
	}
	// Nothing is tuned: W is gossip's wall time on seed 1.
	w := res.Settings.FixedWallS
	if ref := res.Runs[0]; ref.Mode != testnet.ModeGossip || ref.End != testnet.EndComplete || ref.WallS != w || res.Settings.WSeed != 1 {
		t.Errorf("W %.2f s on seed %d, from a %s run that ended %q after %.2f s, want gossip's complete run on seed 1", w,
			res.Settings.WSeed, ref.Mode, ref.End, ref.WallS)
	}
	// Sync keeps a rate of its own, listed when it is not the node's.
	syncDiff := []string{"--mode sync"}
	if lr := testnet.QuickBenchConfig().FixedLR[testnet.ModeSync]; lr != node.DefaultLR {
		syncDiff = append(syncDiff, fmt.Sprintf("--lr %g", lr))
	}
	want := map[string][]string{
		testnet.ModeGossip:      {fmt.Sprintf("--epochs %d", testnet.QuickEpochs)},
		testnet.ModeGossipConst: {fmt.Sprintf("--epochs %d", testnet.QuickEpochs), "--staleness const"},
		testnet.ModeSync:        append(syncDiff, "--schedule const", "--epochs 0"),
		testnet.ModeDiloco:      {"--mode diloco", fmt.Sprintf("--epochs %d", testnet.QuickEpochs)},
		testnet.ModeLocal:       {"--mode local", fmt.Sprintf("--epochs %d", testnet.QuickEpochs)},
	}
	if !reflect.DeepEqual(res.Settings.DiffersFromDefaults, want) {
		t.Errorf("differs from a node's defaults by %q, want %q", res.Settings.DiffersFromDefaults, want)
	}
	for _, r := range res.Runs {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Mode, r.Error)
			continue
		}
		wantEnd := testnet.EndComplete
		if r.Mode == testnet.ModeSync {
			wantEnd = testnet.EndStopped
		}
		if r.End != wantEnd || r.FixedWallS != w {
			t.Errorf("%s ended %q after %.2f s (accuracy read at %.2f s), want %q and W = %.2f s", r.Mode, r.End, r.WallS,
				r.FixedWallS, wantEnd, w)
		}
	}
	g, s := res.Summary[testnet.ModeGossip], res.Summary[testnet.ModeSync]
	if g == nil || s == nil || g.SamplesPerS == nil || s.SamplesPerS == nil {
		t.Fatalf("no throughput for gossip or sync: %+v %+v", g, s)
	}
	// The bars come from the profile's structure, not from how slow
	// today's sync is. Gossip's nodes step at their own pace: the swarm's
	// ceiling is the sum of the solo rates r_i. A synchronous step waits
	// for the slowest node: sync's ceiling, even with free communication,
	// is n x min r_i. Their ratio is the structural ratio
	// S = sum(1/s_i) / (n / max s_i) for slowdowns s_i:
	// (1/2+1/2+1/4+1/8) / (4/8) = 2.75 at 2,2,4,8. On these 2 shared cores
	// the four nodes together get only about 0.45 of their solo rates,
	// with or without communication (local measures it: the co-run
	// ceiling), while a sync node mostly waits and needs little CPU, so
	// against a sync at its ceiling (a DDP-grade all-reduce) gossip's lead
	// is local's rate / (n x min r_i), about 1.2x here, not 2.75x; a fixed
	// 2x bar assumed a slow sync. So:
	//
	// 1. Sync is no faster than its structural pace (else it does not
	// wait for the slowest node, or the slowdowns are not applied); 10%
	// for the snapshot instants' resolution.
	solo := res.SoloSamplesPerS
	syncPace := float64(len(solo)) * slices.Min(solo)
	if *s.SamplesPerS > 1.1*syncPace {
		t.Errorf("sync %.0f samples/s, above its structural pace %.0f (nodes x the slowest solo rate)", *s.SamplesPerS, syncPace)
	}
	// 2. Gossip gets at least half of the co-run ceiling: its merges cost
	// some CPU and the machine's load varies between runs, but a gossip
	// whose nodes wait for their peers falls far below.
	l := res.Summary[testnet.ModeLocal]
	if l == nil || l.SamplesPerS == nil {
		t.Fatalf("no throughput for local: %+v", l)
	}
	if *g.SamplesPerS < 0.5**l.SamplesPerS {
		t.Errorf("gossip %.0f samples/s, below half of local's %.0f (the machine's co-run ceiling)", *g.SamplesPerS, *l.SamplesPerS)
	}
	// Together they bound gossip / sync from below by 0.5 x (local's rate
	// / sync's structural pace) / 1.1, whatever sync's implementation.
	t.Logf("cluster samples/s: gossip %.0f, local %.0f, sync %.0f (structural pace %.0f): gossip/sync %.2fx, structural %.2fx, "+
		"co-run %.2fx", *g.SamplesPerS, *l.SamplesPerS, *s.SamplesPerS, syncPace, *g.SamplesPerS / *s.SamplesPerS,
		res.Ratios.StructuralThroughput, *l.SamplesPerS/syncPace)
	for _, r := range res.Runs {
		if r.Mode == testnet.ModeGossip && len(r.Consensus) == 0 {
			t.Errorf("gossip seed %d: no consensus distance recorded", r.Seed)
		}
	}
	for _, name := range []string{testnet.ReportFile, testnet.AccuracyPlot, testnet.BusyPlot, testnet.TimePlot, testnet.ConsensusPlot} {
		if st, err := os.Stat(filepath.Join(out, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty (%v)", name, err)
		}
	}
	report, err := os.ReadFile(filepath.Join(out, testnet.ReportFile))
	if err != nil || !strings.Contains(string(report), fmt.Sprintf("| gossip | `--epochs %d` |", testnet.QuickEpochs)) {
		t.Errorf("report.md does not list gossip's one difference from a node's defaults (%v)", err)
	}
}
