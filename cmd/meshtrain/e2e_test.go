//go:build e2e

// End-to-end tests of the real binaries on MNIST. They run without -race and
// share two binaries: the release binary, MESHTRAIN_BIN, and the test binary
// with the testhooks build tag (crash points, adversary modes),
// MESHTRAIN_TESTHOOKS_BIN; `make test-e2e` sets both, and whichever is unset
// is built here.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the release binary; hooksBinary the testhooks build, which only
// the crash-recovery and hostile-swarm tests run.
var binary, hooksBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meshtrain-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := func(env, name string, tags ...string) string {
		if path := os.Getenv(env); path != "" {
			return path
		}
		path := filepath.Join(dir, name)
		args := []string{"build", "-o", path}
		if len(tags) > 0 {
			args = append(args, "-tags", strings.Join(tags, ","))
		}
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", name+":", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		return path
	}
	binary = build("MESHTRAIN_BIN", "meshtrain")
	hooksBinary = build("MESHTRAIN_TESTHOOKS_BIN", "meshtrain-testhooks", "testhooks")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type event struct {
	Event        string   `json:"event"`
	Step         int64    `json:"step"`
	Epoch        int      `json:"epoch"`
	TestAccuracy *float64 `json:"test_accuracy"`
	Checkpoint   uint64   `json:"checkpoint"`
	Message      string   `json:"message"`
}

// proc is a running meshtrain whose JSON events arrive on a channel.
type proc struct {
	cmd    *exec.Cmd
	events chan event
	stderr *strings.Builder
	done   chan error
}

func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startBin(t, binary, env, args...)
}

// startBin is start with another binary (hooksBinary).
func startBin(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, events: make(chan event, 1024), stderr: &strings.Builder{}, done: make(chan error, 1)}
	cmd.Stderr = &lockedWriter{w: p.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err == nil {
				p.events <- e
			}
		}
		close(p.events)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return p
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// wait drains the events and returns them with the exit error.
func (p *proc) wait() ([]event, error) {
	var evs []event
	for e := range p.events {
		evs = append(evs, e)
	}
	return evs, <-p.done
}

func finalAccuracy(t *testing.T, evs []event) float64 {
	t.Helper()
	if len(evs) == 0 || evs[len(evs)-1].Event != "final" || evs[len(evs)-1].TestAccuracy == nil {
		t.Fatalf("no final event with test_accuracy: %+v", evs)
	}
	return *evs[len(evs)-1].TestAccuracy
}

var reference struct {
	once sync.Once
	acc  float64
	err  string
}

// referenceAccuracy is the accuracy of one uninterrupted default run
// (seed 1) with a saved model; the crash test must land on exactly it.
func referenceAccuracy(t *testing.T) (float64, string) {
	t.Helper()
	model := filepath.Join(os.TempDir(), fmt.Sprintf("meshtrain-e2e-ref-%d.safetensors", os.Getpid()))
	reference.once.Do(func() {
		p := start(t, nil, "train", "--seed", "1", "--json", "--no-data-dir", "--save", model)
		evs, err := p.wait()
		if err != nil {
			reference.err = fmt.Sprintf("reference run: %v: %s", err, p.stderr)
			return
		}
		epochs := 0
		for _, e := range evs {
			if e.Event == "epoch" {
				epochs++
			}
		}
		if epochs == 0 || epochs > 3 {
			reference.err = fmt.Sprintf("reference run reported %d epoch events", epochs)
			return
		}
		reference.acc = finalAccuracy(t, evs)
	})
	if reference.err != "" {
		t.Fatal(reference.err)
	}
	return reference.acc, model
}

// The bar: defaults, seed 1, MNIST, >= 97.5% within 3 epochs, and
// eval of the saved file reports the same accuracy.
func TestE2ETrainMNISTDefaults(t *testing.T) {
	acc, model := referenceAccuracy(t)
	t.Logf("MNIST defaults, seed 1: test accuracy %.4f", acc)
	if acc < 0.975 {
		t.Fatalf("test accuracy %.4f < 0.975", acc)
	}
	out, err := exec.Command(binary, "eval", model, "--json").Output()
	if err != nil {
		t.Fatalf("eval: %v", err)
	}
	var r struct {
		TestAccuracy float64 `json:"test_accuracy"`
	}
	if err := json.Unmarshal(out, &r); err != nil || r.TestAccuracy != acc {
		t.Fatalf("eval says %s, training said %v", out, acc)
	}
}

// SIGKILL the trainer (the testhooks build) 20 times: at seeded random moments and at injected
// crash points before, during and after a checkpoint commit. Every restart
// must resume at or after the last checkpoint reported committed, and since
// resuming is exact, the run must end on the uninterrupted run's accuracy.
func TestE2ECrashRecovery(t *testing.T) {
	refAcc, _ := referenceAccuracy(t)
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("MESHTRAIN_CRASH_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("crash schedule seed %d (replay with MESHTRAIN_CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	// Slowed down (explicit base step: no calibration) so the 20 kills land
	// inside the run; slowness does not change the model.
	args := []string{"train", "--seed", "1", "--json", "--data-dir", dir, "--checkpoint-every", "150ms",
		"--slowdown", "2", "--base-step", "2ms"}
	points := []string{"checkpoint-before-commit", "checkpoint-mid-chunks", "checkpoint-after-commit"}
	var committed int64 // step of the last checkpoint reported committed
	kills := 0
	for i := 0; kills < 20; i++ {
		if i > 40 {
			t.Fatalf("only %d kills in %d starts", kills, i)
		}
		var env []string
		how := "random moment"
		if i%2 == 1 {
			point := points[(i/2)%len(points)]
			after := 1 + rng.IntN(3)
			env = []string{"MESHTRAIN_TEST_CRASH_AT=" + point, "MESHTRAIN_TEST_CRASH_AFTER=" + strconv.Itoa(after)}
			how = fmt.Sprintf("crash point %s #%d", point, after)
		}
		delay := time.Duration(100+rng.IntN(500)) * time.Millisecond
		p := startBin(t, hooksBinary, env, args...)
		first, ok := <-p.events
		if !ok {
			_, err := p.wait()
			t.Fatalf("start %d: no events: %v: %s", i, err, p.stderr)
		}
		switch first.Event {
		case "resumed":
			if first.Step < committed {
				t.Fatalf("start %d resumed at step %d, before the committed step %d", i, first.Step, committed)
			}
		case "start":
			if committed > 0 {
				t.Fatalf("start %d started fresh after step %d was committed: %s", i, committed, p.stderr)
			}
		default:
			t.Fatalf("start %d: first event %+v", i, first)
		}
		t.Logf("start %d: %s at step %d; killing at %s (after %v)", i, first.Event, first.Step, how, delay)
		var timer <-chan time.Time
		if env == nil {
			timer = time.After(delay)
		}
		finished := false
	loop:
		for {
			select {
			case e, ok := <-p.events:
				if !ok {
					break loop
				}
				if e.Event == "checkpoint" {
					committed = e.Step
				}
				if e.Event == "final" {
					finished = true
				}
			case <-timer:
				_ = p.cmd.Process.Signal(syscall.SIGKILL)
				timer = nil
			}
		}
		_, err := p.wait()
		if finished {
			t.Fatalf("the run finished after %d kills; the schedule is too slow", kills)
		}
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("start %d ended without SIGKILL: %v: %s", i, err, p.stderr)
		}
		kills++
	}
	p := startBin(t, hooksBinary, nil, args...)
	evs, err := p.wait()
	if err != nil {
		t.Fatalf("last run: %v: %s", err, p.stderr)
	}
	if evs[0].Event != "resumed" || evs[0].Step < committed {
		t.Fatalf("last run began with %+v, committed step %d", evs[0], committed)
	}
	acc := finalAccuracy(t, evs)
	t.Logf("after %d kills: test accuracy %.4f (uninterrupted %.4f)", kills, acc, refAcc)
	if acc != refAcc {
		t.Fatalf("accuracy after crashes %.4f differs from the uninterrupted run's %.4f", acc, refAcc)
	}
}

// Flip bytes in the newest checkpoint's data on disk: the node must fall
// back to the previous checkpoint, say so, and keep the bad one.
func TestE2ECorruptCheckpointFallsBack(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	p := start(t, nil, "train", "--json", "--data-dir", dir, "--checkpoint-every", "100ms")
	var ids []uint64
	for e := range p.events {
		if e.Event == "checkpoint" {
			ids = append(ids, e.Checkpoint)
			if len(ids) == 3 {
				// A clean stop: it writes one more checkpoint and closes
				// the store, so the value log ends with that checkpoint.
				_ = p.cmd.Process.Signal(os.Interrupt)
			}
		}
	}
	if _, err := p.wait(); err != nil {
		t.Fatalf("stop: %v: %s", err, p.stderr)
	}
	if len(ids) < 4 {
		t.Fatalf("only %d checkpoints", len(ids))
	}
	// The newest checkpoint's chunks are the last data appended to the
	// value log: flip 16 bytes inside them, bypassing the store.
	vlogs, _ := filepath.Glob(filepath.Join(dir, "*", "*.vlog"))
	var newest string
	var size int64
	for _, f := range vlogs {
		if st, err := os.Stat(f); err == nil && st.Size() > size {
			newest, size = f, st.Size()
		}
	}
	if size < 1<<20 {
		t.Fatalf("no value log with checkpoint data among %v", vlogs)
	}
	f, err := os.OpenFile(newest, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	off := size - 300_000
	if _, err := f.ReadAt(buf, off); err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] ^= 0xff
	}
	if _, err := f.WriteAt(buf, off); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// --max-steps 1 is below the resumed step: the run ends at once.
	out, err := exec.CommandContext(ctx, binary, "train", "--json", "--data-dir", dir, "--max-steps", "1").CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("restart: %v\n%s", err, text)
	}
	newestID := ids[len(ids)-1]
	if !strings.Contains(text, "checkpoint failed verification") || !strings.Contains(text, fmt.Sprintf("checkpoint=%d", newestID)) {
		t.Fatalf("no clear log line about checkpoint %d:\n%s", newestID, text)
	}
	if !strings.Contains(text, fmt.Sprintf("resumed from checkpoint %d", ids[len(ids)-2])) {
		t.Fatalf("did not fall back to checkpoint %d:\n%s", ids[len(ids)-2], text)
	}
	list, err := exec.Command(binary, "checkpoints", "--data-dir", dir, "--verify").CombinedOutput()
	if err != nil || !strings.Contains(string(list), "CORRUPT") {
		t.Fatalf("the corrupt checkpoint is not kept and shown: %v\n%s", err, list)
	}
}

// A second process on the same data dir gets a clear error, and the first
// keeps going.
func TestE2ESecondProcessIsRefused(t *testing.T) {
	dir := t.TempDir()
	p := start(t, nil, "train", "--json", "--data-dir", dir)
	if e, ok := <-p.events; !ok || e.Event != "start" {
		t.Fatalf("first process did not start: %+v %s", e, p.stderr)
	}
	out, err := exec.Command(binary, "train", "--data-dir", dir).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "in use by another meshtrain process") {
		t.Fatalf("second process: %v: %s", err, out)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	evs, err := p.wait()
	if err != nil || len(evs) == 0 || evs[len(evs)-1].Event != "final" {
		t.Fatalf("first process after SIGINT: %v, last events %+v: %s", err, evs, p.stderr)
	}
}
