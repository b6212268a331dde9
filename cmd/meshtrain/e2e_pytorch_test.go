//go:build e2e

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/testnet"
)

// PyTorch trainers through the local trainer API: the README's section,
// and merging against the same trainers alone.

// pythonBin is the interpreter that sees Debian's torch.
const pythonBin = "/usr/bin/python3"

// trainerLine is one JSON line of examples/pytorch-mnist/train.py.
type trainerLine struct {
	Final    bool    `json:"final"`
	T        float64 `json:"t"`
	Rank     int     `json:"rank"`
	Accuracy float64 `json:"accuracy"`
	Samples  int     `json:"samples"`
	Merges   int     `json:"merges"`
	Averaged bool    `json:"averaged"`
	Stop     string  `json:"stop"`
}

// finals are the final lines in out, by rank.
func finals(out string) map[int]trainerLine {
	got := map[int]trainerLine{}
	for _, l := range strings.Split(out, "\n") {
		var r trainerLine
		if json.Unmarshal([]byte(l), &r) == nil && r.Final {
			got[r.Rank] = r
		}
	}
	return got
}

// pyWorkdir is a folder laid out like the repository for the README's
// relative paths: bin/meshtrain (the binary under test) and the repo's
// python/, examples/ and train/ (the MNIST files).
func pyWorkdir(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(dir, "bin", "meshtrain")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"python", "examples", "train"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// readmeBlock is the first sh block of README.md's section titled title.
func readmeBlock(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("README.md has no section %q", title)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, block, ok := strings.Cut(sec, "```sh\n")
	if !ok {
		t.Fatalf("README.md's %q has no sh block", title)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// runGroup runs a shell script in its own process group (killed whole if
// the test ends first) and returns its stdout.
func runGroup(t *testing.T, ctx context.Context, dir, script string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		t.Logf("stderr:\n%s", tail(errb.String(), 40))
	}
	return out.String(), err
}

func head(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestE2EPyTorchReadme runs the README's PyTorch section as written: two
// nodes and two PyTorch trainers train one epoch of MNIST together. Each
// trainer ends because the swarm's run is complete, having merged, at 95%
// or better.
func TestE2EPyTorchReadme(t *testing.T) {
	script := readmeBlock(t, "Train your own PyTorch model")
	if n := len(strings.Split(strings.TrimSpace(script), "\n")); n > 10 {
		t.Fatalf("the README's PyTorch section has %d lines, want at most 10", n)
	}
	dir := pyWorkdir(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	began := time.Now()
	// While it runs: when each node first had a peer and a merge, for the
	// failure's story, from the APIs the README gives the nodes.
	var apis []string
	for _, m := range regexp.MustCompile(`--api (\S+)`).FindAllStringSubmatch(script, -1) {
		apis = append(apis, m[1])
	}
	if len(apis) != 2 {
		t.Fatalf("the README's PyTorch section gives %d nodes an --api address (%v), want 2", len(apis), apis)
	}
	watch, stopWatch := context.WithCancel(ctx)
	met := make(chan [2][2]float64, 1)
	go func() {
		var first [2][2]float64 // node, {peer, merge}: seconds, 0 for never
		defer func() { met <- first }()
		for watch.Err() == nil {
			for i, a := range apis {
				s, err := statusOf(watch, a)
				if err != nil {
					continue
				}
				if s.Peers > 0 && first[i][0] == 0 {
					first[i][0] = time.Since(began).Seconds()
				}
				if s.Merges > 0 && first[i][1] == 0 {
					first[i][1] = time.Since(began).Seconds()
				}
			}
			select {
			case <-watch.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	out, err := runGroup(t, ctx, dir, script)
	stopWatch()
	first := <-met
	defer func() {
		if !t.Failed() {
			return
		}
		// What the nodes said about finding each other and merging.
		for i, f := range first {
			t.Logf("node%d (%s): first peer at %.1fs, first merge at %.1fs (0: never seen)", i, apis[i], f[0], f[1])
		}
		for _, log := range []string{"node0.log", "node1.log"} {
			b, _ := os.ReadFile(filepath.Join(dir, log))
			t.Logf("%s (first and last 25 lines):\n%s\n...\n%s", log, head(string(b), 25), tail(string(b), 25))
		}
	}()
	if err != nil {
		t.Fatalf("the README's PyTorch section failed after %.0fs: %v\n%s", time.Since(began).Seconds(), err, out)
	}
	got := finals(out)
	if len(got) != 2 {
		t.Fatalf("want a final line from each of 2 trainers, got %v\n%s", got, out)
	}
	for rank, r := range got {
		if r.Merges < 1 || r.Accuracy < 0.95 || r.Stop != "run_complete" || !r.Averaged {
			t.Errorf("trainer %d: %+v; want merges, accuracy >= 95%% of the node's average and the run complete", rank, r)
		}
	}
	for _, log := range []string{"node0.log", "node1.log"} {
		b, _ := os.ReadFile(filepath.Join(dir, log))
		if !strings.Contains(string(b), "run complete") {
			t.Errorf("%s does not say the run completed:\n%s", log, tail(string(b), 10))
		}
	}
	t.Logf("README PyTorch section: %.0fs; %v", time.Since(began).Seconds(), got)
}

// freePort is a TCP port on 127.0.0.1 for a node to listen on later.
func freePort(t *testing.T) int {
	t.Helper()
	port, err := testnet.FreePort("tcp")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestE2EPyTorchMergingBeatsAlone: 3 PyTorch trainers, each on its own
// 500 MNIST samples, train for 20 s through 3 nodes; then the same
// trainers train 20 s alone. While they run, every node's REST status shows
// merges, its trainer connected and the trainer's reported accuracy; at the
// end every merged model is at least 1 pp more accurate on the test set
// than the same trainer's model alone. A node that dropped the deltas
// would leave each trainer with what its 500 samples alone can teach.
func TestE2EPyTorchMergingBeatsAlone(t *testing.T) {
	const (
		world    = 3
		duration = 20
		margin   = 0.01
	)
	dir := pyWorkdir(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	trainer := func(i int, mesh string) string {
		return fmt.Sprintf("%s examples/pytorch-mnist/train.py %s --rank %d --world %d --shard-size 500 --duration %d --eval-every 5 --seed 3",
			pythonBin, mesh, i, world, duration)
	}
	id, err := exec.CommandContext(ctx, binary, "id", "--data-dir", filepath.Join(dir, "n0")).Output()
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	var script strings.Builder
	script.WriteString("export PYTHONPATH=$PWD/python\n")
	apis := make([]string, world)
	for i := range world {
		apis[i] = "127.0.0.1:" + strconv.Itoa(freePort(t))
		listen := "/ip4/127.0.0.1/tcp/0"
		boot := fmt.Sprintf(" --bootstrap /ip4/127.0.0.1/tcp/%d/p2p/%s", port, strings.TrimSpace(string(id)))
		if i == 0 {
			listen, boot = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port), ""
		}
		fmt.Fprintf(&script, "bin/meshtrain node --trainer external --epochs 0 --schedule const --eval-every 1s --data-dir n%d --listen %s --api %s%s >n%d.log 2>&1 &\n",
			i, listen, apis[i], boot, i)
	}
	for i := range world {
		fmt.Fprintf(&script, "%s &\n", trainer(i, fmt.Sprintf("--socket n%d/trainer.sock", i)))
	}
	// The trainers are the last world jobs: wait for them, then stop the nodes.
	script.WriteString("for j in $(jobs -p | tail -n 3); do wait $j || exit 1; done\nkill $(jobs -p)\nwait\n")

	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runGroup(t, ctx, dir, script.String())
		done <- result{out, err}
	}()
	// While they train: merges, a connected trainer and its reported
	// accuracy, from each node's REST API.
	seen := make([]bool, world)
	deadline := time.Now().Add(time.Duration(duration+30) * time.Second)
	for n := 0; n < world && time.Now().Before(deadline); {
		for i, a := range apis {
			if seen[i] {
				continue
			}
			s, err := statusOf(ctx, a)
			if err == nil && s.Merges > 0 && s.Trainer != nil && s.Trainer.Connected && s.TestAccuracy > 0.5 && !s.Trust.Holdout {
				seen[i], n = true, n+1
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	res := <-done
	if res.err != nil {
		t.Fatalf("merged run: %v\n%s", res.err, res.out)
	}
	for i, ok := range seen {
		if !ok {
			b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("n%d.log", i)))
			t.Errorf("node %d's REST status never showed merges, its trainer connected and a reported accuracy; log:\n%s", i, tail(string(b), 15))
		}
	}
	merged := finals(res.out)

	var alone strings.Builder
	for i := range world {
		fmt.Fprintf(&alone, "%s &\n", trainer(i, "--no-mesh"))
	}
	alone.WriteString("for j in $(jobs -p); do wait $j || exit 1; done\n")
	out, err := runGroup(t, ctx, dir, alone.String())
	if err != nil {
		t.Fatalf("run alone: %v\n%s", err, out)
	}
	solo := finals(out)
	if len(merged) != world || len(solo) != world {
		t.Fatalf("final lines: merged %v, alone %v; want %d each", merged, solo, world)
	}
	for i := range world {
		m, a := merged[i], solo[i]
		t.Logf("trainer %d: merged %.2f%% (%d merges, %d samples), alone %.2f%% (%d samples)",
			i, 100*m.Accuracy, m.Merges, m.Samples, 100*a.Accuracy, a.Samples)
		if m.Merges == 0 || m.Accuracy < a.Accuracy+margin {
			t.Errorf("trainer %d: merged %.2f%% (%d merges) is not %.0f pp above alone %.2f%%",
				i, 100*m.Accuracy, m.Merges, 100*margin, 100*a.Accuracy)
		}
	}
}

// resumeScript is a PyTorch trainer for TestE2EPyTorchResume. "first":
// train 30 steps through the node, push the model with its optimizer
// state, save both to state.npz, send the node a push with a NaN (which
// must be refused, naming the tensor) and one of the wrong size, then
// kill itself. "second": a new trainer must resume the saved model and
// optimizer state from the node, bit for bit.
const resumeScript = `
import os, signal, sys
import numpy as np, torch
import meshtrain
from meshtrain.pytorch import OptimizerState
phase, sock = sys.argv[1], sys.argv[2]
torch.manual_seed(1 if phase == "first" else 2)   # the second trainer starts elsewhere
model = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
mesh = meshtrain.Mesh(model, opt, run="resume-test", train_samples=1000, batch=8, socket=sock)
flat = lambda: torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()
if phase == "first":
    assert not mesh.resumed, "a fresh node offered a model"
    for _ in range(30):
        x, y = torch.randn(8, 20), torch.randint(0, 4, (8,))
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
        mesh.step(8, 1.0)
    mesh.sync(optimizer=True)
    np.savez("state.npz", params=flat(), opt=OptimizerState(opt).flatten())
    bad = flat(); bad[5] = np.nan
    try:
        mesh.client.push(bad, samples=8, steps=1)
        sys.exit("a NaN push was accepted")
    except meshtrain.MeshtrainError as e:
        assert e.code == "non_finite" and "0.weight" in str(e), e
    try:
        mesh.client.push(flat()[:-1], samples=8, steps=1)
        sys.exit("a short push was accepted")
    except meshtrain.MeshtrainError as e:
        assert e.code == "bad_shape", e
    print("first: pushed and refused as expected", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
saved = np.load("state.npz")
assert mesh.resumed, "the restarted node did not offer the model"
assert np.array_equal(flat(), saved["params"]), "model not resumed"
assert np.array_equal(OptimizerState(opt).flatten(), saved["opt"]), "optimizer state not resumed"
print("second: resumed model and optimizer state", flush=True)
mesh.close()
`

// TestE2EPyTorchResume: a PyTorch trainer pushes its model and SGD
// momentum, sends a NaN and a short push (both refused with the node's
// reason), and is killed; the node is killed too. A new node on the same
// data dir resumes its checkpoint, and a new trainer gets the model and
// the optimizer state back exactly: the refused pushes touched neither
// the node nor its checkpoints.
func TestE2EPyTorchResume(t *testing.T) {
	dir := pyWorkdir(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	script := filepath.Join(dir, "resume.py")
	if err := os.WriteFile(script, []byte(resumeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "n", "trainer.sock")
	apiAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startNode := func() *exec.Cmd {
		cmd := exec.CommandContext(ctx, binary, "node", "--trainer", "external", "--data-dir", filepath.Join(dir, "n"),
			"--listen", "/ip4/127.0.0.1/tcp/0", "--api", apiAddr, "--epochs", "0", "--schedule", "const", "--checkpoint-every", "200ms")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			if t.Failed() {
				t.Logf("node output:\n%s", tail(out.String(), 30))
			}
		})
		for deadline := time.Now().Add(30 * time.Second); ; {
			if _, err := os.Stat(sock); err == nil {
				return cmd
			}
			if time.Now().After(deadline) {
				t.Fatalf("no trainer socket after 30 s:\n%s", out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	trainer := func(phase string) (string, error) {
		cmd := exec.CommandContext(ctx, pythonBin, script, phase, sock)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(dir, "python"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	n1 := startNode()
	out, err := trainer("first")
	if !strings.Contains(out, "first: pushed and refused as expected") {
		t.Fatalf("first trainer: %v\n%s", err, out)
	}
	// Wait until the store has committed a checkpoint of the pushed state
	// (all 30 steps; the refused pushes changed nothing), then kill the
	// node. A fixed wait is not enough on a loaded machine.
	for deadline := time.Now().Add(60 * time.Second); ; {
		st, err := statusOf(ctx, apiAddr)
		if err == nil && st.LastCheckpoint != nil && st.LastCheckpoint.Step >= 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of the pushed state within 60 s (status %+v, error %v)", st.LastCheckpoint, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := n1.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = n1.Wait()
	startNode()
	if out, err := trainer("second"); err != nil || !strings.Contains(out, "second: resumed model and optimizer state") {
		t.Fatalf("second trainer: %v\n%s", err, out)
	}
}
