package main

import (
	"strings"
	"testing"
)

func TestBenchBadFlagsAreOneLineAndExitTwo(t *testing.T) {
	cases := [][]string{
		{"bench", "--nodes", "0"},
		{"bench", "--slowdowns", "2,0.5"},
		{"bench", "--target", "1.5"},
		{"bench", "--seeds", "0"},
		{"bench", "--tune-seed", "2"},
		{"bench", "--modes", "gossip,async"},
		{"bench", "--lr-grid", "0.1,x"},
		{"bench", "--sync-lr-grid", "-1"},
		{"bench", "--lr", "gossip"},
		{"bench", "--lr", "warp=0.1"},
		{"bench", "--duration", "0s"},
		{"bench", "--snapshot-every", "1ms"},
		{"bench", "--staleness", "poly"},
		{"bench", "--wire-dtype", "fp8"},
		{"bench", "--dataset", "cifar"},
		{"bench", "--model", "mlp:x"},
		{"bench", "--threads", "0"},
		{"bench", "--quick", "--target", "0"},
		{"bench", "--lr", "gossip=0.1"}, // annealing needs gossip's tuning runs
		{"bench", "--bogus"},
		{"bench", "stray"},
	}
	for _, args := range cases {
		code, out, errOut := run(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, exitUsage, errOut)
		}
		if n := strings.Count(errOut, "\n"); n != 1 {
			t.Errorf("%v: %d lines on stderr, want 1: %q", args, n, errOut)
		}
		if out != "" {
			t.Errorf("%v: wrote to stdout: %q", args, out)
		}
	}
}

func TestBenchReportsEveryBadFlagAtOnce(t *testing.T) {
	_, _, errOut := run(t, "bench", "--nodes", "0", "--target", "2", "--modes", "nope")
	for _, want := range []string{"nodes 0", "target 2", `"nope"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q: %q", want, errOut)
		}
	}
}

func TestBenchRenderNeedsResults(t *testing.T) {
	code, out, errOut := run(t, "bench", "--render", t.TempDir())
	if code != exitFailure || out != "" || !strings.Contains(errOut, "results.json") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestParseModeLRs(t *testing.T) {
	got, err := parseModeLRs("gossip=0.1, sync=0.4")
	if err != nil || len(got) != 2 || got["gossip"] != 0.1 || got["sync"] != 0.4 {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"gossip", "gossip=x", "=0.1x"} {
		if _, err := parseModeLRs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
