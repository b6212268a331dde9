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

// WriteAll writes results.json, report.md and the plots to dir.
func WriteAll(dir string, r *Results) error {
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
	return WritePlots(dir, r)
}
