package testnet

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
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

// WriteReport renders report.md: the setup, each mode's medians, the
// ratios and bars, every run, the tuning, and the plots.
func WriteReport(w io.Writer, r *Results) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	st := r.Settings
	p("# meshtrain benchmark\n\n")
	if st.Quick {
		p("**Quick run** (a smoke test: one seed, fixed learning rates, a lower target, short runs). " +
			"Its figures are not the benchmark's.\n\n")
	}
	p("- Command: `%s`\n", r.Command)
	p("- Date: %s; run time %s\n", r.Started.Format(time.RFC3339), (time.Duration(r.RunTimeS) * time.Second).String())
	m := r.Machine
	p("- Machine: %d CPUs", m.NumCPU)
	if m.CPUModel != "" {
		p(" (%s)", m.CPUModel)
	}
	p(", %.1f GiB memory, %s/%s, %s, meshtrain %s", float64(m.MemoryBytes)/(1<<30), m.OS, m.Arch, m.GoVersion, m.Version)
	if m.LoadAvg != "" {
		p("; load average at start %s", m.LoadAvg)
	}
	p("\n\n## Setup\n\n")
	shards := "iid"
	if st.NonIID > 0 {
		shards = fmt.Sprintf("label-skewed (Dirichlet alpha %g)", st.NonIID)
	}
	p("| nodes | slowdowns | dataset | shards | model | batch | schedule | target | seeds | tuning seed | run length |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	p("| %d | %s | %s | %s | %s | %d | %s | %.1f%% | %d | %d | %.0f s |\n\n", st.Nodes, joinG(st.Slowdowns), st.Dataset,
		shards, st.Model, st.Batch, st.Schedule, 100*st.Target, len(st.Seeds), st.TuneSeed, st.DurationS)
	p("- Heterogeneity: %s.\n", st.Heterogeneity)
	p("- Base step %.3f ms; solo samples/s per node %s (sum %.0f, the cluster's ceiling).\n", 1000*r.BaseStepS,
		fmtRates(r.SoloSamplesPerS), r.SoloSamplesPerSSum)
	p("- Gossip: a merge started every %.0f ms per node (±20%%; one at a time), alpha %g, staleness decay %s "+
		"(gossip-const: const), models sent as %s. Sync sends fp32 parameters and momentum to a leader every step.\n",
		1000*st.AvgIntervalS, st.Alpha, st.Staleness, st.WireDType)
	p("- Learning rates:")
	for _, mode := range st.Modes {
		p(" %s %g;", mode, r.LR[mode])
	}
	if len(r.Tuning) > 0 {
		p(" the fastest to target on seed %d from the grid %s (sync: %s).\n", st.TuneSeed, joinG(st.LRGrid), joinG(st.SyncLRGrid))
	} else {
		p(" fixed, not tuned.\n")
	}
	if st.Anneal {
		p("- Schedule: %s while tuning; in the report runs each mode's learning rate decays to zero at %.0f s "+
			"(cosine over the progress its tuning run had reached by then):", st.Schedule, st.DurationS)
		for _, mode := range st.Modes {
			p(" %s `%s`;", mode, r.Schedule[mode])
		}
		p("\n")
	}
	p("- Every node snapshots its model every %.0f ms; snapshots are scored on the test set after each run, "+
		"outside the nodes' busy time. Time 0 is the common start (all nodes released at once).\n", 1000*st.SnapshotS)
	if len(st.NodeArgs) > 0 {
		p("- Extra node flags: `%s`\n", strings.Join(st.NodeArgs, " "))
	}

	p("\n## Results (medians over %d seed(s))\n\n", len(st.Seeds))
	p("| mode | time to target, all nodes | first node | samples to target | accuracy at %.0f s | cluster samples/s | efficiency | busy fraction per node | MB sent per node |\n", st.FixedWallS)
	p("|---|---|---|---|---|---|---|---|---|\n")
	for _, mode := range st.Modes {
		s := r.Summary[mode]
		if s == nil {
			continue
		}
		reached := ""
		if s.Reached < s.Runs {
			reached = fmt.Sprintf(" (%d of %d reached)", s.Reached, s.Runs)
		}
		p("| %s | %s%s | %s | %s | %s | %s | %s | %s | %s |\n", mode, secs(s.TimeToTargetS), reached, secs(s.FirstNodeTimeS),
			num(s.SamplesToTarget, "%.0f"), pct(s.FinalAccuracy), num(s.SamplesPerS, "%.0f"), num(s.Efficiency, "%.3f"),
			fracs(s.BusyFraction), mbs(s.BytesSentPerNode))
	}
	if s := r.Summary[ModeSync]; s != nil {
		p("\nIdeal time to target (sync's samples to target / sum of solo rates): %s. "+
			"Sync at its structural pace (sync's samples to target / (nodes x the slowest solo rate), "+
			"a synchronous implementation with free communication): %s.\n", secs(s.IdealTimeToTarget), secs(s.SyncPaceTimeS))
	}
	q := r.Ratios
	p("\nRatios: gossip / sync time to target %s; gossip / sync at its structural pace %s; gossip / ideal %s; "+
		"cluster samples/s gossip / sync %s (the profile's structural ratio is %.2fx).\n", times(q.GossipOverSync),
		times(q.GossipOverSyncPace), times(q.GossipOverIdeal), times(q.ThroughputGossipOverSync), q.StructuralThroughput)

	p("\n## Bars\n\n| claim | want | measured | pass |\n|---|---|---|---|\n")
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

	p("\n## Runs\n\n")
	writeRunTable(&b, r.Runs)
	if len(r.Tuning) > 0 {
		p("\n## Learning-rate tuning (seed %d)\n\n", st.TuneSeed)
		writeRunTable(&b, r.Tuning)
	}
	p("\n## Plots\n\n![accuracy vs wall time](%s)\n\n![busy fraction per node](%s)\n\n![time to target](%s)\n",
		AccuracyPlot, BusyPlot, TimePlot)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRunTable(b *strings.Builder, runs []Run) {
	fmt.Fprintf(b, "| mode | seed | lr | all nodes | first node | samples to target | ideal | final accuracy | samples/s | efficiency | busy per node | merges per node | network wait s per node | load |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range runs {
		if run.Error != "" {
			fmt.Fprintf(b, "| %s | %d | %g | failed: %s |\n", run.Mode, run.Seed, run.LR, strings.ReplaceAll(run.Error, "|", "/"))
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
		fmt.Fprintf(b, "| %s | %d | %g | %s | %s | %s | %s | %.2f%% | %.0f | %.3f | %s | %s | %s | %.1f |\n", run.Mode, run.Seed,
			run.LR, secs(run.TimeToTargetS), secs(run.FirstNodeTimeS), num(run.SamplesToTarget, "%.0f"), secs(run.IdealTimeS),
			100*run.FinalAccuracyMean, run.SamplesPerS, run.Efficiency, fracs(run.BusyFraction), strings.Join(merges, " / "),
			strings.Join(waits, " / "), run.LoadAvg)
	}
}

// WriteSummary prints each mode's medians, the ratios and the bars as a
// table, for the end of `meshtrain bench`.
func WriteSummary(w io.Writer, r *Results) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tLR\tTIME TO TARGET\tFIRST NODE\tSAMPLES TO TARGET\tFINAL ACC\tSAMPLES/S\tEFFICIENCY\tMIN BUSY")
	for _, mode := range r.Settings.Modes {
		s := r.Summary[mode]
		if s == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mode, r.LR[mode], secs(s.TimeToTargetS), secs(s.FirstNodeTimeS),
			num(s.SamplesToTarget, "%.0f"), pct(s.FinalAccuracy), num(s.SamplesPerS, "%.0f"), num(s.Efficiency, "%.3f"),
			num(s.MinBusyFraction, "%.3f"))
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
