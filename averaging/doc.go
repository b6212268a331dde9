// Package averaging owns the math of combining models: staleness functions,
// the merge rule, what a merge does to optimizer momentum, push-sum weights,
// robust aggregation (delta clipping, trimmed mean), and DiLoCo's outer
// optimizer (Outer: Nesterov on the mean pseudo-gradient, and the DyLU rule
// that scales a worker's inner steps by its speed).
//
// It is pure: no I/O, goroutines, clock or logging. Callers own the vectors
// and the locking; every function here either updates the slices it is
// handed in place or writes into a destination it is given.
//
// # Semantics
//
// Progress p estimates the training samples a model embodies (see
// params.Progress). A received model is s local steps stale,
//
//	s = max(0, p_local - p_remote) / local batch size,
//
// and is merged with weight a = a0 * f(s), a0 in (0, 1] (DefaultAlpha 0.5),
// f one of const, poly:p, exp:d, hinge:a,b (see ParseStaleness):
//
//	w <- (1-a) w + a w_remote
//	p <- (1-a) p + a p_remote
//
// Progress mixes exactly like the parameters, so it can fall when a fast
// node mixes in an older model: that is the truth about the blend. In a
// symmetric exchange each side computes its own a from snapshots taken
// before the exchange; when both get a = 0.5 the pair's mean (and so the
// population's) is preserved and both land on the same progress. Momentum
// is kept, reset or mixed per MomentumPolicy.
//
// # Use
//
// Inside a trainer's merge hook, between two local steps:
//
//	m := averaging.DefaultMerger()
//	m.Staleness, err = averaging.ParseStaleness("hinge:10,4")
//	out, err := m.Merge(averaging.Local{
//		Fingerprint: fp,
//		Params:      w,
//		Momentum:    momentum,
//		Progress:    &progress,
//		Batch:       64,
//	}, remoteSnapshot, nil)
//	// out.Staleness, out.Weight: log and count them.
//
// To bound what one peer can do to the model, clip its parameters first
// and merge the clipped copy:
//
//	c, err := averaging.ClipDelta(clipped, w, remote.Params, radius)
package averaging
