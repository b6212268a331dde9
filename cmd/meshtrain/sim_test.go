package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimBadFlagsAreOneLineAndExitTwo(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(bad, []byte("node_id,join_s,leave_s\na,0,10\nb,soon,20\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--nodes", "0"}, "nodes 0"},
		{[]string{"sim", "--duration", "0s"}, "duration 0s"},
		{[]string{"sim", "--churn", "weibull:0.5"}, `churn "weibull:0.5"`},
		{[]string{"sim", "--churn", "pareto:1,10s"}, "pareto shape 1"},
		{[]string{"sim", "--never-return", "2"}, "never-return share 2"},
		{[]string{"sim", "--net", "wan:40ms"}, `net "wan:40ms"`},
		{[]string{"sim", "--net", "wan:40ms,10mbit,1%"}, "no loss"},
		{[]string{"sim", "--wire-dtype", "fp8"}, `wire-dtype "fp8"`},
		{[]string{"sim", "--staleness", "poly"}, "poly"},
		{[]string{"sim", "--slowdowns", "2,x"}, `"x" is not a number`},
		{[]string{"sim", "--trace", bad}, "line 3"},
		{[]string{"sim", "--trace", filepath.Join(t.TempDir(), "none.csv")}, "none.csv"},
		{[]string{"sim", "--step", "0s", "--batch", "0"}, "batch 0"},
		{[]string{"sim", "stray"}, `"stray"`},
	}
	for _, c := range cases {
		code, out, errOut := run(t, c.args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, exitUsage, errOut)
		}
		if n := strings.Count(errOut, "\n"); n != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: stderr %q, want one line naming %q", c.args, errOut, c.want)
		}
		if out != "" {
			t.Errorf("%v: wrote to stdout: %q", c.args, out)
		}
	}
}

func TestSimWritesItsReport(t *testing.T) {
	dir := t.TempDir()
	// The synthetic dataset: this checks the wiring, and decompressing
	// MNIST would cost most of the test's time under -race.
	code, out, errOut := run(t, "sim", "--dataset", "synthetic", "--nodes", "6", "--duration", "20s", "--step", "500ms", "--churn", "weibull:0.7,10s",
		"--epochs", "100", "--eval-samples", "500", "--eval-nodes", "2", "--report-every", "10s", "--threads", "1", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "wrote "+dir) || strings.Count(errOut, "\nt=") != 2 {
		t.Errorf("stdout %q, stderr %q: want a progress line per point and the files named", out, errOut)
	}
	for _, f := range []string{"results.json", "report.md", "accuracy.png", "consensus.png", "churn.png", "lost.png", "traffic.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Settings struct {
			Nodes int    `json:"nodes"`
			Churn string `json:"churn"`
		} `json:"settings"`
		Result struct {
			Points []json.RawMessage `json:"points"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Settings.Nodes != 6 || r.Settings.Churn != "weibull:0.7,10s" || len(r.Result.Points) != 3 {
		t.Errorf("results.json has %+v and %d points, want 6 nodes, the churn flag and 3 points", r.Settings, len(r.Result.Points))
	}
}
