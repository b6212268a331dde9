package averaging

import (
	"fmt"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// Ahead says what weight a receiver gives a remote model that is ahead of
// its own (has seen more samples):
//
//   - fresh (the default): the base weight Alpha, as a fresh model. Of an
//     exchange between a fast node and a slow one, the fast node takes
//     Alpha f(s) of the slow model and the slow node Alpha of the fast
//     one: with Alpha 0.5 the slow node lands halfway and keeps half of
//     its own, older model.
//   - pull: 1 - Alpha f(s'), where s' is how stale our own model is as
//     the remote would measure it (Lag with the two progress values
//     swapped), and never less than Alpha. Both sides of an exchange then
//     land on the same point, the staleness-weighted mean the fast node
//     computes, so the slow node's model is pulled all the way to the
//     swarm's fresher state instead of halfway; a slow node's data still
//     counts through the gradients it adds after the merge.
//
// pull needs a staleness measured from progress (steps or relative): an
// age says nothing about which model is ahead.
type Ahead uint8

// The rules, named "fresh" and "pull" in configs and flags.
const (
	AheadFresh Ahead = iota
	AheadPull
)

// DefaultAhead is the rule DefaultMerger uses.
const DefaultAhead = AheadFresh

var aheadNames = [...]string{AheadFresh: "fresh", AheadPull: "pull"}

// ParseAhead parses "fresh" or "pull".
func ParseAhead(s string) (Ahead, error) {
	for a, name := range aheadNames {
		if s == name {
			return Ahead(a), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want fresh or pull)", ErrBadAhead, s)
}

// String returns the name ParseAhead accepts.
func (a Ahead) String() string {
	if a.valid() {
		return aheadNames[a]
	}
	return fmt.Sprintf("Ahead(%d)", int(a))
}

// MarshalText lets a rule sit in a JSON or flag-backed config as its name.
func (a Ahead) MarshalText() ([]byte, error) {
	if !a.valid() {
		return nil, fmt.Errorf("%w: %d", ErrBadAhead, int(a))
	}
	return []byte(aheadNames[a]), nil
}

// UnmarshalText is the inverse of MarshalText.
func (a *Ahead) UnmarshalText(b []byte) error {
	v, err := ParseAhead(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

func (a Ahead) valid() bool { return int(a) < len(aheadNames) }

// Weigh returns the staleness s of a remote model at progress remote and
// of age age, seen by a receiver at progress local with batch samples per
// step, its decay f(s) and the merge weight a: Alpha f(s), or under
// AheadPull for a remote model ahead of ours 1 - Alpha f(s') (at least
// Alpha), where s' is our own model's staleness as the remote measures it
// (s is then 0 and f the decay of s'). It is the one place a merge weight
// is computed from progress.
func (m Merger) Weigh(local, remote params.Progress, age time.Duration, batch int) (s, f, a float64, err error) {
	if err := m.Validate(); err != nil {
		return 0, 0, 0, err
	}
	if s, err = m.Lag.Staleness(local, remote, age, batch); err != nil {
		return 0, 0, 0, err
	}
	if m.Ahead == AheadPull && remote > local {
		behind, err := m.Lag.Staleness(remote, local, 0, batch)
		if err != nil {
			return 0, 0, 0, err
		}
		if f, _, err = m.weight(behind); err != nil {
			return 0, 0, 0, err
		}
		return s, f, max(m.Alpha, 1-m.Alpha*f), nil
	}
	if f, a, err = m.weight(s); err != nil {
		return 0, 0, 0, err
	}
	return s, f, a, nil
}
