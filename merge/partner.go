package merge

import (
	"iter"
	"math"
	"slices"
)

// Candidate is a fresh peer in good standing that trains our model in our
// mode, as its latest announcement describes it.
type Candidate struct {
	Peer     string
	Progress float64
}

// Choice is what the averager does in one round.
type Choice struct {
	// Peer is the partner ("" when there is none: skip the round).
	Peer string
	// CatchUp: pull Peer's model whole instead of exchanging.
	CatchUp bool
}

// ChoosePartner picks the round's partner among cands (the peers we can
// exchange with now, ordered by peer as the announce table returns them),
// given every peer we have heard of (heard: the catch-up source is chosen
// among them, and pulled only if it is among cands; nil: cands), our
// progress, the previous
// partner, the catch-up threshold (0: never), whether we are starting
// (have judged no pulled model since our process started: neither taken
// nor refused one) and a source of random
// indices (intn(k) in [0,k)):
//
//   - the catch-up source (CatchUpSource: the second most advanced peer),
//     to pull its model, when it is more than the catch-up threshold ahead
//     of us, or, while we are starting, when it
//     has more than twice our progress: a node that joins late or restarts
//     far behind starts from the swarm's model instead of dragging
//     everyone back with its own. The threshold is a gap in samples, which
//     a large swarm's models take long to open (each model's progress
//     grows by the swarm's samples over its size), so a newcomer to 100
//     nodes would otherwise merge its untrained model in at the base
//     weight, halving the distance to the swarm's model per merge;
//   - otherwise a uniformly random peer, not the previous one when there is
//     a choice, so models mix across the whole swarm instead of ping-ponging
//     in pairs. A peer far behind stays a candidate: the progress we know
//     of it may be stale, and a peer we stop choosing is one we stop
//     judging (a node that is starting over is spared outlier verdicts by
//     the core instead; see startingOver).
func ChoosePartner(cands, heard []Candidate, own float64, last string, catchUp float64, starting bool, intn func(int) int) Choice {
	if len(cands) == 0 {
		return Choice{}
	}
	if len(heard) == 0 {
		heard = cands
	}
	// The source among every peer heard of: among the reachable ones
	// alone, one peer we reach (a liar that dialled us) would be the
	// second most advanced of none. If we cannot reach it, the most
	// advanced peer we reach whose claim is no higher: two others claim
	// at least as much.
	if src := CatchUpSource(heard); CatchUpDue(src.Progress, own, catchUp, starting) {
		var pull Candidate
		for _, c := range cands {
			if c.Peer == src.Peer {
				pull = c
				break
			}
			if c.Progress <= src.Progress && (pull.Peer == "" || c.Progress > pull.Progress) {
				pull = c
			}
		}
		if pull.Peer != "" && CatchUpDue(pull.Progress, own, catchUp, starting) {
			return Choice{Peer: pull.Peer, CatchUp: true}
		}
	}
	pool := slices.Clone(cands)
	if len(pool) > 1 {
		for i, c := range pool {
			if c.Peer == last {
				pool = append(pool[:i], pool[i+1:]...)
				break
			}
		}
	}
	return Choice{Peer: pool[intn(len(pool))].Peer}
}

// CatchUpSource is the peer a catch-up pulls among cands (not empty): the
// second most advanced, or the only one. A claim of progress is a peer's
// word, and the most advanced claim may be a lie (a peer claiming ever
// more would otherwise be pulled whole, round after round, by every
// node); the second most advanced is a claim that another peer matches or
// beats, so one liar among the peers cannot make a node pull at all. Two
// that collude can. The honest swarm loses little: its models stay within
// a few percent of each other's progress, so the second most advanced is
// close behind the first.
func CatchUpSource(cands []Candidate) Candidate {
	first, second, two := cands[0], Candidate{}, false
	for _, c := range cands[1:] {
		switch {
		case c.Progress > first.Progress:
			first, second = c, first
		case !two || c.Progress > second.Progress:
			second = c
		}
		two = true
	}
	if !two {
		return first
	}
	return second
}

// Credit is the progress a node at own credits a model it takes whole
// (a catch-up) that claims p: p, up to the highest claim of the other
// peers it has heard of (others: their progress, the model's sender not
// among them) or the catch-up threshold above own (the bound of a merge),
// whichever is higher. A claim no other peer corroborates buys what a
// merge would; so a liar's claim cannot travel through a node that took
// its model and then announces it, making two claims that agree.
func Credit(p, own, catchUp float64, others iter.Seq[float64]) float64 {
	bound := own + catchUp
	for q := range others {
		if !math.IsNaN(q) {
			bound = max(bound, q)
		}
	}
	return min(p, bound)
}

// ClaimCut reports whether a credit (Credit) cut a claim by more than the
// catch-up threshold: more than a merge would. A peer's model has trained
// on, and merged, since the claims it is credited against were announced,
// so honest models are often cut by some; not by that much.
func ClaimCut(claim, credited, catchUp float64) bool {
	return claim-credited > catchUp
}

// CatchUpDue reports whether a node at progress own pulls a model at
// progress best whole rather than merge it (ChoosePartner's rule): best is
// more than catchUp ahead, or, while the node is starting, more than twice
// own. Never with a catch-up threshold of 0.
func CatchUpDue(best, own, catchUp float64, starting bool) bool {
	return catchUp > 0 && (best-own > catchUp || starting && best > startingFactor*own)
}

// TakeWhole reports whether a starting node at progress own takes whole a
// model at progress p that an exchange brought it (sent to it, or the
// answer to its own), rather than merge it: its next round would pull a
// model that far ahead (CatchUpDue while starting), and the peer its next
// round would pull instead (the catch-up source among the peers it knows
// of, their progress: known, the sender's included) is not that far ahead
// of the model too, for then that peer's is the model to pull. A merge of
// p cannot then lift the node past the rule that peer still meets. Nor is
// a model taken whole whose claim is ahead of the source's (aheadOf)
// when the node knows of two peers or more: no other peer corroborates
// it, and a merge clamps it.
func TakeWhole(p, own, catchUp float64, known iter.Seq[float64]) bool {
	if !CatchUpDue(p, own, catchUp, true) {
		return false
	}
	var cands []Candidate
	for q := range known {
		cands = append(cands, Candidate{Progress: q})
	}
	if len(cands) == 0 {
		return true
	}
	src := CatchUpSource(cands).Progress
	return !CatchUpDue(src, p, catchUp, true) && (len(cands) < 2 || !aheadOf(p, src, catchUp))
}

// startingFactor: a starting node catches up with a peer that has more
// than this many times its progress.
const startingFactor = 2

// startingOver reports whether a peer at progress p is starting over
// compared with our progress own (it just joined or restarted, and will
// pull a model): more than catchUp behind and under half of own.
func startingOver(p, own, catchUp float64) bool {
	return catchUp > 0 && own-p > catchUp && p < own/2
}

// aheadMargin: a peer is ahead of us when its progress exceeds ours by more
// than this fraction (or by more than half the catch-up threshold, whichever
// is less: a claim is clamped to that threshold above ours). Merges mix
// progress as they mix models, so peers of equal speed stay within a few
// percent of each other; a faster one leads by more.
const aheadMargin = 0.1

// aheadOf reports whether progress p is ahead of ours (own), with the
// catch-up threshold catchUp (0: none).
func aheadOf(p, own, catchUp float64) bool {
	lead := aheadMargin * own
	if catchUp > 0 {
		lead = math.Min(lead, catchUp/2)
	}
	return p-own > lead
}
