package merge

import (
	"testing"
	"time"
)

func TestBackoffDoublesToMax(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBackoff(time.Second, 10*time.Second)
	if !b.Ready("a", t0) {
		t.Fatal("a peer never tried is not ready")
	}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	now := t0
	for i, w := range want {
		got := b.Fail("a", now)
		if got != w*time.Second {
			t.Errorf("failure %d: wait %v, want %v", i+1, got, w*time.Second)
		}
		if b.Ready("a", now.Add(got-time.Nanosecond)) {
			t.Errorf("failure %d: ready before its wait of %v ended", i+1, got)
		}
		if !b.Ready("a", now.Add(got)) {
			t.Errorf("failure %d: not ready once its wait of %v ended", i+1, got)
		}
		if b.Failures("a") != i+1 {
			t.Errorf("failure %d: Failures = %d", i+1, b.Failures("a"))
		}
		now = now.Add(got)
	}
}

func TestBackoffPerPeerAndSuccess(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBackoff(time.Second, time.Minute)
	b.Fail("a", t0)
	b.Fail("a", t0)
	b.Fail("b", t0)
	if b.Ready("a", t0.Add(time.Second)) || !b.Ready("b", t0.Add(time.Second)) {
		t.Errorf("after 2 failures of a and 1 of b, at +1s: a ready %v (want false), b ready %v (want true)",
			b.Ready("a", t0.Add(time.Second)), b.Ready("b", t0.Add(time.Second)))
	}
	if !b.Ready("c", t0) {
		t.Error("another peer's failures hold back c")
	}
	if n := b.Waiting(t0); n != 2 {
		t.Errorf("Waiting = %d, want 2", n)
	}
	b.Succeed("a")
	if !b.Ready("a", t0) || b.Failures("a") != 0 {
		t.Errorf("after a success: ready %v, failures %d; want ready with none", b.Ready("a", t0), b.Failures("a"))
	}
	// The next failure starts the doubling over.
	if w := b.Fail("a", t0); w != time.Second {
		t.Errorf("first failure after a success waits %v, want 1s", w)
	}
}

// A peer that left is forgotten once its wait ended more than Max ago, so
// the table does not grow with every peer ever seen; one that comes back
// starts afresh.
func TestBackoffForgetsOldPeers(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBackoff(time.Second, 4*time.Second)
	for range 5 {
		b.Fail("gone", t0)
	}
	later := t0.Add(4*time.Second + 4*time.Second + time.Millisecond)
	b.Fail("other", later)
	if _, ok := b.peers["gone"]; ok {
		t.Errorf("a peer whose wait ended more than Max ago is still kept: %+v", b.peers["gone"])
	}
	if w := b.Fail("gone", later); w != time.Second {
		t.Errorf("a forgotten peer's first failure waits %v, want 1s", w)
	}
}
