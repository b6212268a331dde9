package node

import (
	"math"
	"testing"
)

func TestSpeedScale(t *testing.T) {
	for _, c := range []struct {
		name  string
		own   float64
		rates []float64
		want  float64
	}{
		{"alone", 100, nil, 1},
		{"own rate unknown", 0, []float64{100, 200}, 1},
		{"own rate not finite", math.Inf(1), []float64{100}, 1},
		{"equal speeds", 100, []float64{100, 100, 100}, 1},
		// 2,2,4,8: rates 1/2, 1/2, 1/4, 1/8 of the base; median 3/8.
		{"fast node of 2,2,4,8", 400, []float64{400, 200, 100}, 300.0 / 400},
		{"slow node of 2,2,4,8", 100, []float64{400, 400, 200}, 300.0 / 100},
		{"unknown peer rates ignored", 100, []float64{0, -5, math.NaN(), 300}, 200.0 / 100},
		{"a liar cannot move the median far", 100, []float64{100, 100, 1e12}, 1},
		{"clamped above", 1, []float64{1000, 1000}, maxSpeedScale},
		{"clamped below", 1000, []float64{1, 1}, 1 / maxSpeedScale},
	} {
		if got := speedScale(c.own, c.rates); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: speedScale(%v, %v) = %v, want %v", c.name, c.own, c.rates, got, c.want)
		}
	}
}

func TestParseLRScaling(t *testing.T) {
	for _, s := range []string{"none", "speed", "merges"} {
		if v, err := ParseLRScaling(s); err != nil || string(v) != s {
			t.Errorf("ParseLRScaling(%q) = %q, %v", s, v, err)
		}
	}
	if _, err := ParseLRScaling("fast"); err == nil {
		t.Error("ParseLRScaling(fast) accepted")
	}
}

// fairnessConsensus simulates gossip on a synthetic non-iid problem: node
// i's loss is (x - c_i)^2 / 2, it steps every 1/speed_i time units, and
// every averaging interval each node averages with the next one around a
// ring (weight 1/2, both ways). It returns the average of the models at
// the end, where the swarm settles.
func fairnessConsensus(speeds, optima []float64, scaled bool) float64 {
	const (
		lr       = 0.01
		dt       = 0.001 // time step of the simulation
		interval = 0.05  // averaging interval
		duration = 60.0
	)
	n := len(speeds)
	x := make([]float64, n)
	next := make([]float64, n) // time of each node's next step
	for i := range next {
		next[i] = 1 / speeds[i]
	}
	scale := make([]float64, n)
	for i := range scale {
		scale[i] = 1
		if scaled {
			scale[i] = speedScale(speeds[i], append(append([]float64(nil), speeds[:i]...), speeds[i+1:]...))
		}
	}
	nextMerge, round := interval, 0
	for now := 0.0; now < duration; now += dt {
		for i := range x {
			for next[i] <= now {
				x[i] -= lr * scale[i] * (x[i] - optima[i])
				next[i] += 1 / speeds[i]
			}
		}
		if nextMerge <= now {
			for i := round % 2; i+1 < n; i += 2 { // disjoint pairs, alternating
				m := (x[i] + x[i+1]) / 2
				x[i], x[i+1] = m, m
			}
			round++
			nextMerge += interval
		}
	}
	var sum float64
	for _, v := range x {
		sum += v
	}
	return sum / float64(n)
}

// TestSpeedScalingIsFair pins the fairness rule: on a problem where every
// node's data pulls towards its own optimum, the swarm settles at the mean
// of the optima whatever the nodes' speeds, so a slow node's data counts as
// much as a fast one's. Without the scaling the fast nodes weigh more.
func TestSpeedScalingIsFair(t *testing.T) {
	speeds := []float64{500, 500, 250, 125} // steps per second: slowdowns 2,2,4,8
	optima := []float64{0, 0, 0, 1}         // the slowest node holds what the others lack
	fair := 0.25

	if got := fairnessConsensus(speeds, optima, true); math.Abs(got-fair) > 0.02 {
		t.Errorf("with speed scaling the swarm settles at %.4f, want the plain mean of the optima %.4f", got, fair)
	}
	// Without it the fast nodes' data weighs more (towards the
	// speed-weighted mean, 125/1375 = 0.09): the check can fail.
	if got := fairnessConsensus(speeds, optima, false); got > fair-0.08 {
		t.Errorf("without speed scaling the swarm settles at %.4f, want well below the plain mean %.4f", got, fair)
	}
	// The same swarm with the speeds reversed: the slowest node's share
	// stays the same with the scaling.
	rev := []float64{125, 250, 500, 500}
	a := fairnessConsensus(speeds, optima, true)
	b := fairnessConsensus(rev, optima, true)
	if math.Abs(a-b) > 0.02 {
		t.Errorf("with speed scaling the node's share depends on its speed: %.4f at the slowest, %.4f at the fastest", a, b)
	}
}
