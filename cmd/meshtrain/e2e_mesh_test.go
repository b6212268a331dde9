//go:build e2e

// Multi-process mesh tests: real `meshtrain node` processes on 127.0.0.1
// (profile local) that find each other through one bootstrap peer and the
// DHT, exchange models, and stop on their own conditions or on a signal.
// Each test uses its own network name, so the parallel ones cannot meet.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// meshStatus is the part of a node's final status the mesh tests read.
type meshStatus struct {
	PeerID           string           `json:"peer_id"`
	Step             int64            `json:"step"`
	Progress         float64          `json:"progress"`
	TestAccuracy     float64          `json:"test_accuracy"`
	SamplesPerSec    float64          `json:"samples_per_s"`
	BusyFraction     float64          `json:"busy_fraction"`
	UptimeS          float64          `json:"uptime_s"`
	NetworkWaitS     float64          `json:"network_wait_s"`
	Merges           int64            `json:"merges"`
	PeerMerges       map[string]int64 `json:"peer_merges"`
	CatchUps         int64            `json:"catch_ups"`
	ExchangesFailed  int64            `json:"exchanges_failed"`
	ExchangeTimeouts int64            `json:"exchange_timeouts"`
	InboundDropped   int64            `json:"inbound_dropped"`
	Gossip           struct {
		BytesSent       uint64 `json:"bytes_sent"`
		BytesReceived   uint64 `json:"bytes_received"`
		ExchangesDone   uint64 `json:"exchanges_done"`
		ExchangesServed uint64 `json:"exchanges_served"`
		PullsDone       uint64 `json:"pulls_done"`
		PullsServed     uint64 `json:"pulls_served"`
		AnnouncesSeen   uint64 `json:"announces_seen"`
	} `json:"gossip"`
}

// meshEvent is a node event with the mesh fields.
type meshEvent struct {
	event
	Progress float64     `json:"progress"`
	Elapsed  float64     `json:"elapsed_s"`
	PeerID   string      `json:"peer_id"`
	Addrs    []string    `json:"addrs"`
	Peers    int         `json:"peers"`
	Merges   int64       `json:"merges"`
	Status   *meshStatus `json:"status"`
	at       time.Time   // when the test read it
}

// meshNode is a running `meshtrain node --json` whose events are collected
// as they arrive, so a test can watch several nodes at once.
type meshNode struct {
	name    string
	cmd     *exec.Cmd
	started time.Time
	stderr  *strings.Builder
	errMu   *lockedWriter
	mu      sync.Mutex
	evs     []meshEvent
	exited  chan struct{}
	err     error // the exit error, once exited is closed
}

func startMeshNode(t *testing.T, name string, args ...string) *meshNode {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"node", "--json", "--profile", "local"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	n := &meshNode{name: name, cmd: cmd, stderr: &strings.Builder{}, exited: make(chan struct{})}
	n.errMu = &lockedWriter{w: n.stderr}
	cmd.Stderr = n.errMu
	n.started = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var e meshEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				e.at = time.Now()
				n.mu.Lock()
				n.evs = append(n.evs, e)
				n.mu.Unlock()
			}
		}
		n.err = cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-n.exited
	})
	return n
}

func (n *meshNode) events() []meshEvent {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.evs)
}

// first returns the first event of one of the kinds.
func (n *meshNode) first(kinds ...string) (meshEvent, bool) {
	for _, e := range n.events() {
		if slices.Contains(kinds, e.Event) {
			return e, true
		}
	}
	return meshEvent{}, false
}

func (n *meshNode) done() bool {
	select {
	case <-n.exited:
		return true
	default:
		return false
	}
}

// logs is the tail of the node's stderr, for failure messages.
func (n *meshNode) logs() string {
	n.errMu.mu.Lock()
	defer n.errMu.mu.Unlock()
	s := n.stderr.String()
	if len(s) > 3000 {
		s = "..." + s[len(s)-3000:]
	}
	return s
}

// listening waits for the listening event and returns the peer ID and the
// TCP address another node can bootstrap from.
func (n *meshNode) listening(t *testing.T) (id, tcp string) {
	t.Helper()
	var e meshEvent
	meshWaitUntil(t, n.name+" listening", 60*time.Second, func() bool {
		var ok bool
		e, ok = n.first("listening")
		if !ok && n.done() {
			t.Fatalf("%s exited before listening: %v\n%s", n.name, n.err, n.logs())
		}
		return ok
	})
	for _, a := range e.Addrs {
		if strings.Contains(a, "/tcp/") && strings.HasPrefix(a, "/ip4/127.0.0.1/") && strings.HasSuffix(a, "/p2p/"+e.PeerID) {
			return e.PeerID, a
		}
	}
	t.Fatalf("%s: no loopback TCP address with /p2p/%s among %v", n.name, e.PeerID, e.Addrs)
	return "", ""
}

// wait waits for the node to exit on its own, requires exit code 0 and a
// final event with a status, and returns all events and that status.
func (n *meshNode) wait(t *testing.T, limit time.Duration) ([]meshEvent, *meshStatus) {
	t.Helper()
	select {
	case <-n.exited:
	case <-time.After(limit):
		_ = n.cmd.Process.Kill()
		<-n.exited
		t.Fatalf("%s still running after %v\n%s", n.name, limit, n.logs())
	}
	evs := n.events()
	if n.err != nil {
		t.Fatalf("%s: %v\n%s", n.name, n.err, n.logs())
	}
	if len(evs) == 0 || evs[len(evs)-1].Event != "final" || evs[len(evs)-1].Status == nil {
		t.Fatalf("%s: the last event is not a final event with a status: %d events\n%s", n.name, len(evs), n.logs())
	}
	return evs, evs[len(evs)-1].Status
}

// waitUntil polls cond until it holds or limit passes.
func meshWaitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, limit)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("no %s: %v", what, t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startSwarm starts count nodes: the first is the bootstrap, and the others
// get only its TCP address. argsOf gives each node's flags. It returns the
// nodes and their peer IDs.
func startMeshSwarm(t *testing.T, count int, argsOf func(i int) []string) ([]*meshNode, []string) {
	t.Helper()
	nodes := make([]*meshNode, count)
	ids := make([]string, count)
	nodes[0] = startMeshNode(t, "node0", argsOf(0)...)
	var boot string
	ids[0], boot = nodes[0].listening(t)
	for i := 1; i < count; i++ {
		nodes[i] = startMeshNode(t, fmt.Sprintf("node%d", i), append(argsOf(i), "--bootstrap", boot)...)
	}
	for i := 1; i < count; i++ {
		ids[i], _ = nodes[i].listening(t)
	}
	return nodes, ids
}

func logMeshStatus(t *testing.T, name string, s *meshStatus) {
	t.Helper()
	t.Logf("%s: step %d, progress %.0f, test accuracy %.4f, %.0f samples/s, busy %.2f, network wait %.3fs, merges %d %v, "+
		"catch-ups %d, exchanges done %d served %d failed %d timeouts %d, pulls done %d served %d, bytes sent %d received %d",
		name, s.Step, s.Progress, s.TestAccuracy, s.SamplesPerSec, s.BusyFraction, s.NetworkWaitS, s.Merges, s.PeerMerges,
		s.CatchUps, s.Gossip.ExchangesDone, s.Gossip.ExchangesServed, s.ExchangesFailed, s.ExchangeTimeouts,
		s.Gossip.PullsDone, s.Gossip.PullsServed, s.Gossip.BytesSent, s.Gossip.BytesReceived)
}

// Four nodes; three know only the first. Each must find the other three
// through the bootstrap peer and the DHT and exchange models with every one
// of them: both fetch (exchanges it started) and send (exchanges served).
func TestMeshDiscoveryAndExchange(t *testing.T) {
	t.Parallel()
	const count = 4
	// Emulated 6 ms steps on the small synthetic set: the nodes mostly
	// sleep, so the test leaves room for the others running beside it.
	args := []string{"--no-data-dir", "--network", "e2e-discovery", "--dataset", "synthetic", "--epochs", "0",
		"--schedule", "const", "--threads", "1", "--slowdown", "2", "--base-step", "3ms", "--eval-every", "0",
		"--avg-interval", "200ms", "--announce-interval", "1s", "--duration", "20s"}
	nodes, ids := startMeshSwarm(t, count, func(int) []string { return args })
	for i, n := range nodes {
		_, s := n.wait(t, 90*time.Second)
		logMeshStatus(t, n.name, s)
		if s.PeerID != ids[i] {
			t.Errorf("%s: status peer ID %s, listening said %s", n.name, s.PeerID, ids[i])
		}
		for j, other := range ids {
			if j != i && s.PeerMerges[other] < 1 {
				t.Errorf("%s never merged with node%d (%s): peer merges %v", n.name, j, other, s.PeerMerges)
			}
		}
		if len(s.PeerMerges) != count-1 {
			t.Errorf("%s: peer merges with %d peers, want the %d others: %v", n.name, len(s.PeerMerges), count-1, s.PeerMerges)
		}
		if s.Gossip.ExchangesDone < 1 || s.Gossip.ExchangesServed < 1 || s.Gossip.BytesSent == 0 || s.Gossip.BytesReceived == 0 {
			t.Errorf("%s: exchanges done %d, served %d, bytes sent %d, received %d: want models fetched and sent",
				n.name, s.Gossip.ExchangesDone, s.Gossip.ExchangesServed, s.Gossip.BytesSent, s.Gossip.BytesReceived)
		}
		if s.Gossip.AnnouncesSeen < 1 {
			t.Errorf("%s saw no announcements", n.name)
		}
		if s.NetworkWaitS != 0 {
			t.Errorf("%s: the trainer waited %.3fs on the network", n.name, s.NetworkWaitS)
		}
	}
}

// The bar for heterogeneity: four nodes on MNIST, a quarter of the
// data each, steps 2, 2, 4 and 8 times a common base step. Every node must
// reach 96% test accuracy while merging, and none may wait on the network.
func TestMeshHeterogeneousMNIST(t *testing.T) {
	const (
		count  = 4
		target = 0.96
		limit  = 150 * time.Second
	)
	slowdowns := []string{"2", "2", "4", "8"}
	// One explicit base step for all (no calibration noise): about 1.5x the
	// solo MLP step on one core, so the slowdowns are mostly emulated sleep
	// and the four nodes need about one core between them.
	// --epochs 0: a fast node must not run out of its shard and leave the
	// slow ones alone; the cosine schedule then needs a total, in samples on
	// the run clock (every node's samples added up: about 30k/s here), long
	// enough that the slowest node is not left at a rate of zero once the
	// others have stopped at the target.
	argsOf := func(i int) []string {
		return []string{"--no-data-dir", "--network", "e2e-hetero", "--shard", fmt.Sprintf("%d/%d", i, count),
			"--slowdown", slowdowns[i], "--base-step", "3ms", "--threads", "1",
			"--epochs", "0", "--schedule", "cosine:warmup=12800,total=2000000",
			"--avg-interval", "500ms", "--announce-interval", "1s", "--eval-every", "3s",
			"--until-accuracy", fmt.Sprint(target), "--duration", limit.String()}
	}
	nodes, _ := startMeshSwarm(t, count, argsOf)
	// Times are reported from the moment the last node listened: loading
	// MNIST on a busy machine can delay the later nodes by seconds.
	var t0 time.Time
	for _, n := range nodes {
		if l, ok := n.first("listening"); ok && l.at.After(t0) {
			t0 = l.at
		}
	}
	var slowest time.Duration
	for i, n := range nodes {
		evs, s := n.wait(t, limit+time.Minute)
		logMeshStatus(t, n.name, s)
		reachedAt := -1
		for k, e := range evs {
			if (e.Event == "eval" || e.Event == "epoch") && e.TestAccuracy != nil && *e.TestAccuracy >= target {
				reachedAt = k
				break
			}
		}
		final := evs[len(evs)-1]
		if reachedAt < 0 {
			t.Errorf("%s (slowdown %s) never reached %.2f: final accuracy %.4f after %.1fs\n%s",
				n.name, slowdowns[i], target, s.TestAccuracy, final.Elapsed, n.logs())
			continue
		}
		r := evs[reachedAt]
		took := r.at.Sub(t0)
		slowest = max(slowest, took)
		t.Logf("%s (slowdown %s): %.4f at step %d, progress %.0f, %.1fs after the swarm was up (%.1fs of its own); final model %.4f",
			n.name, slowdowns[i], *r.TestAccuracy, r.Step, r.Progress, took.Seconds(), r.Elapsed, s.TestAccuracy)
		if s.Merges < 1 || s.Gossip.ExchangesDone+s.Gossip.ExchangesServed < 1 {
			t.Errorf("%s (slowdown %s): %d merges, %d exchanges done, %d served: it did not exchange models",
				n.name, slowdowns[i], s.Merges, s.Gossip.ExchangesDone, s.Gossip.ExchangesServed)
		}
		if s.NetworkWaitS != 0 {
			t.Errorf("%s (slowdown %s): the trainer waited %.3fs on the network", n.name, slowdowns[i], s.NetworkWaitS)
		}
	}
	t.Logf("every node at %.2f within %.1fs of the swarm being up", target, slowest.Seconds())
}

// A node that joins late, once the others' progress is twice its catch-up
// threshold, pulls the swarm's model instead of merging its fresh
// one, and then merges as usual.
func TestMeshLateJoinerCatchesUp(t *testing.T) {
	t.Parallel()
	const (
		count     = 3
		latest    = 2 * time.Minute // the longest wait for the swarm's progress
		threshold = 60000.0         // samples of progress: one MNIST epoch
	)
	slowdowns := []string{"4", "4", "8"}
	common := []string{"--no-data-dir", "--network", "e2e-late", "--base-step", "3ms", "--threads", "1",
		"--epochs", "0", "--schedule", "const", "--lr", "0.05",
		"--avg-interval", "500ms", "--announce-interval", "1s", "--eval-every", "5s"}
	// The first nodes never catch up themselves, so every catch-up in this
	// test is the late joiner's; the duration only bounds a failure.
	nodes, ids := startMeshSwarm(t, count, func(i int) []string {
		return append(slices.Clone(common), "--shard", fmt.Sprintf("%d/4", i), "--slowdown", slowdowns[i],
			"--catch-up", "0", "--duration", "5m")
	})
	_, boot := nodes[0].listening(t)
	// The precondition: the swarm is past the joiner's threshold, with room
	// to spare for the joiner's start.
	best := func() float64 {
		var b float64
		for _, n := range nodes {
			for _, e := range n.events() {
				if e.Event == "progress" {
					b = max(b, e.Progress)
				}
			}
		}
		return b
	}
	giveUp := nodes[0].started.Add(latest)
	for best() <= 2*threshold {
		for _, n := range nodes {
			if n.done() {
				t.Fatalf("%s exited before the late joiner came: %v\n%s", n.name, n.err, n.logs())
			}
		}
		if time.Now().After(giveUp) {
			t.Fatalf("after %v the swarm's progress is %.0f, not past twice the catch-up threshold %.0f", latest, best(), threshold)
		}
		time.Sleep(time.Second)
	}
	t.Logf("the joiner starts %.0f s after the swarm, at progress %.0f", time.Since(nodes[0].started).Seconds(), best())
	joiner := startMeshNode(t, "joiner", append(slices.Clone(common), "--shard", "3/4", "--slowdown", "4",
		"--catch-up", fmt.Sprint(threshold), "--duration", "25s", "--bootstrap", boot)...)
	joinerID, _ := joiner.listening(t)
	evs, s := joiner.wait(t, 2*time.Minute)
	for _, n := range nodes {
		if err := n.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatalf("%s: %v", n.name, err)
		}
	}
	logMeshStatus(t, "joiner", s)
	for _, n := range nodes {
		_, ns := n.wait(t, time.Minute)
		logMeshStatus(t, n.name, ns)
		if ns.Merges < 1 {
			t.Errorf("%s never merged", n.name)
		}
		t.Logf("%s merged %d times with the joiner", n.name, ns.PeerMerges[joinerID])
	}

	// It takes the swarm's model whole: pulled, or brought by an exchange
	// while it was starting (a peer that heard of it first sent it).
	ci := slices.IndexFunc(evs, func(e meshEvent) bool { return e.Event == "catchup" })
	pulled := ci >= 0 && strings.Contains(evs[ci].Message, ", pulled")
	if ci < 0 || s.CatchUps < 1 || pulled && s.Gossip.PullsDone < 1 {
		t.Fatalf("the joiner did not catch up: catch-up event at %d, catch-ups %d, pulls %d (swarm progress %.0f)\n%s",
			ci, s.CatchUps, s.Gossip.PullsDone, best(), joiner.logs())
	}
	c := evs[ci]
	t.Logf("joiner: catch-up %.1fs after it started, at step %d: %s", c.at.Sub(joiner.started).Seconds(), c.Step, c.Message)
	// What a catch-up credits (the claim up to another peer's, or the
	// threshold above the joiner's own progress) is merge.Credit's, tested
	// there; a joiner that heard of one peer only may pull again.
	for _, e := range evs[ci+1:] {
		if e.Event == "catchup" {
			t.Logf("joiner: caught up again at step %d: %s", e.Step, e.Message)
		}
	}
	// Merges counted after the catch-up: the first report after it, then
	// the final status must show more.
	after := int64(-1)
	for _, e := range evs[ci+1:] {
		if e.Event == "progress" || e.Event == "eval" {
			after = e.Merges
			break
		}
	}
	if after < 0 {
		t.Fatalf("no report from the joiner after its catch-up: %+v", evs[ci:])
	}
	t.Logf("joiner: %d merges at its first report after the catch-up, %d at the end", after, s.Merges)
	if s.Merges <= after {
		t.Errorf("the joiner's merges did not grow after its catch-up: %d then, %d at the end", after, s.Merges)
	}
	if i := slices.IndexFunc(evs[ci:], func(e meshEvent) bool { return e.TestAccuracy != nil }); i >= 0 {
		e := evs[ci+i]
		t.Logf("joiner: first test accuracy after the catch-up: %.4f at step %d, %.1fs after it started",
			*e.TestAccuracy, e.Step, e.at.Sub(joiner.started).Seconds())
	}
	merged := 0
	for _, id := range ids {
		if s.PeerMerges[id] > 0 {
			merged++
		}
	}
	if merged == 0 {
		t.Errorf("the joiner merged with none of the first nodes: %v", s.PeerMerges)
	}
}

// SIGINT to one node and SIGTERM to another while they exchange models:
// each finishes its step, commits a final checkpoint, reports it, then
// prints the final event and exits 0; a restart resumes from exactly that
// checkpoint with the same identity.
func TestMeshCleanShutdown(t *testing.T) {
	t.Parallel()
	dirs := []string{t.TempDir(), t.TempDir()}
	common := []string{"--network", "e2e-shutdown", "--dataset", "synthetic", "--epochs", "0", "--schedule", "const",
		"--threads", "1", "--slowdown", "2", "--base-step", "3ms", "--eval-every", "0",
		"--avg-interval", "200ms", "--announce-interval", "1s", "--checkpoint-every", "0", "--duration", "2m"}
	nodes, ids := startMeshSwarm(t, 2, func(i int) []string {
		return append(slices.Clone(common), "--data-dir", dirs[i])
	})
	for _, n := range nodes {
		meshWaitUntil(t, n.name+" merging", time.Minute, func() bool {
			for _, e := range n.events() {
				if e.Event == "progress" && e.Merges > 0 {
					return true
				}
			}
			if n.done() {
				t.Fatalf("%s exited: %v\n%s", n.name, n.err, n.logs())
			}
			return false
		})
	}
	signals := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}
	names := []string{"SIGINT", "SIGTERM"}
	sent := time.Now()
	for i, n := range nodes {
		if err := n.cmd.Process.Signal(signals[i]); err != nil {
			t.Fatalf("%s: %v", n.name, err)
		}
	}
	for i, n := range nodes {
		evs, s := n.wait(t, time.Minute)
		var ckpts []meshEvent
		for _, e := range evs {
			if e.Event == "checkpoint" {
				ckpts = append(ckpts, e)
			}
		}
		final := evs[len(evs)-1]
		if len(ckpts) != 1 || evs[len(evs)-2].Event != "checkpoint" {
			t.Fatalf("%s after %s: want exactly one checkpoint, right before the final event; got %d: %+v",
				n.name, names[i], len(ckpts), evs[max(0, len(evs)-3):])
		}
		ck := ckpts[0]
		if ck.at.Before(sent) {
			t.Errorf("%s: the checkpoint came before the signal", n.name)
		}
		if ck.Step != final.Step || ck.Step != s.Step || ck.Progress != final.Progress || ck.Step == 0 {
			t.Errorf("%s: checkpoint at step %d (progress %v), final event at step %d (progress %v), status step %d",
				n.name, ck.Step, ck.Progress, final.Step, final.Progress, s.Step)
		}
		t.Logf("%s after %s: checkpoint %d at step %d, %d merges, exit 0", n.name, names[i], ck.Checkpoint, ck.Step, s.Merges)

		// --max-steps below the resumed step: the restart ends at once.
		r := startMeshNode(t, n.name+"-restart", append(slices.Clone(common), "--data-dir", dirs[i], "--max-steps", "1")...)
		revs, _ := r.wait(t, time.Minute)
		if revs[0].Event != "resumed" || revs[0].Step != ck.Step || revs[0].Checkpoint != ck.Checkpoint {
			t.Errorf("%s restart began with %+v, want resumed from checkpoint %d at step %d", n.name, revs[0].event, ck.Checkpoint, ck.Step)
		}
		if l, ok := r.first("listening"); !ok || l.PeerID != ids[i] {
			t.Errorf("%s restart listens as %q, was %s", n.name, l.PeerID, ids[i])
		}
	}
}
