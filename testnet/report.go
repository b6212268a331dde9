package testnet

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshtrain/meshtrain/node"
)

// secs formats an optional time.
func secs(p *float64) string {
	if p == nil {
		return "not reached"
	}
	return fmt.Sprintf("%.2f s", *p)
}

// times formats an optional ratio.
func times(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *p)
}

func num(p *float64, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}

func fracs(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(s, " / ")
}

func mbs(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.1f", x/1e6)
	}
	return strings.Join(s, " / ")
}

func joinG(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%g", x)
	}
	return strings.Join(s, ",")
}

// code formats flags as inline code, "none" for none.
func code(flags []string) string {
	if len(flags) == 0 {
		return "none"
	}
	return "`" + strings.Join(flags, " ") + "`"
}

// modeValue is a mode's value in a per-mode map of the results, else def.
func modeValue[T any](m map[string]T, mode string, def T) T {
	if v, ok := m[mode]; ok {
		return v
	}
	return def
}

// WriteReport renders report.md: the benchmark's command and machine, how
// each network was made, every mode side by side on every network, then
// each network's own report (writeNetwork).
func WriteReport(w io.Writer, br *BenchResults) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# meshtrain benchmark\n\n")
	for _, r := range br.Networks {
		if r.Settings.Quick {
			p("**Quick run** (a smoke test: one seed, no tuning, a short run, a lower target). " +
				"Its figures are not the benchmark's.\n\n")
			break
		}
	}
	p("- Command: `%s`\n", br.Command)
	p("- Date: %s; run time %s\n", br.Started.Format(time.RFC3339), (time.Duration(br.RunTimeS) * time.Second).String())
	m := br.Machine
	p("- Machine: %d CPUs", m.NumCPU)
	if m.CPUModel != "" {
		p(" (%s)", m.CPUModel)
	}
	p(", %.1f GiB memory, %s/%s, %s, meshtrain %s", float64(m.MemoryBytes)/(1<<30), m.OS, m.Arch, m.GoVersion, m.Version)
	if m.LoadAvg != "" {
		p("; load average at start %s", m.LoadAvg)
	}
	p("\n\n## Networks\n\n")
	for _, r := range br.Networks {
		p("- **%s**: %s.\n", r.Network.Name, r.Network.Emulation)
	}
	writeSideBySide(&b, br)
	level := 2
	if len(br.Networks) > 1 {
		level = 3
	}
	for _, r := range br.Networks {
		if len(br.Networks) > 1 {
			p("\n## On %s\n", r.Network.Name)
		}
		writeNetwork(&b, br, r, level)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// perSample formats a run's or mode's bytes per sample: the swarm's, then
// each node's.
func perSample(cluster *float64, nodes []float64) string {
	if cluster == nil {
		return "-"
	}
	s := make([]string, len(nodes))
	for i, x := range nodes {
		s[i] = fmtBytes(x)
	}
	return fmt.Sprintf("%s (%s)", fmtBytes(*cluster), strings.Join(s, " / "))
}

// fmtBytes formats a number of bytes per sample: whole bytes from 100 up,
// three significant digits below.
func fmtBytes(x float64) string {
	if x >= 100 {
		return fmt.Sprintf("%.0f", x)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

// optBytes is fmtBytes of an optional value.
func optBytes(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmtBytes(*p)
}

// writeSideBySide is the headline table: every mode on every network, the
// medians over seeds.
func writeSideBySide(b *strings.Builder, br *BenchResults) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("\n## Every mode on every network\n\n")
	p("Medians over the report seeds. Bytes sent per sample processed: the nodes' parameter bytes over their samples, " +
		"the swarm's and (in brackets) each node's, over the whole run; on an emulated WAN also every byte the nodes put " +
		"on the network (QUIC headers, DHT, pubsub and models) over the swarm's samples.\n\n")
	p("| network | mode | time to target, all nodes | first node | samples to target | bytes sent per sample (per node) | " +
		"wire bytes per sample | busy fraction per node | accuracy at W |\n")
	p("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range br.Networks {
		for _, mode := range r.Settings.Modes {
			s := r.Summary[mode]
			if s == nil {
				continue
			}
			reached := reachedNote(s)
			p("| %s | %s | %s%s | %s | %s | %s | %s | %s | %s at %.2f s |\n", r.Network.Name, mode, secs(s.TimeToTargetS), reached,
				secs(s.FirstNodeTimeS), num(s.SamplesToTarget, "%.0f"), perSample(s.BytesSentPerSample, s.BytesSentPerSamplePerNode),
				optBytes(s.WireBytesSentPerSample), fracs(s.BusyFraction), pct(s.FinalAccuracy), r.Settings.FixedWallS)
		}
	}
}

// writeNetwork is one network's report, its headings at level: the method
// (what each mode runs with and how it differs from a node's defaults,
// what the harness sets), the setup, each mode's medians, the ratios and
// bars, every run, the tuning, and the plots.
func writeNetwork(b *strings.Builder, br *BenchResults, r *Results, level int) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	h := strings.Repeat("#", level)
	st := r.Settings
	writeMethod(b, r, level)
	p("\n%s Setup\n\n", h)
	shards := "iid"
	if st.NonIID > 0 {
		shards = fmt.Sprintf("label-skewed (Dirichlet alpha %g)", st.NonIID)
	}
	p("| network | nodes | slowdowns | dataset | shards | model | batch | target | seeds | tuning seed | W | cap |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	p("| %s | %d | %s | %s | %s | %s | %d | %.1f%% | %d | %d | %.2f s | %.0f s |\n\n", r.Network.Name, st.Nodes, joinG(st.Slowdowns),
		st.Dataset, shards, st.Model, st.Batch, 100*st.Target, len(st.Seeds), st.TuneSeed, st.FixedWallS, st.CapS)
	p("- Network: %s.\n", r.Network.Emulation)
	p("- Heterogeneity: %s.\n", st.Heterogeneity)
	p("- Base step %.3f ms; solo samples/s per node %s (sum %.0f, the cluster's ceiling).\n", 1000*r.BaseStepS,
		fmtRates(r.SoloSamplesPerS), r.SoloSamplesPerSSum)
	p("- Report runs:")
	for _, mode := range st.Modes {
		length := fmt.Sprintf("%g epochs", r.Epochs[mode])
		if r.Epochs[mode] == 0 {
			length = fmt.Sprintf("no end, stopped at %.2f s", st.FixedWallS)
		}
		p(" %s lr %g, `%s`, %s;", mode, r.LR[mode], r.Schedule[mode], length)
	}
	p("\n")
	p("- Every node snapshots its model every %.0f ms; snapshots are scored on the test set after each run, "+
		"outside the nodes' busy time. Time 0 is the common start (all nodes released at once).\n", 1000*st.SnapshotS)
	if len(st.NodeArgs) > 0 {
		p("- Extra node flags: `%s`\n", strings.Join(st.NodeArgs, " "))
	}

	p("\n%s Results (medians over %d seed(s))\n\n", h, len(st.Seeds))
	p("| mode | time to target, all nodes | first node | samples to target | accuracy at W (%.2f s) | wall time | cluster samples/s | efficiency | busy fraction per node | MB sent per node | bytes sent per sample (per node) |\n", st.FixedWallS)
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, mode := range st.Modes {
		s := r.Summary[mode]
		if s == nil {
			continue
		}
		reached := reachedNote(s)
		capped := ""
		if s.Capped > 0 {
			capped = fmt.Sprintf(" (%d capped)", s.Capped)
		}
		p("| %s | %s%s | %s | %s | %s | %s%s | %s | %s | %s | %s | %s |\n", mode, secs(s.TimeToTargetS), reached, secs(s.FirstNodeTimeS),
			num(s.SamplesToTarget, "%.0f"), pct(s.FinalAccuracy), secs(s.WallS), capped, num(s.SamplesPerS, "%.0f"),
			num(s.Efficiency, "%.3f"), fracs(s.BusyFraction), mbs(s.BytesSentPerNode),
			perSample(s.BytesSentPerSample, s.BytesSentPerSamplePerNode))
	}
	if s := r.Summary[ModeSync]; s != nil {
		p("\nIdeal time to target (sync's samples to target / sum of solo rates): %s. "+
			"Sync at its structural pace (sync's samples to target / (nodes x the slowest solo rate), "+
			"a synchronous implementation with free communication): %s.", secs(s.IdealTimeToTarget), secs(s.SyncPaceTimeS))
		if s.CoRunIdealTimeS != nil {
			p(" Co-run ideal (sync's samples to target / the cluster samples/s local measured on the same seed and network, "+
				"what the machine delivers with no communication at all): %s.", secs(s.CoRunIdealTimeS))
		}
		p("\n")
	}
	q := r.Ratios
	p("\nRatios: gossip / sync time to target %s; gossip / sync at its structural pace %s; gossip / ideal %s; ",
		times(q.GossipOverSync), times(q.GossipOverSyncPace), times(q.GossipOverIdeal))
	if q.GossipOverCoRunIdeal != nil {
		p("gossip / co-run ideal %s; ", times(q.GossipOverCoRunIdeal))
	}
	p("cluster samples/s gossip / sync %s (the profile's structural ratio is %.2fx", times(q.ThroughputGossipOverSync),
		q.StructuralThroughput)
	if q.CoRunStructuralThroughput != nil {
		p("; on this machine, local's cluster samples/s over sync's structural pace, %s", times(q.CoRunStructuralThroughput))
	}
	p(").\n")
	writeLink(b, r)

	writeConsensus(b, r)
	writeClockShare(b, r)

	p("\n%s Bars\n\n| claim | want | measured | pass |\n|---|---|---|---|\n", h)
	for _, bar := range r.Bars {
		verdict := "no"
		if bar.Pass {
			verdict = "yes"
		}
		note := ""
		if bar.Note != "" {
			note = " (" + bar.Note + ")"
		}
		p("| %s%s | %s | %s | %s |\n", bar.Name, note, bar.Want, num(bar.Measured, "%.3f"), verdict)
	}

	p("\n%s Runs\n\n", h)
	writeRunTable(b, r.Runs)
	if len(r.Tuning) > 0 {
		p("\n%s Runs on the tuning seed (%d): W and the learning rates\n\n", h, st.TuneSeed)
		writeRunTable(b, r.Tuning)
	}
	p("\n%s Plots\n\n![accuracy vs wall time](%s)\n\n![busy fraction per node](%s)\n\n![time to target](%s)\n",
		h, plotFile(br, r, AccuracyPlot), plotFile(br, r, BusyPlot), plotFile(br, r, TimePlot))
	if hasConsensus(r) {
		p("\n![consensus distance vs wall time](%s)\n", plotFile(br, r, ConsensusPlot))
	}
}

// writeLink is the report's line on what an emulated WAN carried: each
// mode's wire bytes per sample, the drops and losses, and how closely the
// relay kept the model's schedule (nothing on loopback).
func writeLink(b *strings.Builder, r *Results) {
	var parts []string
	var drops, lost uint64
	strangers := 0
	lateMax, lateMeans, cores := 0.0, []float64{}, []float64{}
	for _, mode := range r.Settings.Modes {
		if s := r.Summary[mode]; s != nil && s.WireBytesSentPerSample != nil {
			parts = append(parts, fmt.Sprintf("%s %s", mode, fmtBytes(*s.WireBytesSentPerSample)))
		}
	}
	for _, run := range append(slices.Clone(r.Tuning), r.Runs...) {
		if l := run.Link; l != nil && run.Error == "" {
			for i := range l.QueueDrops {
				drops += l.QueueDrops[i]
				lost += l.Lost[i]
			}
			strangers += l.Strangers
			lateMax = max(lateMax, l.LateMaxS)
			lateMeans = append(lateMeans, l.LateMeanS)
			if run.BenchCores > 0 {
				cores = append(cores, run.BenchCores)
			}
		}
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(b, "\nOn the emulated WAN: wire bytes sent per sample (median over seeds; every byte the nodes put on the network) %s. "+
		"Over every run: %d packets dropped at full queues, %d lost at random, %d senders that were no node (want 0); "+
		"the relay handed packets over late by %.2f ms on average (median over runs) and %.1f ms at worst",
		strings.Join(parts, ", "), drops, lost, strangers, 1000*Median(lateMeans), 1000*lateMax)
	if len(cores) > 0 {
		fmt.Fprintf(b, ", and the benchmark process, its relay mostly, took %.2f of the machine's cores on average "+
			"(median over runs; CPU a real network would not take from the nodes)", Median(cores))
	}
	b.WriteString(".\n")
}

// hasConsensus tells whether any report run recorded its consensus
// distance (PlotConsensus draws nothing otherwise).
func hasConsensus(r *Results) bool {
	for _, run := range r.Runs {
		if run.Error == "" && len(run.Consensus) > 0 {
			return true
		}
	}
	return false
}

// writeConsensus is the report's line on consensus distance: each mode's
// median at the time every node reached the target (at W in a run that did
// not), and the plot.
func writeConsensus(b *strings.Builder, r *Results) {
	if !hasConsensus(r) {
		return
	}
	var parts []string
	for _, mode := range r.Settings.Modes {
		d, n, atW := ConsensusAtTarget(r.Runs, mode)
		if n == 0 {
			continue
		}
		where := ""
		switch {
		case atW == n:
			where = " (at W)"
		case atW > 0:
			where = fmt.Sprintf(" (%d of %d at W)", atW, n)
		}
		parts = append(parts, fmt.Sprintf("%s %.2e%s", mode, d, where))
	}
	fmt.Fprintf(b, "\nConsensus distance (the mean squared distance of the nodes' models to their average, over time in `%s`), "+
		"median over seeds at the time every node reached the target, or at W in a run that did not: %s.\n",
		ConsensusPlot, strings.Join(parts, ", "))
	parts = parts[:0]
	for _, mode := range r.Settings.Modes {
		var ts, ss []float64
		for _, run := range r.Runs {
			if run.Mode == mode && run.Error == "" && run.AverageTimeToTargetS != nil {
				ts, ss = append(ts, *run.AverageTimeToTargetS), append(ss, *run.AverageSamplesToTarget)
			}
		}
		if len(ts) > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f s, %.0f samples", mode, Median(ts), Median(ss)))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(b, "\nThe swarm's average model (the mean of the nodes' models at each snapshot instant, which no node holds; "+
			"scored after the run) first at the target, median over the runs that got there: %s.\n", strings.Join(parts, "; "))
	}
}

// writeClockShare says how soon the gossip modes' nodes counted the whole
// swarm's samples on their run clocks, which their learning-rate schedule
// reads.
func writeClockShare(b *strings.Builder, r *Results) {
	var parts []string
	for _, mode := range r.Settings.Modes {
		var shares [][]float64
		for _, run := range r.Runs {
			if run.Mode == mode && run.Error == "" && len(run.ClockShare) == len(ClockShareTimes) {
				shares = append(shares, run.ClockShare)
			}
		}
		if len(shares) == 0 {
			continue
		}
		at := make([]string, len(ClockShareTimes))
		for k, t := range ClockShareTimes {
			xs := make([]float64, len(shares))
			for i, s := range shares {
				xs[i] = s[k]
			}
			at[k] = fmt.Sprintf("%.2f at %g s", Median(xs), t)
		}
		parts = append(parts, fmt.Sprintf("%s %s", mode, strings.Join(at, ", ")))
	}
	if len(parts) > 0 {
		fmt.Fprintf(b, "\nRun clocks early in the run (the lowest node's count of the swarm's samples over the true count: "+
			"1 counts the whole swarm, 1/%d a node counting only itself), median over seeds: %s.\n", r.Settings.Nodes, strings.Join(parts, "; "))
	}
}

func writeRunTable(b *strings.Builder, runs []Run) {
	fmt.Fprintf(b, "| mode | seed | flags beyond the harness's | end | wall s | all nodes | first node | samples to target | ideal | accuracy at fixed wall | run clock there | samples/s | efficiency | busy per node | merges per node | network wait s per node | bytes sent per sample (per node) | wire bytes per sample | load |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range runs {
		if run.Error != "" {
			fmt.Fprintf(b, "| %s | %d | %s | failed: %s |\n", run.Mode, run.Seed, code(run.Flags), strings.ReplaceAll(run.Error, "|", "/"))
			continue
		}
		merges := make([]string, len(run.Merges))
		for i, m := range run.Merges {
			merges[i] = fmt.Sprint(m)
		}
		waits := make([]string, len(run.NetworkWaitS))
		for i, w := range run.NetworkWaitS {
			waits[i] = fmt.Sprintf("%.1f", w)
		}
		wire := "-"
		if run.Link != nil {
			wire = fmtBytes(run.Link.WireBytesSentPerSample)
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %.2f | %s | %s | %s | %s | %.2f%% at %.2f s | %.0f | %.0f | %.3f | %s | %s | %s | %s | %s | %.1f |\n",
			run.Mode, run.Seed, code(run.Flags), run.End, run.WallS, secs(run.TimeToTargetS), secs(run.FirstNodeTimeS),
			num(run.SamplesToTarget, "%.0f"), secs(run.IdealTimeS), 100*run.FinalAccuracyMean, run.FixedWallS,
			run.RunClockAtFixedWall, run.SamplesPerS, run.Efficiency, fracs(run.BusyFraction), strings.Join(merges, " / "),
			strings.Join(waits, " / "), perSample(&run.ClusterBytesSentPerSample, run.BytesSentPerSample), wire, run.LoadAvg)
	}
}

// writeMethod describes what every mode ran with, in the results' own
// terms: the gossip settings, how W was measured and how sync was tuned
// and budgeted, the flags each mode's nodes differ from a node's defaults
// by, and the harness's flags.
func writeMethod(b *strings.Builder, r *Results, level int) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	st := r.Settings
	diff := st.DiffersFromDefaults
	h := strings.Repeat("#", level)
	p("\n%s Method\n\n", h)
	where := "loopback"
	if r.Network.Name != NetLoopback {
		where = "an emulated WAN, " + r.Network.Name
	}
	p("Every mode runs on the same local swarm of `meshtrain node` processes (the `local` profile) on %s, "+
		"one run after another; within a seed the modes alternate, so a change in the machine's load falls on every mode alike.\n\n", where)
	// Gossip is described by its run on the tuning seed that W is the wall
	// time of: it runs even when gossip is not among the modes reported.
	lr, sched, epochs := modeValue(r.LR, ModeGossip, st.LR), modeValue(r.Schedule, ModeGossip, st.Schedule),
		modeValue(r.Epochs, ModeGossip, st.Epochs)
	g, reported := diff[ModeGossip]
	for _, t := range append(slices.Clone(r.Tuning), r.Runs...) {
		if t.Mode == ModeGossip && t.Error == "" && t.Seed == st.WSeed && t.WallS == st.FixedWallS {
			lr, sched, epochs = t.LR, t.Schedule, t.Epochs
			if !reported {
				g = t.Flags
			}
			break
		}
	}
	if len(g) == 0 {
		p("- **gossip** runs with a node's defaults (no training or gossip flag beyond the harness's)")
	} else {
		p("- **gossip** runs with a node's defaults except %s", code(g))
	}
	p(": every node starts a merge with one random peer every %g ms at most, or as its pace allows (one step, and half the "+
		"time its recent exchanges took less the round trip of their answer), ±20%%, base weight %g, staleness decay `%s`, "+
		"models sent as %s, learning rate %g with schedule `%s` over a run of %g epochs on the run clock (%g x %d samples, "+
		"every node's samples added up). Every node ends the run by itself. ", 1000*st.AvgIntervalS, st.Alpha, st.Staleness,
		wireWords(st.WireDType), lr, sched, epochs, epochs, st.TrainSamples)
	if slices.Contains(st.Tune, ModeGossip) {
		p("Its learning rate is the fastest to target on seed %d of the grid %s. ", st.TuneSeed, joinG(st.LRGrid))
	}
	which := "the tuning seed"
	if st.WSeed != st.TuneSeed {
		which = "the first report seed (nothing is tuned, so no run is made on the tuning seed)"
	}
	p("Its wall time on %s %d, common start to the last node's exit, **W = %.2f s**, is every mode's budget.\n",
		which, st.WSeed, st.FixedWallS)
	if slices.Contains(st.Modes, ModeGossipConst) {
		p("- **gossip-const**: the same with %s (plain AD-PSGD-style averaging), the control for the staleness decay.\n",
			code(diff[ModeGossipConst]))
	}
	if slices.Contains(st.Modes, ModeDiloco) {
		p("- **diloco**, the baseline for training over the internet (DiLoCo): the same run with %s: every node takes "+
			"`--inner-steps` local steps, then the group all-reduces the pseudo-gradient (the group's model minus the node's, sent as %s) and "+
			"takes an outer Nesterov step; each round waits for the slowest node. Its run clock is the group model's progress.\n",
			code(diff[ModeDiloco]), reducedDType(st.WireDType))
	}
	if slices.Contains(st.Modes, ModeDilocoSpeed) {
		p("- **diloco-speed**: diloco with %s: each node's inner steps are scaled by its speed over the group's fastest "+
			"(DyLU), so all arrive at a round together.\n", code(diff[ModeDilocoSpeed]))
	}
	if slices.Contains(st.Modes, ModeLocal) {
		p("- **local**: the same with %s: no merges, each node trains on its own shard only (its run clock still adds up every node's samples).\n",
			code(diff[ModeLocal]))
	}
	if slices.Contains(st.Modes, ModeSync) {
		p("- **sync**, the baseline with DDP semantics: every step, every node tells a leader it is ready, and the group all-reduces "+
			"each node's update (the group's model minus the node's after its step, sent as %s; a reduce-scatter and an all-gather "+
			"among the nodes), so each step waits for the slowest node. Its batch is "+
			"the sum of the nodes', so it keeps a learning rate and a run length of its own: ", reducedDType(st.WireDType))
		_, fixed := st.FixedLR[ModeSync]
		switch {
		case fixed:
			p("learning rate %g, fixed", r.LR[ModeSync])
		default:
			p("learning rate %g, the fastest to target (else the most accurate at W) of the grid %s on seed %d, each tried at a "+
				"constant rate with no end and stopped at W", r.LR[ModeSync], joinG(st.SyncLRGrid), st.TuneSeed)
		}
		if st.BudgetSync {
			var clock float64
			for _, t := range r.Tuning {
				if t.Mode == ModeSync && t.LR == r.LR[ModeSync] && t.Error == "" {
					clock = t.RunClockAtFixedWall
					break
				}
			}
			p("; its report runs are budgeted to W: they run the run clock its tuning run at that rate had reached at W "+
				"(%.0f samples of group progress, so `--epochs %g`), with the schedule `%s` over it, so its learning rate "+
				"decays to zero at about W as gossip's does. Flags: %s.\n", clock, r.Epochs[ModeSync], r.Schedule[ModeSync],
				code(diff[ModeSync]))
		} else {
			p("; its report runs run at that constant rate with no end and are stopped at W (no budgeted run: a quick run). Flags: %s.\n",
				code(diff[ModeSync]))
		}
	}
	if st.EMA > 0 {
		peers := ""
		if st.EMAPeers > 0 {
			peers = fmt.Sprintf(", which also takes in every peer's model a gossip node merges (weight %g, `--ema-peers`)", st.EMAPeers)
		}
		p("- Every node of every mode reports, and the snapshots hold, the moving average of its weights "+
			"(decay %g per step, a node's `--ema` default%s), not its live weights, unless the mode's flags set `--ema`.\n", st.EMA, peers)
	}
	p("- Accuracy at equal wall time is every mode's at W; a node that ended its run holds its final model from then on. "+
		"Every run is capped at %.0f s; a run that hits the cap is marked `capped`, not failed.\n", st.CapS)

	p("\n%s# Settings that differ from a node's defaults\n\n", h)
	p("Every flag a mode's report runs give their nodes beyond the harness's own (below), compared with `meshtrain node`'s defaults:\n\n")
	p("| mode | differs from a node's defaults by |\n|---|---|\n")
	for _, mode := range st.Modes {
		p("| %s | %s |\n", mode, code(diff[mode]))
	}
	if len(st.Harness) > 0 {
		p("\n%s# Harness settings every node gets\n\n| flag | why |\n|---|---|\n", h)
		for _, h := range st.Harness {
			p("| `%s` | %s |\n", h.Flag, h.Why)
		}
	}
}

// WriteSummary prints, network by network, each mode's medians, the
// ratios and the bars as a table, for the end of `meshtrain bench`.
func WriteSummary(w io.Writer, br *BenchResults) {
	for _, r := range br.Networks {
		writeNetworkSummary(w, r)
	}
}

func writeNetworkSummary(w io.Writer, r *Results) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "on %s: W (gossip's wall time on seed %d) = %.2f s; accuracy at equal wall time is read there\n",
		r.Network.Name, r.Settings.WSeed, r.Settings.FixedWallS)
	fmt.Fprintln(tw, "MODE\tLR\tEPOCHS\tTIME TO TARGET\tFIRST NODE\tSAMPLES TO TARGET\tBYTES/SAMPLE\tACC AT W\tWALL\tSAMPLES/S\tEFFICIENCY\tMIN BUSY\tDIFFERS FROM NODE DEFAULTS")
	for _, mode := range r.Settings.Modes {
		s := r.Summary[mode]
		if s == nil {
			continue
		}
		diff := strings.Join(r.Settings.DiffersFromDefaults[mode], " ")
		if diff == "" {
			diff = "none"
		}
		fmt.Fprintf(tw, "%s\t%g\t%g\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mode, r.LR[mode], r.Epochs[mode],
			secs(s.TimeToTargetS), secs(s.FirstNodeTimeS), num(s.SamplesToTarget, "%.0f"), optBytes(s.BytesSentPerSample),
			pct(s.FinalAccuracy), secs(s.WallS),
			num(s.SamplesPerS, "%.0f"), num(s.Efficiency, "%.3f"), num(s.MinBusyFraction, "%.3f"), diff)
	}
	tw.Flush()
	if s := r.Summary[ModeSync]; s != nil {
		fmt.Fprintf(w, "ideal time to target %s, sync at its structural pace %s; gossip/sync %s, gossip/sync pace %s, "+
			"gossip/ideal %s, throughput gossip/sync %s (structural %.2fx)\n", secs(s.IdealTimeToTarget), secs(s.SyncPaceTimeS),
			times(r.Ratios.GossipOverSync), times(r.Ratios.GossipOverSyncPace), times(r.Ratios.GossipOverIdeal),
			times(r.Ratios.ThroughputGossipOverSync), r.Ratios.StructuralThroughput)
	}
	for _, b := range r.Bars {
		verdict := "MISS"
		if b.Pass {
			verdict = "ok"
		}
		fmt.Fprintf(w, "  %-4s %s: %s (want %s)\n", verdict, b.Name, num(b.Measured, "%.3f"), b.Want)
	}
}

// reachedNote says how many of a mode's runs reached the target when not
// all of them did.
func reachedNote(s *ModeSummary) string {
	if s.Reached < s.Runs {
		return fmt.Sprintf(" (%d of %d reached)", s.Reached, s.Runs)
	}
	return ""
}

// reducedDType is what sync and diloco all-reduce for nodes that send
// their models as w (gossip.DType.Reduced).
func reducedDType(w string) string {
	d, _, err := node.ParseWire(w)
	if err != nil {
		return w
	}
	return d.Reduced().String()
}

// wireWords says how gossip's models are sent with --wire-dtype w.
func wireWords(w string) string {
	if w == node.WireAuto {
		return "fp16, or int8 where that makes the exchanges faster (`--wire-dtype auto`)"
	}
	return w
}
