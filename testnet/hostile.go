package testnet

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The hostile-swarm suite: a local swarm in which the last few nodes attack
// the others (node.Adversary), one swarm per attack, plus the same swarm
// all honest. It measures what the attack costs the honest nodes (their
// final test accuracy against the all-honest run) and how each honest node
// treats each attacker over time (its /v1/peers view: reputation state,
// score, verdicts, the moment of the ban). An honest node that bans
// another honest node is a bug, and is reported as such.

// HostileSchema names the layout of the suite's results.json.
const HostileSchema = "meshtrain-hostile/1"

// Reputation states as /v1/peers reports them.
const (
	StateOK           = "ok"
	StateIgnored      = "ignored"
	StateDisconnected = "disconnected"
	StateBanned       = "banned"
)

// AttackNone names the all-honest baseline run.
const AttackNone = "none"

// ErrHostile is wrapped by every error of the suite.
var ErrHostile = errors.New("testnet: hostile swarm")

// HostileResult is the suite's results.json. Seconds are _s; times are
// from each swarm's common start.
type HostileResult struct {
	Schema   string          `json:"schema"`
	Command  string          `json:"command"`
	Started  time.Time       `json:"started"`
	RunTimeS float64         `json:"run_time_s"`
	Machine  Machine         `json:"machine"`
	Settings HostileSettings `json:"settings"`
	// Baseline is the swarm all honest (nil if not run).
	Baseline *AttackRun  `json:"baseline"`
	Runs     []AttackRun `json:"runs"`
}

// HostileSettings are the suite's inputs.
type HostileSettings struct {
	Nodes        int     `json:"nodes"`
	Attackers    int     `json:"attackers"`
	DurationS    float64 `json:"duration_s"`
	Dataset      string  `json:"dataset"`
	Model        string  `json:"model"`
	AvgIntervalS float64 `json:"avg_interval_s"`
	Threads      int     `json:"threads"`
	PollS        float64 `json:"poll_every_s"`
	// AccuracyWindowS: each node's accuracy is the mean of its
	// evaluations over the run's last this many seconds.
	AccuracyWindowS float64  `json:"accuracy_window_s,omitempty"`
	NodeArgs        []string `json:"node_args,omitempty"`
}

// AttackRun is one swarm: one attack (or none) from a common start to
// Duration.
type AttackRun struct {
	Attack   string  `json:"attack"` // AttackNone for the baseline
	Strength float64 `json:"strength"`
	// Nodes, attackers last.
	Nodes []NodeOutcome `json:"nodes"`
	// The honest nodes' final test accuracy: mean and worst, and the mean
	// minus the baseline's over the same node indices, in percentage
	// points (null without a baseline, or for the baseline itself).
	HonestAccuracyMean float64  `json:"honest_accuracy_mean"`
	HonestAccuracyMin  float64  `json:"honest_accuracy_min"`
	AccuracyDeltaPP    *float64 `json:"accuracy_delta_pp"`
	// Pairs is every (honest node, attacker): how the first treats the
	// second.
	Pairs []Pair `json:"pairs"`
	// BannedPairs counts the pairs in which the attacker was banned at
	// some point; AllBanned: every pair.
	BannedPairs int  `json:"banned_pairs"`
	AllBanned   bool `json:"all_banned"`
	// HonestBans are the (honest, honest) pairs in which one banned the
	// other: it must stay empty.
	HonestBans []Pair `json:"honest_bans"`
	// HonestCatchUps counts the catch-ups of the honest nodes (models
	// they took whole: their catchup events), HonestCatchUpsFromAttackers
	// those whose event names an attacker as the peer whose model was
	// taken, and HonestClaimsCut those credited less than their model
	// claimed (catch_up_claims_cut of each one's /v1/status at the end).
	HonestCatchUps              int64 `json:"honest_catch_ups"`
	HonestClaimsCut             int64 `json:"honest_claims_cut"`
	HonestCatchUpsFromAttackers int   `json:"honest_catch_ups_from_attackers"`
	// SetupS is the harness's time to start the swarm.
	SetupS float64 `json:"setup_s"`
	// Error is why the swarm could not be measured.
	Error string `json:"error,omitempty"`
}

// The hostile suite's evaluations: every node evaluates its model every
// EvalEvery (and at each end of a pass over its shard), and a node's
// accuracy at the end of a swarm is the mean of those over the run's last
// DefaultAccuracyWindow, its final one included: with softmax on a fifth
// of MNIST about a hundred evaluations of a settled model.
const (
	EvalEvery             = 2 * time.Second
	DefaultAccuracyWindow = 6 * time.Second
)

// NodeOutcome is one node at the end of a swarm.
type NodeOutcome struct {
	Index    int    `json:"index"`
	PeerID   string `json:"peer_id"`
	Attacker bool   `json:"attacker"`
	// FinalAccuracy is the node's test accuracy at the end of the swarm:
	// the mean of the evaluations it printed over the run's last
	// HostileConfig.AccuracyWindow (eval, epoch and final events), or failing
	// that its final event's, or the latest of its /v1/status;
	// AccuracyFrom says which ("mean of N", "final", "status" or "").
	// A constant learning rate leaves a model's accuracy scattered around
	// its plateau by about a third of a point from one evaluation to the
	// next; the mean of several compares plateaus, not draws.
	FinalAccuracy float64 `json:"final_accuracy"`
	AccuracyFrom  string  `json:"accuracy_from"`
}

// Pair is what an observer (an honest node) made of a target, from its
// /v1/peers.
type Pair struct {
	Observer     int    `json:"observer"`
	ObserverPeer string `json:"observer_peer"`
	Target       int    `json:"target"`
	TargetPeer   string `json:"target_peer"`
	// Listed: the observer's /v1/peers listed the target at least once.
	// State, Reputation and Verdicts as last listed ("" and null when the
	// observer did not say).
	Listed     bool             `json:"listed"`
	State      string           `json:"state"`
	Reputation *float64         `json:"reputation"`
	Verdicts   map[string]int64 `json:"verdicts"`
	// BannedAtS is when the observer was first seen banning the target,
	// and ExchangesAtBan the verdicts it had recorded about it by then.
	BannedAtS      *float64 `json:"banned_at_s"`
	ExchangesAtBan *int64   `json:"exchanges_at_ban"`
}

// banTimes are the ban times of the pairs that were banned.
func banTimes(r AttackRun) []float64 {
	var out []float64
	for _, p := range r.Pairs {
		if p.BannedAtS != nil {
			out = append(out, *p.BannedAtS)
		}
	}
	return out
}

// banExchanges are the verdict counts at ban of the pairs that were banned.
func banExchanges(r AttackRun) []float64 {
	var out []float64
	for _, p := range r.Pairs {
		if p.ExchangesAtBan != nil {
			out = append(out, float64(*p.ExchangesAtBan))
		}
	}
	return out
}

// WriteHostile writes results.json and report.md to dir.
func WriteHostile(dir string, r *HostileResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrHostile, err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: encode results: %w", ErrHostile, err)
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("%w: %w", ErrHostile, err)
	}
	var md strings.Builder
	WriteHostileReport(&md, r)
	if err := os.WriteFile(filepath.Join(dir, ReportFile), []byte(md.String()), 0o644); err != nil {
		return fmt.Errorf("%w: %w", ErrHostile, err)
	}
	return nil
}

// ReadHostileFile reads a suite's results.json.
func ReadHostileFile(path string) (*HostileResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHostile, err)
	}
	var r HostileResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrHostile, path, err)
	}
	if r.Schema != HostileSchema {
		return nil, fmt.Errorf("%w: %s: schema %q, want %q", ErrHostile, path, r.Schema, HostileSchema)
	}
	return &r, nil
}

// WriteHostileReport writes the suite's markdown report: one line per
// swarm, then every (honest, attacker) pair.
func WriteHostileReport(w io.Writer, r *HostileResult) {
	s := r.Settings
	honest := s.Nodes - s.Attackers
	fmt.Fprintf(w, "# Hostile swarm\n\n")
	fmt.Fprintf(w, "%d nodes, of which the last %d attack (node.Adversary); %v per swarm from a common start; %s on %s, iid shards; "+
		"each node starts a merge every %gs. Honest accuracy is the mean of each honest node's test accuracies over the run's last %v "+
		"(at each end of a pass over its shard, every %v, and when stopped); "+
		"\"vs all honest\" compares its mean with the same nodes' in the all-honest swarm. "+
		"A ban is the first time an honest node's /v1/peers (read every %gs) showed the attacker as banned.\n\n",
		s.Nodes, s.Attackers, time.Duration(s.DurationS*float64(time.Second)), s.Model, s.Dataset, s.AvgIntervalS,
		time.Duration(s.AccuracyWindowS*float64(time.Second)), EvalEvery, s.PollS)
	if r.Command != "" {
		fmt.Fprintf(w, "Command: `%s`\n\n", r.Command)
	}
	fmt.Fprintf(w, "| attack | strength | honest accuracy (mean / min) | vs all honest | attacker banned | time to ban (median / max) | verdicts at ban (median) | honest nodes banned | honest catch-ups (from an attacker; claims cut) |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|\n")
	runs := r.Runs
	if r.Baseline != nil {
		runs = append([]AttackRun{*r.Baseline}, runs...)
	}
	for _, run := range runs {
		name, strength := run.Attack, strconv.FormatFloat(run.Strength, 'g', -1, 64)
		if run.Attack == AttackNone {
			name, strength = "none (all honest)", "-"
		}
		if run.Error != "" {
			fmt.Fprintf(w, "| %s | %s | failed: %s | | | | | | |\n", name, strength, strings.ReplaceAll(run.Error, "|", "/"))
			continue
		}
		delta, banned, at, ex := "-", "-", "-", "-"
		if run.AccuracyDeltaPP != nil {
			delta = fmt.Sprintf("%+.2f pp", *run.AccuracyDeltaPP)
		}
		if run.Attack != AttackNone {
			banned = fmt.Sprintf("%d/%d", run.BannedPairs, len(run.Pairs))
			if t := banTimes(run); len(t) > 0 {
				at = fmt.Sprintf("%.1fs / %.1fs", Median(t), slices.Max(t))
			}
			if e := banExchanges(run); len(e) > 0 {
				ex = fmt.Sprintf("%.0f", Median(e))
			}
		}
		hb := strconv.Itoa(len(run.HonestBans))
		if len(run.HonestBans) > 0 {
			hb = "**" + hb + "**"
		}
		fmt.Fprintf(w, "| %s | %s | %.2f%% / %.2f%% | %s | %s | %s | %s | %s | %d (%d; %d) |\n", name, strength,
			100*run.HonestAccuracyMean, 100*run.HonestAccuracyMin, delta, banned, at, ex, hb, run.HonestCatchUps,
			run.HonestCatchUpsFromAttackers, run.HonestClaimsCut)
	}
	fmt.Fprintf(w, "\n## Every honest node's view of every attacker\n\n")
	fmt.Fprintf(w, "| attack | honest node | attacker | state at the end | score | banned at | verdicts at ban | verdicts at the end |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		for _, p := range run.Pairs {
			state, score, at, ex := cmp.Or(p.State, "no reputation"), "-", "-", "-"
			if !p.Listed {
				state = "not listed"
			}
			if p.Reputation != nil {
				score = fmt.Sprintf("%.2f", *p.Reputation)
			}
			if p.BannedAtS != nil {
				at = fmt.Sprintf("%.1fs", *p.BannedAtS)
			}
			if p.ExchangesAtBan != nil {
				ex = strconv.FormatInt(*p.ExchangesAtBan, 10)
			}
			fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s | %s |\n", run.Attack, p.Observer, p.Target, state, score, at, ex,
				verdictList(p.Verdicts))
		}
	}
	var bans []string
	for _, run := range runs {
		for _, p := range run.HonestBans {
			bans = append(bans, fmt.Sprintf("- %s: honest node %d banned honest node %d at %.1fs", run.Attack, p.Observer, p.Target,
				*p.BannedAtS))
		}
	}
	if len(bans) > 0 {
		fmt.Fprintf(w, "\n## Honest nodes banned by honest nodes (must never happen)\n\n%s\n", strings.Join(bans, "\n"))
	}
	var accs []string
	for _, run := range runs {
		if run.Error != "" {
			continue
		}
		var a []string
		for _, n := range run.Nodes[:min(honest, len(run.Nodes))] {
			a = append(a, fmt.Sprintf("%.2f%%", 100*n.FinalAccuracy))
		}
		accs = append(accs, fmt.Sprintf("| %s | %s |", run.Attack, strings.Join(a, ", ")))
	}
	fmt.Fprintf(w, "\n## Honest nodes' accuracy\n\n| attack | nodes 0..%d |\n|---|---|\n%s\n", honest-1, strings.Join(accs, "\n"))
}

// verdictList is "accepted 12, outlier 3" in name order.
func verdictList(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
