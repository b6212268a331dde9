//go:build e2e

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/testnet"
)

// TestBenchQuick runs `meshtrain bench --quick` (every mode, one seed, no
// tuning, a minute or two on two cores) and checks what CI relies on:
// results.json is well-formed; gossip ran with the node's defaults but its
// short run, and every gossip-like run ended by itself; sync ran until
// gossip's wall time W; and gossip's cluster throughput is at least twice
// sync's (the 2,2,4,8 profile's structural ratio is 2.75; sync steps at
// the slowest node's pace).
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
	res, err := testnet.ReadResultsFile(filepath.Join(out, testnet.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Settings.Quick || len(res.Runs) != len(testnet.AllModes) || len(res.Tuning) != 0 {
		t.Fatalf("quick run with %d runs and %d tuning runs, want one per mode (%d) and none", len(res.Runs),
			len(res.Tuning), len(testnet.AllModes))
	}
	// Nothing is tuned: W is gossip's wall time on seed 1.
	w := res.Settings.FixedWallS
	if ref := res.Runs[0]; ref.Mode != testnet.ModeGossip || ref.End != testnet.EndComplete || ref.WallS != w || res.Settings.WSeed != 1 {
		t.Errorf("W %.2f s on seed %d, from a %s run that ended %q after %.2f s, want gossip's complete run on seed 1", w,
			res.Settings.WSeed, ref.Mode, ref.End, ref.WallS)
	}
	want := map[string][]string{
		testnet.ModeGossip:      {fmt.Sprintf("--epochs %d", testnet.QuickEpochs)},
		testnet.ModeGossipConst: {fmt.Sprintf("--epochs %d", testnet.QuickEpochs), "--staleness const"},
		testnet.ModeSync:        {"--mode sync", "--lr 0.1", "--schedule const", "--epochs 0"}, // sync keeps a rate of its own
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
	if ratio := *g.SamplesPerS / *s.SamplesPerS; ratio < 2 {
		t.Errorf("gossip %.0f samples/s is %.2fx sync's %.0f, want >= 2x (structural %.2fx)",
			*g.SamplesPerS, ratio, *s.SamplesPerS, res.Ratios.StructuralThroughput)
	}
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
