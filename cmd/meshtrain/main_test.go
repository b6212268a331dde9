package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshtrain/meshtrain/params"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = dispatch(t.Context(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestBadFlagsAreOneLineAndExitTwo(t *testing.T) {
	cases := [][]string{
		{"train", "--bogus"},
		{"train", "--batch", "-1"},
		{"train", "--batch", "x"},
		{"train", "--model", "mlp:abc"},
		{"train", "--keep", "0"},
		{"train", "--until-accuracy", "2"},
		{"train", "--log-level", "loud"},
		{"train", "--threads", "-3"},
		{"train", "extra-arg"},
		{"eval"},
		{"eval", "a", "b"},
		{"export"},
		{"checkpoints", "--nope"},
		{"id", "x"},
		{"version", "--x"},
		{"node", "--trainer", "torch"},
		{"node", "--staleness-lag", "time"},
		{"node", "--staleness-ahead", "push"},
		{"node", "--staleness-ahead", "pull", "--staleness-lag", "age"},
		{"sim", "--staleness-ahead", "push"},
		{"node", "--lr-scaling", "fast"},
		{"node", "--announce-rate", "-1"},
		{"node", "--announce-rate", "NaN"},
		{"node", "--trainer-listen", "unix:/tmp/x.sock"},
		{"node", "--trainer", "external", "--mode", "sync"},
		{"node", "--trainer", "external", "--no-data-dir"},
		{"no-such-command"},
	}
	for _, args := range cases {
		code, out, errOut := run(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
		if n := strings.Count(errOut, "\n"); n != 1 {
			t.Errorf("%v: %d lines on stderr, want 1: %q", args, n, errOut)
		}
		if out != "" {
			t.Errorf("%v: wrote to stdout: %q", args, out)
		}
	}
}

func TestHelpEverywhere(t *testing.T) {
	for name := range commands() {
		code, out, _ := run(t, name, "--help")
		if code != exitOK || !strings.Contains(out, "Usage: meshtrain "+name) {
			t.Errorf("%s --help: exit %d, output %q", name, code, out)
		}
	}
	code, out, _ := run(t, "--help")
	if code != exitOK || !strings.Contains(out, "train") {
		t.Errorf("--help: exit %d, %q", code, out)
	}
	if code, _, _ := run(t); code != exitUsage {
		t.Errorf("no arguments: exit %d", code)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, "version")
	if code != exitOK || !strings.HasPrefix(out, "meshtrain ") {
		t.Fatalf("exit %d, %q", code, out)
	}
}

func TestFlagsMayFollowArguments(t *testing.T) {
	fs := newFlags(&env{name: "t"}, "")
	j := fs.Bool("json", false, "")
	n := fs.Int("n", 0, "")
	if err := parseInterspersed(fs, []string{"a", "--json", "b", "-n", "3", "--", "--c"}); err != nil {
		t.Fatal(err)
	}
	if !*j || *n != 3 || strings.Join(fs.Args(), " ") != "a b --c" {
		t.Fatalf("json %v n %d args %q", *j, *n, fs.Args())
	}
}

// A short synthetic run through the whole command: checkpoints, resume,
// refusal to resume a finished run, export and eval agree.
func TestTrainResumeExportEvalOnSynthetic(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	model := filepath.Join(dir, "m.safetensors")
	base := []string{"train", "--dataset", "synthetic", "--model", "mlp:32", "--schedule", "const", "--epochs", "4",
		"--data-dir", data, "--json", "--checkpoint-every", "0"}

	code, out, errOut := run(t, append(base, "--max-steps", "40")...)
	if code != exitOK {
		t.Fatalf("first run: exit %d: %s", code, errOut)
	}
	first := events(t, out)
	if first[0]["event"] != "start" || last(first)["step"].(float64) != 40 {
		t.Fatalf("first run events: %v", first)
	}
	// --max-steps made that run final: it must not be resumed silently.
	code, _, errOut = run(t, base...)
	if code != exitFailure || !strings.Contains(errOut, "already finished") {
		t.Fatalf("resume of a finished run: exit %d, %q", code, errOut)
	}
	// Interrupt a run: its checkpoint is not final and is resumed.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	o := cancelOnWrite{cancel: cancel}
	var e bytes.Buffer
	if code := dispatch(ctx, append(base, "--fresh"), &o, &e); code != exitOK {
		t.Fatalf("interrupted run: exit %d: %s", code, e.String())
	}
	code, out, errOut = run(t, append(base, "--save", model)...)
	if code != exitOK {
		t.Fatalf("resumed run: exit %d: %s", code, errOut)
	}
	evs := events(t, out)
	if evs[0]["event"] != "resumed" {
		t.Fatalf("want resumed first, got %v", evs[0])
	}
	final := last(evs)
	acc := final["test_accuracy"].(float64)
	if final["event"] != "final" || acc < 0.8 {
		t.Fatalf("final event %v", final)
	}

	code, out, errOut = run(t, "eval", model, "--json")
	if code != exitOK {
		t.Fatalf("eval: exit %d: %s", code, errOut)
	}
	if got := events(t, out)[0]["test_accuracy"].(float64); got != acc {
		t.Fatalf("eval accuracy %v, training reported %v", got, acc)
	}
	exported := filepath.Join(dir, "e.safetensors")
	if code, _, errOut := run(t, "export", "--data-dir", data, "--out", exported); code != exitOK {
		t.Fatalf("export: %s", errOut)
	}
	a, b := readModel(t, model), readModel(t, exported)
	if len(a) != len(b) {
		t.Fatal("export and save differ in size")
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("export differs from the saved model at %d", i)
		}
	}
	code, out, _ = run(t, "checkpoints", "--data-dir", data, "--json", "--verify")
	var list []map[string]any
	if code != exitOK || json.Unmarshal([]byte(out), &list) != nil || len(list) == 0 || list[0]["final"] != true {
		t.Fatalf("checkpoints: exit %d, %s", code, out)
	}
}

func TestIDIsStable(t *testing.T) {
	dir := t.TempDir()
	_, a, _ := run(t, "id", "--data-dir", dir)
	_, b, _ := run(t, "id", "--data-dir", dir)
	_, c, _ := run(t, "id", "--data-dir", filepath.Join(dir, "other"))
	if !strings.HasPrefix(a, "12D3KooW") || a != b {
		t.Fatalf("peer ID not stable: %q then %q", a, b)
	}
	if a == c {
		t.Fatal("two data dirs share a peer ID")
	}
}

func events(t *testing.T, out string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		evs = append(evs, m)
	}
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	return evs
}

// cancelOnWrite cancels a run as soon as it prints its first event, as a
// Ctrl-C right after start would.
type cancelOnWrite struct {
	bytes.Buffer
	cancel func()
}

func (c *cancelOnWrite) Write(p []byte) (int, error) {
	c.cancel()
	return c.Buffer.Write(p)
}

func last(evs []map[string]any) map[string]any { return evs[len(evs)-1] }

func readModel(t *testing.T, path string) []float32 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, v, _, err := params.ReadSafetensors(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
