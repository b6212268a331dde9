package averaging

import "errors"

// Sentinels callers can branch on with errors.Is. Every error this package
// returns wraps exactly one of them (or params.ErrNonFinite) with context.
var (
	// ErrBadStaleness is wrapped by every ParseStaleness and staleness
	// constructor error.
	ErrBadStaleness = errors.New("averaging: bad staleness function")
	// ErrBadLag reports an unknown staleness measure.
	ErrBadLag = errors.New("averaging: bad staleness measure")
	// ErrBadAhead reports an unknown rule for models ahead of ours, or
	// one the staleness measure cannot serve.
	ErrBadAhead = errors.New("averaging: bad rule for models ahead")
	// ErrBadMomentumPolicy reports an unknown optimizer-state policy.
	ErrBadMomentumPolicy = errors.New("averaging: bad momentum policy")
	// ErrLength reports vectors that should have the same length but do not.
	ErrLength = errors.New("averaging: vector length mismatch")
	// ErrBadWeight reports a merge weight outside [0, 1] or not finite.
	ErrBadWeight = errors.New("averaging: merge weight not in [0,1]")
	// ErrBadAlpha reports a base merge weight outside (0, 1].
	ErrBadAlpha = errors.New("averaging: alpha not in (0,1]")
	// ErrBadBatch reports a local batch size that is not positive.
	ErrBadBatch = errors.New("averaging: batch size not positive")
	// ErrBadProgress reports a progress value that is negative or not finite.
	ErrBadProgress = errors.New("averaging: invalid progress")
	// ErrFingerprint reports a remote model trained on a different
	// architecture, dataset or network: such models are never merged.
	ErrFingerprint = errors.New("averaging: fingerprint mismatch")
	// ErrBadOuter reports bad outer-optimizer settings or a non-finite
	// pseudo-gradient.
	ErrBadOuter = errors.New("averaging: bad outer step")
	// ErrBadRadius reports a clipping radius that is negative or NaN.
	ErrBadRadius = errors.New("averaging: bad clipping radius")
	// ErrBadTrim reports a trim count that leaves nothing to average.
	ErrBadTrim = errors.New("averaging: bad trim count")
	// ErrEmpty reports an aggregation over no vectors.
	ErrEmpty = errors.New("averaging: no vectors to aggregate")
	// ErrBadPushSumWeight reports a push-sum weight that is not positive
	// and finite, so no estimate can be formed.
	ErrBadPushSumWeight = errors.New("averaging: push-sum weight not positive")
)
