package averaging

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshtrain/meshtrain/params"
)

func TestParseAhead(t *testing.T) {
	for _, a := range []Ahead{AheadFresh, AheadPull} {
		got, err := ParseAhead(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAhead(%q) = %v, %v; want %v", a.String(), got, err, a)
		}
		b, err := a.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Ahead
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Errorf("UnmarshalText(%q) = %v, %v", b, back, err)
		}
	}
	for _, bad := range []string{"", "Pull", "push", "fresh "} {
		if _, err := ParseAhead(bad); !errors.Is(err, ErrBadAhead) {
			t.Errorf("ParseAhead(%q) err = %v, want ErrBadAhead", bad, err)
		}
	}
	if _, err := Ahead(7).MarshalText(); !errors.Is(err, ErrBadAhead) {
		t.Errorf("MarshalText of Ahead(7): %v", err)
	}
	if DefaultMerger().Ahead != DefaultAhead {
		t.Errorf("DefaultMerger().Ahead = %v, want %v", DefaultMerger().Ahead, DefaultAhead)
	}
}

func TestAheadValidate(t *testing.T) {
	m := DefaultMerger()
	m.Ahead = AheadPull
	for _, lag := range []Lag{LagSteps, LagRelative} {
		m.Lag = lag
		if err := m.Validate(); err != nil {
			t.Errorf("pull with %v: %v", lag, err)
		}
	}
	m.Lag = LagAge
	if err := m.Validate(); !errors.Is(err, ErrBadAhead) {
		t.Errorf("pull with age: err = %v, want ErrBadAhead", err)
	}
	m = DefaultMerger()
	m.Ahead = Ahead(9)
	if err := m.Validate(); !errors.Is(err, ErrBadAhead) {
		t.Errorf("Ahead(9): err = %v, want ErrBadAhead", err)
	}
}

// TestWeighAhead pins the two rules' weights for a remote model ahead of
// ours and behind it.
func TestWeighAhead(t *testing.T) {
	poly, err := ParseStaleness("poly:0.5")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		ahead         Ahead
		lag           Lag
		local, remote params.Progress
		wantS, wantA  float64
	}{
		// Remote at 4000, we at 1000: we are 75% behind as the remote
		// measures it, f(75) = 1/sqrt(76).
		{"fresh: ahead gets alpha", AheadFresh, LagRelative, 1000, 4000, 0, 0.5},
		{"pull: ahead pulls us in", AheadPull, LagRelative, 1000, 4000, 0, 1 - 0.5/math.Sqrt(76)},
		{"pull: 3% ahead", AheadPull, LagRelative, 97, 100, 0, 1 - 0.5/2},
		{"pull: in steps", AheadPull, LagSteps, 6400 - 64*8, 6400, 0, 1 - 0.5/3},
		{"pull: equal progress is alpha", AheadPull, LagRelative, 500, 500, 0, 0.5},
		{"pull: behind decays as fresh does", AheadPull, LagRelative, 4000, 1000, 75, 0.5 / math.Sqrt(76)},
		{"fresh: behind decays", AheadFresh, LagRelative, 4000, 1000, 75, 0.5 / math.Sqrt(76)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := Merger{Alpha: 0.5, Staleness: poly, Lag: tc.lag, Ahead: tc.ahead}
			s, _, a, err := m.Weigh(tc.local, tc.remote, 0, 64)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(s-tc.wantS) > 1e-12 || math.Abs(a-tc.wantA) > 1e-12 {
				t.Errorf("Weigh(%v, %v) = s %v, a %v; want s %v, a %v", tc.local, tc.remote, s, a, tc.wantS, tc.wantA)
			}
		})
	}
	m := Merger{Alpha: 0.5, Staleness: poly, Lag: LagRelative, Ahead: AheadPull}
	if _, _, _, err := m.Weigh(params.Progress(math.NaN()), 10, 0, 64); !errors.Is(err, ErrBadProgress) {
		t.Errorf("NaN progress: err = %v", err)
	}
	if _, _, _, err := m.Weigh(10, 20, 0, 0); !errors.Is(err, ErrBadBatch) {
		t.Errorf("batch 0: err = %v", err)
	}
}

// TestPullPairLandsTogether: under pull, the two sides of an exchange land
// on the same model and the same progress (the one the node ahead
// computes), every weight stays in [Alpha, 1] for a model ahead and in
// [0, Alpha] for one behind, for random progress, bases and decays.
func TestPullPairLandsTogether(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	decays := []string{"poly:0.5", "poly:1", "exp:0.1", "hinge:4,10", "const"}
	for i := range 500 {
		st, err := ParseStaleness(decays[i%len(decays)])
		if err != nil {
			t.Fatal(err)
		}
		lag := []Lag{LagSteps, LagRelative}[i%2]
		alpha := []float64{0.5, 0.3, 0.8, 1}[i%4]
		m := Merger{Alpha: alpha, Staleness: st, Lag: lag, Ahead: AheadPull, Momentum: MomentumKeep}
		fast := params.Progress(1 + rng.Float64()*1e6)
		slow := params.Progress(rng.Float64() * float64(fast))
		_, _, aFast, err := m.Weigh(fast, slow, 0, 64) // the fast node weighs the slow model
		if err != nil {
			t.Fatal(err)
		}
		_, _, aSlow, err := m.Weigh(slow, fast, 0, 64) // the slow node weighs the fast one
		if err != nil {
			t.Fatal(err)
		}
		if !(aFast >= 0 && aFast <= alpha) || !(aSlow >= alpha && aSlow <= 1) {
			t.Fatalf("case %d (%s, %v, alpha %v): weights %v (behind), %v (ahead)", i, st, lag, alpha, aFast, aSlow)
		}
		if alpha > 0.5 {
			continue // 1 - alpha f < alpha is raised to alpha: no common point
		}
		if math.Abs(aFast+aSlow-1) > 1e-12 {
			t.Fatalf("case %d (%s, %v, alpha %v): weights %v + %v != 1", i, st, lag, alpha, aFast, aSlow)
		}
		const n = 64
		wf, ws := make([]float32, n), make([]float32, n)
		for j := range n {
			wf[j], ws[j] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		pf, ps := fast, slow
		snapF := params.Snapshot{Params: append([]float32(nil), wf...), Progress: fast}
		snapS := params.Snapshot{Params: append([]float32(nil), ws...), Progress: slow}
		if _, err := m.Merge(Local{Params: wf, Progress: &pf, Batch: 64}, snapS, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Merge(Local{Params: ws, Progress: &ps, Batch: 64}, snapF, nil); err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if d := math.Abs(float64(wf[j] - ws[j])); d > 1e-5 {
				t.Fatalf("case %d: value %d lands at %v and %v", i, j, wf[j], ws[j])
			}
		}
		if math.Abs(float64(pf-ps)) > 1e-9*float64(fast) {
			t.Fatalf("case %d: progress lands at %v and %v", i, pf, ps)
		}
	}
}

// TestFreshPairPreservesMeanAtHalf: the default rule with fresh models is
// still the pair's mean on both sides (pull changes only models ahead).
func TestPullEqualProgressIsFresh(t *testing.T) {
	fresh, pull := DefaultMerger(), DefaultMerger()
	pull.Ahead = AheadPull
	for _, p := range []params.Progress{0, 1, 1e6} {
		_, _, a1, err1 := fresh.Weigh(p, p, 0, 64)
		_, _, a2, err2 := pull.Weigh(p, p, 0, 64)
		if err1 != nil || err2 != nil || a1 != a2 || a1 != DefaultAlpha {
			t.Errorf("progress %v: fresh %v (%v), pull %v (%v)", p, a1, err1, a2, err2)
		}
	}
}
