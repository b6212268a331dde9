package params

import "time"

// Snapshot is a frozen copy of a model at one moment: what a checkpoint
// stores, what a peer is served and what a merge reads. Its Params are never
// written after the snapshot is taken, so it may be shared between goroutines.
type Snapshot struct {
	Fingerprint Fingerprint
	// Step counts local optimizer steps taken by this node.
	Step int64
	// Progress is the sample estimate described on Progress.
	Progress Progress
	// Age is how old the model's information about the swarm was when the
	// snapshot was taken: the time since the model last took in a peer's
	// model (or, if it never has, since its node started). A model that
	// reaches a peer is older still by the time it took to get there; the
	// receiver adds that. Staleness is measured from it (averaging's age
	// lag): a model out of touch with the swarm counts for less, however
	// fast or slow its node trains. 0 when not known (a model that is not
	// a node's).
	Age    time.Duration
	Params []float32
}

// Clone returns a deep copy.
func (s Snapshot) Clone() Snapshot {
	s.Params = append([]float32(nil), s.Params...)
	return s
}
