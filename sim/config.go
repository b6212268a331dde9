package sim

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/train"
)

// ErrBadConfig is wrapped by every Config.Validate error.
var ErrBadConfig = errors.New("sim: bad config")

// The node defaults the simulator mirrors. The node package cannot be
// imported here (it brings the whole libp2p stack into a package that
// needs none of it), so they are repeated, and a test fails when they
// drift from node.DefaultLR, node.DefaultSchedule, node.DefaultAvgInterval,
// node.DefaultEpochs and node.DefaultConfig's CatchUp.
const (
	// NodeLR is node.DefaultLR: the base learning rate at batch 64.
	NodeLR = 0.1
	// NodeSchedule is node.DefaultSchedule, over the run clock.
	NodeSchedule = "cosine"
	// NodeAvgInterval is node.DefaultAvgInterval, merge.Pace's floor.
	NodeAvgInterval = 12500 * time.Microsecond
	// NodeEpochs is node.DefaultEpochs: the run, in passes over the
	// training set by the whole swarm.
	NodeEpochs = 40
	// NodeCatchUp is the node's default catch-up threshold, in samples.
	NodeCatchUp = 60000
	// NodeOuterEvery is node.DefaultOuterEvery: the steps between two of
	// gossip's slow-momentum steps.
	NodeOuterEvery = 0
	// NodeLRScaling is the node's default --lr-scaling.
	NodeLRScaling = LRScalingMerges
)

// The learning-rate scalings the simulator models (the node's
// --lr-scaling, but for speed).
const (
	LRScalingNone   = "none"
	LRScalingMerges = "merges"
)

// Lifetime models. With LifetimeNone every node stays for the whole run.
const (
	LifetimeNone    = "none"
	LifetimeWeibull = "weibull"
	LifetimePareto  = "pareto"
)

// Churn is the session model: how long a node stays, how often nodes
// arrive and who they are.
type Churn struct {
	// Lifetime is LifetimeNone, LifetimeWeibull or LifetimePareto: the
	// distribution of a session's length.
	Lifetime string
	// Shape and Scale parametrise it, Scale in seconds of virtual time.
	// Weibull: length = Scale * (-ln U)^(1/Shape), Shape > 0 (below 1 many
	// short sessions and a long tail, as measured in P2P networks).
	// Pareto: length = Scale * U^(-1/Shape), Shape > 1 (so the mean, which
	// sets the arrival rate, is finite); Scale is the shortest session.
	Shape, Scale float64
	// NeverReturn is the share of leaving nodes, in [0, 1], that never come
	// back. The others wait in an offline pool with their last checkpoint.
	NeverReturn float64
}

// Mean is the mean session length in seconds (0 for LifetimeNone).
func (c Churn) Mean() float64 {
	switch c.Lifetime {
	case LifetimeWeibull:
		return c.Scale * math.Gamma(1+1/c.Shape)
	case LifetimePareto:
		return c.Shape * c.Scale / (c.Shape - 1)
	}
	return 0
}

// Config is one simulated swarm. Times are virtual: nothing waits for
// them. DefaultConfig fills every field; Validate reports every bad field
// at once.
type Config struct {
	// Nodes is the population at the start and, with churn, the size the
	// arrival rate keeps it around (Little's law: arrivals per second =
	// Nodes / mean session). 1 to 1,000,000. Ignored with a Trace.
	Nodes int
	// Duration is how much virtual time to simulate, > 0. The run may end
	// sooner (Epochs).
	Duration time.Duration
	// Seed seeds everything: the shared initial model, the shards, the
	// speeds, partner choice, jitter and churn. Same seed, same Result.
	Seed uint64

	// Dataset is "mnist" (the copy built into the binary) or "synthetic".
	Dataset string
	// Model is the model string (train.ParseModel), "softmax" by default.
	Model string
	// Batch is the samples per step, 1 to 65536; a step at the end of a
	// node's pass over a shard smaller than that is shorter, as in the
	// trainer.
	Batch int
	// LR is the base learning rate, in (0, 100]; Schedule its schedule
	// (train.ParseSchedule) over the run clock: every node's samples added
	// up, as the node's run clock estimates them (here it is exact).
	LR       float64
	Schedule string
	// Momentum and WeightDecay are SGD's, as the trainer's defaults.
	Momentum, WeightDecay float64
	// EMA is the decay per step of the moving average of its parameters
	// that each node reports and is scored on (the trainer's --ema,
	// train.Config.EMA); 0 scores the parameters.
	EMA float64
	// EMAPeers is the weight with which that average also takes in each
	// peer's model the node merges (train.Config.EMAPeers).
	EMAPeers float64
	// Epochs is the run's length in passes over the training set by the
	// whole swarm (the node's --epochs): the schedule spans it and the
	// simulation ends when it is complete. 0: no end (needs a schedule
	// with a total, or const).
	Epochs float64
	// Shards: the training set is split iid into this many disjoint shards
	// (train.IIDSplit with Seed) and node i trains shard i mod Shards,
	// reshuffled every pass, as `--shard i/n` does. 0 means one shard per
	// node of the starting population (Nodes, or the trace's nodes), but
	// at most one per Batch samples so that a shard holds a batch (937
	// shards of 64 or 65 MNIST samples for 1,000 nodes: 63 of them serve
	// two starting nodes; later nodes' ids wrap around them too);
	// 1 gives every node the whole training set in its own order. A node
	// holds its pass order, 4 bytes per sample of its shard.
	Shards int

	// StepMedian is the median virtual time of one step, > 0. Per node
	// the step time is StepMedian * exp(StepSpread * Z), Z standard
	// normal (a lognormal spread of speeds), or, when Slowdowns is set,
	// StepMedian * Slowdowns[i mod len] (the bench's "2,2,4,8" profile).
	// A node keeps its speed across sessions.
	StepMedian time.Duration
	// StepSpread is the lognormal sigma, in [0, 5]; 0: every node alike.
	StepSpread float64
	// Slowdowns, when not empty, replaces the lognormal draw; each > 0.
	Slowdowns []float64

	// AvgInterval is merge.Pace's floor (the node's --avg-interval): a
	// node starts at most one exchange per interval, and waits at least
	// one of its steps and half its recent exchange time, with jitter.
	AvgInterval time.Duration
	// Peers is how many live nodes a node knows when it picks a partner:
	// a fresh uniform sample of that many per round (peer sampling). 0:
	// every live node, as a node's announce table lists every fresh peer.
	Peers int
	// Merger is the merge rule (averaging.DefaultMerger, the node's).
	Merger averaging.Merger
	// OuterEvery is the local steps between two slow-momentum steps of a
	// node (the node's --outer-every; 0: none), OuterLR and OuterMomentum
	// the outer Nesterov step's rate (> 0) and momentum (in [0, 1)).
	OuterEvery             int
	OuterLR, OuterMomentum float64
	// LRScaling is LRScalingMerges (each node scales its learning rate by
	// its steps per merge, merge.MergeRate) or LRScalingNone.
	LRScaling string
	// CatchUp is the node's catch-up threshold in samples (>= 0, 0: off):
	// a node that far behind the second most advanced peer it knows
	// (merge.CatchUpSource) pulls its model whole.
	CatchUp float64
	// Latency is the one-way delay between any two nodes, >= 0.
	Latency time.Duration
	// Bandwidth is each node's link rate in bytes per second, > 0: a model
	// takes model bytes / Bandwidth to cross. Links are not shared: a node
	// serving several exchanges at once sends each at the full rate.
	Bandwidth float64
	// WireBytes is the bytes per value on the wire: 2 (fp16, what the
	// node starts with) or 4 (fp32). It sets the transfer time and the
	// bytes counted; the values merged are not rounded to it. A node's
	// default (--wire-dtype auto) switches to int8 where the link sets
	// the pace of its exchanges; the simulator does not model that.
	WireBytes int

	// Churn is the session model, unless Trace is set.
	Churn Churn
	// Trace, when not nil, replaces Nodes and Churn: exactly these
	// sessions (ReadTrace). A node whose last session ends before the end
	// of the simulation never returns.
	Trace []Session

	// ReportEvery is the virtual time between two report points, > 0.
	ReportEvery time.Duration
	// EvalNodes is how many random live nodes are scored at each point
	// (their models' test accuracy), >= 0; the average model always is.
	EvalNodes int
	// EvalSamples is the size of the fixed test subset they are scored
	// on, 1 to the test set's size (checked by Run).
	EvalSamples int
	// Threads is how many goroutines score models, 1 to 256. The result
	// does not depend on it; the simulation itself is one goroutine.
	Threads int
}

// DefaultConfig is 1,000 nodes for 1,000 virtual seconds with churn,
// training softmax regression on MNIST with the node's defaults (learning
// rate, schedule, batch, merge rule, pace floor, catch-up) over a WAN-like
// link (50 ms one way, 10 Mbit/s, fp16 on the wire).
//
// The virtual step time is 1 s median (lognormal spread 0.5): a softmax
// step takes well under a millisecond of real compute, but at 1,000 nodes
// every virtual second of 20 ms steps would be 50,000 real steps; at 1 s
// the default run is about 1,100,000 steps, a few minutes on two cores.
// Slower steps stand in for a bigger model on volunteer hardware. The run
// is 1,500 epochs so that it does not end before the duration: 1,000 nodes
// at these speeds (a mean of 1.13 steps/s each) train about 1,200 epochs'
// worth of samples in 1,000 s, which takes the cosine schedule to about a
// tenth of the base rate.
//
// Sessions are Weibull with shape 0.6 (heavy-tailed, as measured in P2P
// networks) and scale 600 s (mean about 900 s); 30% of the nodes that
// leave never return.
func DefaultConfig() Config {
	tc := train.DefaultConfig()
	return Config{
		Nodes:         1000,
		Duration:      1000 * time.Second,
		Seed:          1,
		Dataset:       train.DatasetMNIST,
		Model:         "softmax",
		Batch:         tc.Batch,
		LR:            NodeLR,
		Schedule:      NodeSchedule,
		Momentum:      tc.Momentum,
		EMA:           tc.EMA,
		EMAPeers:      tc.EMAPeers,
		WeightDecay:   tc.WeightDecay,
		Epochs:        1500,
		StepMedian:    time.Second,
		StepSpread:    0.5,
		AvgInterval:   NodeAvgInterval,
		Merger:        averaging.DefaultMerger(),
		CatchUp:       NodeCatchUp,
		OuterEvery:    NodeOuterEvery,
		LRScaling:     NodeLRScaling,
		OuterLR:       averaging.DefaultOuterLR,
		OuterMomentum: averaging.DefaultOuterMomentum,
		Latency:       50 * time.Millisecond,
		Bandwidth:     10e6 / 8,
		WireBytes:     2,
		Churn:         Churn{Lifetime: LifetimeWeibull, Shape: 0.6, Scale: 600, NeverReturn: 0.3},
		ReportEvery:   10 * time.Second,
		EvalNodes:     20,
		EvalSamples:   2000,
		Threads:       2,
	}
}

// Validate reports every bad field at once, each error wrapping
// ErrBadConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...))
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	if c.Trace == nil && (c.Nodes < 1 || c.Nodes > 1e6) {
		bad("nodes %d not in [1,1000000]", c.Nodes)
	}
	if c.Duration <= 0 {
		bad("duration %v must be > 0", c.Duration)
	}
	dim, classes, err := train.Shape(c.Dataset)
	if err != nil || c.Dataset == "" {
		bad("dataset %q: want mnist or synthetic", c.Dataset)
		dim, classes = 1, 2
	}
	if _, err := train.ParseModel(c.Model, dim, classes); err != nil {
		bad("model %q: %v", c.Model, err)
	}
	if c.Batch < 1 || c.Batch > 1<<16 {
		bad("batch %d not in [1,65536]", c.Batch)
	}
	if !finite(c.LR) || c.LR <= 0 || c.LR > 100 {
		bad("learning rate %v not in (0,100]", c.LR)
	}
	if s, err := train.ParseSchedule(c.Schedule); err != nil {
		bad("schedule %q: %v", c.Schedule, err)
	} else if _, err := s.Resolve(c.Epochs * 1000); err != nil {
		bad("schedule %q with epochs %v: %v", c.Schedule, c.Epochs, err)
	}
	if !finite(c.EMA) || c.EMA < 0 || c.EMA >= 1 {
		bad("ema %v not in [0,1)", c.EMA)
	}
	if !finite(c.EMAPeers) || c.EMAPeers < 0 || c.EMAPeers > 1 {
		bad("ema-peers %v not in [0,1]", c.EMAPeers)
	}
	if !finite(c.Momentum) || c.Momentum < 0 || c.Momentum >= 1 {
		bad("momentum %v not in [0,1)", c.Momentum)
	}
	if !finite(c.WeightDecay) || c.WeightDecay < 0 || c.WeightDecay >= 1 {
		bad("weight decay %v not in [0,1)", c.WeightDecay)
	}
	if !finite(c.Epochs) || c.Epochs < 0 || c.Epochs > 1e6 {
		bad("epochs %v not in [0,1000000]", c.Epochs)
	}
	if c.Shards < 0 || c.Shards > train.MaxShards {
		bad("shards %d not in [0,%d]", c.Shards, train.MaxShards)
	}
	if c.StepMedian <= 0 {
		bad("step time %v must be > 0", c.StepMedian)
	}
	if !finite(c.StepSpread) || c.StepSpread < 0 || c.StepSpread > 5 {
		bad("step spread %v not in [0,5]", c.StepSpread)
	}
	for i, s := range c.Slowdowns {
		if !finite(s) || s <= 0 || s > 1e6 {
			bad("slowdown %d (%v) not in (0,1000000]", i+1, s)
		}
	}
	if c.AvgInterval <= 0 {
		bad("avg-interval %v must be > 0", c.AvgInterval)
	}
	if c.Peers < 0 {
		bad("peers %d must be >= 0", c.Peers)
	}
	if err := c.Merger.Validate(); err != nil {
		bad("merge rule: %v", err)
	}
	if c.LRScaling != LRScalingMerges && c.LRScaling != LRScalingNone {
		bad("lr-scaling %q: want %s or %s", c.LRScaling, LRScalingMerges, LRScalingNone)
	}
	if c.OuterEvery < 0 || c.OuterEvery > 1<<20 {
		bad("outer-every %d not in [0,%d]", c.OuterEvery, 1<<20)
	}
	if o := (averaging.Outer{LR: c.OuterLR, Momentum: c.OuterMomentum}); c.OuterEvery > 0 && o.Validate() != nil {
		bad("slow momentum: %v", o.Validate())
	}
	if !finite(c.CatchUp) || c.CatchUp < 0 {
		bad("catch-up %v must be finite and >= 0", c.CatchUp)
	}
	if c.Latency < 0 {
		bad("latency %v must be >= 0", c.Latency)
	}
	if !finite(c.Bandwidth) || c.Bandwidth <= 0 {
		bad("bandwidth %v bytes/s must be finite and > 0", c.Bandwidth)
	}
	if c.WireBytes != 2 && c.WireBytes != 4 {
		bad("wire bytes %d: want 2 (fp16) or 4 (fp32)", c.WireBytes)
	}
	if c.Trace == nil {
		ch := c.Churn
		switch ch.Lifetime {
		case LifetimeNone:
		case LifetimeWeibull:
			if !finite(ch.Shape) || ch.Shape <= 0 {
				bad("weibull shape %v must be > 0", ch.Shape)
			}
		case LifetimePareto:
			if !finite(ch.Shape) || ch.Shape <= 1 {
				bad("pareto shape %v must be > 1 (a finite mean session)", ch.Shape)
			}
		default:
			bad("lifetime %q: want none, weibull or pareto", ch.Lifetime)
		}
		if ch.Lifetime != LifetimeNone && (!finite(ch.Scale) || ch.Scale <= 0) {
			bad("lifetime scale %v s must be > 0", ch.Scale)
		}
		if !finite(ch.NeverReturn) || ch.NeverReturn < 0 || ch.NeverReturn > 1 {
			bad("never-return share %v not in [0,1]", ch.NeverReturn)
		}
	} else if err := checkSessions(c.Trace); err != nil {
		bad("trace: %v", err)
	}
	if c.ReportEvery <= 0 {
		bad("report interval %v must be > 0", c.ReportEvery)
	}
	if c.EvalNodes < 0 {
		bad("eval nodes %d must be >= 0", c.EvalNodes)
	}
	if c.EvalSamples < 1 {
		bad("eval samples %d must be >= 1", c.EvalSamples)
	}
	if c.Threads < 1 || c.Threads > 256 {
		bad("threads %d not in [1,256]", c.Threads)
	}
	return errors.Join(errs...)
}
