package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/goleak"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train"
)

// TestSyncAverageIsDDPStep checks the design note sync mode rests on: with
// SGD + momentum + weight decay, members that start from identical w, keep
// their own momentum and average only w after each local step follow DDP
// (steps on the mean gradient) exactly, round after round, and the mean of
// their momenta is DDP's momentum.
func TestSyncAverageIsDDPStep(t *testing.T) {
	const n, k, lr, rounds = 257, 4, 0.05, 5
	opt := train.SGD{Momentum: 0.9, WeightDecay: 5e-4}
	vec := normals(rand.New(rand.NewPCG(1, 2)), n)
	w0, m0 := vec(1), vec(0.1)
	// DDP: one model, one momentum, steps on the mean gradient.
	w, m := slices.Clone(w0), slices.Clone(m0)
	// Members: a shared w, a momentum each (identical at the start).
	shared := slices.Clone(w0)
	moms := make([][]float32, k)
	for j := range moms {
		moms[j] = slices.Clone(m0)
	}
	var grads [][]float32
	for range rounds {
		grads = make([][]float32, k)
		mean := make([]float32, n)
		for j := range grads {
			grads[j] = vec(1)
			for i, g := range grads[j] {
				mean[i] += g / k
			}
		}
		opt.Update(w, m, mean, lr)
		avgW := make([]float64, n)
		for j, g := range grads {
			wj := slices.Clone(shared)
			opt.Update(wj, moms[j], g, lr)
			for i := range wj {
				avgW[i] += float64(wj[i]) / k
			}
		}
		for i := range shared {
			shared[i] = float32(avgW[i])
		}
	}
	for i := range w {
		var avgM float64
		for _, mj := range moms {
			avgM += float64(mj[i]) / k
		}
		if math.Abs(float64(shared[i])-float64(w[i])) > 1e-5 || math.Abs(avgM-float64(m[i])) > 1e-5 {
			t.Fatalf("element %d after %d rounds: averaged (%g, mean momentum %g), DDP (%g, %g)", i, rounds, shared[i], avgM, w[i], m[i])
		}
	}
	// And it needs identical starts: from different w the average is not
	// a DDP step of anything's mean (this is why joiners adopt the group's
	// model first).
	pair := make([]float32, n)
	for i := range pair {
		pair[i] = (grads[0][i] + grads[1][i]) / 2
	}
	wd, md := slices.Clone(w0), slices.Clone(m0)
	opt.Update(wd, md, pair, lr)
	w1 := vec(1)
	w2, m2 := slices.Clone(w1), slices.Clone(m0)
	opt.Update(w2, m2, grads[0], lr)
	wa, ma := slices.Clone(w0), slices.Clone(m0)
	opt.Update(wa, ma, grads[1], lr)
	var diff float64
	for i := range wd {
		diff = max(diff, math.Abs((float64(w2[i])+float64(wa[i]))/2-float64(wd[i])))
	}
	if diff < 1e-3 {
		t.Fatalf("averaging from different starts matched the DDP step (max diff %g)", diff)
	}
}

// TestSyncOverlapSwap pins --sync-overlap's math: members that send round
// r's update while they take step r+1 from their own model, and then swap
// that update for the round's mean (swapUpdate), each hold the group's
// model plus their own step since, and the group's model is the start plus
// every round's mean update: no member's step is lost or counted twice.
func TestSyncOverlapSwap(t *testing.T) {
	const n, k, rounds = 257, 4, 6
	vec := normals(rand.New(rand.NewPCG(3, 4)), n)
	g0 := vec(1)
	group := slices.Clone(g0)
	want := make([]float64, n) // g0 plus every round's mean update
	for i, v := range g0 {
		want[i] = float64(v)
	}
	w := make([][]float32, k)
	for j := range w {
		w[j] = slices.Clone(g0)
	}
	var sent [][]float32 // the round in flight: each member's vector
	var base []float32   // the group's model it started from
	for r := range rounds {
		last := make([][]float32, k)
		for j := range w {
			// The local step, from the member's own model.
			last[j] = vec(0.1)
			for i, u := range last[j] {
				w[j][i] += u
			}
		}
		if sent != nil {
			// The round in flight ends: its mean update replaces each
			// member's sent one.
			next := make([]float32, n)
			for i := range next {
				var mean float64
				for j := range sent {
					mean += float64(sent[j][i]) / k
				}
				next[i] = base[i] - float32(mean)
				want[i] -= mean
			}
			group = next
			for j := range w {
				// Into the sent vector, then the model, as adopt does.
				if err := swapUpdate(sent[j], w[j], group, base, sent[j]); err != nil {
					t.Fatal(err)
				}
				copy(w[j], sent[j])
				for i := range w[j] {
					if d := float64(w[j][i]) - float64(group[i]) - float64(last[j][i]); math.Abs(d) > 1e-5 {
						t.Fatalf("round %d, member %d, element %d: model - group = %g, want its own last step %g",
							r, j, i, w[j][i]-group[i], last[j][i])
					}
				}
			}
		}
		// This step's round: each member's update against the group's model.
		base, sent = group, make([][]float32, k)
		for j := range w {
			sent[j] = make([]float32, n)
			for i := range sent[j] {
				sent[j][i] = group[i] - w[j][i]
			}
		}
	}
	for i := range group {
		if math.Abs(float64(group[i])-want[i]) > 1e-5 {
			t.Fatalf("element %d: group model %g, start plus the rounds' mean updates %g", i, group[i], want[i])
		}
	}
	if err := swapUpdate(make([]float32, 3), make([]float32, 3), group, base, sent[0]); err == nil {
		t.Fatal("swapUpdate took vectors of different sizes")
	}
}

// normals returns a source of n-vectors of normal values at a scale.
func normals(rng *rand.Rand, n int) func(scale float64) []float32 {
	return func(scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return v
	}
}

func TestPreferGroup(t *testing.T) {
	a, b := peer.ID("\x00\x01a"), peer.ID("\x00\x01b")
	for _, c := range []struct {
		theirs, ours params.Progress
		tl, ol       peer.ID
		want         bool
	}{
		{100, 50, b, a, true},  // further along wins, whoever leads
		{50, 100, a, b, false}, // a restarted lower ID never drags a group back
		{64, 64, a, b, true},   // tie: lower leader
		{64, 64, b, a, false},
	} {
		if got := preferGroup(c.theirs, c.tl, c.ours, c.ol); got != c.want {
			t.Errorf("preferGroup(%v by %q over %v by %q) = %v", c.theirs, c.tl, c.ours, c.ol, got)
		}
		if c.theirs != c.ours || c.tl != c.ol {
			if preferGroup(c.theirs, c.tl, c.ours, c.ol) == preferGroup(c.ours, c.ol, c.theirs, c.tl) {
				t.Errorf("both groups of (%v %q, %v %q) would join the other, or neither", c.theirs, c.tl, c.ours, c.ol)
			}
		}
	}
}

const syncBase = 25 * time.Millisecond

// syncConfig is a sync-mode node on the local profile training a small MLP
// on the synthetic set, with emulated steps of slowdown x 25 ms (sleeping,
// so four nodes fit on two cores) and every interval shortened.
func syncConfig(network string, slowdown float64) Config {
	c := DefaultConfig()
	c.Mode = ModeSync
	c.Dataset = train.DatasetSynthetic
	c.Train.Model = "mlp:32"
	c.Train.Batch = 16
	c.Epochs = 0
	c.Train.LR = 0.05
	c.Train.Schedule = "const"
	// The tests compare the members' models: the run ends with the live
	// ones, not with an average that each member starts when it joins.
	c.Train.EMA = 0
	c.Train.Seed = 7
	c.Train.BaseStep = syncBase
	c.Train.Slowdown = slowdown
	c.Train.Network = network
	c.Host.Network = network
	c.Host.DiscoveryInterval = 500 * time.Millisecond
	c.Announce.Interval = 100 * time.Millisecond
	c.Announce.FreshWindow = time.Second
	c.Announce.MaxAge = time.Second
	c.Exchange.ChunkTimeout = time.Second
	c.Exchange.ExchangeTimeout = 2 * time.Second
	c.SyncTimeout = time.Second
	c.CheckpointEvery = 0
	c.ReportEvery = time.Second
	return c
}

// syncRun is a node with its Run in progress.
type syncRun struct {
	*Node
	slowdown float64
	cancel   context.CancelFunc
	done     chan struct{}
	res      *Result
	err      error
	log      *lockedBuffer
}

// lockedBuffer keeps a node's log lines, shown when the test fails.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newSyncNodes builds one node per slowdown, bootstrapped off the first,
// each on its own shard, and waits until every node sees all the others
// announce. None runs yet.
func newSyncNodes(t *testing.T, network string, slowdowns []float64, maxSteps int64) []*syncRun {
	t.Helper()
	return newSyncNodesWith(t, network, slowdowns, func(c *Config) { c.MaxSteps = maxSteps })
}

// newSyncNodesWith is newSyncNodes with edit applied to every config.
func newSyncNodesWith(t *testing.T, network string, slowdowns []float64, edit func(*Config)) []*syncRun {
	t.Helper()
	nodes := make([]*syncRun, len(slowdowns))
	for i, f := range slowdowns {
		cfg := syncConfig(network, f)
		edit(&cfg)
		cfg.Train.Shard = fmt.Sprintf("%d/%d", i, len(slowdowns))
		cfg.Train.OrderSeed = uint64(i)
		if i > 0 {
			ai, err := ParseBootstrap(nodes[0].Addrs())
			if err != nil {
				t.Fatal(err)
			}
			cfg.Host.Bootstrap = ai
		}
		// gossipsub lives as long as New's context: it ends with the test.
		meshCtx, endMesh := context.WithCancel(context.Background())
		logs := new(lockedBuffer)
		log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		n, err := New(meshCtx, cfg, nil, log, nil)
		if err != nil {
			endMesh()
			t.Fatalf("New: %v", err)
		}
		r := &syncRun{Node: n, slowdown: f, done: make(chan struct{}), log: logs}
		nodes[i] = r
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("node %d (%s) log:\n%s", i, n.ID(), syncLines(logs.String()))
			}
		})
		// Until started, the mesh is closed here; once started, by Run.
		t.Cleanup(func() {
			defer endMesh()
			if r.cancel == nil {
				n.Close()
				return
			}
			r.stop(t)
		})
	}
	syncWait(t, 30*time.Second, "every node to see the others announce sync", func() bool {
		for _, r := range nodes {
			if len(r.sync.candidates()) < len(nodes)-1 {
				return false
			}
		}
		return true
	})
	return nodes
}

// syncLines keeps the sync mode's lines of a node's log.
func syncLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "sync") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func (r *syncRun) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.res, r.err = r.Run(ctx, nil)
	}()
}

// stop cancels the run (closing the node's mesh) and waits for Run.
func (r *syncRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	r.wait(t)
}

func (r *syncRun) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("node %s: Run did not return", r.ID())
	}
	if r.err != nil {
		t.Fatalf("node %s: Run: %v", r.ID(), r.err)
	}
}

// syncWait polls cond every 5 ms; the limit only turns a hang into a
// failure.
func syncWait(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// grouped reports whether the nodes form one group: each synced, with the
// same members, all of them.
func grouped(nodes []*syncRun) bool {
	var want []string
	for _, r := range nodes {
		want = append(want, r.ID().String())
	}
	slices.Sort(want)
	for _, r := range nodes {
		v := r.SyncStatus()
		if !v.Synced || !slices.Equal(v.Members, want) {
			return false
		}
	}
	return true
}

func leaderOf(nodes []*syncRun) *syncRun {
	l := nodes[0]
	for _, r := range nodes[1:] {
		if r.ID() < l.ID() {
			l = r
		}
	}
	return l
}

func checkNoLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// TestSyncLockstep runs four sync nodes at slowdowns 2, 2, 4 and 8 and
// checks, from their counters, that every node steps at the slowest node's
// rate, that the fast nodes wait on the network for the share of the time
// the profile predicts ((8-f)/8 for a node at slowdown f), and that the
// group survives losing a member and then its leader.
func TestSyncLockstep(t *testing.T) {
	checkNoLeaks(t)
	slowdowns := []float64{2, 2, 4, 8}
	nodes := newSyncNodes(t, "sync-lockstep", slowdowns, 0)
	for _, r := range nodes {
		r.start()
	}
	syncWait(t, time.Minute, "one group of four", func() bool { return grouped(nodes) })

	// Counters over a window in steady state.
	const window = 4 * time.Second
	before := make([]Status, len(nodes))
	for i, r := range nodes {
		before[i] = r.Status()
	}
	time.Sleep(window)
	after := make([]Status, len(nodes))
	for i, r := range nodes {
		after[i] = r.Status()
	}
	// Every node takes the same steps; each step lasts its slowdown x the
	// base step (busy), and the rest of each round it waits. With rounds as
	// long as the slowest node's step, a node at slowdown f waits (8-f)/8 of
	// the time. On top of that every node waits for the round's messages,
	// which is all the slowest node ever waits for: with o its share, the
	// profile predicts o + (1-o)(8-f)/8 for a node at slowdown f. Shares are
	// of the time a node was busy or waiting, which leaves out the loop's
	// own bookkeeping (a few percent when the machine is loaded).
	slowest := slices.Max(slowdowns)
	share := func(i int) (wait, busy, up float64) {
		b, a := before[i], after[i]
		wait, busy, up = a.NetworkWaitS-b.NetworkWaitS, a.BusyS-b.BusyS, a.UptimeS-b.UptimeS
		return wait / (wait + busy), busy / up, up
	}
	var overhead float64
	for i, r := range nodes {
		if r.slowdown == slowest {
			overhead, _, _ = share(i)
		}
	}
	var minSteps, maxSteps int64 = math.MaxInt64, 0
	for i, r := range nodes {
		steps := after[i].Step - before[i].Step
		wait, busy, up := share(i)
		ideal := (slowest - r.slowdown) / slowest
		want := overhead + (1-overhead)*ideal
		minSteps, maxSteps = min(minSteps, steps), max(maxSteps, steps)
		t.Logf("node %d (slowdown %v): %d steps in %.2fs (%.2f steps/s, %.1f ms per round), busy %.3f of the time, waiting %.3f of busy+wait; profile: %.3f ideal, %.3f with the round's messages",
			i, r.slowdown, steps, up, float64(steps)/up, 1000*up/float64(steps), busy, wait, ideal, want)
		if math.Abs(wait-want) > 0.1 {
			t.Errorf("node %d at slowdown %v waited %.3f of its time on the network, the profile predicts %.3f", i, r.slowdown, wait, want)
		}
	}
	// The measurement means something only if rounds are mostly the slowest
	// node's step, not messages.
	if overhead > 0.5 {
		t.Errorf("the slowest node waited %.3f of its time: rounds are mostly messages", overhead)
	}
	// Every round takes in every member's model: a model is never older
	// than the last round (a node that never synced would be as old as
	// its uptime, more than the window).
	for i := range nodes {
		if age := after[i].ModelAgeS; age >= window.Seconds() {
			t.Errorf("node %d: model age %.2fs after %v of rounds", i, age, window)
		}
	}
	// Lockstep: the same number of steps, give or take the round in flight
	// when the counters were read; the slowest node's rate is everyone's.
	if maxSteps-minSteps > 2 || minSteps < 10 {
		t.Errorf("steps in the window range over [%d, %d], want equal (and > 10)", minSteps, maxSteps)
	}

	// Lose a member that does not lead: the group drops it (after the sync
	// timeout, if it stopped between rounds) or, if it stopped mid-round,
	// the all-reduce fails and the leader founds the group anew without it;
	// either way it goes on at the pace of the slowest one left.
	leader := leaderOf(nodes)
	var victim *syncRun
	for _, r := range nodes {
		if r != leader && (victim == nil || r.slowdown > victim.slowdown) {
			victim = r
		}
	}
	rest := slices.DeleteFunc(slices.Clone(nodes), func(r *syncRun) bool { return r == victim })
	victim.stop(t)
	t.Logf("stopped member %s (slowdown %v)", victim.ID(), victim.slowdown)
	keepsGoing(t, rest, "after a member stopped")
	if v := leader.SyncStatus(); v.Service.MembersDropped < 1 && v.AllReduce.Failures < 1 {
		t.Errorf("leader neither dropped a member nor saw a round fail: %+v", v)
	}

	// Lose the leader: the lowest member left takes over.
	rest = slices.DeleteFunc(rest, func(r *syncRun) bool { return r == leader })
	leader.stop(t)
	t.Logf("stopped leader %s", leader.ID())
	keepsGoing(t, rest, "after the leader stopped")
	var lost int64
	for _, r := range rest {
		lost += r.SyncStatus().LeadersLost
	}
	if lost < 1 {
		t.Errorf("no member counted its leader lost")
	}
}

// keepsGoing waits until the nodes form one group again and have taken 20
// more steps.
func keepsGoing(t *testing.T, nodes []*syncRun, when string) {
	t.Helper()
	began := time.Now()
	start := make([]int64, len(nodes))
	for i, r := range nodes {
		start[i] = r.Status().Step
	}
	syncWait(t, time.Minute, "the group to go on "+when, func() bool {
		if !grouped(nodes) {
			return false
		}
		for i, r := range nodes {
			if r.Status().Step < start[i]+20 {
				return false
			}
		}
		return true
	})
	for i, r := range nodes {
		s := r.Status()
		t.Logf("%s: node %s at step %d (from %d) after %v, members %d, leaders lost %d, dropped %d",
			when, r.ID(), s.Step, start[i], time.Since(began).Round(time.Millisecond), len(r.SyncStatus().Members),
			r.SyncStatus().LeadersLost, r.SyncStatus().Service.MembersDropped)
	}
}

// TestSyncJoinIdentical starts two sync nodes, lets a third join once they
// are under way, and checks that all three end holding bit-identical
// parameters at the same step.
func TestSyncJoinIdentical(t *testing.T) {
	// With --sync-overlap too: the round in flight when the run stops is
	// applied, so the members end on the same model.
	for _, overlap := range []bool{false, true} {
		t.Run(fmt.Sprintf("overlap=%v", overlap), func(t *testing.T) { testSyncJoinIdentical(t, overlap) })
	}
}

func testSyncJoinIdentical(t *testing.T, overlap bool) {
	checkNoLeaks(t)
	const steps = 120
	nodes := newSyncNodesWith(t, fmt.Sprintf("sync-join-%v", overlap), []float64{1.5, 1.5, 1.5}, func(c *Config) {
		c.MaxSteps, c.SyncOverlap = steps, overlap
	})
	nodes[0].start()
	nodes[1].start()
	syncWait(t, time.Minute, "the first two to train together", func() bool {
		return grouped(nodes[:2]) && nodes[0].SyncStatus().Round >= 20
	})
	joinedAt := nodes[0].SyncStatus().Round
	nodes[2].start()
	var snaps [][]float32
	for i, r := range nodes {
		r.wait(t)
		s := r.res.Snapshot
		snaps = append(snaps, s.Params)
		v := r.SyncStatus()
		t.Logf("node %d (%s): step %d, progress %v, sync %+v", i, r.ID(), s.Step, float64(s.Progress), v)
		if s.Step != steps {
			t.Errorf("node %d ended at step %d, want %d", i, s.Step, steps)
		}
	}
	if v := nodes[2].SyncStatus(); v.Joins < 1 || len(v.Members) != 3 {
		t.Errorf("the newcomer joined %d times and ended in a group of %d, want a join and 3", v.Joins, len(v.Members))
	}
	t.Logf("newcomer started when the group was at round %d", joinedAt)
	for i := 1; i < len(snaps); i++ {
		for j := range snaps[0] {
			if snaps[i][j] != snaps[0][j] {
				t.Fatalf("node %d parameter %d is %g, node 0 has %g", i, j, snaps[i][j], snaps[0][j])
			}
		}
	}
	// The group's progress counts every member's batch of every round.
	if p0 := nodes[0].res.Snapshot.Progress; p0 <= steps*16 {
		t.Errorf("group progress %v, want more than one member's %d samples", float64(p0), steps*16)
	}
}

// TestSyncKilledMidRound kills a member's host, as a crashed process would
// lose its connections, while its group is in the middle of its rounds: the
// rest fail their round at once (the all-reduce's streams break) or after
// the sync timeout (a contribution that never comes), and go on as one
// group within one timeout.
func TestSyncKilledMidRound(t *testing.T) {
	for _, overlap := range []bool{false, true} {
		t.Run(fmt.Sprintf("overlap=%v", overlap), func(t *testing.T) { testSyncKilledMidRound(t, overlap) })
	}
}

func testSyncKilledMidRound(t *testing.T, overlap bool) {
	checkNoLeaks(t)
	nodes := newSyncNodesWith(t, fmt.Sprintf("sync-killed-%v", overlap), []float64{1, 1, 1, 1}, func(c *Config) { c.SyncOverlap = overlap })
	for _, r := range nodes {
		r.start()
	}
	syncWait(t, time.Minute, "one group of four", func() bool { return grouped(nodes) && nodes[0].SyncStatus().Round > 10 })
	leader := leaderOf(nodes)
	var victim *syncRun
	for _, r := range nodes {
		if r != leader {
			victim = r
			break
		}
	}
	rest := slices.DeleteFunc(slices.Clone(nodes), func(r *syncRun) bool { return r == victim })
	start := make([]int64, len(rest))
	for i, r := range rest {
		start[i] = r.Status().Step
	}
	killed := time.Now()
	_ = victim.host.Close()
	syncWait(t, time.Minute, "the rest to go on as one group", func() bool {
		if !grouped(rest) {
			return false
		}
		for i, r := range rest {
			if r.Status().Step < start[i]+2 {
				return false
			}
		}
		return true
	})
	took := time.Since(killed)
	var failures, dropped uint64
	for _, r := range rest {
		v := r.SyncStatus()
		failures += v.AllReduce.Failures
		dropped += v.Service.MembersDropped
	}
	t.Logf("the rest went on as a group of %d after %v (all-reduce failures %d, members dropped %d)",
		len(rest), took.Round(time.Millisecond), failures, dropped)
	// One timeout, plus a round of steps and the time a join takes.
	if limit := nodes[0].cfg.SyncTimeout + 500*time.Millisecond; took > limit {
		t.Errorf("the rest went on after %v, want within %v", took, limit)
	}
	victim.stop(t)
}

// TestDilocoRounds runs three diloco nodes through a run of one pass over
// the synthetic set on the run clock, which in diloco mode is the group
// model's progress: they form one group, every member ends the run after
// the same outer round, and all end bit-identical (every member applies the
// same outer step to the same model).
func TestDilocoRounds(t *testing.T) {
	checkNoLeaks(t)
	const h = 4
	// Emulated steps (50 to 100 ms), so a node that starts first does not
	// run the whole short run alone before the others are up.
	nodes := newDilocoNodes(t, "diloco-rounds", []float64{2, 2, 4}, func(c *Config) {
		c.InnerSteps = h
		c.Epochs = 1
	})
	for _, r := range nodes {
		r.start()
	}
	var snaps [][]float32
	var rounds []int64
	for i, r := range nodes {
		r.wait(t)
		s := r.res.Snapshot
		v := r.SyncStatus()
		t.Logf("node %d: step %d, progress %v, round %d, members %d, all-reduces %+v", i, s.Step, float64(s.Progress), v.Round, len(v.Members), v.AllReduce)
		if len(v.Members) != 3 || v.Round < 5 {
			t.Errorf("node %d ended at round %d in a group of %d, want 5 or more and 3", i, v.Round, len(v.Members))
		}
		snaps, rounds = append(snaps, s.Params), append(rounds, v.Round)
	}
	for i := 1; i < len(snaps); i++ {
		if rounds[i] != rounds[0] || !slices.Equal(snaps[i], snaps[0]) {
			t.Fatalf("node %d ended at round %d with another model than node 0 at round %d", i, rounds[i], rounds[0])
		}
	}
}

// TestDilocoSpeedScaling: with --inner-steps-scaling speed a node four
// times slower takes about a quarter of the fast node's inner steps per
// round, so the fast one does not wait for it.
func TestDilocoSpeedScaling(t *testing.T) {
	checkNoLeaks(t)
	nodes := newDilocoNodes(t, "diloco-speed", []float64{2, 8}, func(c *Config) {
		c.InnerSteps = 8
		c.InnerScaling = InnerScalingSpeed
	})
	for _, r := range nodes {
		r.start()
	}
	syncWait(t, time.Minute, "a few rounds", func() bool { return grouped(nodes) && nodes[0].SyncStatus().Round >= 3 })
	before := []int64{nodes[0].Status().Step, nodes[1].Status().Step}
	r0 := nodes[0].SyncStatus().Round
	syncWait(t, time.Minute, "more rounds", func() bool { return nodes[0].SyncStatus().Round >= r0+4 })
	fast, slow := nodes[0].Status().Step-before[0], nodes[1].Status().Step-before[1]
	t.Logf("over 4 rounds: fast node %d steps, slow node %d steps", fast, slow)
	if ratio := float64(fast) / float64(max(slow, 1)); ratio < 2.5 || ratio > 6 {
		t.Errorf("fast/slow inner steps %.2f, want about 4", ratio)
	}
	// Without the scaling the fast node would wait 3/4 of the time.
	if w := nodes[0].Status().NetworkWaitS / nodes[0].Status().UptimeS; w > 0.4 {
		t.Errorf("the fast node waited %.2f of its time", w)
	}
}

func newDilocoNodes(t *testing.T, network string, slowdowns []float64, edit func(*Config)) []*syncRun {
	t.Helper()
	return newSyncNodesWith(t, network, slowdowns, func(c *Config) {
		c.Mode = ModeDiloco
		edit(c)
	})
}

// TestReduceFailedSparesAMemberThatResetItsStream: an all-reduce that
// failed on a member whose stream to us was reset by that member, while
// its connection stays up, or that said it left the round, does not give
// up on it: it ended the round itself, having seen another member fail
// first, and the next group wants it. A member whose connection is gone, one that reset nothing (it hung
// up or stalled), a reset on our side, and a second reset by the same
// member within spareWindow are given up on, as before.
func TestReduceFailedSparesAMemberThatResetItsStream(t *testing.T) {
	nodes := newSyncNodesWith(t, "sync-reduce-failed", []float64{1, 1}, func(*Config) {})
	a, b := nodes[0], nodes[1]
	if a.host.Network().Connectedness(b.ID()) != network.Connected {
		if err := a.host.Connect(t.Context(), peer.AddrInfo{ID: b.ID(), Addrs: b.host.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	s := a.sync // not started: nothing else touches it
	gone := testPeer(t)
	for _, c := range []struct {
		what    string
		p       peer.ID
		err     error
		givenUp bool
	}{
		{"reset by a connected member", b.ID(), &network.StreamError{Remote: true}, false},
		{"a second reset by the same member soon after", b.ID(), &network.StreamError{Remote: true}, true},
		{"reset by a member whose connection is gone", gone, &network.StreamError{Remote: true}, true},
		{"reset on our side", b.ID(), &network.StreamError{}, true},
		{"a member that hung up", b.ID(), io.EOF, true},
		{"a member that stalled", b.ID(), gossip.ErrTimeout, true},
		{"a connected member that said it left the round, a window after the last spare", b.ID(), gossip.ErrMemberLeft, false},
		{"the same member leaving again soon after", b.ID(), gossip.ErrMemberLeft, true},
		{"a member that left and whose connection is gone", gone, gossip.ErrMemberLeft, true},
	} {
		if strings.Contains(c.what, "a window after") {
			s.spared[c.p] = time.Now().Add(-spareWindow - time.Second)
		}
		clear(s.failed)
		s.reduceFailed(fmt.Errorf("round failed: %w", &gossip.AllReduceError{Round: 3, Peer: c.p,
			Err: fmt.Errorf("%w: %w", gossip.ErrShortRead, c.err)}))
		if got := !s.failed[c.p].IsZero(); got != c.givenUp {
			t.Errorf("%s: given up %v, want %v", c.what, got, c.givenUp)
		}
	}
	// Once the window has passed, the member is spared again.
	clear(s.failed)
	s.spared[b.ID()] = time.Now().Add(-spareWindow - time.Second)
	s.reduceFailed(&gossip.AllReduceError{Round: 4, Peer: b.ID(), Err: &network.StreamError{Remote: true}})
	if !s.failed[b.ID()].IsZero() {
		t.Errorf("a reset %v after the last one spared: given up, want spared", spareWindow)
	}
}
