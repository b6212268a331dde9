package api

import (
	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
)

// Source is what the server reads. *node.Node implements it; tests use a
// fake. Every method may be called from many request goroutines at once and
// must return values the server may keep (copies, not views of live state).
type Source interface {
	// Status is the node's current status.
	Status() node.Status
	// Peers lists the fresh peers training the same model.
	Peers() []node.PeerStatus
	// History returns the last k metric points, oldest first (all if k <= 0).
	History(k int) []store.Point
	// Snapshot returns a frozen copy of the model and its layout.
	Snapshot() (params.Snapshot, params.Layout)
	// ModelMeta names what an exported model was trained as.
	ModelMeta() (model, dataset, network string, seed uint64)
	// Checkpoints lists the stored checkpoints, newest first.
	Checkpoints() ([]store.Info, error)
}

// SampleCounter is optionally implemented by a Source that counts the
// training samples it processed (unlike progress, which falls when a merge
// mixes in an older model). When present, /metrics exports
// meshtrain_samples_total.
type SampleCounter interface {
	SamplesTotal() int64
}

var _ Source = (*node.Node)(nil)
