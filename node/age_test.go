package node

import (
	"testing"
	"time"
)

// A model's age is the time since it last took in a peer's model: a
// fresh peer's model refreshes it, a staler one does not, a catch-up
// replaces it with the pulled model's, and before any merge it counts from
// the node's start.
func TestModelAge(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	n := &Node{started: t0}
	n.infoTime.Store(t0.UnixNano())
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		what    string
		now     time.Duration
		took    time.Duration // age of the model taken in; <0: none
		replace bool
		want    time.Duration // our age at now, after it
	}{
		{"never merged: age since start", 3 * time.Second, -1, false, 3 * time.Second},
		{"merged a model 40 ms old", 5 * time.Second, 40 * time.Millisecond, false, 40 * time.Millisecond},
		{"time passes", 6 * time.Second, -1, false, time.Second + 40*time.Millisecond},
		{"a stale model does not refresh ours", 6 * time.Second, time.Hour, false, time.Second + 40*time.Millisecond},
		{"a fresh one does", 7 * time.Second, 10 * time.Millisecond, false, 10 * time.Millisecond},
		{"a catch-up takes the pulled model's age", 8 * time.Second, 2 * time.Minute, true, 2 * time.Minute},
		{"a negative age counts as fresh", 9 * time.Second, -1, false, 2*time.Minute + time.Second},
	}
	for _, s := range steps {
		if s.took >= 0 {
			n.tookIn(at(s.now), s.took, s.replace)
		}
		if got := n.modelAge(at(s.now)); got != s.want {
			t.Fatalf("%s: age %v, want %v", s.what, got, s.want)
		}
	}
	n.tookIn(at(10*time.Second), -time.Second, false)
	if got := n.modelAge(at(10 * time.Second)); got != 0 {
		t.Errorf("after taking in a model of negative age: %v, want 0", got)
	}
	if got := n.modelAge(at(0)); got != 0 {
		t.Errorf("age before the latest merge: %v, want 0", got)
	}
}
