package reputation

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// pace returns a random gap between two verdicts: often none (a burst),
// otherwise log-uniform from a millisecond to ten hours.
func pace(r *rand.Rand) time.Duration {
	if r.IntN(3) == 0 {
		return 0
	}
	return time.Duration(math.Exp(r.Float64()*math.Log(3.6e7))) * time.Millisecond
}

// windowed emits verdicts such that every 10 consecutive ones hold at least
// 5 Accepted and at most 1 Rejected, the rest Clipped or Timeout: the
// stream the package documentation proves safe.
type windowed struct {
	r    *rand.Rand
	last []Verdict
}

func (w *windowed) next() Verdict {
	v := []Verdict{Accepted, Clipped, Timeout, Timeout, Rejected}[w.r.IntN(5)]
	nonAccepted, rejected := 0, 0
	for _, u := range w.last {
		if u != Accepted {
			nonAccepted++
		}
		if u == Rejected {
			rejected++
		}
	}
	if v != Accepted && nonAccepted >= 5 || v == Rejected && rejected >= 1 {
		v = Accepted
	}
	w.last = append(w.last, v)
	if len(w.last) > 9 {
		w.last = w.last[1:]
	}
	return v
}

// TestHonestWindowed: such a peer's score never falls below -3.5 at any
// pace, so it is never even ignored.
func TestHonestWindowed(t *testing.T) {
	for seed := range 40 {
		r := rand.New(rand.NewPCG(uint64(seed), 1))
		w := &windowed{r: r}
		b := newBook(t, nil)
		now, lowest := t0, 0.0
		for i := range 10000 {
			if seed > 0 { // seed 0 runs back to back
				now = now.Add(pace(r))
			}
			v := w.next()
			if s := b.Record("h", v, now); s != OK {
				t.Fatalf("seed %d verdict %d (%v): state %v, score %v", seed, i, v, s, b.Score("h", now))
			}
			lowest = min(lowest, b.Score("h", now))
		}
		if lowest < -3.5-1e-9 {
			t.Errorf("seed %d: score reached %v, below the -3.5 bound", seed, lowest)
		}
	}
}

// TestHonestWorstOrder runs the windowed stream with its bad verdicts
// bunched together, back to back: the bound is reached, not crossed.
func TestHonestWorstOrder(t *testing.T) {
	pattern := []Verdict{Rejected, Timeout, Timeout, Timeout, Timeout, Accepted, Accepted, Accepted, Accepted, Accepted}
	b := newBook(t, nil)
	lowest := 0.0
	for i := range 10000 {
		if s := b.Record("h", pattern[i%len(pattern)], t0); s != OK {
			t.Fatalf("verdict %d: %v", i, s)
		}
		lowest = min(lowest, b.Score("h", t0))
	}
	if lowest != -3.5 {
		t.Errorf("lowest score %v, want -3.5", lowest)
	}
}

// TestHonestRandom: verdicts drawn independently, Accepted at a rate of at
// least 50%, Rejected at most 10%, the rest Clipped or Timeout, at any
// pace: never banned over 10,000 verdicts.
func TestHonestRandom(t *testing.T) {
	for seed := range 60 {
		r := rand.New(rand.NewPCG(uint64(seed), 2))
		pA, pR := 0.5, 0.1 // the worst rates for the first seeds
		if seed >= 20 {
			pA, pR = 0.5+0.5*r.Float64(), 0.1*r.Float64()
		}
		pClipped := r.Float64() * (1 - pA - pR) // of the rest, the remainder times out
		if seed < 20 {
			pClipped = 0
		}
		b := newBook(t, nil)
		now := t0
		for i := range 10000 {
			if seed%4 != 0 { // a quarter of the streams run back to back
				now = now.Add(pace(r))
			}
			x, v := r.Float64(), Timeout
			switch {
			case x < pA:
				v = Accepted
			case x < pA+pR:
				v = Rejected
			case x < pA+pR+pClipped:
				v = Clipped
			}
			if s := b.Record("h", v, now); s == Banned {
				t.Fatalf("seed %d (accepted %.2f, rejected %.2f): banned at verdict %d", seed, pA, pR, i)
			}
		}
	}
}

// TestAttacker: a peer whose every model is an outlier or non-finite is
// banned within the counts the package documentation states.
func TestAttacker(t *testing.T) {
	for seed := range 50 {
		r := rand.New(rand.NewPCG(uint64(seed), 3))
		for _, clean := range []bool{false, true} {
			b := newBook(t, nil)
			limit := 9
			if clean {
				record(b, "x", Accepted, 100, t0)
				limit = 13
			}
			n := 0
			for n = 1; n <= limit; n++ {
				v := Outlier
				if r.IntN(4) == 0 {
					v = NonFinite
				}
				if b.Record("x", v, t0) == Banned {
					break
				}
			}
			if n > limit {
				t.Errorf("seed %d clean=%v: not banned after %d", seed, clean, limit)
			}
		}
	}
	// Paced: one outlier every 25s is banned after 11.
	b := newBook(t, nil)
	n := 0
	for now := t0; b.State("x", now) != Banned && n < 100; now = now.Add(25 * time.Second) {
		b.Record("x", Outlier, now)
		n++
	}
	if n != 11 {
		t.Errorf("an outlier every 25s: banned after %d, want 11", n)
	}
}
