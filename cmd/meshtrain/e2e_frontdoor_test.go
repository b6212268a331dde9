//go:build e2e

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/api"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/testnet"
)

// The front door: what a new user gets from the README's first command.

// readmeFirstCommand is the first command of README.md's first sh block,
// without its comment: the command a new user runs first.
func readmeFirstCommand(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```sh\n")
	if !ok {
		t.Fatal("README.md has no sh block")
	}
	line, _, _ := strings.Cut(rest, "\n")
	cmd, _, _ := strings.Cut(line, "#")
	return strings.TrimSpace(cmd)
}

// lines runs cmd and hands every stdout line, as it comes, to a channel;
// stderr is kept for failure messages.
type lines struct {
	cmd    *exec.Cmd
	out    chan string
	stderr *strings.Builder
	done   chan error
	mu     sync.Mutex
	all    []string
}

func startLines(t *testing.T, cmd *exec.Cmd) *lines {
	t.Helper()
	l := &lines{cmd: cmd, out: make(chan string, 4096), stderr: &strings.Builder{}, done: make(chan error, 1)}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &lockedWriter{w: l.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l.mu.Lock()
			l.all = append(l.all, sc.Text())
			l.mu.Unlock()
			select {
			case l.out <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		l.done <- cmd.Wait()
	}()
	return l
}

// text is everything printed so far.
func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// waitLine returns the first line matching re, failing after limit.
func (l *lines) waitLine(t *testing.T, re *regexp.Regexp, limit time.Duration) []string {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case s := <-l.out:
			if m := re.FindStringSubmatch(s); m != nil {
				return m
			}
		case err := <-l.done:
			l.done <- err
			t.Fatalf("exited (%v) before printing a line like %q\nstdout:\n%s\nstderr:\n%s", err, re, l.text(), l.stderr)
		case <-deadline:
			t.Fatalf("no line like %q within %v\nstdout:\n%s", re, limit, l.text())
		}
	}
}

// wait waits for the command to exit.
func (l *lines) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-l.done:
		l.done <- err
		return err
	case <-time.After(limit):
		_ = l.cmd.Process.Kill()
		t.Fatalf("still running after %v\nstdout:\n%s\nstderr:\n%s", limit, l.text(), l.stderr)
	}
	return nil
}

var nodeLine = regexp.MustCompile(`^node (\d+)  (\S+)  slowdown \S+  API http://(\S+)$`)

// testnetAPIs reads the "node N PEERID slowdown Fx API http://ADDR" lines of
// testnet up, one per node.
func testnetAPIs(t *testing.T, l *lines, nodes int) []string {
	t.Helper()
	apis := make([]string, nodes)
	for range nodes {
		m := l.waitLine(t, nodeLine, 3*time.Minute)
		i, _ := strconv.Atoi(m[1])
		apis[i] = m[3]
	}
	return apis
}

func statusOf(ctx context.Context, addr string) (api.StatusResponse, error) {
	c, err := api.NewClient(addr, nil)
	if err != nil {
		return api.StatusResponse{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.Status(rctx)
}

// scheduled is a node's learning rate before its --lr-scaling factor: the
// schedule's rate at its run clock.
func scheduled(s api.StatusResponse) float64 {
	if s.Run.LRScale > 0 {
		return s.Run.LR / s.Run.LRScale
	}
	return s.Run.LR
}

// finalEvent reads the final event from a node's JSON log.
func finalEvent(t *testing.T, logPath string) testnet.FinalEvent {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kind struct{ Event string }
		var e testnet.FinalEvent
		if json.Unmarshal([]byte(line), &kind) == nil && kind.Event == "final" {
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("%s: final event: %v", logPath, err)
			}
			return e
		}
	}
	t.Fatalf("%s has no final event", logPath)
	return testnet.FinalEvent{}
}

// TestE2EReadmeTestnetUp runs the README's first command exactly as written
// in the repository root, and a fifth node started a quarter of the way through the run with
// `meshtrain node --bootstrap ADDR` and nothing else. Every testnet node
// has its 3 peers and a merge within 15 s of the last one listening; the
// late node merges and follows the swarm's schedule (its clock and its
// learning rate are the others'); every node ends the run at 97.5% or
// better; the command exits 0 on its own.
func TestE2EReadmeTestnetUp(t *testing.T) {
	command := readmeFirstCommand(t)
	if !strings.Contains(command, "testnet up") {
		t.Fatalf("README's first command %q does not start a testnet", command)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir = root
	// Its own process group, so that a failing test can stop the shell and
	// the testnet it started together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	began := time.Now()
	up := startLines(t, cmd)
	t.Cleanup(func() {
		if up.cmd.ProcessState == nil {
			_ = syscall.Kill(-up.cmd.Process.Pid, syscall.SIGINT)
			_ = up.wait(t, time.Minute)
		}
	})
	apis := testnetAPIs(t, up, 4)
	listening := time.Now()
	t.Logf("%q: 4 nodes listening after %.1fs", command, listening.Sub(began).Seconds())

	// Every node: 3 peers and a merge, within 15 s of the last listening.
	ok := make([]bool, len(apis))
	for n := 0; n < len(apis); {
		if time.Since(listening) > 15*time.Second {
			var got []string
			for i, a := range apis {
				s, err := statusOf(ctx, a)
				got = append(got, fmt.Sprintf("node %d: peers %d merges %d (%v)", i, s.Peers, s.Merges, err))
			}
			t.Fatalf("15 s after the last node listened: %s", strings.Join(got, "; "))
		}
		for i, a := range apis {
			if ok[i] {
				continue
			}
			if s, err := statusOf(ctx, a); err == nil && s.Peers >= 3 && s.Merges >= 1 {
				ok[i] = true
				n++
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("every node had 3 peers and a merge %.1fs after the last listened", time.Since(listening).Seconds())

	// A node started late, once the swarm is a quarter of the way through
	// its run (a time would not do: how long the run takes depends on the
	// machine), with --bootstrap and no other flag, in a folder of its own
	// (its data dir is ./meshtrain-data).
	boot, err := statusOf(ctx, apis[0])
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	for _, a := range boot.Addrs {
		if strings.Contains(a, "/tcp/") {
			addr = a
		}
	}
	for {
		s, err := statusOf(ctx, apis[0])
		if err != nil {
			t.Fatalf("node 0 before the late node started: %v", err)
		}
		if s.Run.TotalSamples > 0 && s.Run.Samples >= s.Run.TotalSamples/4 {
			t.Logf("the late node starts %.1fs after the last listened, at %.0f%% of the run", time.Since(listening).Seconds(),
				100*s.Run.Samples/s.Run.TotalSamples)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	late := exec.CommandContext(ctx, binary, "node", "--bootstrap", addr)
	late.Dir = t.TempDir()
	joiner := startLines(t, late)
	t.Cleanup(func() {
		if joiner.cmd.ProcessState == nil {
			_ = joiner.cmd.Process.Signal(os.Interrupt)
			_ = joiner.wait(t, time.Minute)
		}
	})
	lateAPI := strings.TrimPrefix(joiner.waitLine(t, regexp.MustCompile(`REST API and /metrics at (\S+)`), time.Minute)[1], "http://")
	deadline := time.Now().Add(time.Minute)
	var js, ns api.StatusResponse
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the late node after a minute: merges %d, clock %.0f, lr %.4g (x%.3g); node 0: clock %.0f, lr %.4g (x%.3g)\n%s",
				js.Merges, js.Run.Samples, js.Run.LR, js.Run.LRScale, ns.Run.Samples, ns.Run.LR, ns.Run.LRScale, joiner.text())
		}
		time.Sleep(500 * time.Millisecond)
		j, err1 := statusOf(ctx, lateAPI)
		s, err2 := statusOf(ctx, apis[0])
		if err1 != nil || err2 != nil {
			continue
		}
		js, ns = j, s
		// The same run (fingerprint), merged, the swarm's clock and so the
		// swarm's learning rate: a late node counting from zero would sit at
		// the warmup's bottom with a clock of its own samples only.
		if js.Fingerprint != ns.Fingerprint {
			t.Fatalf("the late node trains %s, the testnet %s: not the same run", js.Fingerprint, ns.Fingerprint)
		}
		// The rates compared are the schedule's: each node scales its own
		// by how often it merges (lr_scale).
		clockGap := math.Abs(js.Run.Samples-ns.Run.Samples) / ns.Run.TotalSamples
		if js.Merges >= 1 && js.Step > 0 && clockGap <= 0.02 && math.Abs(scheduled(js)-scheduled(ns)) <= 0.1*node.DefaultLR {
			break
		}
	}
	t.Logf("late node: %d merges, clock %.0f (node 0: %.0f), lr %.4g (node 0: %.4g), own samples %.0f",
		js.Merges, js.Run.Samples, ns.Run.Samples, js.Run.LR, ns.Run.LR, js.Run.OwnSamples)
	if js.Run.Samples < 0.2*js.Run.TotalSamples || js.Run.OwnSamples > 0.5*js.Run.Samples {
		t.Errorf("late node: clock %.0f of %.0f with %.0f of its own: it did not take up the swarm's run",
			js.Run.Samples, js.Run.TotalSamples, js.Run.OwnSamples)
	}

	// The command ends by itself when the run is complete, with exit 0.
	if err := up.wait(t, 5*time.Minute); err != nil {
		t.Fatalf("%q: %v\nstdout:\n%s\nstderr:\n%s", command, err, up.text(), up.stderr)
	}
	t.Logf("%q exited 0 after %.0fs", command, time.Since(began).Seconds())
	if !strings.Contains(up.text(), "every node finished the run") {
		t.Errorf("no closing line in the output:\n%s", up.text())
	}
	for i := range apis {
		e := finalEvent(t, filepath.Join(root, "meshtrain-testnet", fmt.Sprintf("node-%d.log", i)))
		if e.TestAccuracy == nil || *e.TestAccuracy < 0.975 || e.Merges == 0 || !strings.HasPrefix(e.Message, "run complete") {
			t.Errorf("node %d ended with %+v", i, e)
		} else {
			t.Logf("node %d: %.2f%%, %d merges, %s", i, 100**e.TestAccuracy, e.Merges, e.Message)
		}
	}
	if err := joiner.wait(t, 2*time.Minute); err != nil {
		t.Errorf("the late node: %v\n%s", err, joiner.stderr)
	}
	if !strings.Contains(joiner.text(), "run complete") {
		t.Errorf("the late node did not end with the run:\n%s", joiner.text())
	}
}

// TestE2ETestnetUpRerunAndCrash: `testnet up` run twice in one folder
// starts a fresh run each time; when a node is killed, the command exits
// non-zero and names it.
func TestE2ETestnetUpRerunAndCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "tn")
	up := func() *lines {
		cmd := exec.CommandContext(ctx, binary, "testnet", "up", "--nodes", "3", "--slowdowns", "2", "--dir", dir, "--",
			"--epochs", "8")
		return startLines(t, cmd)
	}
	first := up()
	testnetAPIs(t, first, 3)
	if err := first.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("first run: %v\n%s\n%s", err, first.text(), first.stderr)
	}
	second := up()
	testnetAPIs(t, second, 3)
	second.waitLine(t, regexp.MustCompile(`training starts`), time.Minute)
	time.Sleep(2 * time.Second)
	// Kill node 1 as a crash would: no final event, no final checkpoint.
	pid := nodePID(t, filepath.Join(dir, "node-1"))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := second.wait(t, 3*time.Minute)
	if err == nil {
		t.Fatalf("testnet up exited 0 with a killed node:\n%s", second.text())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want exit code 1", err)
	}
	if !strings.Contains(second.stderr.String(), "node 1 exited with") {
		t.Errorf("the error does not name node 1:\n%s", second.stderr)
	}
	if strings.Count(second.text(), "FAILED") != 1 {
		t.Errorf("want exactly one FAILED node in the summary:\n%s", second.text())
	}
}

// nodePID finds the meshtrain process whose command line names dataDir.
func nodePID(t *testing.T, dataDir string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cl), "\x00node\x00") && strings.Contains(string(cl), dataDir+"\x00") {
			return pid
		}
	}
	t.Fatalf("no node process for %s", dataDir)
	return 0
}
