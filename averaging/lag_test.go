package averaging

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

func TestLagStaleness(t *testing.T) {
	nan := params.Progress(math.NaN())
	tests := []struct {
		name          string
		lag           Lag
		local, remote params.Progress
		age           time.Duration
		batch         int
		want          float64
		wantErr       error
	}{
		{"steps behind", LagSteps, 6400, 3200, 0, 64, 50, nil},
		{"relative half behind", LagRelative, 6400, 3200, 0, 64, 50, nil},
		{"relative a quarter of ours", LagRelative, 4000, 1000, 0, 64, 75, nil},
		{"relative 3% behind", LagRelative, 505000, 489850, 0, 64, 3, nil},
		{"relative at zero", LagRelative, 1000, 0, 0, 64, 100, nil},
		{"relative ahead is fresh", LagRelative, 100, 1e6, 0, 64, 0, nil},
		{"relative both zero", LagRelative, 0, 0, 0, 64, 0, nil},
		{"relative bad batch", LagRelative, 10, 0, 0, 0, 0, ErrBadBatch},
		{"relative NaN", LagRelative, nan, 0, 0, 64, 0, ErrBadProgress},
		{"unknown measure", Lag(9), 10, 0, 0, 64, 0, ErrBadLag},
		{"age in seconds", LagAge, 6400, 3200, 1500 * time.Millisecond, 64, 1.5, nil},
		{"age ignores a progress gap", LagAge, 1e6, 10, 20 * time.Millisecond, 64, 0.02, nil},
		{"age of a model ahead", LagAge, 10, 1e6, time.Hour, 64, 3600, nil},
		{"negative age is fresh", LagAge, 10, 10, -time.Second, 64, 0, nil},
		{"age still checks progress", LagAge, nan, 0, 0, 64, 0, ErrBadProgress},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.lag.Staleness(tc.local, tc.remote, tc.age, tc.batch)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("s = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseLag(t *testing.T) {
	for _, l := range []Lag{LagSteps, LagRelative, LagAge} {
		b, err := l.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Lag
		if err := back.UnmarshalText(b); err != nil || back != l {
			t.Errorf("%v: round trip gave %v, %v", l, back, err)
		}
		if got, err := ParseLag(l.String()); err != nil || got != l {
			t.Errorf("ParseLag(%q) = %v, %v", l.String(), got, err)
		}
	}
	if _, err := ParseLag("time"); !errors.Is(err, ErrBadLag) {
		t.Errorf("ParseLag(time): %v, want ErrBadLag", err)
	}
	if _, err := Lag(7).MarshalText(); !errors.Is(err, ErrBadLag) {
		t.Errorf("marshal of Lag(7): %v, want ErrBadLag", err)
	}
	m := DefaultMerger()
	m.Lag = Lag(7)
	if err := m.Validate(); !errors.Is(err, ErrBadLag) {
		t.Errorf("Validate with Lag(7): %v, want ErrBadLag", err)
	}
	if DefaultMerger().Lag != DefaultLag {
		t.Errorf("DefaultMerger().Lag = %v, want %v", DefaultMerger().Lag, DefaultLag)
	}
}

// TestLagSlowNodeWeight pins why the relative measure exists: a node 8x
// faster than its peer, both merging with each other every 10 of the fast
// node's steps (progress mixed as Merge mixes it), gives the slow node's
// fresh model a weight that under LagSteps stays far below Alpha for the
// whole run, and under LagRelative climbs back towards Alpha as the
// settled gap shrinks against the growing progress.
func TestLagSlowNodeWeight(t *testing.T) {
	const batch = 64
	weightAfter := func(lag Lag, ticks int) float64 {
		m := DefaultMerger()
		m.Lag = lag
		var fast, slow params.Progress
		var last float64
		for i := 1; i <= ticks; i++ {
			fast = fast.Step(batch)
			if i%8 == 0 {
				slow = slow.Step(batch)
			}
			if i%10 != 0 {
				continue
			}
			sf, err := m.Lag.Staleness(fast, slow, 0, batch)
			if err != nil {
				t.Fatal(err)
			}
			af, err := m.Weight(sf)
			if err != nil {
				t.Fatal(err)
			}
			ss, err := m.Lag.Staleness(slow, fast, 0, batch)
			if err != nil {
				t.Fatal(err)
			}
			as, err := m.Weight(ss)
			if err != nil {
				t.Fatal(err)
			}
			fast, slow = fast.Mix(slow, af), slow.Mix(fast, as)
			last = af
		}
		return last
	}
	for _, ticks := range []int{10_000, 100_000} {
		steps, rel := weightAfter(LagSteps, ticks), weightAfter(LagRelative, ticks)
		t.Logf("after %d fast steps: weight of the slow model %.3f (steps), %.3f (relative)", ticks, steps, rel)
		if steps > 0.25 {
			t.Errorf("steps: weight %.3f after %d steps; the settled gap should keep it low", steps, ticks)
		}
		if rel < 0.4 || rel > DefaultAlpha {
			t.Errorf("relative: weight %.3f after %d steps, want in [0.4, %v]", rel, ticks, DefaultAlpha)
		}
	}
}
