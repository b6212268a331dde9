//go:build e2e

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/testnet"
)

// TestBenchQuick runs `meshtrain bench --quick` (every mode, one seed, a
// few minutes on two cores) and checks what CI relies on: results.json is
// well-formed, and gossip's cluster throughput is at least twice sync's
// (the 2,2,4,8 profile's structural ratio is 2.75; sync steps at the
// slowest node's pace).
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
	if !res.Settings.Quick || len(res.Runs) != len(testnet.AllModes) {
		t.Fatalf("quick run with %d runs, want one per mode (%d)", len(res.Runs), len(testnet.AllModes))
	}
	for _, r := range res.Runs {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Mode, r.Error)
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
	for _, name := range []string{testnet.ReportFile, testnet.AccuracyPlot, testnet.BusyPlot, testnet.TimePlot} {
		if st, err := os.Stat(filepath.Join(out, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty (%v)", name, err)
		}
	}
}
