package train

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Config configures a Trainer. Every field has a documented unit and range;
// Validate reports every field outside it at once.
type Config struct {
	// Model is the model string: "softmax" or "mlp:H1,H2,..." (see
	// ParseModel).
	Model string
	// Batch is the number of samples per step, 1 to 65536.
	Batch int
	// Epochs is the number of passes over the shard after which Step
	// returns ErrDone, 0 to 1e6; 0 means no end (a cosine schedule then
	// needs an explicit total or RunSamples).
	Epochs int
	// RunSamples is the length of the run the schedule spans, in samples
	// of the run clock (see Trainer.SetClock): the schedule's total when
	// its string gives none. 0 means Epochs × shard size. A node sets it
	// to the swarm's run, counted over every node's samples. Finite, >= 0.
	RunSamples float64
	// LR is the base learning rate, in (0, 100].
	LR float64
	// Momentum is SGD's momentum coefficient, in [0, 1).
	Momentum float64
	// WeightDecay is the L2 penalty coefficient, in [0, 1).
	WeightDecay float64
	// EMA is the decay per step of the exponential moving average of the
	// parameters that AverageInto returns (Polyak averaging), in [0, 1);
	// 0 keeps none. The average smooths out the noise of small-batch
	// steps and, in a swarm, of each node's drift between merges; the
	// steps and merges act on the live parameters. See Trainer.AverageInto.
	EMA float64
	// EMAPeers is the weight, in [0, 1], with which the average also
	// takes in every peer's model the parameters merge (AverageIn): 1
	// counts each as one of the average's updates, 0 takes in only the
	// trainer's own parameters. Taking in the models merged makes the
	// average span the swarm's models, not only this trainer's drift
	// between merges.
	EMAPeers float64
	// Schedule is the learning-rate schedule string (see ParseSchedule);
	// warmup and total are in samples of progress.
	Schedule string
	// Seed seeds the initial parameters and the shard partition. Every peer
	// of a network must share it, so that they start from the same model
	// and their shards are disjoint.
	Seed uint64
	// OrderSeed seeds the per-epoch sample order on top of Seed. Peers that
	// train the same shard should pick different values.
	OrderSeed uint64
	// Shard is "all" or "i/n" (0-based; see ParseShard).
	Shard string
	// Alpha is the Dirichlet concentration of label-skewed shards; 0 means
	// iid shards. Finite, >= 0.
	Alpha float64
	// Network is the network name hashed into the fingerprint; not empty.
	Network string
	// Run describes the swarm's run (its length and schedule) for the
	// fingerprint (params.RunFingerprint); "" for none. At most 256 bytes.
	Run string
	// Slowdown makes every step last Slowdown × the base step time by
	// sleeping until that deadline. 1 with no BaseStep means full speed; 1
	// with a BaseStep makes every step last at least BaseStep. In [1, 1000].
	Slowdown float64
	// BaseStep is the solo step time Slowdown multiplies; 0 means measure it
	// when the trainer is built (the median of CalibrationSteps steps on a
	// copy of the model). >= 0.
	BaseStep time.Duration
	// CalibrationSteps is how many steps the calibration times, 1 to 100.
	CalibrationSteps int
	// Threads is how many goroutines Trainer.Evaluate uses, 1 to 256. It
	// does not set GOMAXPROCS: that is the caller's choice.
	Threads int
	// Logger receives a line per calibration; nil discards.
	Logger *slog.Logger
}

// DefaultConfig is tuned for MNIST: mlp:256,128, batch 64, 3 epochs,
// momentum SGD with linear warmup and cosine decay, and a moving average
// of the parameters as the reported model.
func DefaultConfig() Config {
	return Config{
		Model:            "mlp:256,128",
		Batch:            64,
		Epochs:           3,
		LR:               0.1,
		Momentum:         0.9,
		WeightDecay:      5e-4,
		EMA:              DefaultEMA,
		EMAPeers:         DefaultEMAPeers,
		Schedule:         "cosine:warmup=4%",
		Seed:             1,
		Shard:            "all",
		Network:          "main",
		Slowdown:         1,
		CalibrationSteps: 7,
		Threads:          1,
	}
}

// Validate reports every field out of range, joined, each wrapping
// ErrBadConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...))
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	if _, err := parseHidden(c.Model); err != nil {
		bad("model: %v", err)
	}
	if c.Batch < 1 || c.Batch > 1<<16 {
		bad("batch %d not in [1,65536]", c.Batch)
	}
	if c.Epochs < 0 || c.Epochs > 1e6 {
		bad("epochs %d not in [0,1000000]", c.Epochs)
	}
	if !finite(c.LR) || c.LR <= 0 || c.LR > 100 {
		bad("learning rate %v not in (0,100]", c.LR)
	}
	if !finite(c.Momentum) || c.Momentum < 0 || c.Momentum >= 1 {
		bad("momentum %v not in [0,1)", c.Momentum)
	}
	if !finite(c.WeightDecay) || c.WeightDecay < 0 || c.WeightDecay >= 1 {
		bad("weight decay %v not in [0,1)", c.WeightDecay)
	}
	if !finite(c.EMA) || c.EMA < 0 || c.EMA >= 1 {
		bad("ema %v not in [0,1)", c.EMA)
	}
	if !finite(c.EMAPeers) || c.EMAPeers < 0 || c.EMAPeers > 1 {
		bad("ema-peers %v not in [0,1]", c.EMAPeers)
	}
	if s, err := ParseSchedule(c.Schedule); err != nil {
		bad("schedule: %v", err)
	} else if s.Kind == "cosine" && s.Total == 0 && c.Epochs == 0 && c.RunSamples == 0 {
		bad("schedule %q needs a total (e.g. cosine:total=180000) when epochs is 0", c.Schedule)
	}
	if !finite(c.RunSamples) || c.RunSamples < 0 || c.RunSamples > 1e15 {
		bad("run samples %v not in [0,1e15]", c.RunSamples)
	}
	if _, err := ParseShard(c.Shard); err != nil {
		bad("shard: %v", err)
	}
	if !finite(c.Alpha) || c.Alpha < 0 {
		bad("alpha %v must be finite and >= 0 (0: iid shards)", c.Alpha)
	}
	if c.Network == "" || len(c.Network) > 128 {
		bad("network name must be 1 to 128 bytes")
	}
	if len(c.Run) > 256 {
		bad("run description of %d bytes: at most 256", len(c.Run))
	}
	if !finite(c.Slowdown) || c.Slowdown < 1 || c.Slowdown > 1000 {
		bad("slowdown %v not in [1,1000]", c.Slowdown)
	}
	if c.BaseStep < 0 {
		bad("base step %v is negative", c.BaseStep)
	}
	if c.CalibrationSteps < 1 || c.CalibrationSteps > 100 {
		bad("calibration steps %d not in [1,100]", c.CalibrationSteps)
	}
	if c.Threads < 1 || c.Threads > 256 {
		bad("threads %d not in [1,256]", c.Threads)
	}
	return errors.Join(errs...)
}
