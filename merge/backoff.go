package merge

import "time"

// Backoff spaces out the attempts to reach a peer that failed, so that a
// peer we cannot reach (behind a NAT we cannot get through, gone, or
// refusing us) costs a dial now and then instead of a failed exchange
// every round. After k failures in a row a peer waits Base·2^(k-1), at
// most Max, before it is tried again; a success forgets its failures.
//
// It is pure: the caller passes the time. It is not safe for concurrent
// use: the averager's goroutine owns it.
type Backoff struct {
	// Base is the wait after a first failure, Max the longest wait.
	Base, Max time.Duration
	peers     map[string]backoffEntry
}

type backoffEntry struct {
	failures int
	until    time.Time // no attempt before this
}

// NewBackoff returns an empty Backoff. base must be > 0 and max >= base.
func NewBackoff(base, max time.Duration) *Backoff {
	return &Backoff{Base: base, Max: max, peers: map[string]backoffEntry{}}
}

// Ready reports whether peer may be tried at now.
func (b *Backoff) Ready(peer string, now time.Time) bool {
	e, ok := b.peers[peer]
	return !ok || !now.Before(e.until)
}

// Fail records a failed attempt on peer at now and returns how long the
// peer now waits.
func (b *Backoff) Fail(peer string, now time.Time) time.Duration {
	e := b.peers[peer]
	e.failures++
	wait := b.Base
	for i := 1; i < e.failures && wait < b.Max; i++ {
		wait *= 2
	}
	wait = min(wait, b.Max)
	e.until = now.Add(wait)
	b.peers[peer] = e
	b.prune(now)
	return wait
}

// Succeed forgets peer's failures.
func (b *Backoff) Succeed(peer string) { delete(b.peers, peer) }

// Failures is how many attempts on peer failed in a row.
func (b *Backoff) Failures(peer string) int { return b.peers[peer].failures }

// Waiting is how many peers may not be tried at now.
func (b *Backoff) Waiting(now time.Time) int {
	n := 0
	for _, e := range b.peers {
		if now.Before(e.until) {
			n++
		}
	}
	return n
}

// prune forgets peers whose wait ended more than Max ago: a peer that left
// the mesh must not be remembered for ever, and one that comes back after
// that long starts afresh.
func (b *Backoff) prune(now time.Time) {
	for p, e := range b.peers {
		if now.Sub(e.until) > b.Max {
			delete(b.peers, p)
		}
	}
}
