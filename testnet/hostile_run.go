//go:build testhooks

package testnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshtrain/meshtrain/api"
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/train"
)

// The suite's runner: it starts attacking nodes (node.Adversary), so it
// exists in the testhooks build only (make build-testhooks), whose binary
// is the one the nodes run. The results it writes (hostile.go) can be
// read by any build.

// HostileConfig describes a suite. DefaultHostileConfig fills every field;
// Validate reports every bad one at once.
type HostileConfig struct {
	// Binary is the meshtrain executable the nodes run.
	Binary string
	// Out receives results.json and report.md; Work the nodes' data dirs
	// and logs ("" means Out/work).
	Out, Work string
	// Attacks are the adversary kinds (node.AdversaryKinds), one swarm
	// each; Strengths overrides a kind's default strength.
	Attacks   []string
	Strengths map[string]float64
	// Nodes in each swarm, of which the last Attackers attack.
	Nodes, Attackers int
	// Duration of each swarm's training, from a common start.
	Duration time.Duration
	// Baseline runs the same swarm all honest first, for the accuracy
	// comparison.
	Baseline bool
	// Dataset, DataPath and Model are every node's; shards are iid
	// (--shard i/Nodes). Every other setting is the node's default, but
	// two: training runs with no end (--epochs 0) at a constant learning
	// rate, stopped after Duration, because the suite compares each
	// attacked swarm with the all-honest one at the same wall time (a run
	// that ends by itself would end at another time in each swarm: an
	// attacker's samples move the run clock too); and AvgInterval.
	Dataset, DataPath, Model string
	// AvgInterval is the wall time between the merges a node starts. The
	// suite's default is 5x the node's: with up to 10 nodes on 2 cores,
	// every honest node vetting a model (clipping, holdout validation)
	// every 50 ms would saturate the machine and the comparison would
	// measure the load.
	AvgInterval time.Duration
	// Threads per node (GOMAXPROCS).
	Threads int
	// Settle is the wait between the last node starting and the common
	// start, for announcements to reach every peer.
	Settle time.Duration
	// PollEvery is how often each honest node's /v1/peers is read.
	PollEvery time.Duration
	// AccuracyWindow is the end of the run over which each node's test
	// accuracies are averaged (NodeOutcome.FinalAccuracy); the whole run
	// if longer. Default DefaultAccuracyWindow.
	AccuracyWindow time.Duration
	// NodeArgs are passed to every node after the suite's own.
	NodeArgs []string
	// Command is the command line, for the report.
	Command string
	// Progress receives progress lines (nil discards).
	Progress io.Writer
}

// DefaultHostileConfig is every attack on 5 nodes with 1 attacker, 60 s
// each, with an all-honest baseline, on the default model and MNIST.
func DefaultHostileConfig() HostileConfig {
	return HostileConfig{
		Out:            "meshtrain-hostile",
		Attacks:        slices.Clone(node.AdversaryKinds),
		Nodes:          5,
		Attackers:      1,
		Duration:       60 * time.Second,
		Baseline:       true,
		Dataset:        train.DatasetMNIST,
		Model:          train.DefaultConfig().Model,
		AvgInterval:    250 * time.Millisecond,
		Threads:        1,
		Settle:         3 * time.Second,
		PollEvery:      500 * time.Millisecond,
		AccuracyWindow: DefaultAccuracyWindow,
	}
}

// Validate reports every bad field at once.
func (c HostileConfig) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrHostile}, a...)...))
	}
	if c.Binary == "" {
		bad("no binary")
	}
	if c.Out == "" {
		bad("no output dir")
	}
	if len(c.Attacks) == 0 {
		bad("no attacks")
	}
	for _, k := range c.Attacks {
		if _, err := c.adversary(k); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrHostile, err))
		}
	}
	for k := range c.Strengths {
		if !slices.Contains(c.Attacks, k) {
			bad("strength for %q, which is not among the attacks", k)
		}
	}
	if c.Nodes < 2 || c.Nodes > 64 {
		bad("nodes %d not in [2,64]", c.Nodes)
	}
	if c.Attackers < 1 || c.Attackers >= c.Nodes {
		bad("attackers %d not in [1, nodes-1=%d]", c.Attackers, c.Nodes-1)
	}
	if c.Duration < time.Second || c.Duration > 24*time.Hour {
		bad("duration %v not in [1s,24h]", c.Duration)
	}
	if _, _, err := train.Shape(c.Dataset); err != nil || c.Dataset == "" {
		bad("dataset %q: want mnist or synthetic", c.Dataset)
	}
	tc := train.DefaultConfig()
	tc.Model = c.Model
	if err := tc.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrHostile, err))
	}
	if c.AvgInterval <= 0 {
		bad("averaging interval %v must be > 0", c.AvgInterval)
	}
	if c.Threads < 1 || c.Threads > 256 {
		bad("threads %d not in [1,256]", c.Threads)
	}
	if c.Settle < 0 || c.Settle > 10*time.Minute {
		bad("settle %v not in [0,10m]", c.Settle)
	}
	if c.PollEvery < 10*time.Millisecond || c.PollEvery > c.Duration {
		bad("poll interval %v not in [10ms, duration]", c.PollEvery)
	}
	if c.AccuracyWindow <= 0 {
		bad("accuracy window %v must be > 0", c.AccuracyWindow)
	}
	return errors.Join(errs...)
}

// adversary is kind at the strength the suite runs it at.
func (c HostileConfig) adversary(kind string) (node.Adversary, error) {
	a, err := node.DefaultAdversary(kind)
	if err != nil {
		return a, err
	}
	if s, ok := c.Strengths[kind]; ok {
		a.Strength = s
	}
	return a, nil
}

// exchanges is the number of verdicts the observer recorded about the
// peer: one per input it judged.
func exchanges(v api.PeerStatus) int64 {
	var n int64
	for _, c := range v.Verdicts {
		n += c
	}
	return n
}

// banTracker follows every (observer, target) pair of one swarm through
// successive /v1/peers views. Pure: the caller passes the time.
type banTracker struct {
	index map[string]int // peer ID -> node index
	peers []string       // node index -> peer ID
	pairs map[[2]int]*Pair
}

func newBanTracker(peers []string) *banTracker {
	t := &banTracker{index: map[string]int{}, peers: peers, pairs: map[[2]int]*Pair{}}
	for i, p := range peers {
		t.index[p] = i
	}
	return t
}

// pair returns the (observer, target) record, creating it.
func (t *banTracker) pair(observer, target int) *Pair {
	k := [2]int{observer, target}
	p, ok := t.pairs[k]
	if !ok {
		p = &Pair{Observer: observer, ObserverPeer: t.peers[observer], Target: target, TargetPeer: t.peers[target],
			Verdicts: map[string]int64{}}
		t.pairs[k] = p
	}
	return p
}

// observe records observer's view at atS seconds from the start. It
// returns the pairs that turned banned for the first time.
func (t *banTracker) observe(atS float64, observer int, views []api.PeerStatus) []Pair {
	var fresh []Pair
	for _, v := range views {
		target, ok := t.index[v.PeerID]
		if !ok || target == observer {
			continue
		}
		p := t.pair(observer, target)
		p.Listed, p.State, p.Reputation = true, v.ReputationState, v.Reputation
		p.Verdicts = cloneCounts(v.Verdicts)
		if v.ReputationState == StateBanned && p.BannedAtS == nil {
			at, n := atS, exchanges(v)
			p.BannedAtS, p.ExchangesAtBan = &at, &n
			fresh = append(fresh, *p)
		}
	}
	return fresh
}

func cloneCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// outcome fills run's pairs from the tracker: every (honest, attacker)
// pair, listed or not, and the (honest, honest) bans. Nodes [0, honest)
// are honest.
func (t *banTracker) outcome(run *AttackRun, honest int) {
	run.Pairs, run.HonestBans, run.BannedPairs = nil, nil, 0
	for o := range honest {
		for a := honest; a < len(t.peers); a++ {
			p := *t.pair(o, a)
			run.Pairs = append(run.Pairs, p)
			if p.BannedAtS != nil {
				run.BannedPairs++
			}
		}
	}
	run.AllBanned = len(run.Pairs) > 0 && run.BannedPairs == len(run.Pairs)
	for o := range honest {
		for h := range honest {
			if p, ok := t.pairs[[2]int{o, h}]; ok && p.BannedAtS != nil {
				run.HonestBans = append(run.HonestBans, *p)
			}
		}
	}
	if run.HonestBans == nil {
		run.HonestBans = []Pair{}
	}
}

// accuracies fills the honest nodes' accuracy summary, and the delta
// against the baseline over the same indices.
func accuracies(run *AttackRun, honest int, baseline *AttackRun) {
	var accs []float64
	for _, n := range run.Nodes {
		if n.Index < honest && !n.Attacker {
			accs = append(accs, n.FinalAccuracy)
		}
	}
	if len(accs) == 0 {
		return
	}
	run.HonestAccuracyMean, run.HonestAccuracyMin = Sum(accs)/float64(len(accs)), slices.Min(accs)
	if baseline == nil || baseline.Error != "" || run == baseline {
		return
	}
	var base []float64
	for _, n := range baseline.Nodes {
		if n.Index < honest {
			base = append(base, n.FinalAccuracy)
		}
	}
	if len(base) > 0 {
		d := 100 * (run.HonestAccuracyMean - Sum(base)/float64(len(base)))
		run.AccuracyDeltaPP = &d
	}
}

// hostile is one suite in progress.
type hostile struct {
	cfg     HostileConfig
	netID   string
	seq     int
	started time.Time
}

// apiTimeout bounds one request to a node's API: a node too loaded to
// answer in time only misses a poll.
const apiTimeout = 2 * time.Second

// RunHostile runs the baseline (if asked) and then one swarm per attack,
// and returns the results. It writes nothing to cfg.Out: see
// WriteHostile. A swarm that fails is recorded with its error; only
// cancellation stops the suite.
func RunHostile(ctx context.Context, cfg HostileConfig) (*HostileResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Work == "" {
		cfg.Work = filepath.Join(cfg.Out, "work")
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	h := &hostile{cfg: cfg, started: time.Now(), netID: strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}
	res := &HostileResult{Schema: HostileSchema, Command: cfg.Command, Started: h.started.UTC(), Machine: machineInfo(),
		Settings: HostileSettings{Nodes: cfg.Nodes, Attackers: cfg.Attackers, DurationS: cfg.Duration.Seconds(),
			Dataset: cfg.Dataset, Model: cfg.Model, AvgIntervalS: cfg.AvgInterval.Seconds(), Threads: cfg.Threads,
			PollS: cfg.PollEvery.Seconds(), AccuracyWindowS: cfg.AccuracyWindow.Seconds(), NodeArgs: cfg.NodeArgs},
		Runs: []AttackRun{}}
	total := len(cfg.Attacks)
	if cfg.Baseline {
		total++
	}
	done := 0
	report := func(run AttackRun) {
		done++
		fmt.Fprintf(cfg.Progress, "[%d/%d] %s | elapsed %s\n", done, total, attackLine(run),
			time.Since(h.started).Round(time.Second))
	}
	if cfg.Baseline {
		run, err := h.swarm(ctx, node.Adversary{}, 0)
		if err != nil {
			return nil, err
		}
		accuracies(&run, cfg.Nodes-cfg.Attackers, nil)
		res.Baseline = &run
		report(run)
	}
	for _, kind := range cfg.Attacks {
		adv, _ := cfg.adversary(kind)
		run, err := h.swarm(ctx, adv, cfg.Attackers)
		if err != nil {
			return nil, err
		}
		accuracies(&run, cfg.Nodes-cfg.Attackers, res.Baseline)
		res.Runs = append(res.Runs, run)
		report(run)
	}
	res.RunTimeS = time.Since(h.started).Seconds()
	return res, nil
}

// attackLine is a finished swarm in one line.
func attackLine(r AttackRun) string {
	name := r.Attack
	if name == AttackNone {
		name = "all honest"
	} else {
		name = fmt.Sprintf("%s %g", r.Attack, r.Strength)
	}
	if r.Error != "" {
		return name + ": FAILED: " + r.Error
	}
	s := fmt.Sprintf("%s: honest accuracy %.2f%% (min %.2f%%)", name, 100*r.HonestAccuracyMean, 100*r.HonestAccuracyMin)
	if r.AccuracyDeltaPP != nil {
		s += fmt.Sprintf(", %+.2f pp vs all honest", *r.AccuracyDeltaPP)
	}
	if r.Attack != AttackNone {
		s += fmt.Sprintf("; attackers banned in %d/%d pairs", r.BannedPairs, len(r.Pairs))
		if at := banTimes(r); len(at) > 0 {
			s += fmt.Sprintf(" (median %.1fs)", Median(at))
		}
	}
	if len(r.HonestBans) > 0 {
		s += fmt.Sprintf("; %d HONEST NODE(S) BANNED BY HONEST NODES", len(r.HonestBans))
	} else {
		s += "; no honest node banned"
	}
	return s
}

// nodeArgs are every node's flags in one swarm.
func (h *hostile) nodeArgs(net, startFile string) []string {
	c := h.cfg
	args := []string{"--no-data-dir", "--log-level", "warn", "--network", net, "--seed", "1",
		"--dataset", c.Dataset, "--model", c.Model, "--epochs", "0", "--schedule", "const", "--threads", strconv.Itoa(c.Threads),
		"--avg-interval", c.AvgInterval.String(), "--eval-every", EvalEvery.String(),
		"--checkpoint-every", "0", "--start-file", startFile}
	if c.DataPath != "" {
		args = append(args, "--data", c.DataPath)
	}
	return append(args, c.NodeArgs...)
}

// swarm runs one swarm: attackers nodes at the end attack with adv (none
// if attackers is 0). Only cancellation is returned as an error; any
// other failure is the run's Error.
func (h *hostile) swarm(ctx context.Context, adv node.Adversary, attackers int) (AttackRun, error) {
	run := AttackRun{Attack: cmp.Or(adv.Kind, AttackNone), Strength: adv.Strength, Pairs: []Pair{}, HonestBans: []Pair{}}
	h.seq++
	err := h.measure(ctx, &run, adv, attackers)
	if ctx.Err() != nil {
		return run, ctx.Err()
	}
	if err != nil {
		run.Error = err.Error()
	}
	return run, nil
}

func (h *hostile) measure(ctx context.Context, run *AttackRun, adv node.Adversary, attackers int) error {
	c := h.cfg
	honest := c.Nodes - attackers // every node in the baseline
	dir := filepath.Join(c.Work, fmt.Sprintf("%02d-%s", h.seq, run.Attack))
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	startFile := filepath.Join(dir, "start")
	net := fmt.Sprintf("hostile-%s-%d", h.netID, h.seq)
	perNode := func(i int) (args, env []string) {
		if i < c.Nodes-attackers {
			return nil, nil
		}
		return []string{"--adversary", adv.Kind, "--adversary-strength", strconv.FormatFloat(adv.Strength, 'g', -1, 64)},
			[]string{node.UnlockAdversaryEnv + "=" + node.UnlockAdversaryValue}
	}
	if attackers > 0 {
		fmt.Fprintf(c.Progress, "%s %g: %d nodes, the last %d attacking, %v from a common start...\n", adv.Kind, adv.Strength,
			c.Nodes, attackers, c.Duration)
	} else {
		fmt.Fprintf(c.Progress, "all honest: %d nodes, %v from a common start...\n", c.Nodes, c.Duration)
	}
	began := time.Now()
	tn, err := Up(ctx, Config{Binary: c.Binary, Dir: dir, Nodes: c.Nodes, NodeArgs: h.nodeArgs(net, startFile), PerNode: perNode})
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			tn.Stop(10 * time.Second)
		}
	}()
	peers := make([]string, len(tn.Members))
	clients := make([]*api.Client, len(tn.Members))
	for i, m := range tn.Members {
		peers[i] = m.PeerID
		run.Nodes = append(run.Nodes, NodeOutcome{Index: i, PeerID: m.PeerID, Attacker: i >= c.Nodes-attackers})
		if clients[i], err = api.NewClient(m.API, nil); err != nil {
			return fmt.Errorf("%w: node %d: %w", ErrHostile, i, err)
		}
	}
	if err := sleepCtx(ctx, c.Settle); err != nil {
		return err
	}
	t0 := time.Now()
	run.SetupS = t0.Sub(began).Seconds()
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		return err
	}
	track := newBanTracker(peers)
	status := make([]float64, c.Nodes) // latest /v1/status accuracy
	poll := func() {
		at := time.Since(t0).Seconds()
		for i, cl := range clients[:honest] {
			rctx, cancel := context.WithTimeout(ctx, apiTimeout)
			views, err := cl.Peers(rctx)
			cancel()
			if err != nil {
				continue // a missed poll only delays what it would have seen
			}
			for _, p := range track.observe(at, i, views) {
				who := "attacker"
				if p.Target < honest {
					who = "HONEST"
				}
				fmt.Fprintf(c.Progress, "  %5.1fs: node %d banned %s node %d after %d verdicts\n", at, i, who, p.Target,
					*p.ExchangesAtBan)
			}
		}
	}
	tick := time.NewTicker(c.PollEvery)
	defer tick.Stop()
	lastLine := t0
	exited := tn.Done()
	end := time.NewTimer(c.Duration)
	defer end.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return fmt.Errorf("%w: every node exited before the end; see the logs in %s", ErrHostile, dir)
		case <-end.C:
			break loop
		case <-tick.C:
			poll()
			if time.Since(lastLine) >= 10*time.Second {
				lastLine = time.Now()
				var r AttackRun
				track.outcome(&r, honest)
				line := fmt.Sprintf("  %5.1fs: ", time.Since(t0).Seconds())
				if attackers > 0 {
					line += fmt.Sprintf("attackers banned in %d/%d pairs, ", r.BannedPairs, len(r.Pairs))
				}
				fmt.Fprintf(c.Progress, "%shonest nodes banned %d\n", line, len(r.HonestBans))
			}
		}
	}
	poll()
	for i, cl := range clients {
		rctx, cancel := context.WithTimeout(ctx, apiTimeout)
		if st, err := cl.Status(rctx); err == nil {
			status[i] = st.TestAccuracy
			if i < honest {
				run.HonestClaimsCut += st.CatchUpClaimsCut
			}
		}
		cancel()
	}
	var dead []string
	for _, r := range tn.Summary() {
		if !r.Alive {
			dead = append(dead, strconv.Itoa(r.Index))
		}
	}
	tn.Stop(30 * time.Second)
	stopped = true
	track.outcome(run, honest)
	attackerIDs := map[string]bool{}
	for _, m := range tn.Members[honest:] {
		attackerIDs[m.PeerID] = true
	}
	for i, m := range tn.Members {
		m.mu.Lock()
		final, _ := m.last["test_accuracy"].(float64)
		isFinal := m.last["event"] == "final"
		if i < honest {
			run.HonestCatchUps += int64(len(m.caughtUpFrom))
			for _, from := range m.caughtUpFrom {
				if attackerIDs[from] {
					run.HonestCatchUpsFromAttackers++
				}
			}
		}
		m.mu.Unlock()
		mean, k := m.accuracySince(t0.Add(c.Duration - min(c.AccuracyWindow, c.Duration)))
		switch {
		case k > 0:
			run.Nodes[i].FinalAccuracy, run.Nodes[i].AccuracyFrom = mean, fmt.Sprintf("mean of %d", k)
		case isFinal:
			run.Nodes[i].FinalAccuracy, run.Nodes[i].AccuracyFrom = final, "final"
		case status[i] > 0:
			run.Nodes[i].FinalAccuracy, run.Nodes[i].AccuracyFrom = status[i], "status"
		}
	}
	if len(dead) > 0 {
		return fmt.Errorf("%w: node %s exited before the end; see the logs in %s", ErrHostile, strings.Join(dead, ","), dir)
	}
	for _, n := range run.Nodes[:honest] {
		if n.AccuracyFrom == "" {
			return fmt.Errorf("%w: no test accuracy from node %d; see the logs in %s", ErrHostile, n.Index, dir)
		}
	}
	return nil
}

// accuracySince is the mean of the test accuracies m printed at or after
// from (eval, epoch and final events), and how many there were.
func (m *Member) accuracySince(from time.Time) (mean float64, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.accs {
		if !a.at.Before(from) {
			mean += a.acc
			n++
		}
	}
	if n > 0 {
		mean /= float64(n)
	}
	return mean, n
}
