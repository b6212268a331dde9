package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/meshtrain/meshtrain/testnet"
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
		{"bench", "--cap", "0s"},
		{"bench", "--duration", "90s"}, // the old name of a run's length: runs end by themselves now
		{"bench", "--epochs", "0"},
		{"bench", "--schedule", "linear"},
		{"bench", "--tune", "sync"},
		{"bench", "--tune", "gossip", "--lr", "gossip=0.1"},
		{"bench", "--snapshot-every", "1ms"},
		{"bench", "--staleness", "poly"},
		{"bench", "--wire-dtype", "fp8"},
		{"bench", "--dataset", "cifar"},
		{"bench", "--model", "mlp:x"},
		{"bench", "--threads", "-1"},
		{"bench", "--quick", "--target", "0"},
		{"bench", "--net", "lan"},
		{"bench", "--net", "wan:40ms"},
		{"bench", "--net", "wan:40ms,100mbps"},
		{"bench", "--net", "loopback", "--net", "loopback"},
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

func benchFlags(t *testing.T, args ...string) testnet.BenchConfig {
	t.Helper()
	var o, errOut bytes.Buffer
	cfg, render, code, ok := benchConfig(&env{name: "meshtrain", stdout: &o, stderr: &errOut}, args)
	if !ok || render != "" {
		t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
	}
	return cfg
}

func TestBenchFlagsDefaultToTheNodes(t *testing.T) {
	cfg := benchFlags(t)
	if got := cfg.ModeFlags(testnet.ModeGossip); len(got) != 0 {
		t.Errorf("a default bench's gossip differs from a node's defaults by %q, want nothing", got)
	}
	if got := cfg.ModeFlags(testnet.ModeGossipConst); !slices.Equal(got, []string{"--staleness const"}) {
		t.Errorf("gossip-const differs by %q", got)
	}
	if !cfg.BudgetSync || len(cfg.FixedLR) != 0 || len(cfg.Tune) != 0 || cfg.Epochs != 40 {
		t.Errorf("default bench: budget %v, fixed %v, tune %v, epochs %v", cfg.BudgetSync, cfg.FixedLR, cfg.Tune, cfg.Epochs)
	}

	q := benchFlags(t, "--quick")
	if got := q.ModeFlags(testnet.ModeGossip); !slices.Equal(got, []string{"--epochs 8"}) {
		t.Errorf("quick gossip differs by %q, want only its short run", got)
	}
	if q.BudgetSync || q.FixedLR[testnet.ModeSync] != 0.1 || q.Seeds != 1 || q.Target != 0.95 {
		t.Errorf("quick: budget %v, fixed %v, seeds %d, target %v", q.BudgetSync, q.FixedLR, q.Seeds, q.Target)
	}
	if !slices.Equal(q.Modes, testnet.QuickModes) {
		t.Errorf("quick modes %v, want %v", q.Modes, testnet.QuickModes)
	}
	if q := benchFlags(t, "--quick", "--modes", "gossip,diloco-speed"); !slices.Equal(q.Modes, []string{"gossip", "diloco-speed"}) {
		t.Errorf("--modes with --quick: %v", q.Modes)
	}
	if q := benchFlags(t, "--quick", "--epochs", "5"); q.Epochs != 5 {
		t.Errorf("--epochs 5 with --quick: %v", q.Epochs)
	}
	if q := benchFlags(t, "--quick", "--sync-lr-grid", "0.1,0.2"); !q.BudgetSync || len(q.FixedLR) != 0 {
		t.Errorf("a sync grid in a quick run tunes sync: budget %v, fixed %v", q.BudgetSync, q.FixedLR)
	}
	tuned := benchFlags(t, "--tune", "gossip", "--lr", "sync=0.2", "--", "--holdout", "500")
	if !slices.Equal(tuned.Tune, []string{"gossip"}) || tuned.FixedLR["sync"] != 0.2 {
		t.Errorf("tune %v, fixed %v", tuned.Tune, tuned.FixedLR)
	}
	if got := tuned.ModeFlags(testnet.ModeLocal); !slices.Equal(got, []string{"--mode local", "--holdout 500"}) {
		t.Errorf("local with node flags after --: %q", got)
	}
}

func TestBenchNetDefaultsToLoopbackAndRepeats(t *testing.T) {
	if cfg := benchFlags(t); len(cfg.Networks) != 1 || cfg.Networks[0] != testnet.Loopback {
		t.Errorf("default networks %v, want loopback only", cfg.Networks)
	}
	cfg := benchFlags(t, "--quick", "--net", "wan:40ms,100mbit", "--net", "loopback")
	var got []string
	for _, n := range cfg.Networks {
		got = append(got, n.String())
	}
	if !slices.Equal(got, []string{"wan:40ms,100mbit", "loopback"}) {
		t.Errorf("networks %q, want the WAN then loopback, in the order given", got)
	}
}
