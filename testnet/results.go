package testnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"
)

// ResultsSchema names the layout of results.json; it changes when a field
// changes meaning.
//
// /2: runs end by themselves (gossip at the node's defaults); the fixed
// wall time is gossip's wall time W on the tuning seed, not a set run
// length; sync is budgeted to W; wall_s is until the last node exited.
// /3: one complete benchmark per network (--net), under "networks"; the
// command and machine are the whole benchmark's, and every network has
// the same base step. ReadResults still reads /2 (a benchmark on
// loopback).
const ResultsSchema = "meshtrain-bench/3"

// resultsSchema2 is the layout before networks.
const resultsSchema2 = "meshtrain-bench/2"

// The modes a benchmark compares. gossip-const is gossip with --staleness
// const (plain AD-PSGD-style averaging); diloco-speed is diloco with
// --inner-steps-scaling speed (DyLU).
const (
	ModeGossip      = "gossip"
	ModeGossipConst = "gossip-const"
	ModeSync        = "sync"
	ModeDiloco      = "diloco"
	ModeDilocoSpeed = "diloco-speed"
	ModeLocal       = "local"
)

// AllModes is every mode, in report order.
var AllModes = []string{ModeGossip, ModeGossipConst, ModeSync, ModeDiloco, ModeDilocoSpeed, ModeLocal}

// QuickModes are the modes of `meshtrain bench --quick`: every mode but
// diloco-speed, a variant of diloco that the smoke run need not repeat.
var QuickModes = []string{ModeGossip, ModeGossipConst, ModeSync, ModeDiloco, ModeLocal}

// BenchResults is results.json: the whole benchmark, every network's
// results side by side, in the order the networks were given.
type BenchResults struct {
	Schema   string    `json:"schema"`
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	RunTimeS float64   `json:"run_time_s"`
	Machine  Machine   `json:"machine"`
	// Networks holds one complete benchmark per network (its own W,
	// tuning and report runs).
	Networks []*Results `json:"networks"`
}

// Results is everything a benchmark measured on one network, enough to
// rebuild its part of the report and its plots. Seconds are _s, sizes
// bytes; a figure that could not be measured (a target never reached) is
// null.
type Results struct {
	// Network is what the nodes talked over, and how it was emulated.
	Network NetworkInfo `json:"network"`
	// Started and RunTimeS: when this network's runs began, and how long
	// they took.
	Started  time.Time `json:"started"`
	RunTimeS float64   `json:"run_time_s"`
	Settings Settings  `json:"settings"`

	// BaseStepS is the base step time every node's --slowdown multiplies.
	BaseStepS float64 `json:"base_step_s"`
	// SoloSamplesPerS are the nodes' solo rates (batch / (slowdown x base
	// step)); SoloSamplesPerSSum their sum, the cluster's ceiling.
	SoloSamplesPerS    []float64 `json:"solo_samples_per_s"`
	SoloSamplesPerSSum float64   `json:"solo_samples_per_s_sum"`

	// LR, Schedule and Epochs are each mode's learning rate, schedule and
	// run length (--epochs; 0: no end, stopped at W) in the report runs.
	LR       map[string]float64 `json:"lr"`
	Schedule map[string]string  `json:"schedule"`
	Epochs   map[string]float64 `json:"epochs"`
	// Tuning holds the runs on the tuning seed: gossip's (W is the wall
	// time of the one at the chosen rate), any other tuned mode's, and
	// sync's at each rate of its grid, stopped at W.
	Tuning []Run `json:"tuning"`
	Runs   []Run `json:"runs"`

	Summary map[string]*ModeSummary `json:"summary"`
	Ratios  Ratios                  `json:"ratios"`
	Bars    []Bar                   `json:"bars"`
}

// NetworkInfo names a benchmark's network and says how it was made.
type NetworkInfo struct {
	// Name is the --net value in canonical form (ParseNet, Net.String):
	// "loopback" or "wan:RTT,RATE[,LOSS]".
	Name string `json:"name"`
	// For a WAN: the round-trip time, each node's uplink and downlink
	// rate, the loss per packet and direction, and each link's queue.
	RTTS       float64 `json:"rtt_s,omitempty"`
	RateBits   float64 `json:"rate_bits_per_s,omitempty"`
	Loss       float64 `json:"loss,omitempty"`
	QueueBytes int     `json:"queue_bytes,omitempty"`
	// Emulation says in words what was emulated and how.
	Emulation string `json:"emulation"`
}

// networkInfo describes n for the results.
func networkInfo(n Net) NetworkInfo {
	info := NetworkInfo{Name: n.String(), Emulation: n.Describe()}
	if n.Kind == NetWAN {
		info.RTTS, info.RateBits, info.Loss, info.QueueBytes = n.WAN.RTT.Seconds(), n.WAN.Rate, n.WAN.Loss, n.WAN.QueueBytes()
	}
	return info
}

// Machine is where the benchmark ran.
type Machine struct {
	NumCPU      int    `json:"nproc"`
	MemoryBytes uint64 `json:"memory_bytes"`
	CPUModel    string `json:"cpu_model,omitempty"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	GoVersion   string `json:"go_version"`
	Version     string `json:"meshtrain_version"`
	LoadAvg     string `json:"load_avg_at_start,omitempty"`
}

// Settings are the benchmark's inputs, and the run lengths and flags it
// chose from what it measured on the tuning seed.
type Settings struct {
	Nodes     int       `json:"nodes"`
	Slowdowns []float64 `json:"slowdowns"`
	Target    float64   `json:"target"`
	Seeds     []uint64  `json:"seeds"`
	TuneSeed  uint64    `json:"tune_seed"`
	Dataset   string    `json:"dataset"`
	NonIID    float64   `json:"non_iid"`
	Model     string    `json:"model"`
	Batch     int       `json:"batch"`
	// TrainSamples is the training set's size: one epoch of the run clock.
	TrainSamples int      `json:"train_samples"`
	Modes        []string `json:"modes"`
	// The runs that end by themselves (BenchConfig: the node's defaults
	// unless overridden): learning rate, --epochs, schedule, gossip.
	LR           float64 `json:"lr"`
	Epochs       float64 `json:"epochs"`
	Schedule     string  `json:"schedule"`
	AvgIntervalS float64 `json:"avg_interval_s"`
	Alpha        float64 `json:"alpha"`
	Staleness    string  `json:"staleness"`
	WireDType    string  `json:"wire_dtype"`
	// EMA is the nodes' default decay of the moving average of the
	// weights they report, and the snapshots hold (0 in results written
	// before nodes kept one); a mode's or the run's node flags may set
	// another.
	EMA float64 `json:"ema,omitempty"`
	// EMAPeers is the nodes' default weight with which that average
	// takes in the peers' models they merge (absent in results written
	// before the average took them in).
	EMAPeers float64 `json:"ema_peers,omitempty"`
	// Tuning: the grids, the modes tuned on LRGrid besides sync, the fixed
	// rates, and whether sync's report runs are budgeted to W.
	LRGrid     []float64          `json:"lr_grid"`
	SyncLRGrid []float64          `json:"sync_lr_grid"`
	Tune       []string           `json:"tune"`
	FixedLR    map[string]float64 `json:"fixed_lr,omitempty"`
	BudgetSync bool               `json:"budget_sync"`
	// CapS bounds every run's wall time. FixedWallS is W: gossip's wall
	// time on WSeed, common start to the last node's exit; every
	// mode's accuracy at equal wall time is read there, and sync's runs
	// with no end are stopped there.
	CapS       float64 `json:"cap_s"`
	FixedWallS float64 `json:"fixed_wall_s"`
	// WSeed is the seed W was measured on: the tuning seed, or the first
	// report seed when nothing is tuned (a quick run).
	WSeed     uint64  `json:"w_seed"`
	SnapshotS float64 `json:"snapshot_every_s"`
	Threads   int     `json:"threads"`
	// NodeArgs are the extra node flags given after --.
	NodeArgs      []string `json:"node_args,omitempty"`
	Heterogeneity string   `json:"heterogeneity"`
	Quick         bool     `json:"quick"`
	// DiffersFromDefaults lists, per mode, every setting its report runs'
	// nodes get beyond the harness's flags, "flag value" each: how they
	// differ from a `meshtrain node` with its defaults (empty: not at all).
	DiffersFromDefaults map[string][]string `json:"differs_from_defaults"`
	// Harness is what every node of every run gets from the harness, and
	// why.
	Harness []HarnessFlag `json:"harness"`
}

// HarnessFlag is a node setting the harness gives every node, and why.
type HarnessFlag struct {
	Flag string `json:"flag"`
	Why  string `json:"why"`
}

// How a run ended (Run.End).
const (
	// EndComplete: every node ended its run by itself.
	EndComplete = "complete"
	// EndStopped: the run had no end; the harness stopped it at its stop
	// time (sync's runs at constant rate, at W).
	EndStopped = "stopped"
	// EndCap: a node still ran at the cap and was stopped there.
	EndCap = "capped"
)

// Run is one run of one mode on one seed: every node of the swarm, from a
// common start until the last one exited.
type Run struct {
	Mode     string  `json:"mode"`
	Seed     uint64  `json:"seed"`
	LR       float64 `json:"lr"`
	Schedule string  `json:"schedule"`
	// Epochs is the run's --epochs (0: no end); Flags its settings beyond
	// the harness's flags (see Settings.DiffersFromDefaults).
	Epochs float64  `json:"epochs"`
	Flags  []string `json:"flags"`
	// StopAtS is when the harness stops a run with no end (0: the run
	// ends by itself, within the cap). End is how it ended: EndComplete,
	// EndStopped or EndCap.
	StopAtS float64 `json:"stop_at_s"`
	End     string  `json:"end"`
	// WallS: common start until the last node exited. NodeExitS: each
	// node's exit; NodeFinished: whether it ended its run by itself (a node
	// that did holds its final model from then on).
	WallS        float64   `json:"wall_s"`
	NodeExitS    []float64 `json:"node_exit_s"`
	NodeFinished []bool    `json:"node_finished"`

	// TimeToTargetS: every node's model at target (the last node's first
	// time there); FirstNodeTimeS: the first node's.
	TimeToTargetS     *float64   `json:"time_to_target_s"`
	FirstNodeTimeS    *float64   `json:"first_node_time_s"`
	NodeTimeToTargetS []*float64 `json:"node_time_to_target_s"`
	// SamplesToTarget: training samples the whole cluster processed by
	// TimeToTargetS.
	SamplesToTarget *float64 `json:"samples_to_target"`
	// AverageTimeToTargetS: the swarm's average model (the mean of the
	// nodes' models, which no node holds) first at target, and
	// AverageSamplesToTarget the samples processed by then: how much of
	// the time to target is the nodes' models drifting apart. Absent when
	// it never got there, and in results from before it was measured.
	AverageTimeToTargetS   *float64 `json:"average_time_to_target_s,omitempty"`
	AverageSamplesToTarget *float64 `json:"average_samples_to_target,omitempty"`
	// IdealTimeS: this seed's sync samples to target / sum of solo rates.
	IdealTimeS *float64 `json:"ideal_time_to_target_s"`
	// CoRunIdealTimeS: this seed's sync samples to target / the cluster
	// samples/s local mode measured on this seed and network: what the
	// machine really delivers with no communication at all. Absent without
	// a local run (and in results from before it was computed).
	CoRunIdealTimeS *float64 `json:"co_run_ideal_time_to_target_s,omitempty"`
	// SyncPaceTimeS: this seed's sync samples to target at sync's own
	// structural pace (every node at the slowest one's rate, no
	// communication cost): what a perfect synchronous implementation takes.
	SyncPaceTimeS *float64 `json:"sync_pace_time_to_target_s"`

	// Accuracy of each node's model at the fixed wall time (W for every
	// report run and sync's tuning runs; a run's own end for a tuning run
	// that ends by itself), and their mean. RunClockAtFixedWall is the run
	// clock there (see RunClockAt).
	FixedWallS          float64   `json:"fixed_wall_s"`
	RunClockAtFixedWall float64   `json:"run_clock_at_fixed_wall"`
	FinalAccuracy       []float64 `json:"final_accuracy"`
	FinalAccuracyMean   float64   `json:"final_accuracy_mean"`
	SamplesPerS         float64   `json:"samples_per_s"`
	NodeSamplesPerS     []float64 `json:"node_samples_per_s"`
	Efficiency          float64   `json:"cluster_efficiency"`
	BusyFraction        []float64 `json:"busy_fraction"`
	BytesSent           []uint64  `json:"bytes_sent"`
	Merges              []int64   `json:"merges"`
	NetworkWaitS        []float64 `json:"network_wait_s"`

	// ClockShare (gossip modes): the lowest node's run clock over the
	// swarm's samples at each of ClockShareTimes (see ClockShare). Absent
	// in other modes, whose clock is not a sum of announcements, and in
	// results from before it was measured.
	ClockShare []float64 `json:"clock_share,omitempty"`

	// BytesSentPerSample is each node's parameter bytes sent over the
	// samples it processed, both counted until it exited (0 for a node
	// that processed none); ClusterBytesSentPerSample every node's bytes
	// over every node's samples: what a sample of training costs in
	// traffic, whatever the mode.
	BytesSentPerSample        []float64 `json:"bytes_sent_per_sample"`
	ClusterBytesSentPerSample float64   `json:"cluster_bytes_sent_per_sample"`
	// Link is what the emulated WAN carried (absent on loopback).
	Link   *RunLink `json:"link,omitempty"`
	Traces []Trace  `json:"traces"`
	// Consensus is the nodes' consensus distance over time (see
	// ConsensusPoint), at every snapshot instant from the first at which
	// every node had a snapshot; absent in results from before it was
	// measured.
	Consensus []ConsensusPoint `json:"consensus,omitempty"`
	// The harness's own time: starting the swarm, and scoring snapshots.
	SetupS   float64 `json:"setup_s"`
	ScoringS float64 `json:"scoring_s"`
	// LoadAvg is the machine's 1-minute load average as the run ended:
	// above the core count, something besides the swarm competed for CPU.
	LoadAvg float64 `json:"load_avg"`
	// BenchCores is the benchmark process's CPU time over the run's wall
	// time, from the common start to the last node's end: on a WAN
	// mostly its relay's, taken from the cores the nodes share (a real
	// network costs them nothing); on loopback what watching the nodes
	// costs. 0 where it could not be read.
	BenchCores float64 `json:"bench_cores,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// RunLink is what the emulated WAN carried in a run, per node, and how
// closely its relay kept the model's schedule (WANStats).
type RunLink struct {
	// WireBytesSent and WireBytesReceived: every UDP payload byte a node
	// put on the network or got from it (QUIC's headers and every
	// protocol's traffic: DHT, pubsub, identify, models).
	WireBytesSent     []uint64 `json:"wire_bytes_sent"`
	WireBytesReceived []uint64 `json:"wire_bytes_received"`
	// QueueDrops: packets dropped at the node's full uplink or downlink
	// queue; Lost: packets it sent that the random loss took.
	QueueDrops []uint64 `json:"queue_drops"`
	Lost       []uint64 `json:"lost"`
	// WireBytesSentPerSample: every node's wire bytes over every node's
	// samples.
	WireBytesSentPerSample float64 `json:"wire_bytes_sent_per_sample"`
	// Strangers counts senders that were no node's listen address (0:
	// every packet was a node's).
	Strangers int `json:"strangers"`
	// LateMaxS and LateMeanS: how far behind the model's schedule the
	// relay delivered, at worst and on average.
	LateMaxS  float64 `json:"late_max_s"`
	LateMeanS float64 `json:"late_mean_s"`
}

// runLink takes a run's figures from its WAN's stats: the first nodes
// endpoints are the nodes, in order (testnet.Up joins them so).
func runLink(s WANStats, nodes int) *RunLink {
	l := &RunLink{WireBytesSent: make([]uint64, nodes), WireBytesReceived: make([]uint64, nodes),
		QueueDrops: make([]uint64, nodes), Lost: make([]uint64, nodes), Strangers: s.Strangers, LateMaxS: s.LateMaxS,
		LateMeanS: s.LateMeanS}
	for i := range min(nodes, len(s.Endpoints)) {
		e := s.Endpoints[i]
		l.WireBytesSent[i], l.WireBytesReceived[i] = e.SentBytes, e.RecvBytes
		l.QueueDrops[i], l.Lost[i] = e.UplinkDrops+e.DownlinkDrops, e.Lost
	}
	return l
}

// ModeSummary holds a mode's medians over the report seeds.
type ModeSummary struct {
	Runs    int `json:"runs"`
	Reached int `json:"reached_target"`
	// Capped counts the runs that hit the cap; WallS is the median run's
	// wall time.
	Capped            int       `json:"capped"`
	WallS             *float64  `json:"wall_s"`
	TimeToTargetS     *float64  `json:"time_to_target_s"`
	FirstNodeTimeS    *float64  `json:"first_node_time_s"`
	SamplesToTarget   *float64  `json:"samples_to_target"`
	FinalAccuracy     *float64  `json:"final_accuracy"`
	SamplesPerS       *float64  `json:"samples_per_s"`
	Efficiency        *float64  `json:"cluster_efficiency"`
	MinBusyFraction   *float64  `json:"min_busy_fraction"`
	BusyFraction      []float64 `json:"busy_fraction"`
	BytesSentPerNode  []float64 `json:"bytes_sent"`
	IdealTimeToTarget *float64  `json:"ideal_time_to_target_s,omitempty"`
	SyncPaceTimeS     *float64  `json:"sync_pace_time_to_target_s,omitempty"`
	CoRunIdealTimeS   *float64  `json:"co_run_ideal_time_to_target_s,omitempty"`
	// BytesSentPerSample: the median of the runs' cluster parameter bytes
	// per sample; per node, the median of each node's.
	BytesSentPerSample        *float64  `json:"bytes_sent_per_sample"`
	BytesSentPerSamplePerNode []float64 `json:"bytes_sent_per_sample_per_node"`
	// WireBytesSentPerSample (on a WAN): the median of the runs' wire
	// bytes per sample.
	WireBytesSentPerSample *float64 `json:"wire_bytes_sent_per_sample,omitempty"`
}

// Ratios are the headline comparisons, medians over seeds.
type Ratios struct {
	// GossipOverSync: gossip's median time to target / sync's.
	GossipOverSync *float64 `json:"gossip_over_sync"`
	// GossipOverIdeal: gossip's median time to target / the median ideal.
	GossipOverIdeal *float64 `json:"gossip_over_ideal"`
	// GossipOverCoRunIdeal: gossip's median time to target / the median
	// co-run ideal (absent without local runs).
	GossipOverCoRunIdeal *float64 `json:"gossip_over_co_run_ideal,omitempty"`
	// GossipOverSyncPace: gossip's median time to target / the median
	// time a perfect synchronous implementation would take (sync's samples
	// to target at nodes x the slowest node's rate).
	GossipOverSyncPace *float64 `json:"gossip_over_sync_pace"`
	// ThroughputGossipOverSync: cluster samples/s, gossip / sync.
	ThroughputGossipOverSync *float64 `json:"throughput_gossip_over_sync"`
	// StructuralThroughput is the profile's own ratio: sum of solo rates /
	// (nodes x the slowest node's rate).
	StructuralThroughput float64 `json:"structural_throughput"`
	// CoRunStructuralThroughput is the same on this machine: the cluster
	// samples/s local mode measured (every node at its own pace, sharing
	// the cores, no communication) / (nodes x the slowest solo rate), the
	// most gossip can get over a sync with free communication here.
	// Absent without local runs.
	CoRunStructuralThroughput *float64 `json:"co_run_structural_throughput,omitempty"`
	// PerSeed are gossip/sync and gossip/ideal seed by seed.
	PerSeedGossipOverSync  []*float64 `json:"per_seed_gossip_over_sync"`
	PerSeedGossipOverIdeal []*float64 `json:"per_seed_gossip_over_ideal"`
}

// Bar is one of the claims the benchmark checks, with what was measured.
type Bar struct {
	Name     string   `json:"name"`
	Want     string   `json:"want"`
	Measured *float64 `json:"measured"`
	Pass     bool     `json:"pass"`
	Note     string   `json:"note,omitempty"`
}

// opt turns NaN into a missing value.
func opt(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// val reads an optional value, NaN when missing.
func val(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// WriteResults writes r as indented JSON.
func WriteResults(w io.Writer, r *BenchResults) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("%w: encode results: %w", ErrBench, err)
	}
	return nil
}

// resultsV2 is results.json before networks: one benchmark, on loopback.
type resultsV2 struct {
	Schema  string  `json:"schema"`
	Command string  `json:"command"`
	Machine Machine `json:"machine"`
	Results
}

// ReadResults reads and validates results.json, of this schema or of
// /2 (whose figures added since are computed from its traces).
func ReadResults(r io.Reader) (*BenchResults, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%w: results: %w", ErrBench, err)
	}
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: results: %w", ErrBench, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var res BenchResults
	if head.Schema == resultsSchema2 {
		var old resultsV2
		if err := dec.Decode(&old); err != nil {
			return nil, fmt.Errorf("%w: results: %w", ErrBench, err)
		}
		res = BenchResults{Schema: ResultsSchema, Command: old.Command, Started: old.Started, RunTimeS: old.RunTimeS,
			Machine: old.Machine, Networks: []*Results{&old.Results}}
		old.Network = networkInfo(Loopback)
		for _, runs := range [][]Run{old.Tuning, old.Runs} {
			for i := range runs {
				if runs[i].Error == "" {
					runCosts(&runs[i])
				}
			}
		}
		summarize(&old.Results)
	} else if err := dec.Decode(&res); err != nil {
		return nil, fmt.Errorf("%w: results: %w", ErrBench, err)
	}
	if err := res.Validate(); err != nil {
		return nil, err
	}
	return &res, nil
}

// ReadResultsFile is ReadResults on a file.
func ReadResultsFile(path string) (*BenchResults, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBench, err)
	}
	defer f.Close()
	return ReadResults(f)
}

// ErrBadResults is wrapped by Validate errors.
var ErrBadResults = errors.New("testnet: bad bench results")

// Validate checks the whole benchmark: the schema, at least one network,
// no network twice, and every network's results (Results.Validate). It
// reports every problem at once.
func (r *BenchResults) Validate() error {
	var errs []error
	if r.Schema != ResultsSchema {
		errs = append(errs, fmt.Errorf("%w: schema %q, want %q", ErrBadResults, r.Schema, ResultsSchema))
	}
	if len(r.Networks) == 0 {
		errs = append(errs, fmt.Errorf("%w: no networks", ErrBadResults))
	}
	seen := map[string]bool{}
	for i, n := range r.Networks {
		if n == nil {
			errs = append(errs, fmt.Errorf("%w: network %d is null", ErrBadResults, i))
			continue
		}
		if seen[n.Network.Name] {
			errs = append(errs, fmt.Errorf("%w: network %s twice", ErrBadResults, n.Network.Name))
		}
		seen[n.Network.Name] = true
		if err := n.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("network %s: %w", n.Network.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Validate checks that one network's results are well-formed: the
// network, one run per mode and seed with one entry per node in every
// per-node field, and sane numbers. It reports every problem at once.
func (r *Results) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadResults}, a...)...))
	}
	if net, err := ParseNet(r.Network.Name); err != nil || net.String() != r.Network.Name {
		bad("network %q: want loopback or wan:RTT,RATE[,LOSS] in canonical form", r.Network.Name)
	}
	n := r.Settings.Nodes
	if n < 1 || len(r.Settings.Slowdowns) != n {
		bad("%d nodes with %d slowdowns", n, len(r.Settings.Slowdowns))
	}
	if !(r.Settings.Target > 0 && r.Settings.Target <= 1) {
		bad("target %v not in (0,1]", r.Settings.Target)
	}
	if !(r.BaseStepS > 0) || len(r.SoloSamplesPerS) != n || !(r.SoloSamplesPerSSum > 0) {
		bad("base step %v s and %d solo rates (sum %v) for %d nodes", r.BaseStepS, len(r.SoloSamplesPerS), r.SoloSamplesPerSSum, n)
	}
	if len(r.Settings.Modes) == 0 || len(r.Settings.Seeds) == 0 {
		bad("no modes or no seeds")
	}
	if !(r.Settings.FixedWallS > 0) || !(r.Settings.CapS > 0) || r.Settings.TrainSamples < 1 {
		bad("fixed wall time %v s, cap %v s, training set of %d", r.Settings.FixedWallS, r.Settings.CapS, r.Settings.TrainSamples)
	}
	for _, m := range r.Settings.Modes {
		if !slices.Contains(AllModes, m) {
			bad("unknown mode %q", m)
		}
		if lr, ok := r.LR[m]; !ok || !(lr > 0) {
			bad("mode %s has no learning rate", m)
		}
		if r.Summary[m] == nil {
			bad("mode %s has no summary", m)
		}
		if e, ok := r.Epochs[m]; !ok || !(e >= 0) {
			bad("mode %s has no run length", m)
		}
		if _, ok := r.Settings.DiffersFromDefaults[m]; !ok {
			bad("mode %s does not list how it differs from a node's defaults", m)
		}
		for _, s := range r.Settings.Seeds {
			k := 0
			for _, run := range r.Runs {
				if run.Mode == m && run.Seed == s {
					k++
				}
			}
			if k != 1 {
				bad("mode %s seed %d has %d runs, want 1", m, s, k)
			}
		}
	}
	for i, run := range append(slices.Clone(r.Tuning), r.Runs...) {
		if run.Error != "" {
			continue
		}
		if len(run.NodeTimeToTargetS) != n || len(run.FinalAccuracy) != n || len(run.BusyFraction) != n ||
			len(run.BytesSent) != n || len(run.Merges) != n || len(run.NetworkWaitS) != n || len(run.Traces) != n ||
			len(run.NodeSamplesPerS) != n || len(run.NodeExitS) != n || len(run.NodeFinished) != n {
			bad("run %d (%s seed %d): per-node fields do not have %d entries", i, run.Mode, run.Seed, n)
		}
		if !(run.WallS > 0) || !(run.SamplesPerS >= 0) || !(run.Efficiency >= 0) {
			bad("run %d (%s seed %d): wall %v s, %v samples/s, efficiency %v", i, run.Mode, run.Seed, run.WallS, run.SamplesPerS, run.Efficiency)
		}
		if run.End != EndComplete && run.End != EndStopped && run.End != EndCap {
			bad("run %d (%s seed %d): end %q, want %s, %s or %s", i, run.Mode, run.Seed, run.End, EndComplete, EndStopped, EndCap)
		}
		if !(run.FixedWallS > 0) || !(run.Epochs >= 0) {
			bad("run %d (%s seed %d): fixed wall time %v s, epochs %v", i, run.Mode, run.Seed, run.FixedWallS, run.Epochs)
		}
		for _, b := range run.BusyFraction {
			if !(b >= 0 && b <= 1) {
				bad("run %d (%s seed %d): busy fraction %v", i, run.Mode, run.Seed, b)
			}
		}
		for _, a := range run.FinalAccuracy {
			if !(a >= 0 && a <= 1) {
				bad("run %d (%s seed %d): accuracy %v", i, run.Mode, run.Seed, a)
			}
		}
		for _, tr := range run.Traces {
			if err := tr.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("%w: run %d (%s seed %d): %w", ErrBadResults, i, run.Mode, run.Seed, err))
			}
		}
		if err := validateConsensus(run.Consensus); err != nil {
			errs = append(errs, fmt.Errorf("%w: run %d (%s seed %d): %w", ErrBadResults, i, run.Mode, run.Seed, err))
		}
		if len(run.BytesSentPerSample) != n || !(run.ClusterBytesSentPerSample >= 0) {
			bad("run %d (%s seed %d): %d bytes per sample for %d nodes, cluster %v", i, run.Mode, run.Seed,
				len(run.BytesSentPerSample), n, run.ClusterBytesSentPerSample)
		}
		if l := run.Link; l != nil && (len(l.WireBytesSent) != n || len(l.WireBytesReceived) != n || len(l.QueueDrops) != n ||
			len(l.Lost) != n) {
			bad("run %d (%s seed %d): link figures do not have %d entries", i, run.Mode, run.Seed, n)
		}
		if (run.TimeToTargetS == nil) != (run.SamplesToTarget == nil) {
			bad("run %d (%s seed %d): time and samples to target disagree on whether it was reached", i, run.Mode, run.Seed)
		}
	}
	return errors.Join(errs...)
}
