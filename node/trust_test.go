package node

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/merge"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/reputation"
	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/train"
)

// trustNode is an offline node with the defences armed, trained a little,
// so merges can be driven by hand without a network.
func trustNode(t *testing.T, st store.Store) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Dataset = train.DatasetSynthetic
	cfg.Train.Model = "softmax"
	cfg.Train.Batch = 16
	cfg.Epochs = 0
	cfg.Train.Schedule = "const"
	cfg.Offline = true
	n, err := New(context.Background(), cfg, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// An offline node keeps no holdout: give it a trainer that does.
	g, _, err := newGoTrainer(cfg, cfg.Trust.Holdout, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.trainer = g
	if n.trust, err = newTrust(cfg.Trust); err != nil {
		t.Fatal(err)
	}
	mc := mergeConfig(cfg, g, true)
	if want := math.Log(10); mc.ChanceLoss != want || mc.NoHoldout {
		t.Fatalf("merge config of a built-in trainer: chance loss %v, no holdout %v; want %v, false", mc.ChanceLoss, mc.NoHoldout, want)
	}
	if mc.PeerLossScale != cfg.Trust.PeerLossScale || mc.PeerLossScale == 0 {
		t.Fatalf("merge config: peer loss scale %v, want the trust config's %v (on by default)", mc.PeerLossScale, cfg.Trust.PeerLossScale)
	}
	if mc.OutlierGrace != cfg.Trust.OutlierGrace || mc.OutlierGrace == 0 {
		t.Fatalf("merge config: outlier grace %v, want the trust config's %v (on by default)", mc.OutlierGrace, cfg.Trust.OutlierGrace)
	}
	// The exchanges here come back to back, within any grace: outlier
	// verdicts count from the first (merge.TestDecideOutlierGrace pins the
	// grace itself).
	mc.OutlierGrace = 0
	core, err := merge.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	n.avg = newAverager(n, core)
	// Past its start: these tests are about merges, and a starting node
	// takes a model far enough ahead of it whole instead
	// (TestStartingNodeTakesAModelAheadWhole).
	n.avg.judgedCatchUp = true
	n.restoreBans()
	for range 200 {
		if _, err := n.trainer.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// near is our model moved by a random vector of norm d, claiming our
// progress: what an honest, fresh peer sends.
func near(n *Node, rng *rand.Rand, d float64) params.Snapshot {
	s := n.trainer.SnapshotInto(nil)
	out := make([]float32, len(s.Params))
	noise := make([]float64, len(out))
	var sum float64
	for i := range noise {
		noise[i] = rng.NormFloat64()
		sum += noise[i] * noise[i]
	}
	k := d / math.Sqrt(sum)
	for i := range out {
		out[i] = s.Params[i] + float32(k*noise[i])
	}
	s.Params = out
	return s
}

func warmUp(t *testing.T, n *Node, rng *rand.Rand, honest []peer.ID) {
	t.Helper()
	for i := range 40 {
		p := honest[i%len(honest)]
		n.avg.merge(p, near(n, rng, 0.05+0.05*rng.Float64()), false, discard)
	}
	if got := n.Merges(); got != 40 {
		t.Fatalf("%d of 40 honest merges applied (trust stats %+v)", got, n.TrustStats())
	}
}

func TestTrustBansAttackersNotHonestPeers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	honest := []peer.ID{"honest-a", "honest-b", "honest-c"}
	attacks := map[string]func(n *Node) params.Snapshot{
		"signflip": func(n *Node) params.Snapshot {
			s := n.trainer.SnapshotInto(nil)
			for i := range s.Params {
				s.Params[i] = -s.Params[i]
			}
			return s
		},
		"scale": func(n *Node) params.Snapshot {
			s := n.trainer.SnapshotInto(nil)
			for i := range s.Params {
				s.Params[i] *= 10
			}
			return s
		},
		"noise": func(n *Node) params.Snapshot { return near(n, rng, 50) },
		"nan": func(n *Node) params.Snapshot {
			s := n.trainer.SnapshotInto(nil)
			s.Params[3] = float32(math.NaN())
			return s
		},
	}
	for name, attack := range attacks {
		t.Run(name, func(t *testing.T) {
			st := store.NewMemory()
			defer st.Close()
			n := trustNode(t, st)
			warmUp(t, n, rng, honest)
			before := n.trainer.SnapshotInto(nil)
			const attacker = peer.ID("attacker")
			exchanges := 0
			for n.standing(attacker) != reputation.Banned {
				exchanges++
				if exchanges > 20 {
					t.Fatalf("not banned after 20 exchanges: %+v", n.trust.book.Peer(attacker.String(), time.Now()))
				}
				n.avg.merge(attacker, attack(n), false, discard)
				// Honest peers go on meanwhile.
				n.avg.merge(honest[exchanges%3], near(n, rng, 0.08), true, discard)
			}
			t.Logf("%s banned after %d exchanges", name, exchanges)
			if !n.refuseConn(attacker) {
				t.Error("the connection gate does not refuse a banned peer")
			}
			for _, p := range honest {
				if s := n.standing(p); s != reputation.OK {
					t.Errorf("honest %s is %s: %+v", p, s, n.trust.book.Peer(p.String(), time.Now()))
				}
			}
			// Nothing of the attacker's reached the model: it moved only by
			// the honest merges, each at most alpha * 0.08.
			after := n.trainer.SnapshotInto(nil)
			var d float64
			for i := range after.Params {
				x := float64(after.Params[i] - before.Params[i])
				d += x * x
			}
			if math.Sqrt(d) > float64(exchanges)*0.5*0.08+1e-3 {
				t.Errorf("model moved %.3f during the attack, more than the honest merges can explain", math.Sqrt(d))
			}
			// The ban is persisted and survives a restart.
			n.trust.wg.Wait()
			rec, err := st.Peer(attacker.String())
			if err != nil || !rec.BannedUntil.After(time.Now()) {
				t.Fatalf("ban not persisted: %+v, %v", rec, err)
			}
			n2 := trustNode(t, st)
			if n2.standing(attacker) != reputation.Banned {
				t.Error("ban not restored after a restart")
			}
		})
	}
}

func TestTrustRefusesALossJumpFromANewPeer(t *testing.T) {
	n := trustNode(t, nil)
	// Before any merge the radius is still warming up, so nothing is an
	// outlier: the holdout check is what stops a garbage model from a peer
	// on probation.
	s := n.trainer.SnapshotInto(nil)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range s.Params {
		s.Params[i] = float32(rng.NormFloat64() * 3)
	}
	n.avg.merge("stranger", s, false, discard)
	if n.Merges() != 0 {
		t.Fatal("a model that ruins the holdout loss was merged")
	}
	if got := n.TrustStats().Refused["loss_jump"]; got != 1 {
		t.Fatalf("loss_jump refusals %d, want 1", got)
	}
	// Refused, but not held against it: an honest peer with other labels
	// can fail a check on our own shard's holdout too.
	if c := n.trust.book.Peer(peer.ID("stranger").String(), time.Now()).Counts["loss_jump"]; c != 0 {
		t.Fatalf("a failed holdout check of a blend counted against the peer: %d", c)
	}
}

func TestTrustClampsClaimedProgress(t *testing.T) {
	n := trustNode(t, nil)
	own := n.trainer.Stats().Progress
	s := near(n, rand.New(rand.NewPCG(5, 6)), 0.01)
	s.Progress = 1e15
	n.avg.merge("boaster", s, false, discard)
	if n.Merges() != 1 {
		t.Fatalf("merge refused: %+v", n.TrustStats())
	}
	got := float64(n.trainer.Stats().Progress)
	if limit := float64(own) + n.cfg.CatchUp; got > limit {
		t.Fatalf("progress %v after merging an inflated claim; at most %v", got, limit)
	}
}

func TestTrustIgnoredPeerNotMerged(t *testing.T) {
	n := trustNode(t, nil)
	rng := rand.New(rand.NewPCG(7, 8))
	for range 3 {
		n.verdict("shady", reputation.Outlier)
	}
	if s := n.standing("shady"); s != reputation.Ignored {
		t.Fatalf("standing %s after 3 outliers, want ignored", s)
	}
	n.avg.merge("shady", near(n, rng, 0.01), false, discard)
	if n.Merges() != 0 || n.TrustStats().Refused["ignored"] != 1 {
		t.Fatalf("merged a model from an ignored peer: %+v", n.TrustStats())
	}
}

func TestTrustConfigValidate(t *testing.T) {
	c := DefaultTrustConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Holdout, c.ValidateEvery, c.LossTolerance, c.PeerLossScale, c.OutlierGrace = 1, 0, math.NaN(), 0.5, -time.Second
	c.Reputation.BanBelow = 5
	err := c.Validate()
	for _, want := range []string{"holdout", "validate-every", "loss tolerance", "BanBelow", "peer loss scale", "outlier grace"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	c = DefaultTrustConfig()
	c.Enabled = false
	c.Holdout = -1
	if err := c.Validate(); err != nil {
		t.Errorf("disabled trust config validated its fields: %v", err)
	}
}

func TestTrustCatchUpNeedsABetterModel(t *testing.T) {
	n := trustNode(t, nil)
	vet := func(from peer.ID, s params.Snapshot) bool {
		d := n.avg.core.DecideCatchUp(n.avg.input(from, &s))
		n.avg.judged(from, d)
		return d.Merge
	}
	good := n.trainer.SnapshotInto(nil)
	if !vet("ahead", good) {
		t.Fatal("a model as good as ours was refused for catch-up")
	}
	bad := good
	bad.Params = make([]float32, len(good.Params))
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range bad.Params {
		bad.Params[i] = float32(rng.NormFloat64() * 3)
	}
	if vet("liar", bad) {
		t.Fatal("a garbage model claiming to be far ahead would replace ours")
	}
	bad.Params[0] = float32(math.NaN())
	if vet("nan", bad) || n.trust.book.Peer(peer.ID("nan").String(), time.Now()).Counts["non_finite"] != 1 {
		t.Fatal("a non-finite catch-up model was not refused and counted")
	}
}

// TestPeerNamesCachesAndStaysBounded pins the peer-ID cache the trust
// state keys the reputation book with: it gives every ID's text form and
// forgets everything once full, so churn cannot grow it without bound.
func TestPeerNamesCachesAndStaysBounded(t *testing.T) {
	var c peerNames
	ids := make([]peer.ID, maxPeerNames+1)
	for i := range ids {
		ids[i] = peer.ID(fmt.Sprintf("peer-%d", i))
	}
	for _, p := range ids[:maxPeerNames] {
		if got := c.of(p); got != p.String() {
			t.Fatalf("name of %q: %q, want %q", string(p), got, p.String())
		}
	}
	if len(c.m) != maxPeerNames {
		t.Fatalf("cache holds %d names after %d peers", len(c.m), maxPeerNames)
	}
	if got := c.of(ids[0]); got != ids[0].String() || len(c.m) != maxPeerNames {
		t.Fatalf("a cached name: %q (cache %d)", got, len(c.m))
	}
	if got := c.of(ids[maxPeerNames]); got != ids[maxPeerNames].String() || len(c.m) != 1 {
		t.Fatalf("one past full: %q, cache holds %d, want 1", got, len(c.m))
	}
}
