// Package merge owns the merge decision of a gossip node: what to do with a
// remote model (merge it with weight a, clip it first, refuse it, and what
// that says about its sender) and whom to merge with next (a partner, or a
// peer far ahead to catch up with). It is pure, like raft's rawnode: no
// goroutines, clock, network or disk. The caller passes the time, our model
// and the holdout score, and performs what the decision says; the node
// package owns those side effects.
//
//	core, _ := merge.New(cfg)
//	d := core.Decide(merge.Input{Peer: p, Standing: st, Local: own, Remote: &remote, Now: now, Loss: holdout})
//	if d.Merge {
//		// apply remote with weight d.Weight to the live model, then:
//		core.Applied(p, d)
//	}
//	// record d.Verdict against p when d.HasVerdict
//
// The rules are in DESIGN.md and docs/security.md: staleness and weight
// (averaging.Merger), claimed progress clamped to the catch-up threshold,
// outliers refused, far models checked for plausibility and clipped to an
// adaptive radius, candidate merges of new, clipped and randomly sampled
// peers validated on a holdout.
package merge
