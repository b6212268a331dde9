package params

// Snapshot is a frozen copy of a model at one moment: what a checkpoint
// stores, what a peer is served and what a merge reads. Its Params are never
// written after the snapshot is taken, so it may be shared between goroutines.
type Snapshot struct {
	Fingerprint Fingerprint
	// Step counts local optimizer steps taken by this node.
	Step int64
	// Progress is the sample estimate described on Progress.
	Progress Progress
	Params   []float32
}

// Clone returns a deep copy.
func (s Snapshot) Clone() Snapshot {
	s.Params = append([]float32(nil), s.Params...)
	return s
}
