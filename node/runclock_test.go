package node

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// t0 is the arbitrary origin of every run-clock test's time line: the clock
// is pure, so no test reads the real clock or sleeps.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// noEst is an invalid Estimate: an observation carrying it leaves the floor
// alone, which isolates the sum of counts in the tests that are not about
// the floor.
const noEst = -1

func ob(p peer.ID, samples, rate, estimate float64, seen time.Time) clockObservation {
	return clockObservation{Peer: p, Samples: samples, Rate: rate, Estimate: estimate, Seen: seen}
}

func wantClock(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.IsNaN(got) || math.IsInf(got, 0) {
		t.Fatalf("%s = %v, want finite %v", what, got, want)
	}
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func TestRunClockBase(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, own float64
		want      float64
	}{
		{"new run", 0, 0, 0},
		{"new run own counts", 0, 123, 123},
		{"base above own", 1000, 10, 1000},
		{"own above base", 1000, 5000, 5000},
		{"own equal base", 1000, 1000, 1000},
		{"negative own", 1000, -50, 1000},
		{"negative own new run", 0, -50, 0},
		{"NaN base is 0", math.NaN(), 7, 7},
		{"negative base is 0", -100, 7, 7},
		{"+Inf base is 0", math.Inf(1), 7, 7},
		{"-Inf base is 0", math.Inf(-1), 7, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(tc.base)
			wantClock(t, "value", c.value(t0, tc.own), tc.want)
		})
	}
}

func TestRunClockNeverFalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		base float64
		own  []float64 // successive own counts, one a second
		want []float64
	}{
		{"restart to 0", 0, []float64{100, 300, 0, 50, 400}, []float64{100, 300, 300, 300, 400}},
		{"with base", 200, []float64{0, 100, 300, 10, 301}, []float64{200, 200, 300, 300, 301}},
		{"negative own", 0, []float64{10, -5, 11}, []float64{10, 10, 11}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(tc.base)
			for i, own := range tc.own {
				wantClock(t, fmt.Sprintf("value #%d (own %v)", i, own), c.value(at(float64(i)), own), tc.want[i])
			}
		})
	}

	t.Run("floor drops", func(t *testing.T) {
		c := newRunClock(0)
		c.observe(t0, 0, []clockObservation{ob("a", 0, 0, 1e6, t0), ob("b", 0, 0, 1e6, t0)})
		wantClock(t, "value with floor 1e6", c.value(t0, 0), 1e6)
		// The swarm's estimates fall (say its nodes restarted): the floor
		// drops, the value does not.
		c.observe(at(1), 0, []clockObservation{ob("a", 0, 0, 10, at(1)), ob("b", 0, 0, 10, at(1))})
		wantClock(t, "value after the floor dropped", c.value(at(1), 0), 1e6)
		wantClock(t, "value later", c.value(at(100), 5), 1e6)
	})

	t.Run("peer extrapolation ends", func(t *testing.T) {
		c := newRunClock(0)
		c.observe(t0, 0, []clockObservation{ob("a", 100, 10, noEst, t0)})
		wantClock(t, "value at +2s", c.value(at(2), 0), 120)
		// Asked about an earlier moment, the clock still does not fall.
		wantClock(t, "value back at t0", c.value(t0, 0), 120)
	})
}

func TestRunClockSum(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  float64
		obs  []clockObservation
		want float64
	}{
		{"own only", 42, nil, 42},
		{"one peer", 5, []clockObservation{ob("a", 100, 0, noEst, t0)}, 105},
		{"three peers", 5, []clockObservation{
			ob("a", 100, 0, noEst, t0), ob("b", 200, 0, noEst, t0), ob("c", 0.5, 0, noEst, t0)}, 305.5},
		{"peers, own 0", 0, []clockObservation{ob("a", 100, 0, noEst, t0), ob("b", 200, 0, noEst, t0)}, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(0)
			c.observe(t0, 0, tc.obs)
			for _, o := range tc.obs {
				wantClock(t, "peerSamples("+string(o.Peer)+")", c.peerSamples(o.Peer), o.Samples)
			}
			wantClock(t, "value", c.value(t0, tc.own), tc.want)
			if n := c.clampedTotal(); n != 0 {
				t.Fatalf("clampedTotal = %d, want 0", n)
			}
		})
	}

	t.Run("announcements accumulate across calls", func(t *testing.T) {
		c := newRunClock(0)
		c.observe(t0, 0, []clockObservation{ob("a", 100, 0, noEst, t0)})
		c.observe(at(1), 0, []clockObservation{ob("b", 200, 0, noEst, at(1))})
		c.observe(at(2), 0, []clockObservation{ob("a", 150, 0, noEst, at(2))})
		wantClock(t, "value", c.value(at(2), 10), 10+150+200)
		if got := c.peerSamples("nobody"); got != 0 {
			t.Fatalf("peerSamples of an unknown peer = %v, want 0", got)
		}
	})
}

func TestRunClockExtrapolation(t *testing.T) {
	// Peer a: 100 samples at t0, 10 samples/s; own count 7.
	for _, tc := range []struct {
		name string
		now  time.Time
		want float64
	}{
		{"before seen", at(-1), 107},
		{"at seen", t0, 107},
		{"+0.5s", at(0.5), 112},
		{"+1s", at(1), 117},
		{"+1.5s", at(1.5), 122},
		{"at horizon", t0.Add(clockHorizon), 127},
		{"just past horizon", t0.Add(clockHorizon + time.Millisecond), 127},
		{"+1min", at(60), 127},
		{"+1 day", t0.Add(24 * time.Hour), 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(0)
			c.observe(t0, 0, []clockObservation{ob("a", 100, 10, noEst, t0)})
			wantClock(t, "value", c.value(tc.now, 7), tc.want)
		})
	}

	t.Run("from each peer's own seen time", func(t *testing.T) {
		c := newRunClock(0)
		c.observe(at(1), 0, []clockObservation{
			ob("a", 100, 10, noEst, t0),    // heard 1s ago: 1s of extrapolation left
			ob("b", 200, 10, noEst, at(1)), // just heard
		})
		// At +2s: a at its horizon (+20), b 1s on (+10).
		wantClock(t, "value at +2s", c.value(at(2), 0), 100+20+200+10)
		// At +10s both have stopped adding.
		wantClock(t, "value at +10s", c.value(at(10), 0), 100+20+200+20)
	})

	t.Run("for two of a peer's announced intervals", func(t *testing.T) {
		// A large swarm stretches a's interval to 10 s: its count is
		// extrapolated for 20 s, not the 2 s of a peer announcing every
		// second (b says 0.5 s: the 2 s floor holds) nor past the cap.
		c := newRunClock(0)
		a, b, z := ob("a", 100, 10, noEst, t0), ob("b", 200, 10, noEst, t0), ob("z", 300, 1, noEst, t0)
		a.Interval, b.Interval, z.Interval = 10*time.Second, 500*time.Millisecond, time.Hour
		c.observe(t0, 0, []clockObservation{a, b, z})
		wantClock(t, "value at +15s", c.value(at(15), 0), 100+150+200+20+300+15)
		wantClock(t, "value at +1h", c.value(t0.Add(time.Hour), 0), 100+200+200+20+300+clockMaxHorizon.Seconds())
	})
}

func TestRunClockRepeatedObservation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second clockObservation
	}{
		{"same seen, more samples", ob("a", 5000, 10, noEst, t0)},
		{"same seen, other rate", ob("a", 100, 50, noEst, t0)},
		{"same seen, both", ob("a", 1e6, 1e3, noEst, t0)},
		{"earlier seen", ob("a", 5000, 50, noEst, at(-1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(0)
			c.observe(t0, 0, []clockObservation{ob("a", 100, 10, noEst, t0)})
			c.observe(at(1), 0, []clockObservation{tc.second})
			wantClock(t, "peerSamples", c.peerSamples("a"), 100)
			// The rate on file is still 10: +1s adds 10.
			wantClock(t, "value at +1s", c.value(at(1), 0), 110)
			if n := c.clampedTotal(); n != 0 {
				t.Fatalf("clampedTotal = %d, want 0", n)
			}
		})
	}
}

func TestRunClockLowerSamples(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples float64
	}{
		{"lower", 50},
		{"zero", 0},
		{"equal", 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(0)
			c.observe(t0, 0, []clockObservation{ob("a", 100, 10, noEst, t0)})
			// 5s later a announces fewer samples (it restarted) at 20/s.
			c.observe(at(5), 0, []clockObservation{ob("a", tc.samples, 20, noEst, at(5))})
			wantClock(t, "peerSamples", c.peerSamples("a"), 100)
			// Its seen time and rate are taken: at +6s it extrapolates 1s
			// at 20/s (not its horizon's 2s at 20/s, nor 10/s).
			wantClock(t, "value at +6s", c.value(at(6), 0), 120)
			if n := c.clampedTotal(); n != 0 {
				t.Fatalf("clampedTotal = %d, want 0", n)
			}
		})
	}
}

func TestRunClockJumpClamp(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ownRate     float64
		others      []clockObservation // fresh announcements heard with a's second one
		rate        float64            // a's announced rate, both times
		elapsed     float64            // seconds between a's two announcements
		samples     float64            // a's second count (its first is 100)
		wantSamples float64
		wantClamped int64
	}{
		// own 10, median 10: limit 100 + 10*10*(1+2) = 400.
		{"honest jump", 10, nil, 10, 1, 350, 350, 0},
		{"at the limit", 10, nil, 10, 1, 400, 400, 0},
		{"just over the limit", 10, nil, 10, 1, 400.5, 400, 1},
		{"one over the limit", 10, nil, 10, 1, 401, 400, 1},
		{"huge jump", 10, nil, 10, 1, 1e15, 400, 1},
		// A longer gap allows more: 100 + 100*(10+2).
		{"longer gap honest", 10, nil, 10, 10, 1300, 1300, 0},
		{"longer gap over", 10, nil, 10, 10, 1e9, 1300, 1},
		// Our own rate is the higher: limit 100 + 10*50*3 = 1600.
		{"own rate higher", 50, nil, 10, 1, 1e6, 1600, 1},
		{"own rate higher honest", 50, nil, 10, 1, 1600, 1600, 0},
		// The median rate is the higher: own 1, rates {1, 10, 10, 10}
		// (lower middle 10): limit 100 + 10*10*3 = 400.
		{"median rate higher", 1, []clockObservation{
			ob("b", 0, 10, noEst, at(1)), ob("c", 0, 10, noEst, at(1))}, 10, 1, 1e6, 400, 1},
		// A huge announced rate does not raise the limit by itself: rates
		// {10, 1e9 capped} have a lower middle of 10.
		{"own huge rate claim", 10, nil, 1e12, 1, 1e6, 400, 1},
		// A lone peer's rate counts capped at clockMaxRate in the median:
		// limit 100 + 10*1e9*(1+2), not 10*1e12*(1+2).
		{"capped rate in the limit", 0, nil, 1e12, 1, 1e15, 100 + 3e10, 1},
		// No rate at all to compare with: no limit.
		{"no rates", 0, nil, 0, 1, 1e12, 1e12, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(0)
			c.observe(t0, tc.ownRate, []clockObservation{ob("a", 100, tc.rate, noEst, t0)})
			if n := c.clampedTotal(); n != 0 {
				t.Fatalf("clampedTotal after the first announcement = %d, want 0", n)
			}
			seen := at(tc.elapsed)
			obs := append([]clockObservation{ob("a", tc.samples, tc.rate, noEst, seen)}, tc.others...)
			c.observe(seen, tc.ownRate, obs)
			wantClock(t, "peerSamples", c.peerSamples("a"), tc.wantSamples)
			if n := c.clampedTotal(); n != tc.wantClamped {
				t.Fatalf("clampedTotal = %d, want %d", n, tc.wantClamped)
			}
			// The value holds the clamped count (the others count 0 and
			// nothing is extrapolated at seen).
			wantClock(t, "value", c.value(seen, 0), tc.wantSamples)
		})
	}

	t.Run("clamps add up", func(t *testing.T) {
		c := newRunClock(0)
		c.observe(t0, 10, []clockObservation{ob("a", 100, 10, noEst, t0)})
		for i := 1; i <= 3; i++ {
			c.observe(at(float64(i)), 10, []clockObservation{ob("a", 1e15, 10, noEst, at(float64(i)))})
		}
		// Each step may add at most 10*10*(1+2) = 300.
		wantClock(t, "peerSamples", c.peerSamples("a"), 100+3*300)
		if n := c.clampedTotal(); n != 3 {
			t.Fatalf("clampedTotal = %d, want 3", n)
		}
	})
}

func TestRunClockNewcomerClamp(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name         string
		newcomer     clockObservation
		others       []float64 // Estimate of each other peer (each with 10 samples)
		wantSamples  float64
		wantClamped  int64
		wantValueAt0 float64 // value at t0 with own 0, floor included
	}{
		// Median of the others {1000, 2000, 3000} is 2000.
		{"over the median", ob("n", 5000, 0, 2000, t0), []float64{1000, 2000, 3000}, 2000, 1, 2000 + 30},
		{"at the median", ob("n", 2000, 0, 2000, t0), []float64{1000, 2000, 3000}, 2000, 0, 2000 + 30},
		{"under the median", ob("n", 1500, 0, 2000, t0), []float64{1000, 2000, 3000}, 1500, 0, 2000}, // the floor
		// Two others: their lower middle, 1000.
		{"two others", ob("n", 5000, 0, 3000, t0), []float64{1000, 3000}, 1000, 1, 3000}, // the floor
		// The newcomer's own estimate is not counted: with it the median
		// would be 2000.
		{"own estimate excluded", ob("n", 5000, 0, 1e9, t0), []float64{1000, 2000}, 1000, 1, 2000}, // the floor
		{"own estimate invalid", ob("n", 5000, 0, nan, t0), []float64{1000, 2000}, 1000, 1, 1000 + 20},
		// Fewer than two others with an estimate: nothing to compare with.
		{"one other", ob("n", 5000, 0, 3000, t0), []float64{1000}, 5000, 0, 5000 + 10},
		{"no other", ob("n", 5000, 0, 3000, t0), nil, 5000, 0, 5000},
		{"one valid other", ob("n", 5000, 0, 3000, t0), []float64{1000, nan, -1, math.Inf(1)}, 5000, 0, 5000 + 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(0)
			obs := []clockObservation{tc.newcomer}
			for i, e := range tc.others {
				obs = append(obs, ob(peer.ID(fmt.Sprintf("o%d", i)), 10, 0, e, t0))
			}
			c.observe(t0, 0, obs)
			wantClock(t, "peerSamples(newcomer)", c.peerSamples("n"), tc.wantSamples)
			if n := c.clampedTotal(); n != tc.wantClamped {
				t.Fatalf("clampedTotal = %d, want %d", n, tc.wantClamped)
			}
			for i := range tc.others {
				p := peer.ID(fmt.Sprintf("o%d", i))
				wantClock(t, "peerSamples("+string(p)+")", c.peerSamples(p), 10)
			}
			// The larger of the sum and the floor (the median of every
			// estimate, the newcomer's included).
			wantClock(t, "value", c.value(t0, 0), tc.wantValueAt0)
		})
	}

	t.Run("a known peer is not a newcomer", func(t *testing.T) {
		c := newRunClock(0)
		c.observe(t0, 0, []clockObservation{ob("a", 100, 0, noEst, t0)})
		c.observe(at(1), 0, []clockObservation{
			ob("a", 5000, 0, noEst, at(1)), ob("b", 0, 0, 10, at(1)), ob("c", 0, 0, 10, at(1))})
		wantClock(t, "peerSamples(a)", c.peerSamples("a"), 5000)
		if n := c.clampedTotal(); n != 0 {
			t.Fatalf("clampedTotal = %d, want 0", n)
		}
	})
}

func TestRunClockFloor(t *testing.T) {
	// A late joiner (own 0) hears three peers with few samples of their
	// own, 100/s each, and estimates of about 1e6.
	three := func(e1, e2, e3 float64) []clockObservation {
		return []clockObservation{ob("a", 10, 100, e1, t0), ob("b", 10, 100, e2, t0), ob("c", 10, 100, e3, t0)}
	}
	for _, tc := range []struct {
		name    string
		ownRate float64
		own     float64
		obs     []clockObservation
		now     time.Time
		want    float64
	}{
		{"late joiner", 0, 0, three(1e6, 1e6, 1e6), t0, 1e6},
		{"before floorAt", 0, 0, three(1e6, 1e6, 1e6), at(-1), 1e6},
		// Extrapolated at the swarm's rate, 300/s.
		{"+1s", 0, 0, three(1e6, 1e6, 1e6), at(1), 1e6 + 300},
		{"+0.5s", 0, 0, three(1e6, 1e6, 1e6), at(0.5), 1e6 + 150},
		{"at horizon", 0, 0, three(1e6, 1e6, 1e6), t0.Add(clockHorizon), 1e6 + 600},
		{"past horizon", 0, 0, three(1e6, 1e6, 1e6), at(60), 1e6 + 600},
		// Our own rate is part of the swarm's: 350/s.
		{"own rate", 50, 0, three(1e6, 1e6, 1e6), at(1), 1e6 + 350},
		// The median, not the mean nor the maximum.
		{"median of three", 0, 0, three(1e6, 2e6, 9e6), t0, 2e6},
		{"median unordered", 0, 0, three(9e6, 1e6, 2e6), t0, 2e6},
		{"lower middle of two", 0, 0, []clockObservation{
			ob("a", 10, 0, 1e6, t0), ob("b", 10, 0, 2e6, t0)}, t0, 1e6},
		{"one estimate", 0, 0, []clockObservation{ob("a", 10, 0, 1e6, t0)}, t0, 1e6},
		// An estimate from an observation without a valid count still
		// counts toward the floor.
		{"estimate without samples", 0, 0, []clockObservation{
			ob("a", math.NaN(), 0, 1e6, t0), ob("b", -1, 0, 1e6, t0)}, t0, 1e6},
		// The sum wins when it is higher.
		{"sum above floor", 0, 5e6, three(1e6, 1e6, 1e6), t0, 5e6 + 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(0)
			c.observe(t0, tc.ownRate, tc.obs)
			wantClock(t, "value", c.value(tc.now, tc.own), tc.want)
		})
	}

	t.Run("no estimates keep the floor", func(t *testing.T) {
		c := newRunClock(0)
		c.observe(t0, 0, []clockObservation{ob("a", 10, 0, 1e6, t0), ob("b", 10, 0, 1e6, t0)})
		c.observe(at(1), 0, []clockObservation{ob("a", 20, 0, noEst, at(1))})
		if c.floor != 1e6 || !c.floorAt.Equal(t0) {
			t.Fatalf("floor = %v at %v, want 1e6 at %v", c.floor, c.floorAt, t0)
		}
		wantClock(t, "value", c.value(at(1), 0), 1e6)
	})
}

func TestRunClockHostileMinority(t *testing.T) {
	// Four honest peers (1000 samples, 10/s, estimates about 5000) and one
	// announcing an absurd count, rate and estimate; our own rate 10, own
	// count 1000.
	honest := []clockObservation{
		ob("h1", 1000, 10, 4000, t0), ob("h2", 1000, 10, 5000, t0),
		ob("h3", 1000, 10, 5000, t0), ob("h4", 1000, 10, 6000, t0),
	}
	for _, tc := range []struct {
		name          string
		hostile       clockObservation
		wantHostile   float64 // its count on file
		wantClamped   int64
		wantFloorRate float64
		wantAt1s      float64
		wantAt10s     float64
	}{
		// Rates {10 own, 10 x4, 1e9 capped}: lower middle 10, limit 100/s.
		// Estimates {4000, 5000, 5000, 6000, 1e15}: median 5000. Its count
		// as a newcomer is clamped to the median of the others, 5000, and
		// its rate to 100: the floor's rate is 10 + 4*10 + 100.
		{"huge count, rate, estimate", ob("x", 1e15, 1e12, 1e15, t0), 5000, 1, 150,
			1000 + 4*(1000+10) + 5000 + 100, 1000 + 4*(1000+20) + 5000 + 200},
		// Here the sums (5140 at +1s, 5280 at +10s) are below the floor.
		{"small count, huge rate and estimate", ob("x", 0, 1e12, 1e15, t0), 0, 0, 150,
			5000 + 150, 5000 + 2*150},
		{"+Inf rate ignored", ob("x", 0, math.Inf(1), 1e15, t0), 0, 0, 50,
			5000 + 50, 5000 + 2*50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(0)
			c.observe(t0, 10, append(append([]clockObservation{}, honest...), tc.hostile))
			if c.floor != 5000 {
				t.Fatalf("floor = %v, want 5000 (the honest median)", c.floor)
			}
			wantClock(t, "floorRate", c.floorRate, tc.wantFloorRate)
			wantClock(t, "peerSamples(hostile)", c.peerSamples("x"), tc.wantHostile)
			if n := c.clampedTotal(); n != tc.wantClamped {
				t.Fatalf("clampedTotal = %d, want %d", n, tc.wantClamped)
			}
			wantClock(t, "value at +1s", c.value(at(1), 1000), tc.wantAt1s)
			wantClock(t, "value at +10s", c.value(at(10), 1000), tc.wantAt10s)
			if v := c.value(at(3600), 1000); v > 1e5 {
				t.Fatalf("value an hour later = %v, the hostile peer moved it", v)
			}
		})
	}

	t.Run("keeps announcing", func(t *testing.T) {
		c := newRunClock(0)
		for i := 0; i < 10; i++ {
			now := at(float64(i))
			obs := []clockObservation{
				ob("h1", 1000+10*float64(i), 10, 5000, now), ob("h2", 1000+10*float64(i), 10, 5000, now),
				ob("h3", 1000+10*float64(i), 10, 5000, now), ob("h4", 1000+10*float64(i), 10, 5000, now),
				ob("x", 1e15, 1e12, 1e15, now),
			}
			c.observe(now, 10, obs)
		}
		if c.floor != 5000 {
			t.Fatalf("floor = %v, want 5000", c.floor)
		}
		// x: clamped to 5000 first, then by at most 100*(1+2) a second.
		wantClock(t, "peerSamples(x)", c.peerSamples("x"), 5000+9*300)
		if n := c.clampedTotal(); n != 10 {
			t.Fatalf("clampedTotal = %d, want 10", n)
		}
	})
}

func TestRunClockRateCap(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate float64
		want float64 // the rate used to extrapolate
	}{
		{"far above", 1e12, clockMaxRate},
		{"just above", clockMaxRate * 2, clockMaxRate},
		{"at the cap", clockMaxRate, clockMaxRate},
		{"below", 5e8, 5e8},
		{"max float", math.MaxFloat64, clockMaxRate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A lone peer: the median rate is its own (capped), the limit
			// 10 times that, so only clockMaxRate caps it.
			c := newRunClock(0)
			c.observe(t0, 0, []clockObservation{ob("a", 100, tc.rate, noEst, t0)})
			wantClock(t, "value at +1s", c.value(at(1), 0), 100+tc.want)
			wantClock(t, "value at +1h", c.value(at(3600), 0), 100+tc.want*clockHorizon.Seconds())
		})
		t.Run(tc.name+" floor", func(t *testing.T) {
			c := newRunClock(0)
			c.observe(t0, 0, []clockObservation{ob("a", 0, tc.rate, 0, t0)})
			wantClock(t, "floorRate", c.floorRate, tc.want)
		})
	}
}

func TestRunClockInvalidInputs(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	// Peer b (50 samples, no rate, no estimate) is heard with a in every
	// case: a's bad fields must not spoil it. Values at +1s, own 0.
	for _, tc := range []struct {
		name      string
		a         clockObservation
		wantA     float64 // a's count on file
		want      float64
		wantFloor bool // an estimate was taken
	}{
		{"NaN samples", ob("a", nan, 10, noEst, t0), 0, 50, false},
		{"negative samples", ob("a", -5, 10, noEst, t0), 0, 50, false},
		{"+Inf samples", ob("a", inf, 10, noEst, t0), 0, 50, false},
		{"-Inf samples", ob("a", -inf, 10, noEst, t0), 0, 50, false},
		{"NaN rate", ob("a", 100, nan, noEst, t0), 100, 150, false},
		{"negative rate", ob("a", 100, -10, noEst, t0), 100, 150, false},
		{"+Inf rate", ob("a", 100, inf, noEst, t0), 100, 150, false},
		{"-Inf rate", ob("a", 100, -inf, noEst, t0), 100, 150, false},
		{"NaN estimate", ob("a", 100, 0, nan, t0), 100, 150, false},
		{"negative estimate", ob("a", 100, 0, -1e6, t0), 100, 150, false},
		{"+Inf estimate", ob("a", 100, 0, inf, t0), 100, 150, false},
		{"-Inf estimate", ob("a", 100, 0, -inf, t0), 100, 150, false},
		{"all NaN", ob("a", nan, nan, nan, t0), 0, 50, false},
		{"all +Inf", ob("a", inf, inf, inf, t0), 0, 50, false},
		{"valid estimate, bad samples", ob("a", nan, nan, 1e4, t0), 0, 1e4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRunClock(0)
			c.observe(t0, 0, []clockObservation{tc.a, ob("b", 50, 0, noEst, t0)})
			wantClock(t, "peerSamples(a)", c.peerSamples("a"), tc.wantA)
			wantClock(t, "peerSamples(b)", c.peerSamples("b"), 50)
			if got := !c.floorAt.IsZero(); got != tc.wantFloor {
				t.Fatalf("floor set = %v, want %v (floor %v)", got, tc.wantFloor, c.floor)
			}
			wantClock(t, "value at +1s", c.value(at(1), 0), tc.want)
			wantClock(t, "value at +1h", c.value(at(3600), 0), tc.want)
		})
	}

	t.Run("bad announcement of a known peer", func(t *testing.T) {
		c := newRunClock(0)
		c.observe(t0, 0, []clockObservation{ob("a", 100, 0, noEst, t0)})
		for i, o := range []clockObservation{
			ob("a", nan, nan, nan, at(1)), ob("a", inf, inf, inf, at(2)), ob("a", -1, -1, -1, at(3)),
		} {
			c.observe(o.Seen, 0, []clockObservation{o})
			wantClock(t, fmt.Sprintf("value after bad announcement #%d", i), c.value(o.Seen, 0), 100)
		}
	})

	t.Run("bad estimates among good ones", func(t *testing.T) {
		c := newRunClock(0)
		c.observe(t0, 0, []clockObservation{
			ob("a", 0, 0, nan, t0), ob("b", 0, 0, inf, t0), ob("c", 0, 0, 1000, t0), ob("d", 0, 0, -1, t0)})
		wantClock(t, "value", c.value(t0, 0), 1000)
	})
}

func TestRunClockFullTable(t *testing.T) {
	id := func(i int) peer.ID { return peer.ID(fmt.Sprintf("p%d", i)) }
	// fill fills a table with clockMaxPeers peers, peer i (i+1 samples)
	// seen at t0 + i ms, one announcement at a time.
	fill := func() (*runClock, float64) {
		c := newRunClock(0)
		var sum float64
		for i := 0; i < clockMaxPeers; i++ {
			seen := t0.Add(time.Duration(i) * time.Millisecond)
			c.observe(seen, 0, []clockObservation{ob(id(i), float64(i+1), 0, noEst, seen)})
			sum += float64(i + 1)
		}
		if n := len(c.peers); n != clockMaxPeers {
			t.Fatalf("table holds %d peers, want %d", n, clockMaxPeers)
		}
		return c, sum
	}
	later := at(3600)

	t.Run("a full table counts no newcomer", func(t *testing.T) {
		c, sum := fill()
		c.observe(later, 0, []clockObservation{ob("new", 1000, 0, noEst, later)})
		if n := len(c.peers); n != clockMaxPeers {
			t.Fatalf("table holds %d peers, want %d", n, clockMaxPeers)
		}
		if _, ok := c.peers["new"]; ok {
			t.Fatal("a newcomer entered a full table")
		}
		wantClock(t, "value", c.value(later, 0), sum)
		// Nobody was pushed out, so a known peer's next count is added once.
		c.observe(later.Add(time.Second), 0, []clockObservation{ob(id(0), 11, 0, noEst, later.Add(time.Second))})
		wantClock(t, "value after p0 grows by 10", c.value(later.Add(time.Second), 0), sum+10)
	})

	t.Run("a known peer evicts nobody", func(t *testing.T) {
		c, sum := fill()
		last := id(clockMaxPeers - 1)
		c.observe(later, 0, []clockObservation{ob(last, float64(clockMaxPeers)+10, 0, noEst, later)})
		if n := len(c.peers); n != clockMaxPeers {
			t.Fatalf("table holds %d peers, want %d", n, clockMaxPeers)
		}
		wantClock(t, "value", c.value(later, 0), sum+10)
	})

	t.Run("a rejected announcement evicts nobody", func(t *testing.T) {
		c, sum := fill()
		c.observe(later, 0, []clockObservation{ob("bad", math.NaN(), 0, noEst, later)})
		if _, ok := c.peers[id(0)]; !ok {
			t.Fatalf("%s was evicted by an invalid announcement", id(0))
		}
		wantClock(t, "value", c.value(later, 0), sum)
	})
}

func TestRunClockConcurrent(t *testing.T) {
	// One writer feeds growing counts, readers check the value never falls
	// (run with -race).
	c := newRunClock(0)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i <= 200; i++ {
			now := at(float64(i))
			c.observe(now, 10, []clockObservation{
				ob("a", 10*float64(i), 10, 20*float64(i), now), ob("b", 10*float64(i), 10, 20*float64(i), now)})
		}
	}()
	errs := make(chan error, 4)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev := 0.0
			for i := 0; i <= 200; i++ {
				v := c.value(at(float64(i)), float64(i))
				if v < prev || math.IsNaN(v) {
					errs <- fmt.Errorf("value fell from %v to %v", prev, v)
					return
				}
				prev = v
				_ = c.clampedTotal()
				_ = c.peerSamples("a")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// After the writer is done: a and b at 2000 each, own 200; no reader
	// saw more (the floor is at most 20*198 + 30*2 = 4020).
	wantClock(t, "final value", c.value(at(200), 200), 2000+2000+200)
}

// TestRunClockBadOwnRate: a NaN or infinite rate of our own (which the
// trainer never reports, but a future trainer might) leaves the clock
// finite.
func TestRunClockBadOwnRate(t *testing.T) {
	for _, r := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -5} {
		c := newRunClock(0)
		c.observe(t0, r, []clockObservation{ob("a", 100, 10, 100, t0)})
		for _, dt := range []float64{0, 1, 10} {
			if v := c.value(at(dt), 0); math.IsNaN(v) || math.IsInf(v, 0) || v < 100 {
				t.Errorf("own rate %v: value %v at +%vs, want finite >= 100", r, v, dt)
			}
		}
	}
}

// The watcher feeds the run clock every clockFastEvery before training
// starts and in its first clockFastFor, while the peers' first
// announcements since they began to train arrive, and every clockEvery
// after.
func TestClockFeedIsFastOnlyAtTheStart(t *testing.T) {
	n := &Node{}
	now := time.Unix(1_000_000, 0)
	if got := n.clockFeedEvery(now); got != clockFastEvery {
		t.Errorf("before training starts: every %v, want %v", got, clockFastEvery)
	}
	for _, tc := range []struct {
		since time.Duration
		want  time.Duration
	}{{0, clockFastEvery}, {clockFastFor - time.Millisecond, clockFastEvery}, {clockFastFor, clockEvery}, {time.Hour, clockEvery}} {
		start := now.Add(-tc.since)
		n.trainStart.Store(&start)
		if got := n.clockFeedEvery(now); got != tc.want {
			t.Errorf("%v into training: every %v, want %v", tc.since, got, tc.want)
		}
	}
	if clockFastEvery >= clockEvery {
		t.Errorf("the fast feed (%v) is not faster than the usual (%v)", clockFastEvery, clockEvery)
	}
}
