package merge

import (
	"math"
	"slices"
	"time"
)

// peerSpread decides which remote models are outliers by comparing a
// model's distance from ours with the latest distances of the other peers'
// models: one vote per peer, so a peer that sends many models (a flooder)
// weighs no more than one that sends few, and a model is an outlier only
// when it is many times farther than what the other peers send now.
//
// Comparing with recent accepted merges instead (the clipping radius's
// window) locks a node out when every honest distance grows at once: in a
// learning-rate warmup the first merges are of near-identical models, the
// distances then grow more than the outlier factor within a second, every
// merge is refused, the window never moves again, and the node bans its
// honest peers one by one.
//
// The caller passes the time; it is not safe for concurrent use.
type peerSpread struct {
	latest map[string]spreadEntry
}

type spreadEntry struct {
	d  float64
	at time.Time
}

const (
	// spreadTTL: a peer's distance counts this long after it was seen.
	spreadTTL = 30 * time.Second
	// spreadMinPeers: other peers needed for the comparison; with fewer
	// there is no majority to compare with, and no model is an outlier.
	spreadMinPeers = 2
	// spreadMaxPeers bounds the table (stale entries are dropped first).
	spreadMaxPeers = 4096
)

// outlier reports whether a model from p at distance d is more than scale
// times the median latest distance of the other peers, then records d as
// p's latest. A distance that is not a finite number >= 0 is an outlier.
func (s *peerSpread) outlier(p string, d, scale float64, now time.Time) bool {
	out, _ := s.compare(p, d, scale, now)
	return out
}

// compare is outlier that also tells whether enough other peers were on
// file to compare with (a value that is not a finite number >= 0 is an
// outlier either way).
func (s *peerSpread) compare(p string, d, scale float64, now time.Time) (out, enough bool) {
	med, enough := s.observe(p, d, now)
	if !(d >= 0) || math.IsInf(d, 1) {
		return true, enough
	}
	return enough && d > scale*med, enough
}

// observe returns the median of the other peers' latest values (enough:
// at least spreadMinPeers of them), then records d as p's latest if it is
// a finite number >= 0.
func (s *peerSpread) observe(p string, d float64, now time.Time) (median float64, enough bool) {
	median, enough = s.median(p, now)
	s.record(p, d, now)
	return median, enough
}

// median returns the median of the latest values of the peers other than
// p (enough: at least spreadMinPeers of them), dropping expired ones.
func (s *peerSpread) median(p string, now time.Time) (median float64, enough bool) {
	others := make([]float64, 0, len(s.latest))
	for q, e := range s.latest {
		switch {
		case now.Sub(e.at) > spreadTTL:
			delete(s.latest, q)
		case q != p:
			others = append(others, e.d)
		}
	}
	return Median(others), len(others) >= spreadMinPeers
}

// record sets p's latest value to d if d is a finite number >= 0 (and the
// table has room or already holds p).
func (s *peerSpread) record(p string, d float64, now time.Time) {
	if !(d >= 0) || math.IsInf(d, 1) {
		return
	}
	if s.latest == nil {
		s.latest = map[string]spreadEntry{}
	}
	if _, ok := s.latest[p]; ok || len(s.latest) < spreadMaxPeers {
		s.latest[p] = spreadEntry{d: d, at: now}
	}
}

// Median of xs (the lower middle for an even count); 0 for none. xs is
// not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
