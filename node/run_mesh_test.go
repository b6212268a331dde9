package node_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
)

// runConfig is meshConfig on a run of `epochs` passes over the synthetic
// set with the node's default cosine schedule, the run clock fed by
// announcements every 200 ms.
func runConfig(network string, epochs float64) node.Config {
	c := meshConfig(network)
	c.Epochs = epochs
	c.Train.Schedule = node.DefaultConfig().Train.Schedule
	c.Announce.Interval, c.Announce.FreshWindow, c.Announce.MaxAge = 200*time.Millisecond, time.Second, time.Second
	return c
}

// TestRunBelongsToTheSwarm: two nodes on one run of E epochs end it
// together, after about E passes over the training set between them (not
// each), at the same point of the schedule; a node that joins later takes
// up the schedule where the swarm is, not at the warmup's first step.
func TestRunBelongsToTheSwarm(t *testing.T) {
	checkGoroutines(t)
	const epochs = 80 // of the synthetic set: long enough for a late joiner to catch up mid-run
	cfg := runConfig("swarmrun", epochs)
	a := newMeshNode(t, cfg, nil)
	cb := cfg
	cb.Host.Bootstrap = bootstrapOff(t, a.Node)
	cb.Train.Shard = "1/2"
	b := newMeshNode(t, cb, nil)
	a.start(t)
	b.start(t)
	total := a.Status().Run.TotalSamples
	if total <= 0 {
		t.Fatalf("run total %v, want epochs x training set", total)
	}
	// Wait until the run is a fifth done, then let a third node join.
	eventually(t, time.Minute, "a fifth of the run", func() bool { return a.Status().Run.Fraction >= 0.2 })
	cc := cfg
	cc.Host.Bootstrap = bootstrapOff(t, a.Node)
	c := newMeshNode(t, cc, nil)
	c.start(t)
	// The joiner's clock follows the swarm's once it has heard it.
	var sa, sc node.Status
	eventually(t, time.Minute, "the joiner to take up the swarm's clock", func() bool {
		sc, sa = c.Status(), a.Status()
		return sc.Run.Samples >= 0.9*sa.Run.Samples && sc.Step > 0
	})
	if sc.Run.OwnSamples > 0.5*sc.Run.Samples {
		t.Errorf("joiner: own samples %.0f of a clock of %.0f: it counts only itself", sc.Run.OwnSamples, sc.Run.Samples)
	}
	// Equal clocks, equal rates: both read the same schedule. A joiner
	// starting from zero would sit at the warmup's bottom. Mid-run only:
	// at the run's end both rates are near zero and would match anyway.
	eventually(t, time.Minute, "the joiner's learning rate to match the swarm's before the run's last tenth", func() bool {
		sc, sa = c.Status(), a.Status()
		return sc.Run.LR > 0 && math.Abs(scheduledLR(sc)-scheduledLR(sa)) <= 0.05*cfg.Train.LR && sa.Run.Fraction < 0.9
	})
	t.Logf("joiner at clock %.0f (swarm %.0f, %.0f%% of the run), lr %.4g x %.3g (swarm %.4g x %.3g)", sc.Run.Samples, sa.Run.Samples,
		100*sa.Run.Fraction, scheduledLR(sc), sc.Run.LRScale, scheduledLR(sa), sa.Run.LRScale)
	ra, rb, rc := a.wait(t), b.wait(t), c.wait(t)
	for name, r := range map[string]*node.Result{"a": ra, "b": rb, "c": rc} {
		if !r.Finished || r.StopReason != node.StopRunComplete {
			t.Errorf("node %s stopped with %q (finished %v), want %q", name, r.StopReason, r.Finished, node.StopRunComplete)
		}
	}
	// Between them the nodes processed about one run, not one each.
	var own float64
	for _, m := range []*meshNode{a, b, c} {
		st := m.Status()
		own += st.Run.OwnSamples
		if st.Run.Samples < total {
			t.Errorf("node %s ended at clock %.0f < total %.0f", m.ID(), st.Run.Samples, total)
		}
		if st.Run.LR > 0.05*cfg.Train.LR {
			t.Errorf("node %s ended at learning rate %.4g: the schedule did not reach its end", m.ID(), st.Run.LR)
		}
	}
	if own < 0.9*total || own > 1.3*total {
		t.Errorf("the nodes processed %.0f samples between them for a run of %.0f", own, total)
	}
}

// TestRunClockHearsAPeerFromItsFirstStep: a node announces at its first
// step after the start, out of schedule, so that its peers' run clocks
// count its samples from the start rather than from its next scheduled
// announcement. With half an hour between scheduled announcements, that
// first-step announcement is the only way either clock can count the
// other's samples within the test.
func TestRunClockHearsAPeerFromItsFirstStep(t *testing.T) {
	checkGoroutines(t)
	cfg := meshConfig("firststep")
	cfg.Announce.Interval, cfg.Announce.FreshWindow = 30*time.Minute, time.Hour
	// The kicks below, before the start, are all within one interval.
	cfg.Announce.MaxPerInterval = 200
	start := filepath.Join(t.TempDir(), "go")
	a := newMeshNode(t, cfg, nil)
	cb := cfg
	cb.Host.Bootstrap = bootstrapOff(t, a.Node)
	b := newMeshNode(t, cb, nil)
	for _, m := range []*meshNode{a, b} {
		if err := m.SetSnapshots(node.SnapshotConfig{StartFile: start}); err != nil {
			t.Fatal(err)
		}
		m.start(t)
	}
	// Both wait at the start line. Their scheduled first announcements
	// may have gone out before they were connected: kick, at most every
	// 100 ms, until each has heard the other.
	var kicked time.Time
	eventually(t, time.Minute, "each node to hear the other before the start", func() bool {
		if time.Since(kicked) >= 100*time.Millisecond {
			node.KickAnnounce(a.Node)
			node.KickAnnounce(b.Node)
			kicked = time.Now()
		}
		return len(a.Peers()) == 1 && len(b.Peers()) == 1
	})
	for _, m := range []*meshNode{a, b} {
		if st := m.Status(); st.Step != 0 {
			t.Fatalf("node %s took %d steps before the start", m.ID(), st.Step)
		}
	}
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "each node's run clock to count the other's samples", func() bool {
		return node.ClockPeerSamples(a.Node, b.ID()) > 0 && node.ClockPeerSamples(b.Node, a.ID()) > 0
	})
	if st := a.Status(); st.Run.Samples <= st.Run.OwnSamples {
		t.Errorf("run clock %.0f counts no more than the node's own %.0f samples", st.Run.Samples, st.Run.OwnSamples)
	}
}

// scheduledLR is a node's latest rate before its --lr-scaling factor (each
// node scales its own by how often it merges): the schedule's rate at its
// run clock.
func scheduledLR(st node.Status) float64 {
	if st.Run.LRScale <= 0 {
		return st.Run.LR
	}
	return st.Run.LR / st.Run.LRScale
}

// TestRestartedNodeResumesTheRunClock: a node stopped mid-run and started
// again from its data dir takes up the run clock at its checkpoint, not at
// zero, and so the schedule too.
func TestRestartedNodeResumesTheRunClock(t *testing.T) {
	checkGoroutines(t)
	cfg := runConfig("restartclock", 1000)
	cfg.Host.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // after the nodes' cleanups, which run first
	a := newMeshNode(t, cfg, st)
	a.start(t)
	eventually(t, time.Minute, "some of the run", func() bool { return a.Status().Run.Fraction >= 0.01 })
	a.stop(t)
	saved := a.Status().Run
	b := newMeshNode(t, cfg, st)
	if got := b.Status().Run; got.Samples < saved.Samples || got.Samples == 0 {
		t.Fatalf("restarted at clock %.0f, stopped at %.0f", got.Samples, saved.Samples)
	}
	resumed := b.Events("resumed")
	if len(resumed) != 1 || resumed[0].RunSamples < saved.Samples {
		t.Fatalf("resumed events %+v, want one at clock >= %.0f", resumed, saved.Samples)
	}
	b.start(t)
	eventually(t, time.Minute, "a step after the restart", func() bool { return b.Status().Step > a.Status().Step })
	if lr, warm := b.Status().Run.LR, 0.5*cfg.Train.LR; lr < warm {
		t.Errorf("restarted node at learning rate %.4g, below %.4g: its schedule started over", lr, warm)
	}
}

// deadBootstrap is a bootstrap address nobody listens on.
func deadBootstrap(t *testing.T) []peer.AddrInfo {
	t.Helper()
	key, _, err := crypto.GenerateKeyPair(crypto.Ed25519, -1)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return []peer.AddrInfo{{ID: id, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/1")}}}
}

// TestLoneNodeSaysWhy: a node that trains alone for a few seconds says so
// in its status, with the reason it can tell, and says no more once it
// has a partner.
func TestLoneNodeSaysWhy(t *testing.T) {
	checkGoroutines(t)
	cases := []struct {
		name   string
		setup  func(t *testing.T, cfg *node.Config)
		reason node.AloneReason
		words  []string
	}{
		{"no bootstrap", func(*testing.T, *node.Config) {}, node.AloneNoPeers, []string{"no --bootstrap", "profile local"}},
		{"bootstrap unreachable", func(t *testing.T, cfg *node.Config) { cfg.Host.Bootstrap = deadBootstrap(t) },
			node.AloneBootstrapUnreachable, []string{"bootstrap peer unreachable", "127.0.0.1/tcp/1"}},
		{"another run", func(t *testing.T, cfg *node.Config) {
			other := *cfg
			other.Epochs = 1e5 // another run (another fingerprint) that outlasts the test
			o := newMeshNode(t, other, nil)
			o.start(t)
			cfg.Host.Bootstrap = bootstrapOff(t, o.Node)
		}, node.AloneFingerprintMismatch, []string{"another model or run", "--epochs"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := runConfig("lone-"+strings.ReplaceAll(tc.name, " ", "-"), 0)
			cfg.Train.Schedule = "const"
			tc.setup(t, &cfg)
			n := newMeshNode(t, cfg, nil)
			n.start(t)
			var a *node.Alone
			eventually(t, time.Minute, "the node to say it is alone", func() bool {
				a = n.Status().Alone
				return a != nil
			})
			if a.Reason != tc.reason {
				t.Fatalf("alone: %+v, want reason %s", a, tc.reason)
			}
			for _, w := range tc.words {
				if !strings.Contains(a.Message, w) {
					t.Errorf("message %q lacks %q", a.Message, w)
				}
			}
			if a.SinceS < 4 {
				t.Errorf("alone since %.1fs: said before the grace period", a.SinceS)
			}
		})
	}
	t.Run("partner found", func(t *testing.T) {
		t.Parallel()
		cfg := runConfig("lone-partner", 0)
		cfg.Train.Schedule = "const"
		a := newMeshNode(t, cfg, nil)
		a.start(t)
		eventually(t, time.Minute, "a lone node to say so", func() bool { return a.Status().Alone != nil })
		cb := cfg
		cb.Host.Bootstrap = bootstrapOff(t, a.Node)
		b := newMeshNode(t, cb, nil)
		b.start(t)
		eventually(t, time.Minute, "the node to stop saying it is alone", func() bool { return a.Status().Alone == nil })
		if b.Status().Alone != nil {
			t.Errorf("the second node says it is alone: %+v", b.Status().Alone)
		}
	})
}

// TestLastCheckpointIsTheCommittedOne: the status and the final event show
// the checkpoint as the store committed it: its fingerprint, size and
// lengths, not zeros.
func TestLastCheckpointIsTheCommittedOne(t *testing.T) {
	checkGoroutines(t)
	cfg := meshConfig("lastckpt")
	cfg.Offline = true
	cfg.CheckpointEvery = 50 * time.Millisecond
	cfg.MaxSteps = 3000
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n := newMeshNode(t, cfg, st)
	n.start(t)
	eventually(t, time.Minute, "a checkpoint", func() bool { return n.Status().LastCheckpoint != nil })
	size := node.TrainerOf(n.Node).Layout().Size()
	check := func(where string, c *store.Info) {
		t.Helper()
		if c == nil {
			t.Fatalf("%s: no last checkpoint", where)
		}
		// The optimizer state holds the momentum and the reported average.
		if c.Fingerprint != node.TrainerOf(n.Node).Fingerprint() || c.Size != int64(12*size) || c.ParamsLen != size || c.OptLen != 2*size {
			t.Errorf("%s: last checkpoint %+v, want fingerprint %s, %d params, momenta and averages, %d bytes", where, *c,
				node.TrainerOf(n.Node).Fingerprint().Short(), size, 12*size)
		}
		infos, err := st.List()
		if err != nil {
			t.Fatal(err)
		}
		if !infos[0].Created.Equal(c.Created) || infos[0].ID != c.ID {
			t.Errorf("%s: last checkpoint %d at %v, the store's newest is %d at %v", where, c.ID, c.Created, infos[0].ID, infos[0].Created)
		}
	}
	check("status while running", n.Status().LastCheckpoint)
	n.wait(t)
	finals := n.Events("final")
	if len(finals) != 1 || finals[0].Status == nil {
		t.Fatalf("final events: %+v", finals)
	}
	last := finals[0].Status.LastCheckpoint
	check("final event", last)
	if !last.Final {
		t.Errorf("the final event's checkpoint is not the final one: %+v", *last)
	}
}
