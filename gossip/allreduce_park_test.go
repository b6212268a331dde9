package gossip

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// noRejections checks that who counted no rejection.
func noRejections(t *testing.T, who string, c *Counters) {
	t.Helper()
	for r, k := range c.Snapshot().Rejected {
		if k != 0 {
			t.Errorf("%s counted %d as %v", who, k, r)
		}
	}
}

// parkedFrom is what a holds parked from p: messages and payload elements.
func parkedFrom(a *AllReducer, p peer.ID) (msgs, elems int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, pm := range a.parked {
		if pm.m.from == p {
			msgs++
			elems += len(pm.m.data)
		}
	}
	return msgs, elems
}

// TestAllReduceGuessNobodyRunsHoldsNothingUp: B starts a reduction among A
// and B that A never runs and nobody settles (B guessed the next round of
// a group its leader has since left), then gives it up. Its scatter to A
// is parked, not held in front of B's next messages on the stream: A and B
// then reduce in the new group at once, long before A would give up on
// the guess (AheadWait).
func TestAllReduceGuessNobodyRunsHoldsNothingUp(t *testing.T) {
	checkLeaks(t)
	ps, ids, ctx := leftReducers(t, 2)
	a, b := ps[0], ps[1]
	const n = 3000
	guess := ReduceID{Round: 9, Group: 4, List: ListHash(ids)}
	next := ReduceID{Round: 1, Group: 5, List: ListHash(ids)}
	guessed := make(chan error, 1)
	go func() { guessed <- b.r.AllReduce(ctx, guess, ids, randVec(n, 1)) }()
	lo, hi := segment(n, 2, 0)
	eventually(t, "B to send A its guessed scatter", func() bool {
		return b.r.c.Snapshot().BytesSent >= uint64(ReduceHeaderSize+4*(hi-lo))
	})
	b.r.Abandon(guess)
	if err := <-guessed; !errors.Is(err, ErrAbandoned) {
		t.Fatalf("B's guess: %v, want ErrAbandoned", err)
	}
	rctx, cancel := context.WithTimeout(ctx, leftTimeout/3)
	defer cancel()
	bufs := [][]float32{randVec(n, 2), randVec(n, 3)}
	for i, err := range reduceAll(rctx, ps, next, ids, bufs) {
		if err != nil {
			t.Fatalf("member %d, the new group's reduction: %v", i, err)
		}
	}
	if !slices.Equal(bufs[0], bufs[1]) {
		t.Fatal("A and B hold different results")
	}
	// The guess stays parked until its time is up, and is no offence.
	if msgs, _ := parkedFrom(a.r, b.h.ID()); msgs == 0 {
		t.Error("the guess's messages were dropped early")
	}
	for i, p := range ps {
		noRejections(t, fmt.Sprintf("member %d", i), p.r.c)
		if s := p.r.Stats(); s.Failures != 0 || s.Reductions != 1 {
			t.Errorf("member %d: %+v, want one reduction and no failure", i, s)
		}
	}
}

// TestAllReduceParkingIsBounded: a peer that sends messages for reductions
// we never start gets no more than its bound parked; the message past it
// waits in its reader, as every such message did before parking; at
// AheadWait each is dropped and its reduction counted as over, and none
// counts against the peer. Meanwhile the other members reduce.
func TestAllReduceParkingIsBounded(t *testing.T) {
	checkLeaks(t)
	cfg := reduceTestConfig()
	cfg.AheadWait = 500 * time.Millisecond
	ps, ids := newReducers(t, 2, cfg)
	a := ps[0]
	x := newHost(t, "tcp", testConfig(1))
	connect(t, x, a.h)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := x.NewStream(ctx, a.h.ID(), AllReduceProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Reset()
	const count, sends = 100_000, 5 // 400 kB each; the bound holds two
	payload := float32Bytes(make([]float32, count))
	var nevers []ReduceID
	var msgs []byte
	for i := range sends {
		id := ReduceID{Round: uint64(i + 1), Group: 77}
		nevers = append(nevers, id)
		h := reduceHeader{kind: reduceScatter, id: id, total: 2 * count, offset: 0, count: count}
		hb := h.marshal()
		msgs = append(append(msgs, hb[:]...), payload...)
	}
	wrote := make(chan error, 1)
	go func() { _, err := st.Write(msgs); wrote <- err }()
	// The third waits in its reader, behind the two parked.
	eventually(t, "two messages parked", func() bool {
		msgs, _ := parkedFrom(a.r, x.ID())
		return msgs == 2
	})
	if msgs, elems := parkedFrom(a.r, x.ID()); msgs > 2 || elems > maxParkedPerPeer {
		t.Fatalf("%d messages, %d elements parked from one peer, bound %d", msgs, elems, maxParkedPerPeer)
	}
	bufs := [][]float32{randVec(3000, 1), randVec(3000, 2)}
	for i, err := range reduceAll(ctx, ps, ReduceID{Round: 1, Group: 78}, ids, bufs) {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	eventually(t, "every message dropped at its time, its reduction over", func() bool {
		msgs, _ := parkedFrom(a.r, x.ID())
		a.r.mu.Lock()
		defer a.r.mu.Unlock()
		for _, id := range nevers {
			if !slices.Contains(a.r.ended, id) {
				return false
			}
		}
		return msgs == 0
	})
	noRejections(t, "A", a.r.c)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if a.h.Network().Connectedness(x.ID()) != network.Connected {
		t.Error("the peer was cut off")
	}
}

// TestAllReduceParkedFromOutsiderIsRejected: a peer outside a reduction's
// members sends a message for it before we start it: parked, then, when
// the reduction starts, refused and counted as a protocol violation; the
// members reduce as if it had never come.
func TestAllReduceParkedFromOutsiderIsRejected(t *testing.T) {
	checkLeaks(t)
	ps, ids := newReducers(t, 2, reduceTestConfig())
	a := ps[0]
	x := newHost(t, "tcp", testConfig(1))
	connect(t, x, a.h)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const n = 2000
	id := ReduceID{Round: 3, Group: 9, List: ListHash(ids)}
	st, err := x.NewStream(ctx, a.h.ID(), AllReduceProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Reset()
	lo, hi := segment(n, 2, 0)
	h := reduceHeader{kind: reduceScatter, id: id, total: n, offset: uint64(lo), count: uint32(hi - lo)}
	hb := h.marshal()
	if _, err := st.Write(append(hb[:], float32Bytes(randVec(hi-lo, 5))...)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the outsider's message parked", func() bool {
		msgs, _ := parkedFrom(a.r, x.ID())
		return msgs == 1
	})
	bufs := [][]float32{randVec(n, 1), randVec(n, 2)}
	want := make([]float32, n)
	for i := range want {
		want[i] = (bufs[0][i] + bufs[1][i]) / 2
	}
	for i, err := range reduceAll(ctx, ps, id, ids, bufs) {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	for i := range want {
		if d := bufs[0][i] - want[i]; d > 1e-6 || d < -1e-6 {
			t.Fatalf("element %d: %v, want %v", i, bufs[0][i], want[i])
		}
	}
	if got := a.r.c.Snapshot().Rejected[ReasonProtocol]; got != 1 {
		t.Errorf("protocol rejections %d, want 1: %v", got, a.r.c.Snapshot().Rejected)
	}
	if msgs, _ := parkedFrom(a.r, x.ID()); msgs != 0 {
		t.Errorf("%d messages still parked", msgs)
	}
}
