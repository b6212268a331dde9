package merge

import (
	"math"
	"testing"
)

// TestMergeScale pins the merge scaling's rule: sqrt(48 / steps per
// merge), within [1, 2], and 1 while there are no merges to go by.
func TestLRScale(t *testing.T) {
	for _, c := range []struct {
		name          string
		steps, merges float64
		want          float64
	}{
		{"no merges", 100, 0, 1},
		{"nothing yet", 0, 0, 1},
		{"the reference", 48, 1, 1},
		{"rarer than the reference", 200, 1, 1},
		{"four times as often", 12, 1, 2},
		{"every step", 1, 1, 2},
		{"merges but no steps", 0, 3, 2},
		{"in between", 27, 1, math.Sqrt(48.0 / 27)},
		{"as moving averages", 13.5, 0.5, math.Sqrt(48.0 / 27)},
		{"not finite", math.NaN(), 1, 1},
		{"infinite steps", math.Inf(1), 1, 1},
		{"negative merges", 10, -1, 1},
	} {
		if got := LRScale(c.steps, c.merges); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: LRScale(%v, %v) = %v, want %v", c.name, c.steps, c.merges, got, c.want)
		}
	}
}

// TestMergeRateFollowsTheMerges: the factor starts at 1, rises to 2 while
// merges come every few steps, falls back to 1 once they stop, and starts
// over when the counters go back.
func TestMergeRateFollowsTheMerges(t *testing.T) {
	var r MergeRate
	steps, merges := int64(1000), int64(50)
	if got := r.Observe(steps, merges); got != 1 {
		t.Fatalf("first tick: factor %v, want 1", got)
	}
	tick := func(ds, dm int64) float64 {
		steps += ds
		merges += dm
		return r.Observe(steps, merges)
	}
	// A fast node on loopback: 300 steps and 28 merges a tick.
	var got float64
	for range 10 {
		got = tick(300, 28)
	}
	if got != LRScaleMax {
		t.Errorf("11 steps a merge: factor %v, want %v", got, LRScaleMax)
	}
	// On a slow link: 300 steps and 6 merges a tick, 50 steps a merge.
	for range 20 {
		got = tick(300, 6)
	}
	if got != 1 {
		t.Errorf("50 steps a merge: factor %v, want 1", got)
	}
	// 27 steps a merge, held: the factor settles at sqrt(48/27).
	for range 60 {
		got = tick(270, 10)
	}
	if want := math.Sqrt(48.0 / 27); math.Abs(got-want) > 1e-6 {
		t.Errorf("27 steps a merge: factor %v, want %v", got, want)
	}
	// Merges every few steps, then none at all: back to 1 within seconds.
	for range 10 {
		tick(300, 100)
	}
	n := 0
	for got = tick(300, 0); got > 1; got = tick(300, 0) {
		if n++; n > 20 {
			t.Fatalf("no merges for %d ticks: factor still %v", n, got)
		}
	}
	// A restored checkpoint sets the counters back: start over at 1.
	steps, merges = 10, 1
	if got := r.Observe(steps, merges); got != 1 {
		t.Errorf("counters gone back: factor %v, want 1", got)
	}
	if got := tick(0, 0); got != 1 {
		t.Errorf("no steps, no merges after a restart: factor %v, want 1", got)
	}
}
