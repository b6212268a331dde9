package node

import (
	"math"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/merge"
)

// The run clock: how far the swarm's run has got, in training samples
// processed by every node of the swarm, ours included. A run's length and
// its learning-rate schedule are counted on it, so a swarm of N nodes
// finishes a run N times sooner than one node would, every node stands at
// the same point of the schedule at the same moment, and a node that joins
// late or restarts takes up the schedule where the swarm is.
//
// A model's progress counter cannot serve: merges mix it to about one
// node's share. Instead every node announces the samples it has processed
// itself (a count only it increases) and its estimate of the clock; each
// node adds up the counts it has heard, ours included, and takes the
// median of the estimates it hears as a floor (that floor carries the
// counts of nodes that left before we arrived).
//
// runClock is pure: the caller passes the time and the announcements. It
// is safe for concurrent use (the trainer loop reads it every step, the
// node's clock loop feeds it).

// Limits of what a peer's announcements may move the clock by.
const (
	// clockRateCap: a peer's count may grow at most this many times the
	// fastest of our own rate and the median rate announced, per second
	// since its previous announcement (plus clockSlack). Honest hardware
	// within a swarm differs by less; a peer claiming more is clamped.
	clockRateCap = 10.0
	// clockSlack is added to the time between two announcements a count
	// may grow over (delivery jitter).
	clockSlack = 2 * time.Second
	// clockHorizon bounds the extrapolation of a peer's count from its
	// announced rate after its latest announcement: a peer that stops
	// announcing stops adding. A peer that announces less often than every
	// clockHorizon/2 (a large swarm stretches the interval) is extrapolated
	// for two of its intervals instead.
	clockHorizon = 2 * time.Second
	// clockMaxHorizon bounds the extrapolation whatever interval a peer
	// announces.
	clockMaxHorizon = 10 * time.Minute
	// clockMaxRate bounds any rate read from an announcement, samples/s.
	clockMaxRate = 1e9
	// clockMaxPeers bounds the table. Peers beyond it are not counted one
	// by one (evicting one to make room would count it twice when it came
	// back); the median floor of the estimates still carries them.
	clockMaxPeers = 4096
)

// clockObservation is one peer's latest announcement, as the clock needs it.
type clockObservation struct {
	Peer peer.ID
	// Samples the peer has processed in this run; Rate its samples/s;
	// Estimate its own estimate of the run clock.
	Samples, Rate, Estimate float64
	// Seen is when we received it (our clock).
	Seen time.Time
	// Interval is the peer's announced wait until its next announcement
	// (0 if it did not say).
	Interval time.Duration
}

type clockPeer struct {
	samples float64
	rate    float64
	seen    time.Time
	horizon time.Duration // how long after seen to extrapolate
}

// horizonOf is how long after an observation its peer's count is
// extrapolated: clockHorizon, or two of the peer's announce intervals.
func horizonOf(o clockObservation) time.Duration {
	return min(max(clockHorizon, 2*o.Interval), clockMaxHorizon)
}

type runClock struct {
	mu    sync.Mutex
	peers map[peer.ID]clockPeer
	// floor is the median of the fresh estimates heard at floorAt, and
	// floorRate the swarm's rate then (to extrapolate it); base a lower
	// bound carried over from a checkpoint.
	floor     float64
	floorAt   time.Time
	floorRate float64
	base      float64
	last      float64 // value never falls
	clamped   int64   // announcements whose count was clamped
}

// newRunClock starts a clock at base (the value saved in a checkpoint, 0
// for a new run).
func newRunClock(base float64) *runClock {
	if !(base >= 0) || math.IsInf(base, 0) {
		base = 0
	}
	return &runClock{peers: map[peer.ID]clockPeer{}, base: base, last: base}
}

// observe takes the fresh announcements heard (one per peer, ours
// excluded) and our own rate, at now.
func (c *runClock) observe(now time.Time, ownRate float64, obs []clockObservation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !valid(ownRate) {
		ownRate = 0
	}
	ownRate = min(ownRate, clockMaxRate)
	var rates, estimates []float64
	if ownRate > 0 {
		rates = append(rates, ownRate)
	}
	for _, o := range obs {
		if valid(o.Rate) {
			rates = append(rates, min(o.Rate, clockMaxRate))
		}
		if valid(o.Estimate) {
			estimates = append(estimates, o.Estimate)
		}
	}
	maxRate := clockRateCap * max(ownRate, merge.Median(rates))
	if maxRate == 0 {
		maxRate = math.Inf(1) // no rate to compare with yet
	}
	var swarmRate float64 = max(ownRate, 0)
	for _, o := range obs {
		if !valid(o.Samples) {
			continue
		}
		rate := 0.0
		if valid(o.Rate) {
			rate = min(o.Rate, clockMaxRate, maxRate)
		}
		swarmRate += rate
		old, known := c.peers[o.Peer]
		switch {
		case known && !o.Seen.After(old.seen):
			continue // nothing new
		case known && o.Samples <= old.samples:
			old.seen, old.rate, old.horizon = o.Seen, rate, horizonOf(o)
			c.peers[o.Peer] = old
			continue
		}
		samples := o.Samples
		if known {
			limit := old.samples + maxRate*(o.Seen.Sub(old.seen)+clockSlack).Seconds()
			if samples > limit {
				samples = limit
				c.clamped++
			}
		} else if others := othersEstimates(obs, o.Peer); len(others) >= 2 {
			// A newcomer to our table cannot have processed more than the
			// swarm as the others see it.
			if m := merge.Median(others); samples > m {
				samples = m
				c.clamped++
			}
		}
		if !known && len(c.peers) >= clockMaxPeers {
			continue
		}
		c.peers[o.Peer] = clockPeer{samples: samples, rate: rate, seen: o.Seen, horizon: horizonOf(o)}
	}
	if len(estimates) > 0 {
		c.floor, c.floorAt, c.floorRate = merge.Median(estimates), now, swarmRate
	}
}

// othersEstimates are the valid estimates of every observation but p's.
func othersEstimates(obs []clockObservation, p peer.ID) []float64 {
	var out []float64
	for _, o := range obs {
		if o.Peer != p && valid(o.Estimate) {
			out = append(out, o.Estimate)
		}
	}
	return out
}

// value is the run clock at now, given the samples we have processed in
// this run (own). It never falls.
func (c *runClock) value(now time.Time, own float64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := max(own, 0)
	for _, p := range c.peers {
		sum += p.samples + p.rate*extrapolation(now.Sub(p.seen), p.horizon)
	}
	v := max(sum, c.base, c.last)
	if !c.floorAt.IsZero() {
		v = max(v, c.floor+c.floorRate*extrapolation(now.Sub(c.floorAt), clockHorizon))
	}
	c.last = v
	return v
}

// peerSamples is the count on file for p (0 if none), for tests and the
// peers view.
func (c *runClock) peerSamples(p peer.ID) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peers[p].samples
}

// clampedTotal counts announcements whose sample count was clamped.
func (c *runClock) clampedTotal() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clamped
}

func extrapolation(d, horizon time.Duration) float64 {
	return min(max(d, 0), horizon).Seconds()
}

func valid(x float64) bool { return x >= 0 && !math.IsInf(x, 0) }
