//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/sim"
	"github.com/meshtrain/meshtrain/testnet"
)

// The profile the simulator is checked against real nodes on
// (docs/scale.md, "The simulator against real nodes"): 4 softmax nodes
// stepping every 100, 200, 400 and 800 ms (base step 50 ms times 2, 4, 8
// and 16), the node's defaults otherwise. The real nodes run the trust
// checks (on by default), which the simulator does not model: they must
// not slow an honest mixed-speed swarm, nor make its nodes ignore each
// other.
const (
	agreeTarget    = 0.88
	agreeSlowdowns = "2,4,8,16"
	agreeBaseStep  = "50ms"
	// agreeCap ends the real run (its run is 40 epochs long) and the
	// simulated one: both reach the target in about 8 s.
	agreeCap = "15s"
	// agreeBound: the two times to target may differ by this factor.
	agreeBound = 1.25
)

// agreeBenchArgs is the real run: `meshtrain bench`, which releases the
// nodes together and scores their snapshots every 250 ms after the run.
func agreeBenchArgs(out string) []string {
	return []string{"bench", "--nodes", "4", "--slowdowns", agreeSlowdowns, "--base-step", agreeBaseStep,
		"--model", "softmax", "--target", fmt.Sprint(agreeTarget), "--modes", "gossip", "--seeds", "1", "--cap", agreeCap,
		"--out", out}
}

// agreeSimArgs is the same swarm in the simulator: every node scored
// every 250 ms of virtual time on the whole test set, as the bench scores
// the snapshots; the node's run length (40 epochs, the warm-up's base).
func agreeSimArgs(out string) []string {
	return []string{"sim", "--nodes", "4", "--slowdowns", agreeSlowdowns, "--step", agreeBaseStep, "--step-spread", "0",
		"--churn", "none", "--net", "wan:1ms,1000mbit", "--model", "softmax", "--epochs", "40", "--seed", "1",
		"--report-every", "250ms", "--eval-nodes", "4", "--eval-samples", "10000", "--duration", agreeCap, "--out", out}
}

// TestE2ESimAgreement runs one small profile for real and in the
// simulator and checks that their times to target agree within 25%. The
// time to target is the bench's: every node's own model at the target,
// the last node's first time there, from the common start (the release of
// the nodes; virtual time 0), read at instants 250 ms apart both ways.
// The real run takes about 22 s (5 s to start the nodes, 3 s to settle,
// the 15 s cap, 2 s to score), the simulated one 2 to 3 s.
func TestE2ESimAgreement(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	run, solo, out := agreeRealRun(ctx, t)
	realBy := time.Since(began)
	simRes := agreeSimRun(ctx, t)
	t.Logf("wall time: real run %.1f s, simulation %.1f s", realBy.Seconds(), (time.Since(began) - realBy).Seconds())

	// The real swarm must have kept its pace: the comparison assumes the
	// steps the slowdowns say. On a machine too busy to schedule four
	// sleeping nodes on time it is the machine, not the simulator, that
	// differs.
	if run.SamplesPerS < 0.9*solo {
		t.Fatalf("the real nodes trained %.0f samples/s, below 90%% of the %.0f their steps make: the machine is too busy "+
			"for the comparison", run.SamplesPerS, solo)
	}
	checkNoneIgnored(t, filepath.Join(out, "work", "run-gossip-s1-lr0.1"))
	if run.TimeToTargetS == nil {
		t.Fatalf("the real nodes did not all reach %.0f%% within %s: per node %v", 100*agreeTarget, agreeCap,
			fmtTimes(run.NodeTimeToTargetS))
	}
	realS := *run.TimeToTargetS
	perNode := simRes.TimesToTarget(agreeTarget)
	if len(perNode) != 4 {
		t.Fatalf("in the simulator, %d of 4 nodes reached %.0f%% within %s: %v", len(perNode), 100*agreeTarget, agreeCap, perNode)
	}
	simNodes := make([]*float64, 4)
	simS, simFirst := 0.0, math.Inf(1)
	for id, at := range perNode {
		simNodes[id] = &at
		simS, simFirst = max(simS, at), min(simFirst, at)
	}
	t.Logf("time to %.0f%%, every node: real %.2f s, simulated %.2f s: ratio %.3f", 100*agreeTarget, realS, simS, realS/simS)
	t.Logf("per node (slowdowns %s): real %s; simulated %s", agreeSlowdowns, fmtTimes(run.NodeTimeToTargetS), fmtTimes(simNodes))
	t.Logf("first node: real %s, simulated %.2f s; average model: real %s, simulated %s; real nodes %.0f samples/s (their steps: %.0f)",
		fmtTime(run.FirstNodeTimeS), simFirst, fmtTime(run.AverageTimeToTargetS), simAverageTime(simRes, agreeTarget),
		run.SamplesPerS, solo)
	if max(realS, simS)/min(realS, simS) > agreeBound {
		t.Errorf("the times to %.0f%% differ by more than %.0f%%: real %.2f s, simulated %.2f s", 100*agreeTarget,
			100*(agreeBound-1), realS, simS)
	}
}

// agreeRealRun runs the profile with real nodes and returns the run, the
// samples/s its steps make and the bench's output directory.
func agreeRealRun(ctx context.Context, t *testing.T) (testnet.Run, float64, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bench")
	b, err := exec.CommandContext(ctx, binary, agreeBenchArgs(out)...).CombinedOutput()
	if err != nil {
		t.Fatalf("meshtrain %s: %v\n%s", strings.Join(agreeBenchArgs(out), " "), err, b)
	}
	t.Logf("meshtrain bench:\n%s", tail(strings.TrimSpace(string(b)), 8))
	res, err := testnet.ReadResultsFile(filepath.Join(out, testnet.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Networks) != 1 || len(res.Networks[0].Runs) != 1 {
		t.Fatalf("want one run on one network, got %d networks", len(res.Networks))
	}
	n := res.Networks[0]
	if r := n.Runs[0]; r.Error != "" {
		t.Fatalf("the real run failed: %s", r.Error)
	}
	return n.Runs[0], n.SoloSamplesPerSSum, out
}

// checkNoneIgnored reads every node's final event in dir and fails the
// test if a node refused models because it ignored, disconnected or
// banned a peer: every peer here is honest.
func checkNoneIgnored(t *testing.T, dir string) {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "node-*.log"))
	if err != nil || len(logs) != 4 {
		t.Fatalf("node logs in %s: %v (%v)", dir, logs, err)
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		var final struct {
			Event  string `json:"event"`
			Status struct {
				Trust struct {
					Enabled bool           `json:"enabled"`
					Refused map[string]int `json:"refused"`
					Clipped int            `json:"clipped"`
					Banned  int            `json:"banned"`
				} `json:"trust"`
			} `json:"status"`
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if strings.Contains(line, `"event":"final"`) {
				if err := json.Unmarshal([]byte(line), &final); err != nil {
					t.Fatalf("%s: final event: %v", l, err)
				}
			}
		}
		tr := final.Status.Trust
		switch {
		case final.Event != "final":
			t.Errorf("%s: no final event", filepath.Base(l))
		case !tr.Enabled:
			t.Errorf("%s: trust checks off; the profile runs the node's defaults", filepath.Base(l))
		case tr.Refused["ignored"] > 0 || tr.Banned > 0:
			t.Errorf("%s: an honest peer was held out: %d models refused from ignored or banned peers, %d peers banned "+
				"(refused %v)", filepath.Base(l), tr.Refused["ignored"], tr.Banned, tr.Refused)
		default:
			t.Logf("%s: trust refused %v, clipped %d", filepath.Base(l), tr.Refused, tr.Clipped)
		}
	}
}

// agreeSimRun runs the profile in the simulator.
func agreeSimRun(ctx context.Context, t *testing.T) *sim.Result {
	t.Helper()
	out := filepath.Join(t.TempDir(), "sim")
	b, err := exec.CommandContext(ctx, binary, agreeSimArgs(out)...).CombinedOutput()
	if err != nil {
		t.Fatalf("meshtrain %s: %v\n%s", strings.Join(agreeSimArgs(out), " "), err, b)
	}
	raw, err := os.ReadFile(filepath.Join(out, sim.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Result *sim.Result `json:"result"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Result == nil {
		t.Fatalf("%s: %v", sim.ResultsFile, err)
	}
	return r.Result
}

func simAverageTime(r *sim.Result, target float64) string {
	for _, p := range r.Points {
		if p.AverageAccuracy >= target {
			return fmt.Sprintf("%.2f s", p.T)
		}
	}
	return "-"
}

func fmtTime(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f s", *p)
}

func fmtTimes(ps []*float64) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmtTime(p)
	}
	return strings.Join(s, ", ")
}
