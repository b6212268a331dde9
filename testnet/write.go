package testnet

import (
	"fmt"
	"os"
	"path/filepath"
)

// Files a benchmark writes to its output dir.
const (
	ResultsFile  = "results.json"
	ReportFile   = "report.md"
	AccuracyPlot = "accuracy.png"
	BusyPlot     = "busy.png"
	TimePlot     = "time_to_target.png"
	// ConsensusPlot is written only when a run recorded its consensus
	// distance (not from results that predate it).
	ConsensusPlot = "consensus.png"
)

// WriteAll writes results.json, report.md and the plots to dir: each
// network's plots, named as plotFile says.
func WriteAll(dir string, r *BenchResults) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrBench, err)
	}
	f, err := os.Create(filepath.Join(dir, ResultsFile))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBench, err)
	}
	if err := WriteResults(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%w: %w", ErrBench, err)
	}
	rf, err := os.Create(filepath.Join(dir, ReportFile))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBench, err)
	}
	if err := WriteReport(rf, r); err != nil {
		rf.Close()
		return fmt.Errorf("%w: report: %w", ErrBench, err)
	}
	if err := rf.Close(); err != nil {
		return fmt.Errorf("%w: %w", ErrBench, err)
	}
	for _, n := range r.Networks {
		if err := WritePlots(dir, n, func(name string) string { return plotFile(r, n, name) }); err != nil {
			return err
		}
	}
	return nil
}

// plotFile is the file name of network r's plot called name: name itself
// when the benchmark ran on one network, else prefixed by the network's
// slug (wan-40ms-100mbit-accuracy.png).
func plotFile(br *BenchResults, r *Results, name string) string {
	if len(br.Networks) <= 1 {
		return name
	}
	n, err := ParseNet(r.Network.Name)
	if err != nil {
		return r.Network.Name + "-" + name
	}
	return n.Slug() + "-" + name
}
