package merge

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/reputation"
)

// The fixture: 32 parameters, ours all 1 at progress 16000 (1000 steps of
// 16), and a holdout whose loss is the squared distance to the zero vector,
// so our own loss is 32 and the tests choose each model's loss by where
// they put it. Remote models differ from ours in coordinate 0 only, so
// their distance from ours is exactly what the test moved them by.
const (
	dim        = 32
	ownProg    = params.Progress(16000)
	batch      = 16
	catchUp    = 1000
	radiusMed  = 1.0 // the radius median warmCore sets: radius 2, outliers beyond 20
	clipRadius = 2 * radiusMed
)

var (
	t0      = time.Unix(1_700_000_000, 0)
	fp      = params.Fingerprint{1}
	otherFP = params.Fingerprint{2}
)

// testConfig measures staleness in steps, whose math the cases spell out;
// TestDecideRelativeLag covers the default measure.
func testConfig() Config {
	rad := averaging.DefaultRadiusConfig()
	rad.OutlierScale = 20
	m := averaging.DefaultMerger()
	m.Lag = averaging.LagSteps
	return Config{
		Merger: m, Batch: batch, CatchUp: catchUp, Trust: true, Radius: rad,
		Probation: 5, ValidateEvery: 16, LossTolerance: 2, LossSlack: 0.05, PlausibleFactor: 10, Seed: 1,
	}
}

func newCore(t *testing.T, cfg Config) *Core {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func fill(x float32) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = x
	}
	return v
}

func local() params.Snapshot {
	return params.Snapshot{Fingerprint: fp, Progress: ownProg, Params: fill(1)}
}

// moved is ours with coordinate 0 moved by d: at distance |d| from ours.
func moved(d float32) []float32 {
	v := fill(1)
	v[0] += d
	return v
}

func snap(w []float32, p params.Progress) *params.Snapshot {
	return &params.Snapshot{Fingerprint: fp, Progress: p, Params: w}
}

type lossFunc = func(w []float32) (float64, bool, error)

// sqLoss is the holdout loss ||w - good||^2.
func sqLoss(good []float32) lossFunc {
	return func(w []float32) (float64, bool, error) {
		d, err := averaging.Distance(w, good)
		return d * d, err == nil, err
	}
}

var (
	goodLoss  = sqLoss(make([]float32, dim))
	constLoss = func([]float32) (float64, bool, error) { return 1, true, nil }
	noHoldout = func([]float32) (float64, bool, error) { return 0, false, nil }
	errLoss   = func([]float32) (float64, bool, error) { return 0, true, errors.New("holdout broke") }
	nanLoss   = func([]float32) (float64, bool, error) { return math.NaN(), true, nil }
)

// weightAt is the default merger's weight of a model s steps stale.
func weightAt(s float64) float64 { return 0.5 * math.Pow(1+s, -0.5) }

// warm fills the radius window with MinSamples distances of radiusMed
// (radius 2, outlier threshold 20), as merges from a peer none of the
// tests use.
func warm(t *testing.T, c *Core, cfg Config) {
	t.Helper()
	for range cfg.Radius.MinSamples {
		c.Applied("warm", Decision{Merge: true, Distance: radiusMed})
	}
	if r, m := c.Radius(); r != clipRadius || m != radiusMed {
		t.Fatalf("warm radius %v median %v, want %v and %v", r, m, clipRadius, radiusMed)
	}
}

// seePeers decides one honest model at distance d from each peer, so the
// peer spread has their latest distances; they are not applied (the radius
// stays where it is).
func seePeers(t *testing.T, c *Core, d float32, now time.Time, peers ...string) {
	t.Helper()
	for _, p := range peers {
		got := c.Decide(Input{Peer: p, Local: local(), Remote: snap(moved(-d), ownProg), Now: now, Loss: constLoss})
		if !got.Merge {
			t.Fatalf("setup: honest model of %s at %v refused: %+v", p, d, got)
		}
	}
}

// warmCore is a core whose radius is warm (median 1, radius 2, outliers
// beyond 20) and whose peer spread holds two other peers at distance 1.
func warmCore(t *testing.T, cfg Config) *Core {
	t.Helper()
	c := newCore(t, cfg)
	warm(t, c, cfg)
	seePeers(t, c, 1, t0, "b", "c")
	return c
}

func near(a, b float64) bool { return a == b || math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func checkDecision(t *testing.T, got, want Decision) {
	t.Helper()
	if got.Merge != want.Merge || got.Reason != want.Reason || got.HasVerdict != want.HasVerdict ||
		(want.HasVerdict && got.Verdict != want.Verdict) || got.Validated != want.Validated ||
		!near(got.Staleness, want.Staleness) || !near(got.Weight, want.Weight) || !near(got.Distance, want.Distance) {
		t.Errorf("decision\n got %+v (%v, verdict %v)\nwant %+v (%v, verdict %v)", got, got.Reason, got.Verdict, want, want.Reason, want.Verdict)
	}
}

// TestDecide: one case per reason, with the exact verdict, staleness,
// weight, distance and whether the holdout was consulted.
func TestDecide(t *testing.T) {
	withNaN := moved(-1)
	withNaN[5] = float32(math.NaN())
	withInf := moved(-1)
	withInf[7] = float32(math.Inf(-1))
	const stale3 = ownProg - 3*batch // three of our steps behind

	accepted := func(s, dist float64) Decision {
		return Decision{Merge: true, Reason: Merged, HasVerdict: true, Verdict: reputation.Accepted,
			Staleness: s, Weight: weightAt(s), Distance: dist, Validated: true}
	}
	tests := []struct {
		name     string
		cold     bool // a fresh core: radius warming up, no other peers seen
		standing reputation.State
		remote   *params.Snapshot
		loss     lossFunc
		want     Decision
		// after checks the remote after the decision (clipped or not).
		after func(t *testing.T, r *params.Snapshot)
	}{
		{name: "merged, three steps stale", remote: snap(moved(-1), stale3), loss: goodLoss,
			want: accepted(3, 1)},
		{name: "merged, ahead of us is not stale", remote: snap(moved(-1), ownProg+500), loss: goodLoss,
			want: accepted(0, 1)},
		{name: "merged with a worse candidate within tolerance", remote: snap(moved(1), ownProg), loss: goodLoss,
			want: accepted(0, 1)},
		{
			name: "beyond the radius: clipped", remote: snap(moved(4), stale3), loss: goodLoss,
			want: Decision{Merge: true, Reason: MergedClipped, HasVerdict: true, Verdict: reputation.Clipped,
				Staleness: 3, Weight: weightAt(3), Distance: 4, Validated: true},
			after: func(t *testing.T, r *params.Snapshot) {
				if d, _ := averaging.Distance(r.Params, fill(1)); !near(d, clipRadius) {
					t.Errorf("clipped remote at %v from ours, want the radius %v", d, clipRadius)
				}
			},
		},
		{name: "banned: not looked at", standing: reputation.Banned, remote: snap(moved(-1), ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedBanned}},
		{name: "banned with another fingerprint", standing: reputation.Banned,
			remote: &params.Snapshot{Fingerprint: otherFP, Progress: ownProg, Params: moved(-1)}, loss: goodLoss,
			want: Decision{Reason: RefusedBanned}},
		{name: "another fingerprint", remote: &params.Snapshot{Fingerprint: otherFP, Progress: ownProg, Params: moved(-1)},
			loss: goodLoss, want: Decision{Reason: RefusedFingerprint, HasVerdict: true, Verdict: reputation.FingerprintMismatch}},
		{name: "wrong length", remote: snap(moved(-1)[:dim-1], ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedFingerprint, HasVerdict: true, Verdict: reputation.FingerprintMismatch}},
		{name: "longer", remote: snap(append(moved(-1), 1), ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedFingerprint, HasVerdict: true, Verdict: reputation.FingerprintMismatch}},
		{name: "NaN in params", remote: snap(withNaN, ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{name: "Inf in params", remote: snap(withInf, ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{name: "NaN progress", remote: snap(moved(-1), params.Progress(math.NaN())), loss: goodLoss,
			want: Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{name: "negative progress", remote: snap(moved(-1), -1), loss: goodLoss,
			want: Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{name: "NaN in params of an ignored peer", standing: reputation.Ignored, remote: snap(withNaN, ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{name: "outlier", remote: snap(moved(49), ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedOutlier, HasVerdict: true, Verdict: reputation.Outlier, Distance: 49}},
		{name: "outlier from an ignored peer is still evidence", standing: reputation.Ignored,
			remote: snap(moved(49), ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedOutlier, HasVerdict: true, Verdict: reputation.Outlier, Distance: 49}},
		{
			// 19 is within the outlier threshold 20 but beyond the radius;
			// its own loss 31+20^2 = 431 exceeds 10*32 + 0.05.
			name: "implausible", remote: snap(moved(19), ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedImplausible, HasVerdict: true, Verdict: reputation.LossJump, Distance: 19, Validated: true},
			after: func(t *testing.T, r *params.Snapshot) {
				if r.Params[0] != 20 {
					t.Errorf("an implausible model was clipped: params[0] = %v", r.Params[0])
				}
			},
		},
		{name: "ignored, a good model", standing: reputation.Ignored, remote: snap(moved(-1), ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedIgnored, Distance: 1}},
		{name: "disconnected, a good model", standing: reputation.Disconnected, remote: snap(moved(-1), ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedIgnored, Distance: 1}},
		{
			name: "ignored, beyond the radius: checked, not clipped", standing: reputation.Ignored,
			remote: snap(moved(4), ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedIgnored, Distance: 4, Validated: true},
			after: func(t *testing.T, r *params.Snapshot) {
				if r.Params[0] != 5 {
					t.Errorf("an ignored peer's model was clipped in place: params[0] = %v", r.Params[0])
				}
			},
		},
		{name: "implausible from an ignored peer is still evidence", standing: reputation.Ignored,
			remote: snap(moved(19), ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedImplausible, HasVerdict: true, Verdict: reputation.LossJump, Distance: 19, Validated: true}},
		{
			// Our model is the holdout's optimum (loss 0): any blend that
			// moves it by more than sqrt(LossSlack) fails.
			name: "blend fails the holdout", remote: snap(moved(-1), ownProg), loss: sqLoss(fill(1)),
			want: Decision{Reason: RefusedBlend, Distance: 1, Validated: true},
		},
		{
			// The candidate (at 7) scores 31+49 = 80: 2.5x ours, within
			// 1+LossTolerance.
			name: "merged, radius warming up: candidate worse within tolerance", cold: true,
			remote: snap(moved(12), ownProg), loss: goodLoss, want: accepted(0, 12),
		},
		{
			// No radius yet and no other peer: nothing is an outlier, the
			// blend (at 8.5: 31+72.25 > 3*32+0.05) is what refuses it.
			name: "blend fails, radius warming up", cold: true, remote: snap(moved(15), ownProg), loss: goodLoss,
			want: Decision{Reason: RefusedBlend, Distance: 15, Validated: true},
		},
		{name: "no holdout: nil loss on probation", remote: snap(moved(-1), ownProg),
			want: Decision{Reason: RefusedNoHoldout, Distance: 1, Validated: true}},
		{name: "no holdout: loss not ok on probation", remote: snap(moved(-1), ownProg), loss: noHoldout,
			want: Decision{Reason: RefusedNoHoldout, Distance: 1, Validated: true}},
		{name: "no holdout: loss errs", remote: snap(moved(-1), ownProg), loss: errLoss,
			want: Decision{Reason: RefusedNoHoldout, Distance: 1, Validated: true}},
		{name: "no holdout: loss NaN", remote: snap(moved(-1), ownProg), loss: nanLoss,
			want: Decision{Reason: RefusedNoHoldout, Distance: 1, Validated: true}},
		{
			name: "no holdout: only our own model scores", remote: snap(moved(-1), ownProg),
			loss: func(w []float32) (float64, bool, error) { return 1, w[0] == 1, nil },
			want: Decision{Reason: RefusedNoHoldout, Distance: 1, Validated: true},
		},
		{
			name: "no holdout: our own model does not score", remote: snap(moved(-1), ownProg),
			loss: func(w []float32) (float64, bool, error) { return 1, w[0] != 1, nil },
			want: Decision{Reason: RefusedNoHoldout, Distance: 1, Validated: true},
		},
		{
			name: "no holdout: nil loss beyond the radius", remote: snap(moved(4), ownProg),
			want: Decision{Reason: RefusedNoHoldout, Distance: 4, Validated: true},
			after: func(t *testing.T, r *params.Snapshot) {
				if r.Params[0] != 5 {
					t.Errorf("a model refused for want of a holdout was clipped: params[0] = %v", r.Params[0])
				}
			},
		},
		{name: "no holdout: not ok beyond the radius", remote: snap(moved(4), ownProg), loss: noHoldout,
			want: Decision{Reason: RefusedNoHoldout, Distance: 4, Validated: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			var c *Core
			if tt.cold {
				c = newCore(t, cfg)
			} else {
				c = warmCore(t, cfg)
			}
			got := c.Decide(Input{Peer: "x", Standing: tt.standing, Local: local(), Remote: tt.remote, Now: t0, Loss: tt.loss})
			checkDecision(t, got, tt.want)
			if tt.after != nil {
				tt.after(t, tt.remote)
			}
		})
	}
}

// TestDecideLocalUntouched: Decide reads our snapshot and writes only the
// remote one.
func TestDecideLocalUntouched(t *testing.T) {
	cfg := testConfig()
	c := warmCore(t, cfg)
	own := local()
	for _, r := range []*params.Snapshot{snap(moved(4), ownProg), snap(moved(-1), ownProg), snap(moved(49), ownProg)} {
		c.Decide(Input{Peer: "x", Local: own, Remote: r, Now: t0, Loss: goodLoss})
	}
	for i, x := range own.Params {
		if x != 1 || own.Progress != ownProg {
			t.Fatalf("our snapshot changed: params[%d] = %v, progress %v", i, x, own.Progress)
		}
	}
}

// TestDecideOutlierNeedsBothMeasures: a model is refused as an outlier only
// when it is far beyond the other peers' latest distances and beyond
// OutlierScale times the radius median (or the radius is warming up).
func TestDecideOutlierNeedsBothMeasures(t *testing.T) {
	cfg := testConfig()
	in := func(p string, d float32, now time.Time) Input {
		return Input{Peer: p, Local: local(), Remote: snap(moved(d), ownProg), Now: now, Loss: constLoss}
	}
	t.Run("far by both", func(t *testing.T) {
		c := warmCore(t, cfg)
		if got := c.Decide(in("x", 49, t0)); got.Reason != RefusedOutlier || got.Verdict != reputation.Outlier {
			t.Fatalf("49 against peers at 1 and a median of 1: %v, want an outlier", got.Reason)
		}
	})
	t.Run("far from the peers only", func(t *testing.T) {
		// The others just merged with us: their latest distances are
		// tiny. A model at 1.5 is 150x theirs but within the radius.
		c := newCore(t, cfg)
		warm(t, c, cfg)
		seePeers(t, c, 0.01, t0, "b", "c")
		got := c.Decide(in("x", 1.5, t0))
		if !got.Merge || got.Reason != Merged {
			t.Fatalf("1.5 against peers at 0.01 and a median of 1: %v, want merged", got.Reason)
		}
	})
	t.Run("far from the radius only: fewer than two other peers", func(t *testing.T) {
		c := newCore(t, cfg)
		warm(t, c, cfg)
		seePeers(t, c, 1, t0, "b")
		got := c.Decide(in("x", 49, t0))
		if got.Reason != MergedClipped {
			t.Fatalf("49 with one other peer: %v, want clipped (no majority to call it an outlier)", got.Reason)
		}
	})
	t.Run("radius warming up: the peers decide", func(t *testing.T) {
		c := newCore(t, cfg)
		seePeers(t, c, 1, t0, "b", "c")
		if got := c.Decide(in("x", 49, t0)); got.Reason != RefusedOutlier {
			t.Fatalf("49 against peers at 1, radius warming up: %v, want an outlier", got.Reason)
		}
		if got := c.Decide(in("y", 15, t0)); got.Reason != Merged {
			t.Fatalf("15 against peers at 1, radius warming up: %v, want merged", got.Reason)
		}
	})
	t.Run("stale peer distances do not count", func(t *testing.T) {
		c := warmCore(t, cfg)
		if got := c.Decide(in("x", 49, t0.Add(spreadTTL+time.Second))); got.Reason != MergedClipped {
			t.Fatalf("49 after the other peers' distances expired: %v, want clipped", got.Reason)
		}
	})
	t.Run("every distance grows 30x: a warmup", func(t *testing.T) {
		// Three honest peers, whose distances grow 30x within four rounds
		// (3x a round: more than Scale, less than OutlierScale). The
		// radius's window lags, since it stores distances capped at the
		// radius: by the last round 30 is far beyond 20x its median, and
		// only the peers' latest distances tell that everyone moved.
		c := newCore(t, cfg)
		warm(t, c, cfg)
		peers := []string{"a", "b", "c"}
		for round, d := range []float32{1, 3, 9, 30} {
			now := t0.Add(time.Duration(round) * 200 * time.Millisecond)
			for _, p := range peers {
				got := c.Decide(in(p, d, now))
				if !got.Merge {
					t.Fatalf("round %d: honest %s at %v refused: %v", round, p, d, got.Reason)
				}
				// Beyond the window's radius, a and b are clipped (the
				// lower median of the other two peers' latest merges is
				// still last round's distance); c, whose two others both
				// merged at d, is not: the radius follows the peers.
				want := Merged
				if d > clipRadius && p != "c" {
					want = MergedClipped
				}
				if got.Reason != want {
					t.Errorf("round %d: %s at %v: %v, want %v", round, p, d, got.Reason, want)
				}
				c.Applied(p, got)
			}
		}
		if _, m := c.Radius(); !(30 > cfg.Radius.OutlierScale*m) {
			t.Fatalf("median %v: the radius alone would not have refused 30; the test proves nothing", m)
		}
		// A lone model far beyond all of them is still an outlier.
		if got := c.Decide(in("x", 30*25, t0.Add(time.Second))); got.Reason != RefusedOutlier {
			t.Fatalf("750 against peers at 30: %v, want an outlier", got.Reason)
		}
	})
}

// TestDecideProgressClamp: a claim above ours + CatchUp is clamped to it
// (so it is not stale and cannot drag our progress further); with CatchUp 0
// nothing is clamped.
func TestDecideProgressClamp(t *testing.T) {
	tests := []struct {
		name    string
		trust   bool
		catchUp float64
		claim   params.Progress
		want    params.Progress
	}{
		{"far ahead: clamped", true, catchUp, 1e9, ownProg + catchUp},
		{"just above: clamped", true, catchUp, ownProg + catchUp + 1, ownProg + catchUp},
		{"at the threshold: kept", true, catchUp, ownProg + catchUp, ownProg + catchUp},
		{"below the threshold: kept", true, catchUp, ownProg + 999, ownProg + 999},
		{"behind: kept", true, catchUp, ownProg - 160, ownProg - 160},
		{"catch-up 0: no clamp", true, 0, 1e9, 1e9},
		{"trust off: clamped too", false, catchUp, 1e9, ownProg + catchUp},
		{"trust off, catch-up 0: no clamp", false, 0, 1e9, 1e9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Trust, cfg.CatchUp = tt.trust, tt.catchUp
			c := newCore(t, cfg)
			r := snap(moved(-1), tt.claim)
			got := c.Decide(Input{Peer: "x", Local: local(), Remote: r, Now: t0, Loss: constLoss})
			if r.Progress != tt.want {
				t.Errorf("progress %v after Decide, want %v", float64(r.Progress), float64(tt.want))
			}
			s := math.Max(0, float64(ownProg-tt.want)) / batch
			if !got.Merge || got.Staleness != s || !near(got.Weight, weightAt(s)) {
				t.Errorf("got %+v, want merged at staleness %v weight %v", got, s, weightAt(s))
			}
		})
	}
	t.Run("NaN is not clamped into a number", func(t *testing.T) {
		c := newCore(t, testConfig())
		r := snap(moved(-1), params.Progress(math.NaN()))
		got := c.Decide(Input{Peer: "x", Local: local(), Remote: r, Now: t0, Loss: constLoss})
		if got.Merge || got.Reason != RefusedNonFinite || got.Verdict != reputation.NonFinite {
			t.Errorf("NaN progress: %+v, want refused as non-finite", got)
		}
	})
}

// TestDecideTrustOff: without the checks every finite model of our
// fingerprint and size merges at its staleness weight, however far.
func TestDecideTrustOff(t *testing.T) {
	cfg := testConfig()
	cfg.Trust = false
	withNaN := moved(1e6)
	withNaN[3] = float32(math.NaN())
	withInf := moved(1)
	withInf[0] = float32(math.Inf(1))
	const stale3 = ownProg - 3*batch
	tests := []struct {
		name     string
		standing reputation.State
		remote   *params.Snapshot
		want     Decision
	}{
		{"near", reputation.OK, snap(moved(-1), stale3),
			Decision{Merge: true, Reason: Merged, HasVerdict: true, Verdict: reputation.Accepted, Staleness: 3, Weight: weightAt(3)}},
		{"very far", reputation.OK, snap(moved(1e6), ownProg),
			Decision{Merge: true, Reason: Merged, HasVerdict: true, Verdict: reputation.Accepted, Weight: weightAt(0)}},
		{"NaN", reputation.OK, snap(withNaN, ownProg),
			Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{"Inf", reputation.OK, snap(withInf, ownProg),
			Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{"bad progress", reputation.OK, snap(moved(1), -5),
			Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{"another fingerprint", reputation.OK, &params.Snapshot{Fingerprint: otherFP, Progress: ownProg, Params: moved(1)},
			Decision{Reason: RefusedFingerprint, HasVerdict: true, Verdict: reputation.FingerprintMismatch}},
		{"wrong length", reputation.OK, snap(fill(1)[:3], ownProg),
			Decision{Reason: RefusedFingerprint, HasVerdict: true, Verdict: reputation.FingerprintMismatch}},
		{"ignored", reputation.Ignored, snap(moved(-1), ownProg), Decision{Reason: RefusedIgnored}},
		{"disconnected", reputation.Disconnected, snap(moved(-1), ownProg), Decision{Reason: RefusedIgnored}},
		{"banned", reputation.Banned, snap(moved(-1), ownProg), Decision{Reason: RefusedBanned}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCore(t, cfg)
			// Other peers near us, so a far model would be an outlier if
			// anything judged it.
			for _, p := range []string{"a", "b", "c"} {
				c.Decide(Input{Peer: p, Local: local(), Remote: snap(moved(-1), ownProg), Now: t0})
			}
			loss := func([]float32) (float64, bool, error) {
				t.Error("the holdout was consulted with trust off")
				return 0, false, nil
			}
			sent := slices.Clone(tt.remote.Params)
			got := c.Decide(Input{Peer: "x", Standing: tt.standing, Local: local(), Remote: tt.remote, Now: t0, Loss: loss})
			checkDecision(t, got, tt.want)
			if tt.want.Merge && !slices.Equal(tt.remote.Params, sent) {
				t.Errorf("a merged model was changed (clipped?) with trust off")
			}
		})
	}
	t.Run("no radius", func(t *testing.T) {
		c := newCore(t, cfg)
		for range 20 {
			c.Applied("a", Decision{Merge: true, Distance: 1})
		}
		if r, m := c.Radius(); !math.IsInf(r, 1) || m != 0 {
			t.Fatalf("Radius() = %v, %v with trust off, want +Inf, 0", r, m)
		}
		far := moved(1e6)
		got := c.Decide(Input{Peer: "x", Local: local(), Remote: snap(far, ownProg), Now: t0})
		if !got.Merge || got.Reason != Merged || far[0] != 1+1e6 {
			t.Fatalf("far model after many merges: %+v, params[0] %v; want merged unclipped", got, far[0])
		}
	})
}

// TestDecideValidation: a peer's first Probation merges (as counted by
// Applied) are validated on the holdout; after that only clipped ones and
// one in ValidateEvery.
func TestDecideValidation(t *testing.T) {
	nearIn := func(p string, loss lossFunc) Input {
		return Input{Peer: p, Local: local(), Remote: snap(moved(-1), ownProg), Now: t0, Loss: loss}
	}
	t.Run("probation, then rarely", func(t *testing.T) {
		cfg := testConfig()
		cfg.ValidateEvery = 1 << 30
		c := newCore(t, cfg)
		calls := 0
		loss := func(w []float32) (float64, bool, error) { calls++; return goodLoss(w) }
		for i := range cfg.Probation + 10 {
			before := calls
			got := c.Decide(nearIn("p", loss))
			if !got.Merge {
				t.Fatalf("merge %d refused: %v", i, got.Reason)
			}
			onProbation := i < cfg.Probation
			if got.Validated != onProbation || (calls > before) != onProbation {
				t.Fatalf("merge %d: validated %v, holdout calls %d, want validated %v", i, got.Validated, calls-before, onProbation)
			}
			c.Applied("p", got)
		}
		// Past probation a merge needs no holdout at all.
		if got := c.Decide(nearIn("p", nil)); !got.Merge || got.Validated {
			t.Fatalf("past probation without a holdout: %+v, want merged unvalidated", got)
		}
		// Probation is per peer.
		if got := c.Decide(nearIn("q", loss)); !got.Validated {
			t.Fatal("a new peer's first merge not validated")
		}
	})
	t.Run("counted only when applied", func(t *testing.T) {
		cfg := testConfig()
		cfg.ValidateEvery = 1 << 30
		c := newCore(t, cfg)
		for i := range 3 * cfg.Probation {
			if got := c.Decide(nearIn("p", goodLoss)); !got.Validated {
				t.Fatalf("decision %d (none applied) not validated", i)
			}
		}
	})
	t.Run("refusals do not count", func(t *testing.T) {
		cfg := testConfig()
		cfg.ValidateEvery = 1 << 30
		c := newCore(t, cfg)
		for range 3 * cfg.Probation {
			// Applied is only called for merges; a refusal leaves the
			// peer on probation.
			if got := c.Decide(nearIn("p", sqLoss(fill(1)))); got.Merge {
				t.Fatalf("setup: blend should fail: %v", got.Reason)
			}
		}
		if got := c.Decide(nearIn("p", goodLoss)); !got.Validated {
			t.Fatal("after refusals only, not on probation")
		}
	})
	t.Run("clipped always validated", func(t *testing.T) {
		cfg := testConfig()
		cfg.ValidateEvery = 1 << 30
		c := newCore(t, cfg)
		for range cfg.Radius.MinSamples { // past probation, and the radius warm
			c.Applied("p", Decision{Merge: true, Distance: radiusMed})
		}
		if got := c.Decide(nearIn("p", goodLoss)); got.Validated {
			t.Fatal("past probation, within the radius: validated")
		}
		for i := range 5 {
			got := c.Decide(Input{Peer: "p", Local: local(), Remote: snap(moved(4), ownProg), Now: t0, Loss: goodLoss})
			if got.Reason != MergedClipped || !got.Validated {
				t.Fatalf("clipped merge %d: %v validated %v, want clipped and validated", i, got.Reason, got.Validated)
			}
		}
	})
	t.Run("clipped merges past probation are blend-checked", func(t *testing.T) {
		cfg := testConfig()
		cfg.ValidateEvery = 1 << 30
		c := newCore(t, cfg)
		for range cfg.Radius.MinSamples {
			c.Applied("p", Decision{Merge: true, Distance: radiusMed})
		}
		// The holdout likes ours and the model as sent (plausible), not
		// the blend of its clipped version.
		loss := func(w []float32) (float64, bool, error) {
			if w[0] == 1 || w[0] == 5 {
				return 1, true, nil
			}
			return 10, true, nil
		}
		got := c.Decide(Input{Peer: "p", Local: local(), Remote: snap(moved(4), ownProg), Now: t0, Loss: loss})
		if got.Merge || got.Reason != RefusedBlend || !got.Validated {
			t.Fatalf("got %v (validated %v), want the blend refused", got.Reason, got.Validated)
		}
	})
	t.Run("validate every 1: always", func(t *testing.T) {
		cfg := testConfig()
		cfg.ValidateEvery = 1
		c := newCore(t, cfg)
		for i := range 4 * cfg.Probation {
			got := c.Decide(nearIn("p", goodLoss))
			if !got.Validated {
				t.Fatalf("merge %d not validated with ValidateEvery 1", i)
			}
			c.Applied("p", got)
		}
		if got := c.Decide(nearIn("p", nil)); got.Reason != RefusedNoHoldout {
			t.Fatalf("ValidateEvery 1 without a holdout: %v, want refused", got.Reason)
		}
	})
	t.Run("one in ValidateEvery", func(t *testing.T) {
		cfg := testConfig()
		c := newCore(t, cfg)
		for range cfg.Probation {
			c.Applied("p", Decision{Merge: true, Distance: radiusMed})
		}
		const n = 3200 // expect 200
		validated := 0
		for range n {
			if c.Decide(nearIn("p", goodLoss)).Validated {
				validated++
			}
		}
		if want := n / cfg.ValidateEvery; validated < want/2 || validated > 2*want {
			t.Fatalf("%d of %d validated, want about %d", validated, n, want)
		}
	})
}

// TestDecideCatchUp: a model pulled whole must be finite, from a peer in
// good standing and, with trust on, no worse than ours on the holdout.
func TestDecideCatchUp(t *testing.T) {
	withNaN := fill(0.5)
	withNaN[9] = float32(math.NaN())
	// firstLoss scores a model by its first coordinate, to place a model
	// at the slack's edge: ours scores 1, LossSlack is 0.05.
	firstLoss := func(w []float32) (float64, bool, error) { return float64(w[0]), true, nil }
	ahead := ownProg + 50*catchUp
	accept := Decision{Merge: true, Reason: Merged, Weight: 1, Validated: true}
	tests := []struct {
		name     string
		trust    bool
		standing reputation.State
		remote   *params.Snapshot
		loss     lossFunc
		want     Decision
	}{
		{"better", true, reputation.OK, snap(fill(0.5), ahead), goodLoss, accept},
		{"worse within slack", true, reputation.OK, snap(moved(0.04), ahead), firstLoss, accept},
		{"worse beyond slack", true, reputation.OK, snap(moved(0.06), ahead), firstLoss,
			Decision{Reason: RefusedImplausible, HasVerdict: true, Verdict: reputation.LossJump, Validated: true}},
		{"worse", true, reputation.OK, snap(fill(2), ahead), goodLoss,
			Decision{Reason: RefusedImplausible, HasVerdict: true, Verdict: reputation.LossJump, Validated: true}},
		{"NaN", true, reputation.OK, snap(withNaN, ahead), goodLoss,
			Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{"Inf progress", true, reputation.OK, snap(fill(0.5), params.Progress(math.Inf(1))), goodLoss,
			Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{"another fingerprint", true, reputation.OK, &params.Snapshot{Fingerprint: otherFP, Progress: ahead, Params: fill(0.5)}, goodLoss,
			Decision{Reason: RefusedFingerprint, HasVerdict: true, Verdict: reputation.FingerprintMismatch}},
		{"wrong length", true, reputation.OK, snap(fill(0.5)[:8], ahead), goodLoss,
			Decision{Reason: RefusedFingerprint, HasVerdict: true, Verdict: reputation.FingerprintMismatch}},
		{"banned", true, reputation.Banned, snap(fill(0.5), ahead), goodLoss, Decision{Reason: RefusedBanned}},
		{"ignored", true, reputation.Ignored, snap(fill(0.5), ahead), goodLoss, Decision{Reason: RefusedIgnored}},
		{"disconnected", true, reputation.Disconnected, snap(fill(0.5), ahead), goodLoss, Decision{Reason: RefusedIgnored}},
		{"ignored, NaN: not looked at", true, reputation.Ignored, snap(withNaN, ahead), goodLoss, Decision{Reason: RefusedIgnored}},
		{"no holdout: nil", true, reputation.OK, snap(fill(0.5), ahead), nil,
			Decision{Reason: RefusedNoHoldout, Validated: true}},
		{"no holdout: not ok", true, reputation.OK, snap(fill(0.5), ahead), noHoldout,
			Decision{Reason: RefusedNoHoldout, Validated: true}},
		{"no holdout: err", true, reputation.OK, snap(fill(0.5), ahead), errLoss,
			Decision{Reason: RefusedNoHoldout, Validated: true}},
		{"trust off: no holdout needed", false, reputation.OK, snap(fill(0.5), ahead), nil,
			Decision{Merge: true, Reason: Merged, Weight: 1}},
		{"trust off: worse accepted", false, reputation.OK, snap(fill(2), ahead), goodLoss,
			Decision{Merge: true, Reason: Merged, Weight: 1}},
		{"trust off: NaN", false, reputation.OK, snap(withNaN, ahead), nil,
			Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite}},
		{"trust off: banned", false, reputation.Banned, snap(fill(0.5), ahead), nil, Decision{Reason: RefusedBanned}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Trust = tt.trust
			c := newCore(t, cfg)
			loss := tt.loss
			if !tt.trust && loss != nil {
				loss = func([]float32) (float64, bool, error) {
					t.Error("the holdout was consulted with trust off")
					return 0, false, nil
				}
			}
			prog := tt.remote.Progress
			got := c.DecideCatchUp(Input{Peer: "x", Standing: tt.standing, Local: local(), Remote: tt.remote, Now: t0, Loss: loss})
			want := tt.want
			if got.Merge && got.HasVerdict && got.Verdict == reputation.Accepted {
				want.HasVerdict, want.Verdict = true, reputation.Accepted // an accepted catch-up may say so
			}
			checkDecision(t, got, want)
			if tt.remote.Progress != prog && !(math.IsNaN(float64(prog)) && math.IsNaN(float64(tt.remote.Progress))) {
				t.Errorf("catch-up changed the remote's progress %v to %v", float64(prog), float64(tt.remote.Progress))
			}
		})
	}
}

// TestConfigValidate: every bad field is reported, all at once.
func TestConfigValidate(t *testing.T) {
	if err := testConfig().Validate(); err != nil {
		t.Fatalf("the test config: %v", err)
	}
	off := testConfig()
	off.Trust, off.Radius, off.ValidateEvery, off.PlausibleFactor = false, averaging.RadiusConfig{Scale: 0.5}, 0, 0
	if err := off.Validate(); err != nil {
		t.Fatalf("trust off, the checks' fields are not used: %v", err)
	}
	zeroRadius := testConfig()
	zeroRadius.Radius = averaging.RadiusConfig{}
	if err := zeroRadius.Validate(); err != nil {
		t.Fatalf("a zero radius config takes the defaults: %v", err)
	}

	tests := []struct {
		name   string
		mutate func(*Config)
		is     error
		says   string
	}{
		{"merger", func(c *Config) { c.Merger = averaging.Merger{} }, averaging.ErrBadAlpha, "alpha"},
		{"batch 0", func(c *Config) { c.Batch = 0 }, ErrBadConfig, "batch"},
		{"batch negative", func(c *Config) { c.Batch = -16 }, ErrBadConfig, "batch"},
		{"catch-up NaN", func(c *Config) { c.CatchUp = math.NaN() }, ErrBadConfig, "catch-up"},
		{"catch-up Inf", func(c *Config) { c.CatchUp = math.Inf(1) }, ErrBadConfig, "catch-up"},
		{"catch-up negative", func(c *Config) { c.CatchUp = -1 }, ErrBadConfig, "catch-up"},
		{"radius scale", func(c *Config) { c.Radius.Scale = 0.5 }, averaging.ErrBadRadiusConfig, "scale"},
		{"radius window", func(c *Config) { c.Radius.Window = averaging.MaxRadiusWindow + 1 }, averaging.ErrBadRadiusConfig, "window"},
		{"validate every 0", func(c *Config) { c.ValidateEvery = 0 }, ErrBadConfig, "validate-every"},
		{"probation negative", func(c *Config) { c.Probation = -1 }, ErrBadConfig, "probation"},
		{"plausible factor < 1", func(c *Config) { c.PlausibleFactor = 0.9 }, ErrBadConfig, "plausible factor"},
		{"plausible factor NaN", func(c *Config) { c.PlausibleFactor = math.NaN() }, ErrBadConfig, "plausible factor"},
		{"loss tolerance NaN", func(c *Config) { c.LossTolerance = math.NaN() }, ErrBadConfig, "loss tolerance"},
		{"loss slack negative", func(c *Config) { c.LossSlack = -0.1 }, ErrBadConfig, "slack"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Validate = %v, want an error wrapping %v that says %q", err, tt.is, tt.says)
			}
			if c, err := New(cfg); err == nil || c != nil {
				t.Fatalf("New accepted it: %v, %v", c, err)
			}
		})
	}

	t.Run("all at once", func(t *testing.T) {
		cfg := testConfig()
		cfg.Batch, cfg.CatchUp, cfg.Radius.Scale, cfg.ValidateEvery, cfg.PlausibleFactor = 0, math.NaN(), 0.5, 0, 0.5
		err := cfg.Validate()
		if err == nil {
			t.Fatal("no error")
		}
		j, ok := err.(interface{ Unwrap() []error })
		if !ok || len(j.Unwrap()) != 5 {
			t.Fatalf("want 5 errors joined, got %v", err)
		}
		for _, s := range []string{"batch 0", "catch-up NaN", "scale 0.5", "validate-every 0", "plausible factor 0.5"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%q not reported in %v", s, err)
			}
		}
		if !errors.Is(err, ErrBadConfig) || !errors.Is(err, averaging.ErrBadRadiusConfig) {
			t.Errorf("%v does not wrap both sentinels", err)
		}
	})
}

// TestReasonString: every reason has its own name.
func TestReasonString(t *testing.T) {
	seen := map[string]Reason{}
	for r := Merged; r <= RefusedNoHoldout; r++ {
		s := r.String()
		if s == "" || strings.HasPrefix(s, "reason(") {
			t.Errorf("reason %d has no name: %q", r, s)
		}
		if q, dup := seen[s]; dup {
			t.Errorf("reasons %d and %d are both %q", q, r, s)
		}
		seen[s] = r
	}
	if len(seen) != int(RefusedNoHoldout)+1 {
		t.Errorf("%d names for %d reasons", len(seen), int(RefusedNoHoldout)+1)
	}
	if got := (RefusedNoHoldout + 1).String(); got != "reason(10)" {
		t.Errorf("an unknown reason: %q, want reason(10)", got)
	}
}

// TestDecideRegressions: cases a first version got wrong.
func TestDecideRegressions(t *testing.T) {
	t.Run("+Inf progress is refused, not clamped", func(t *testing.T) {
		c := newCore(t, testConfig())
		d := c.Decide(Input{Peer: "p", Standing: reputation.OK, Local: local(), Remote: snap(moved(0.1), params.Progress(math.Inf(1))),
			Now: t0, Loss: goodLoss})
		if d.Merge || d.Reason != RefusedNonFinite || !d.HasVerdict || d.Verdict != reputation.NonFinite {
			t.Fatalf("decision %+v, want refused non_finite with a verdict", d)
		}
	})
	t.Run("our own broken progress is not the peer's fault", func(t *testing.T) {
		c := newCore(t, testConfig())
		own := local()
		own.Progress = params.Progress(math.NaN())
		d := c.Decide(Input{Peer: "p", Standing: reputation.OK, Local: own, Remote: snap(moved(0.1), ownProg), Now: t0, Loss: goodLoss})
		if d.Merge || d.HasVerdict {
			t.Fatalf("decision %+v, want refused without a verdict", d)
		}
	})
	t.Run("a zero outlier scale means the default", func(t *testing.T) {
		cfg := testConfig()
		cfg.Radius = averaging.RadiusConfig{}
		c := newCore(t, cfg)
		for i, p := range []string{"a", "b", "c", "d"} {
			d := c.Decide(Input{Peer: p, Standing: reputation.OK, Local: local(), Remote: snap(moved(1), ownProg), Now: t0, Loss: goodLoss})
			if d.Reason == RefusedOutlier {
				t.Fatalf("peer %d: a model as far as every other refused as an outlier", i)
			}
		}
	})
	t.Run("the accepted table is bounded", func(t *testing.T) {
		c := newCore(t, testConfig())
		for i := range maxAccepted + 10 {
			c.Applied(fmt.Sprint(i), Decision{Merge: true, Distance: 1})
		}
		if len(c.accepted) > maxAccepted {
			t.Fatalf("%d peers counted, bound %d", len(c.accepted), maxAccepted)
		}
	})
}

// TestDecideNewcomerOutlier: a model far beyond the others from a peer
// starting over (more than CatchUp behind us and under half our progress:
// it just joined, and will pull a model) is refused without a verdict; the
// same model claiming our progress is evidence.
func TestDecideNewcomerOutlier(t *testing.T) {
	cfg := testConfig()
	c := warmCore(t, cfg)
	fresh := c.Decide(Input{Peer: "newcomer", Standing: reputation.OK, Local: local(), Remote: snap(moved(49), 0), Now: t0, Loss: goodLoss})
	if fresh.Merge || fresh.Reason != RefusedOutlier || fresh.HasVerdict {
		t.Fatalf("newcomer: %+v (%v), want an outlier refused without a verdict", fresh, fresh.Reason)
	}
	c = warmCore(t, cfg)
	same := c.Decide(Input{Peer: "peer", Standing: reputation.OK, Local: local(), Remote: snap(moved(49), ownProg), Now: t0, Loss: goodLoss})
	if same.Merge || same.Reason != RefusedOutlier || !same.HasVerdict || same.Verdict != reputation.Outlier {
		t.Fatalf("peer at our progress: %+v (%v), want an outlier verdict", same, same.Reason)
	}
}

// TestDecideNoHoldout: a core told its trainer has no holdout never asks
// for a loss, merges a new peer's near model at once (no probation to
// fail), clips a far one instead of refusing it, still refuses outliers,
// non-finite models and other fingerprints, and takes a catch-up whole.
func TestDecideNoHoldout(t *testing.T) {
	cfg := testConfig()
	cfg.NoHoldout = true
	c := warmCore(t, cfg)
	asked := func([]float32) (float64, bool, error) {
		t.Fatal("the holdout was asked for a loss")
		return 0, false, nil
	}
	w1 := weightAt(0)
	checkDecision(t, c.Decide(Input{Peer: "p", Local: local(), Remote: snap(moved(-1), ownProg), Now: t0, Loss: asked}),
		Decision{Merge: true, Reason: Merged, HasVerdict: true, Verdict: reputation.Accepted, Weight: w1, Distance: 1})
	far := snap(moved(-5), ownProg)
	checkDecision(t, c.Decide(Input{Peer: "p", Local: local(), Remote: far, Now: t0, Loss: asked}),
		Decision{Merge: true, Reason: MergedClipped, HasVerdict: true, Verdict: reputation.Clipped, Weight: w1, Distance: 5})
	if d, _ := averaging.Distance(far.Params, local().Params); !near(d, clipRadius) {
		t.Errorf("far model clipped to distance %v, want the radius %v", d, clipRadius)
	}
	checkDecision(t, c.Decide(Input{Peer: "p", Local: local(), Remote: snap(moved(-50), ownProg), Now: t0, Loss: asked}),
		Decision{Reason: RefusedOutlier, HasVerdict: true, Verdict: reputation.Outlier, Distance: 50})
	bad := moved(-1)
	bad[3] = float32(math.NaN())
	checkDecision(t, c.Decide(Input{Peer: "p", Local: local(), Remote: snap(bad, ownProg), Now: t0, Loss: asked}),
		Decision{Reason: RefusedNonFinite, HasVerdict: true, Verdict: reputation.NonFinite})
	other := snap(moved(-1), ownProg)
	other.Fingerprint = otherFP
	checkDecision(t, c.Decide(Input{Peer: "p", Local: local(), Remote: other, Now: t0, Loss: asked}),
		Decision{Reason: RefusedFingerprint, HasVerdict: true, Verdict: reputation.FingerprintMismatch})
	checkDecision(t, c.DecideCatchUp(Input{Peer: "p", Local: local(), Remote: snap(moved(-3), ownProg+5000), Now: t0, Loss: asked}),
		Decision{Merge: true, Reason: Merged, Weight: 1})
}

// TestDecideChanceLoss: a far model scoring between PlausibleFactor times
// our holdout loss and the loss of a uniform guess is an honest model of
// other labels on a skewed shard: clipped and merged, not held against its
// peer; above the chance loss it is still implausible.
func TestDecideChanceLoss(t *testing.T) {
	// As in TestDecide's "implausible": ours scores 32, the remote 431.
	for _, tc := range []struct {
		chance float64
		want   Decision
	}{
		{0, Decision{Reason: RefusedImplausible, HasVerdict: true, Verdict: reputation.LossJump, Distance: 19, Validated: true}},
		{400, Decision{Reason: RefusedImplausible, HasVerdict: true, Verdict: reputation.LossJump, Distance: 19, Validated: true}},
		{500, Decision{Merge: true, Reason: MergedClipped, HasVerdict: true, Verdict: reputation.Clipped, Distance: 19,
			Validated: true, Weight: weightAt(0)}},
	} {
		cfg := testConfig()
		cfg.ChanceLoss = tc.chance
		c := warmCore(t, cfg)
		got := c.Decide(Input{Peer: "a", Local: local(), Remote: snap(moved(19), ownProg), Now: t0, Loss: goodLoss})
		t.Run(fmt.Sprint("chance ", tc.chance), func(t *testing.T) { checkDecision(t, got, tc.want) })
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		cfg := testConfig()
		cfg.ChanceLoss = bad
		if _, err := New(cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("ChanceLoss %v: New gave %v, want ErrBadConfig", bad, err)
		}
	}
}

// TestDecideRelativeLag: with the default measure the weight comes from how
// far behind ours, in percent of our progress, the remote model is.
func TestDecideRelativeLag(t *testing.T) {
	cfg := testConfig()
	cfg.Merger.Lag = averaging.LagRelative
	c := warmCore(t, cfg)
	// 3 steps of 16 behind our 16000 samples: 0.3%.
	got := c.Decide(Input{Peer: "a", Local: local(), Remote: snap(moved(-1), ownProg-3*batch), Now: t0, Loss: goodLoss})
	checkDecision(t, got, Decision{Merge: true, Reason: Merged, HasVerdict: true, Verdict: reputation.Accepted,
		Staleness: 0.3, Weight: weightAt(0.3), Distance: 1, Validated: true})
}

// TestDecidePeerLoss: with PeerLossScale, a far model that scores above 10x
// ours and above a guess is still plausible when the other peers' far
// models score alike on our holdout (label-skewed shards: none of them saw
// our labels), and implausible when it scores far above them.
func TestDecidePeerLoss(t *testing.T) {
	cfg := testConfig()
	cfg.PeerLossScale = 3
	c := warmCore(t, cfg)
	// Ours scores 32. Peers b and c send far models scoring 31+18^2 = 355:
	// above 10x ours, and with fewer than two other peers on file, judged
	// by that alone: implausible.
	for _, p := range []string{"b", "c"} {
		got := c.Decide(Input{Peer: p, Local: local(), Remote: snap(moved(18), ownProg), Now: t0, Loss: goodLoss})
		if got.Reason != RefusedImplausible {
			t.Fatalf("setup: %s's far model: %+v, want refused as implausible (no peers to compare with yet)", p, got)
		}
	}
	// a's model scores 431, within 3x the others' 355: clipped and merged.
	got := c.Decide(Input{Peer: "a", Local: local(), Remote: snap(moved(19), ownProg), Now: t0, Loss: goodLoss})
	checkDecision(t, got, Decision{Merge: true, Reason: MergedClipped, HasVerdict: true, Verdict: reputation.Clipped, Distance: 19,
		Validated: true, Weight: weightAt(0)})
	// d's scores 31+40^2 = 1631, beyond 3x the median of the others: refused.
	got = c.Decide(Input{Peer: "d", Local: local(), Remote: snap(moved(40), ownProg), Now: t0, Loss: goodLoss})
	checkDecision(t, got, Decision{Reason: RefusedImplausible, HasVerdict: true, Verdict: reputation.LossJump, Distance: 40, Validated: true})
	// withFarPeers is a warm core that has scored b's and c's far models.
	withFarPeers := func(scale float64) *Core {
		cfg.PeerLossScale = scale
		c := warmCore(t, cfg)
		for _, p := range []string{"b", "c"} {
			c.Decide(Input{Peer: p, Local: local(), Remote: snap(moved(18), ownProg), Now: t0, Loss: goodLoss})
		}
		return c
	}
	// Off (0), a's model is judged against ours and the guess alone.
	c = withFarPeers(0)
	got = c.Decide(Input{Peer: "a", Local: local(), Remote: snap(moved(19), ownProg), Now: t0, Loss: goodLoss})
	checkDecision(t, got, Decision{Reason: RefusedImplausible, HasVerdict: true, Verdict: reputation.LossJump, Distance: 19, Validated: true})
	// The other peers' losses expire with the spread's TTL.
	c = withFarPeers(3)
	later := t0.Add(spreadTTL + time.Second)
	seePeers(t, c, 1, later, "e", "f") // keep the distance spread fresh
	got = c.Decide(Input{Peer: "a", Local: local(), Remote: snap(moved(19), ownProg), Now: later, Loss: goodLoss})
	if got.Reason != RefusedImplausible {
		t.Errorf("a's far model after the others' losses expired: %+v, want refused as implausible", got)
	}
	for _, bad := range []float64{-1, 0.5, math.NaN(), math.Inf(1)} {
		cfg := testConfig()
		cfg.PeerLossScale = bad
		if _, err := New(cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("PeerLossScale %v: New gave %v, want ErrBadConfig", bad, err)
		}
	}
}

// TestDecideAheadOfUs: in a mixed-speed swarm the slow peers' models sit
// close to ours and the fast peer's far away. A far model from a peer well
// ahead of us that does better than ours on our holdout is merged whole
// (not clipped, its blend validated); one that does not is refused without
// a verdict; one that is implausible is still evidence; and the same far
// model from a peer not ahead is an outlier, as before.
func TestDecideAheadOfUs(t *testing.T) {
	const lead = ownProg + catchUp // clamped to this anyway; 1000 > the 500 margin
	// fast is the fast peer's model: every coordinate at 0.25, at distance
	// sqrt(32)*0.75 = 4.24 from ours (beyond 20x the other peers' 0.01 and
	// beyond the radius 2), scoring 32*0.0625 = 2 on our holdout against
	// our 32. The blend at weight 0.5 (coordinates 0.625) scores 12.5.
	fast := func() []float32 { return fill(0.25) }
	farDist := math.Sqrt(dim) * 0.75
	// slowPeers is a core whose other peers sent models at 0.01 from ours:
	// they just merged with us. warmRadius also fills the radius's window
	// with merges at that distance (radius 0.02, outliers beyond 0.2).
	slowPeers := func(t *testing.T, cfg Config, warmRadius bool) *Core {
		c := newCore(t, cfg)
		if warmRadius {
			for range cfg.Radius.MinSamples {
				c.Applied("warm", Decision{Merge: true, Distance: 0.01})
			}
		}
		seePeers(t, c, 0.01, t0, "b", "c")
		return c
	}
	whole := Decision{Merge: true, Reason: Merged, HasVerdict: true, Verdict: reputation.Accepted,
		Weight: weightAt(0), Distance: farDist, Validated: true}
	for _, warmRadius := range []bool{false, true} {
		t.Run(fmt.Sprint("warm radius ", warmRadius), func(t *testing.T) {
			cfg := testConfig()
			t.Run("ahead and better: merged whole", func(t *testing.T) {
				c := slowPeers(t, cfg, warmRadius)
				r := snap(fast(), lead)
				checkDecision(t, c.Decide(Input{Peer: "fast", Local: local(), Remote: r, Now: t0, Loss: goodLoss}), whole)
				if !slices.Equal(r.Params, fast()) {
					t.Errorf("the model was changed (clipped?): %v", r.Params[:3])
				}
			})
			t.Run("not ahead: an outlier", func(t *testing.T) {
				c := slowPeers(t, cfg, warmRadius)
				got := c.Decide(Input{Peer: "fast", Local: local(), Remote: snap(fast(), ownProg+catchUp/2), Now: t0, Loss: goodLoss})
				checkDecision(t, got, Decision{Reason: RefusedOutlier, HasVerdict: true, Verdict: reputation.Outlier, Distance: farDist})
			})
			t.Run("ahead, not better: refused without a verdict", func(t *testing.T) {
				c := slowPeers(t, cfg, warmRadius)
				// fill(1.5): distance 2.83, loss 72 (2.25x ours: plausible).
				got := c.Decide(Input{Peer: "fast", Local: local(), Remote: snap(fill(1.5), lead), Now: t0, Loss: goodLoss})
				checkDecision(t, got, Decision{Reason: RefusedOutlier, Distance: math.Sqrt(dim) * 0.5, Validated: true})
			})
			t.Run("ahead, implausible: evidence", func(t *testing.T) {
				c := slowPeers(t, cfg, warmRadius)
				// fill(-5): loss 800, 25x ours.
				got := c.Decide(Input{Peer: "fast", Local: local(), Remote: snap(fill(-5), lead), Now: t0, Loss: goodLoss})
				checkDecision(t, got, Decision{Reason: RefusedImplausible, HasVerdict: true, Verdict: reputation.LossJump,
					Distance: math.Sqrt(dim) * 6, Validated: true})
			})
			t.Run("ahead and better, blend worse than ours: refused", func(t *testing.T) {
				c := slowPeers(t, cfg, warmRadius)
				// A holdout on which both ends score well and their midpoint
				// badly: the blend must be no worse than ours, not within
				// the tolerance that other merges get.
				bowl := func(w []float32) (float64, bool, error) {
					if w[0] == 1 || w[0] == 0.25 {
						return 1, true, nil
					}
					return 1.5, true, nil
				}
				got := c.Decide(Input{Peer: "fast", Local: local(), Remote: snap(fast(), lead), Now: t0, Loss: bowl})
				checkDecision(t, got, Decision{Reason: RefusedBlend, Distance: farDist, Validated: true})
			})
			t.Run("no holdout: refused without a verdict", func(t *testing.T) {
				cfg := cfg
				cfg.NoHoldout = true
				c := slowPeers(t, cfg, warmRadius)
				got := c.Decide(Input{Peer: "fast", Local: local(), Remote: snap(fast(), lead), Now: t0})
				checkDecision(t, got, Decision{Reason: RefusedOutlier, Distance: farDist})
			})
		})
	}
	t.Run("ahead and better within the outlier test: not clipped", func(t *testing.T) {
		cfg := testConfig()
		c := warmCore(t, cfg) // peers at 1: 4.24 is beyond the radius 2, not an outlier
		r := snap(fast(), lead)
		checkDecision(t, c.Decide(Input{Peer: "fast", Local: local(), Remote: r, Now: t0, Loss: goodLoss}), whole)
		// The same model not ahead is clipped, as before.
		r = snap(fast(), ownProg)
		got := c.Decide(Input{Peer: "fast", Local: local(), Remote: r, Now: t0, Loss: goodLoss})
		checkDecision(t, got, Decision{Merge: true, Reason: MergedClipped, HasVerdict: true, Verdict: reputation.Clipped,
			Weight: weightAt(0), Distance: farDist, Validated: true})
	})
}

// TestAheadOf pins the margin: more than 10% of our progress, or more than
// half the catch-up threshold where that is less.
func TestAheadOf(t *testing.T) {
	for _, tc := range []struct {
		p, own, catchUp float64
		want            bool
	}{
		{1100, 1000, 0, false},
		{1101, 1000, 0, true},
		{1101, 1000, 60000, true},
		{1050, 1000, 100, false},
		{1051, 1000, 100, true},
		{1e6 + 30001, 1e6, 60000, true},
		{1e6 + 30000, 1e6, 60000, false},
		{1, 0, 60000, true},
		{0, 0, 60000, false},
		{900, 1000, 60000, false},
	} {
		if got := aheadOf(tc.p, tc.own, tc.catchUp); got != tc.want {
			t.Errorf("aheadOf(%v, %v, %v) = %v, want %v", tc.p, tc.own, tc.catchUp, got, tc.want)
		}
	}
}

// TestDecideOutlierGrace: with OutlierGrace, a peer's plausible outliers
// are refused without a verdict until its models have been outliers that
// long; a model that is not an outlier starts the count again, each peer
// has its own, and an implausible outlier is evidence at once.
func TestDecideOutlierGrace(t *testing.T) {
	cfg := testConfig()
	cfg.OutlierGrace = 2 * time.Second
	c := warmCore(t, cfg)
	decide := func(p string, d float32, at time.Duration, loss lossFunc) Decision {
		return c.Decide(Input{Peer: p, Local: local(), Remote: snap(moved(d), ownProg), Now: t0.Add(at), Loss: loss})
	}
	// constLoss: every model scores alike, so an outlier is plausible.
	quiet := Decision{Reason: RefusedOutlier, Distance: 49, Validated: true}
	evidence := Decision{Reason: RefusedOutlier, HasVerdict: true, Verdict: reputation.Outlier, Distance: 49}
	checkDecision(t, decide("x", 49, 0, constLoss), quiet)
	checkDecision(t, decide("x", 49, 1999*time.Millisecond, constLoss), quiet)
	checkDecision(t, decide("y", 49, 1999*time.Millisecond, constLoss), quiet) // y's count starts now
	checkDecision(t, decide("x", 49, 2*time.Second, constLoss), evidence)
	checkDecision(t, decide("x", 49, 3*time.Second, constLoss), evidence)
	if got := decide("x", -1, 3500*time.Millisecond, constLoss); !got.Merge {
		t.Fatalf("x's model within the spread: %+v, want merged", got)
	}
	checkDecision(t, decide("x", 49, 4*time.Second, constLoss), quiet) // counted afresh
	checkDecision(t, decide("x", 49, 6*time.Second, constLoss), evidence)
	checkDecision(t, decide("y", 49, 3999*time.Millisecond, constLoss), evidence)
	// goodLoss: the model at 49 scores 31+50^2, far above 10x ours.
	checkDecision(t, decide("z", 49, 0, goodLoss),
		Decision{Reason: RefusedImplausible, HasVerdict: true, Verdict: reputation.LossJump, Distance: 49, Validated: true})

	cfg.OutlierGrace = -time.Second
	if _, err := New(cfg); !errors.Is(err, ErrBadConfig) {
		t.Errorf("OutlierGrace -1s: New gave %v, want ErrBadConfig", err)
	}
}

// TestClipRadiusFollowsPeers: the clipping radius is Scale times the larger
// of the window's median and the median of the other peers' distances at
// their latest applied merges; a peer's own merges never widen the radius
// it is judged by.
func TestClipRadiusFollowsPeers(t *testing.T) {
	cfg := testConfig()
	c := newCore(t, cfg)
	warm(t, c, cfg) // window median 1: radius 2
	for _, p := range []string{"a", "b"} {
		c.Applied(p, Decision{Merge: true, Distance: 10, at: t0})
	}
	if r, m := c.Radius(); r != clipRadius || m != radiusMed {
		t.Fatalf("window radius %v median %v after two merges at 10, want %v and %v", r, m, clipRadius, radiusMed)
	}
	decide := func(p string) Decision {
		return c.Decide(Input{Peer: p, Local: local(), Remote: snap(moved(15), ownProg), Now: t0.Add(time.Second), Loss: constLoss})
	}
	// c's others are a and b at 10: radius 20, so 15 is merged as sent.
	if got := decide("c"); got.Reason != Merged {
		t.Errorf("c at 15 with two other peers merged at 10: %v, want merged unclipped", got.Reason)
	}
	// a's only other is b (and c, which was never applied): too few, so
	// the window's radius 2 applies and 15 is clipped.
	if got := decide("a"); got.Reason != MergedClipped {
		t.Errorf("a at 15 with one other peer on file: %v, want clipped to the window's radius", got.Reason)
	}
	// Past the spread's TTL the peers' distances no longer count.
	got := c.Decide(Input{Peer: "c", Local: local(), Remote: snap(moved(15), ownProg), Now: t0.Add(spreadTTL + 2*time.Second), Loss: constLoss})
	if got.Reason != MergedClipped {
		t.Errorf("c at 15 after the others' merges expired: %v, want clipped", got.Reason)
	}
}

// TestDecidePull: with Ahead = pull a model ahead of ours gets 1 - a0 f(s')
// (s' our staleness as the remote measures it) and one behind the usual
// a0 f(s), so both sides of an exchange agree.
func TestDecidePull(t *testing.T) {
	cfg := testConfig()
	cfg.Merger.Lag = averaging.LagRelative
	cfg.Merger.Ahead = averaging.AheadPull
	c := warmCore(t, cfg)
	// 500 samples ahead of our 16000 (under the catch-up clamp): we are
	// 100*500/16500 percent behind it.
	ahead := c.Decide(Input{Peer: "a", Local: local(), Remote: snap(moved(-1), ownProg+500), Now: t0, Loss: goodLoss})
	want := 1 - averaging.DefaultAlpha/math.Sqrt(1+100*500.0/16500)
	if !ahead.Merge || ahead.Staleness != 0 || math.Abs(ahead.Weight-want) > 1e-12 {
		t.Errorf("ahead: %+v, want a merge at weight %v", ahead, want)
	}
	behind := c.Decide(Input{Peer: "b", Local: local(), Remote: snap(moved(-1), ownProg-3*batch), Now: t0, Loss: goodLoss})
	if !behind.Merge || math.Abs(behind.Weight-weightAt(0.3)) > 1e-12 {
		t.Errorf("behind: %+v, want weight %v", behind, weightAt(0.3))
	}
	cfg.Merger.Lag = averaging.LagAge
	if _, err := New(cfg); !errors.Is(err, averaging.ErrBadAhead) {
		t.Errorf("pull with age: New err = %v, want ErrBadAhead", err)
	}
}
