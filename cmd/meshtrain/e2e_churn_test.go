//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/testnet"
)

// TestE2EChurn: 30 nodes of --model softmax, 20% of them replaced per
// minute for 90 s of training. Every session (one node's process) that
// lasted 60 s or more reaches 90% test accuracy, some nodes leave, some
// come back and resume from the checkpoint they left with, newcomers join
// through live nodes, and the testnet exits 0 with no process left.
//
// The churn seed is picked so that returns are certain, not likely: the
// seed alone fixes the events' times and fates (testnet.ChurnConfig.Seed),
// and its draws bring back a node that left 15 s or more before (its exit
// takes at most the 10 s grace) at 23, 49 and 54 s of training. The 30
// nodes use about 1.4 of 2 cores at a base step of 20 ms, mostly per-node
// overhead rather than steps; a joiner then takes 10-15 s to start (about
// 1.5 s of CPU) and 20-40 s to its first evaluation at 90%, which
// --min-session 60s leaves room for. The last joiners are often still
// starting when the testnet stops.
func TestE2EChurn(t *testing.T) {
	const (
		nodes      = 30
		duration   = 90 * time.Second
		minSession = 60 * time.Second
	)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "tn")
	began := time.Now()
	up := startLines(t, exec.CommandContext(ctx, binary, "testnet", "up", "--nodes", strconv.Itoa(nodes), "--dir", dir,
		"--every", "30s", "--settle", "15s", "--churn", "20%", "--churn-seed", "18", "--duration", duration.String(),
		"--min-session", minSession.String(), "--",
		"--model", "softmax", "--base-step", "20ms", "--epochs", "0", "--schedule", "const", "--eval-every", "5s"))
	err := up.wait(t, 7*time.Minute)
	t.Logf("testnet up exited (%v) after %.0f s", err, time.Since(began).Seconds())
	if err != nil {
		t.Fatalf("testnet up: %v\nstdout:\n%s\nstderr:\n%s", err, tail(up.text(), 80), up.stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, testnet.SessionsFile))
	if err != nil {
		t.Fatal(err)
	}
	var r testnet.SessionsReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	verdict := r.Verdict()
	t.Log(verdict)
	if !strings.Contains(up.text(), verdict) {
		t.Errorf("the output does not end on the verdict %q", verdict)
	}
	if r.Churn == nil || r.Churn.Events < 5 || r.Long < nodes/2 || !r.OK() {
		t.Fatalf("churn %+v, %d long sessions, missed %v, failed %v: want 5 events or more, %d long sessions or more, none missed or failed\n%s",
			r.Churn, r.Long, r.Missed, r.Failed, nodes/2, tail(up.text(), 80))
	}
	t.Logf("churn: %+v", *r.Churn)
	left, resumed := 0, 0
	sessions := map[int]int{} // per node
	for _, s := range r.Sessions {
		sessions[s.Index]++
		if s.End == testnet.SessionLeft {
			left++
		}
		if s.Returning {
			if s.StartEvent != "resumed" || s.StartStep <= 0 {
				t.Errorf("session %d: node %d came back with %q at step %d: want it to resume its checkpoint", s.Session, s.Index,
					s.StartEvent, s.StartStep)
			}
			resumed++
			t.Logf("session %d: node %d came back at %.0f s, resumed at step %d, %s after %v s", s.Session, s.Index, s.StartS,
				s.StartStep, percent(r.Target), toTarget(s))
		}
		if s.End != testnet.SessionLeft && s.End != testnet.SessionStopped {
			t.Errorf("session %d (node %d) ended %q, want left or stopped", s.Session, s.Index, s.End)
		}
	}
	if left == 0 || resumed == 0 {
		t.Errorf("%d sessions left, %d came back: want both", left, resumed)
	}
	// A newcomer joins through live nodes (node 0 may be gone): each that
	// stayed long, and never came back (its log holds one session), merged.
	checked := 0
	for _, s := range r.Sessions {
		if s.Index >= nodes && sessions[s.Index] == 1 && s.Lasted() >= minSession.Seconds() {
			if f := finalEvent(t, s.Log); f.Merges == 0 {
				t.Errorf("newcomer node %d never merged in %.0f s: %s", s.Index, s.Lasted(), f.Message)
			}
			checked++
		}
	}
	t.Logf("%d long newcomers merged", checked)
	// Exited cleanly: no node outlives the command.
	if pids := processesIn(t, dir); len(pids) > 0 {
		t.Errorf("node processes %v still run", pids)
	}
}

func toTarget(s testnet.Session) string {
	if s.ToTargetS == nil {
		return "-"
	}
	return strconv.FormatFloat(*s.ToTargetS, 'f', 0, 64)
}

func percent(v float64) string { return strconv.FormatFloat(100*v, 'g', -1, 64) + "%" }

// processesIn lists the meshtrain node processes whose command line names
// a folder under dir.
func processesIn(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cl), "\x00node\x00") && strings.Contains(string(cl), dir+string(filepath.Separator)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
