package train

import "errors"

// Sentinel errors. Every error this package returns wraps one of them, with
// the offending value or file in context, so callers branch with errors.Is.
var (
	// ErrBadIDX reports malformed, truncated or oversized IDX input.
	ErrBadIDX = errors.New("train: bad IDX data")
	// ErrBadDataset reports a dataset whose shapes or labels do not agree.
	ErrBadDataset = errors.New("train: bad dataset")
	// ErrBadShard reports an unparsable or impossible shard request.
	ErrBadShard = errors.New("train: bad shard")
	// ErrBadModel reports an unparsable model string or a layout that does
	// not match a model.
	ErrBadModel = errors.New("train: bad model")
	// ErrBadSchedule reports an unparsable learning-rate schedule.
	ErrBadSchedule = errors.New("train: bad schedule")
	// ErrBadConfig is wrapped by every field error Config.Validate reports.
	ErrBadConfig = errors.New("train: bad config")
	// ErrBadState reports a State that cannot be restored into a trainer.
	ErrBadState = errors.New("train: bad state")
	// ErrMerge reports a mutation passed to Trainer.Apply that failed or
	// left the model non-finite; the model is rolled back.
	ErrMerge = errors.New("train: merge rejected")
	// ErrDone is returned by Trainer.Step once the configured epochs are
	// complete.
	ErrDone = errors.New("train: all epochs done")
)
