package averaging

import (
	"fmt"
	"math"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// Lag says how a receiver measures the staleness s of a remote model:
//
//   - age: s = the remote model's age in seconds (params.Snapshot.Age: how
//     long ago the model last took in a peer's model, when it was
//     snapshotted, plus the time it took to reach us). It measures how old
//     the model's information about the swarm is, not how much its node
//     has trained: a slow node that merges as often as a fast one sends
//     models as fresh as the fast one's (s well under a second, so f(s)
//     near 1), while a node that was cut off, or restarted from an old
//     checkpoint, counts for less until it has merged again.
//
// and two measures from the two models' progress (samples embodied, mixed
// on every merge), which discount a slow node's model for being slow:
//
//   - steps: s = max(0, local - remote) / batch, how many of the
//     receiver's own steps the remote model is behind. The gap between a
//     fast and a slow node settles at a size set by their speeds and the
//     merge rate, so in a long run a slow node's fresh model stays many
//     steps "stale" and keeps being discounted.
//   - relative: s = 100 * max(0, local - remote) / local, how far behind
//     the remote model is in percent of what the receiver's model has
//     seen. A model at a quarter of our progress (a slow node at the start)
//     is s = 75; one that has seen 97% of our samples is s = 3, whatever
//     the two nodes' speeds: as every model's progress grows, a settled gap
//     between a fast and a slow node shrinks in relative terms, so the slow
//     node's data is discounted less and less over the run.
//
// A remote model ahead of the local one is not stale (s = 0) in both.
// The zero value is LagSteps; DefaultLag is LagAge.
type Lag uint8

// The measures, named "steps", "relative" and "age" in configs and flags.
const (
	LagSteps Lag = iota
	LagRelative
	LagAge
)

// DefaultLag is the staleness measure DefaultMerger uses: relative, which
// on label-skewed shards brought every node to the target with fewer
// samples than steps and than constant weights, and on iid shards needed
// as many as steps (docs/benchmarks.md).
const DefaultLag = LagRelative

var lagNames = [...]string{LagSteps: "steps", LagRelative: "relative", LagAge: "age"}

// ParseLag parses "steps", "relative" or "age".
func ParseLag(s string) (Lag, error) {
	for l, name := range lagNames {
		if s == name {
			return Lag(l), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want age, relative or steps)", ErrBadLag, s)
}

// String returns the name ParseLag accepts.
func (l Lag) String() string {
	if l.valid() {
		return lagNames[l]
	}
	return fmt.Sprintf("Lag(%d)", int(l))
}

// MarshalText lets a measure sit in a JSON or flag-backed config as its name.
func (l Lag) MarshalText() ([]byte, error) {
	if !l.valid() {
		return nil, fmt.Errorf("%w: %d", ErrBadLag, int(l))
	}
	return []byte(lagNames[l]), nil
}

// UnmarshalText is the inverse of MarshalText.
func (l *Lag) UnmarshalText(b []byte) error {
	v, err := ParseLag(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

func (l Lag) valid() bool { return int(l) < len(lagNames) }

// Staleness returns s for a remote model at progress remote and of age
// age (see params.Snapshot.Age) seen by a receiver at progress local with
// batch samples per step. It fails on an unknown measure, a batch that is
// not positive, or a progress value that is negative or not finite; a
// negative age counts as 0.
func (l Lag) Staleness(local, remote params.Progress, age time.Duration, batch int) (float64, error) {
	if !l.valid() {
		return 0, fmt.Errorf("%w: %d", ErrBadLag, int(l))
	}
	s, err := StalenessSteps(local, remote, batch)
	if l == LagAge {
		if err != nil {
			return 0, err
		}
		return max(0, age.Seconds()), nil
	}
	if err != nil || l == LagSteps {
		return s, err
	}
	if s == 0 {
		return 0, nil
	}
	// local > remote >= 0 here, so the ratio is in (0, 1].
	return math.Min(100, 100*float64(local-remote)/float64(local)), nil
}
