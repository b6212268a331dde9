package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// leftTimeout bounds the reductions of these tests: far longer than they
// take when members say they left, so that a member that waits for its
// deadline instead fails them by its error, not by a clock.
const leftTimeout = 30 * time.Second

// leftConfig is reduceTestConfig with messages for a reduction not yet
// started kept as long as the reductions may run.
func leftConfig() AllReduceConfig {
	c := reduceTestConfig()
	c.AheadWait = leftTimeout
	return c
}

// leftReducers is newReducers with leftConfig, and a context that bounds
// the test's reductions.
func leftReducers(t *testing.T, k int) ([]reducePeer, []peer.ID, context.Context) {
	t.Helper()
	ps, ids := newReducers(t, k, leftConfig())
	ctx, cancel := context.WithTimeout(t.Context(), leftTimeout)
	t.Cleanup(cancel)
	return ps, ids, ctx
}

// running waits until r runs a reduction.
func running(t *testing.T, who string, r *AllReducer) {
	t.Helper()
	eventually(t, who+" to start", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.cur != nil
	})
}

// wantLeft checks that err is a reduction that failed because one of ps
// left it.
func wantLeft(t *testing.T, who string, err error, ps ...peer.ID) {
	t.Helper()
	var re *AllReduceError
	if !errors.As(err, &re) || !errors.Is(err, ErrMemberLeft) || !slices.Contains(ps, re.Peer) {
		t.Fatalf("%s: %v, want a failure on one of %v, who left", who, err, ps)
	}
	if errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s waited for its deadline: %v", who, err)
	}
}

// TestAllReduceLeftFailsTheOthersAtOnce: of A, B and C, B's reduction ends
// (its context, as when its own deadline passes) while it waits for C's
// scatter, which C has not started. A, running, fails at once on B, which
// owes it B's segment; so does C when it starts, on B or on A (which left
// in turn), though their messages came before it started. Neither waits
// for its deadline.
func TestAllReduceLeftFailsTheOthersAtOnce(t *testing.T) {
	checkLeaks(t)
	ps, ids := newReducers(t, 3, leftConfig())
	a, b, c := ps[0], ps[1], ps[2]
	const n = 3000 // segments of 1000: one message each
	id := ReduceID{Round: 4, Group: 2}
	ctx, cancel := context.WithTimeout(t.Context(), leftTimeout)
	defer cancel()
	bctx, bcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var aErr, bErr error
	wg.Go(func() { aErr = a.r.AllReduce(ctx, id, ids, randVec(n, 1)) })
	wg.Go(func() { bErr = b.r.AllReduce(bctx, id, ids, randVec(n, 2)) })
	scatter := uint64(ReduceHeaderSize + 4*1000)
	eventually(t, "B's and A's scatters to reach C, and B's to reach A", func() bool {
		return c.r.c.Snapshot().BytesReceived >= 2*scatter && a.r.c.Snapshot().BytesReceived >= scatter
	})
	bcancel()
	wg.Wait()
	if !errors.Is(bErr, ErrAllReduce) {
		t.Fatalf("B: %v, want a failed reduction", bErr)
	}
	wantLeft(t, "A", aErr, b.h.ID())
	cErr := c.r.AllReduce(ctx, id, ids, randVec(n, 3))
	wantLeft(t, "C", cErr, b.h.ID(), a.h.ID())
	for i, p := range ps {
		if got := p.r.Stats().Failures; got != 1 {
			t.Errorf("member %d: %d failures, want 1", i, got)
		}
		noRejections(t, fmt.Sprintf("member %d (leaving is no offence)", i), p.r.c)
	}
	// The streams stay up: the next reduction runs on them.
	bufs := [][]float32{randVec(n, 4), randVec(n, 5), randVec(n, 6)}
	for i, err := range reduceAll(ctx, ps, ReduceID{Round: 5, Group: 2}, ids, bufs) {
		if err != nil {
			t.Fatalf("member %d, the next reduction: %v", i, err)
		}
	}
	if !slices.Equal(bufs[0], bufs[2]) {
		t.Fatal("the next reduction's results differ")
	}
}

// TestAllReduceLeftBeforeWeStart: B fails before it sends anything (its
// context had ended); A and C, which have not started, note its message
// without holding up B's streams, and fail at once when they start.
func TestAllReduceLeftBeforeWeStart(t *testing.T) {
	checkLeaks(t)
	ps, ids := newReducers(t, 3, leftConfig())
	a, b, c := ps[0], ps[1], ps[2]
	const n = 3000
	id := ReduceID{Round: 9, Group: 3, List: ListHash(ids)}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if err := b.r.AllReduce(ended, id, ids, randVec(n, 2)); !errors.Is(err, ErrAllReduce) {
		t.Fatalf("B: %v, want a failed reduction", err)
	}
	for _, p := range []reducePeer{a, c} {
		eventually(t, "B's message to be noted", func() bool {
			p.r.mu.Lock()
			defer p.r.mu.Unlock()
			return slices.Contains(p.r.left, leftNote{id: id, from: b.h.ID()})
		})
	}
	ctx, cancelAll := context.WithTimeout(t.Context(), leftTimeout)
	defer cancelAll()
	errs := reduceAll(ctx, []reducePeer{a, c}, id, ids, [][]float32{randVec(n, 1), randVec(n, 3)})
	wantLeft(t, "A", errs[0], b.h.ID())
	wantLeft(t, "C", errs[1], b.h.ID())
}

// TestAllReduceMemberThatOwesNothingMayLeave: X sends A and B all it owes
// them (its scatters and its segment's mean) and then says it left; A and
// B, which still wait for each other, finish, with the same bytes. X is a
// bare host that reads what it is sent and answers nothing of its own.
func TestAllReduceMemberThatOwesNothingMayLeave(t *testing.T) {
	checkLeaks(t)
	ps, _ := newReducers(t, 2, leftConfig())
	x := newHost(t, "tcp", testConfig(1))
	x.SetStreamHandler(AllReduceProtocolID, func(st network.Stream) {
		_, _ = io.Copy(io.Discard, st)
		_ = st.Close()
	})
	for _, p := range ps {
		connect(t, x, p.h)
	}
	ids := []peer.ID{ps[0].h.ID(), ps[1].h.ID(), x.ID()}
	slices.Sort(ids)
	const n = 3000
	id := ReduceID{Round: 2, Group: 8}
	mine := slices.Index(ids, x.ID())
	xlo, xhi := segment(n, 3, mine)
	ctx, cancel := context.WithTimeout(t.Context(), leftTimeout)
	defer cancel()
	// A starts first: X's messages reach it while it runs.
	first, second := ps[0], ps[1]
	done := make(chan error, 1)
	bufA := randVec(n, 1)
	go func() { done <- first.r.AllReduce(ctx, id, ids, bufA) }()
	running(t, "A", first.r)
	mean := randVec(xhi-xlo, 7) // what X says its segment's mean is
	for _, p := range ps {
		st, err := x.NewStream(ctx, p.h.ID(), AllReduceProtocolID)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Reset()
		j := slices.Index(ids, p.h.ID())
		lo, hi := segment(n, 3, j)
		for _, m := range []struct {
			h reduceHeader
			v []float32
		}{
			{reduceHeader{kind: reduceScatter, id: id, total: n, offset: uint64(lo), count: uint32(hi - lo)}, randVec(hi-lo, 9)},
			{reduceHeader{kind: reduceGather, id: id, total: n, offset: uint64(xlo), count: uint32(xhi - xlo)}, mean},
			{reduceHeader{kind: reduceLeft, id: id}, nil},
		} {
			hb := m.h.marshal()
			if _, err := st.Write(append(hb[:], float32Bytes(m.v)...)); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, "A to read X's messages", func() bool {
		return first.r.c.Snapshot().BytesReceived >= uint64(3*ReduceHeaderSize+4*(2*1000))
	})
	bufB := randVec(n, 2)
	if err := second.r.AllReduce(ctx, id, ids, bufB); err != nil {
		t.Fatalf("B: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("A: %v", err)
	}
	if !slices.Equal(bufA, bufB) {
		t.Fatal("A and B hold different results")
	}
	if !slices.Equal(bufA[xlo:xhi], mean) {
		t.Fatal("X's segment is not the mean it sent")
	}
}

// stallLimiter lets the first free bytes through and then holds every
// write until released.
type stallLimiter struct {
	mu      sync.Mutex
	free    int
	release chan struct{}
}

func (l *stallLimiter) WaitN(ctx context.Context, n int) error {
	l.mu.Lock()
	if l.free >= n {
		l.free -= n
		l.mu.Unlock()
		return nil
	}
	l.free = 0
	l.mu.Unlock()
	select {
	case <-l.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestAllReduceSegmentNotDeliveredFailsOnlyItsAddressee: V sends A its
// scatter and its segment's mean and is then killed, before A's mean of
// A's segment reaches it. A holds the whole mean and succeeds; that V
// missed A's segment fails only V's reduction.
func TestAllReduceSegmentNotDeliveredFailsOnlyItsAddressee(t *testing.T) {
	checkLeaks(t)
	const n = 2000 // segments of 1000: one message each
	msg := ReduceHeaderSize + 4*1000
	lim := &stallLimiter{free: msg, release: make(chan struct{})}
	ps, ids := newReducersWith(t, 2, func(i int) AllReduceConfig {
		c := leftConfig()
		if i == 0 {
			c.UploadLimiter = lim // A's scatter goes; its gather waits
		}
		return c
	})
	a, v := ps[0], ps[1]
	if a.r.cfg.UploadLimiter == nil {
		a, v = v, a
	}
	ctx, cancel := context.WithTimeout(t.Context(), leftTimeout)
	defer cancel()
	id := ReduceID{Round: 1, Group: 4}
	bufA, bufV := randVec(n, 1), randVec(n, 2)
	want := make([]float32, n)
	for i := range want {
		want[i] = (bufA[i] + bufV[i]) * 0.5
	}
	done := make(chan error, 2)
	go func() { done <- a.r.AllReduce(ctx, id, ids, bufA) }()
	go func() { done <- v.r.AllReduce(ctx, id, ids, bufV) }()
	eventually(t, "A to hold V's scatter and mean", func() bool {
		return a.r.c.Snapshot().BytesReceived >= uint64(2*msg)
	})
	_ = v.h.Close() // V is killed
	close(lim.release)
	errs := []error{<-done, <-done}
	var ok int
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if ok != 1 {
		t.Fatalf("results %v: want A's to succeed and V's to fail", errs)
	}
	for i := range want {
		if bufA[i] != want[i] {
			t.Fatalf("element %d: %v, want %v", i, bufA[i], want[i])
		}
	}
}

// TestAllReduceOldStreamResetIsNoFailure: B resets the stream an earlier
// reduction went on (as a member does when that reduction ends mid-message)
// while A already runs the next one. A does not fail on it: B sends the
// next reduction's messages on a new stream, and both finish.
func TestAllReduceOldStreamResetIsNoFailure(t *testing.T) {
	checkLeaks(t)
	ps, ids, ctx := leftReducers(t, 2)
	a, b := ps[0], ps[1]
	const n = 2000
	bufs := [][]float32{randVec(n, 1), randVec(n, 2)}
	for i, err := range reduceAll(ctx, ps, ReduceID{Round: 1, Group: 6}, ids, bufs) {
		if err != nil {
			t.Fatalf("member %d, the first reduction: %v", i, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- a.r.AllReduce(ctx, ReduceID{Round: 2, Group: 6}, ids, bufs[0]) }()
	running(t, "A", a.r)
	l := b.r.link(a.h.ID())
	l.mu.Lock()
	_ = l.st.Reset()
	l.st = nil
	l.mu.Unlock()
	eventually(t, "A to read the reset", func() bool {
		a.r.mu.Lock()
		defer a.r.mu.Unlock()
		return a.r.broken[b.h.ID()] != nil
	})
	if err := b.r.AllReduce(ctx, ReduceID{Round: 2, Group: 6}, ids, bufs[1]); err != nil {
		t.Fatalf("B: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("A: %v", err)
	}
	if !slices.Equal(bufs[0], bufs[1]) {
		t.Fatal("A and B hold different results")
	}
}

// TestAllReduceMemberDisconnectedFailsAtOnce: B, which has not started,
// holds A's scatter and has never sent A anything, when its host goes
// away. A, whose sends are done and which reads no stream from B, learns
// it from the lost connection and fails at once.
func TestAllReduceMemberDisconnectedFailsAtOnce(t *testing.T) {
	checkLeaks(t)
	ps, ids, ctx := leftReducers(t, 2)
	a, b := ps[0], ps[1]
	const n = 2000
	done := make(chan error, 1)
	go func() { done <- a.r.AllReduce(ctx, ReduceID{Round: 1, Group: 6}, ids, randVec(n, 1)) }()
	eventually(t, "B to read A's scatter", func() bool {
		return b.r.c.Snapshot().BytesReceived >= uint64(ReduceHeaderSize+4*1000)
	})
	_ = b.h.Close()
	err := <-done
	var re *AllReduceError
	if !errors.As(err, &re) || re.Peer != b.h.ID() || errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("A: %v, want a failure on B, not at the deadline", err)
	}
}
