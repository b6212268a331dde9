package gossip

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

func reduceTestConfig() AllReduceConfig {
	c := DefaultAllReduceConfig()
	c.MaxElements = 1 << 20
	c.ChunkElements = 1000 // several messages per segment
	c.ChunkTimeout = 500 * time.Millisecond
	c.AheadWait = 2 * time.Second
	c.Logger = slog.New(slog.DiscardHandler)
	return c
}

type reducePeer struct {
	h host.Host
	r *AllReducer
}

// newReducers starts k connected hosts with an AllReducer each, sorted by
// peer ID.
func newReducers(t testing.TB, k int, cfg AllReduceConfig) ([]reducePeer, []peer.ID) {
	t.Helper()
	return newReducersWith(t, k, func(int) AllReduceConfig { return cfg })
}

// newReducersWith is newReducers with host i's config cfg(i) (before the
// sort).
func newReducersWith(t testing.TB, k int, cfg func(i int) AllReduceConfig) ([]reducePeer, []peer.ID) {
	t.Helper()
	ps := make([]reducePeer, k)
	for i := range ps {
		h := newHost(t, "tcp", testConfig(1))
		c := cfg(i)
		c.Counters = new(Counters)
		r, err := NewAllReducer(h, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		ps[i] = reducePeer{h: h, r: r}
	}
	for i := range ps {
		for j := i + 1; j < k; j++ {
			connect(t, ps[i].h, ps[j].h)
		}
	}
	slices.SortFunc(ps, func(a, b reducePeer) int {
		switch {
		case a.h.ID() < b.h.ID():
			return -1
		case a.h.ID() > b.h.ID():
			return 1
		}
		return 0
	})
	ids := make([]peer.ID, k)
	for i, p := range ps {
		ids[i] = p.h.ID()
	}
	return ps, ids
}

// reduceAll runs one reduction on every peer in ps at once.
func reduceAll(ctx context.Context, ps []reducePeer, id ReduceID, members []peer.ID, bufs [][]float32) []error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = p.r.AllReduce(ctx, id, members, bufs[i]) })
	}
	wg.Wait()
	return errs
}

func TestAllReduceMean(t *testing.T) {
	checkLeaks(t)
	for _, k := range []int{2, 3, 4} {
		ps, ids := newReducers(t, k, reduceTestConfig())
		const n = 10007 // segments of unequal length, several messages each
		for round := uint64(1); round <= 3; round++ {
			bufs := make([][]float32, k)
			want := make([]float64, n)
			for i := range bufs {
				bufs[i] = randVec(n, round*10+uint64(i))
				for j, v := range bufs[i] {
					want[j] += float64(v) / float64(k)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			errs := reduceAll(ctx, ps, ReduceID{Round: round, Group: 7}, ids, bufs)
			cancel()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("k=%d round %d member %d: %v", k, round, i, err)
				}
			}
			for i := range bufs {
				if !slices.Equal(bufs[i], bufs[0]) {
					t.Fatalf("k=%d round %d: member %d holds other values than member 0", k, round, i)
				}
			}
			for j, w := range want {
				if math.Abs(w-float64(bufs[0][j])) > 1e-6 {
					t.Fatalf("k=%d round %d element %d: %g, mean is %g", k, round, j, bufs[0][j], w)
				}
			}
		}
		for _, p := range ps {
			if s := p.r.Stats(); s.Reductions != 3 || s.Failures != 0 {
				t.Fatalf("k=%d: stats %+v", k, s)
			}
		}
	}
}

// A member that stops mid-reduction makes the others fail within their
// deadline, and the rest reduce among themselves next.
func TestAllReduceMemberDies(t *testing.T) {
	checkLeaks(t)
	// The dead member is found by its refused dials and the 1 s context
	// below; the chunk timeout only has to let the survivors' second round
	// through on a loaded machine (500 ms did not, once in CI, under -race).
	cfg := reduceTestConfig()
	cfg.ChunkTimeout = 5 * time.Second
	ps, ids := newReducers(t, 4, cfg)
	const n = 4000
	bufs := make([][]float32, 4)
	for i := range bufs {
		bufs[i] = randVec(n, uint64(i))
	}
	// Member 3 dies: its host goes away while the others reduce.
	_ = ps[3].r.Close()
	_ = ps[3].h.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	start := time.Now()
	errs := reduceAll(ctx, ps[:3], ReduceID{Round: 1, Group: 1}, ids, bufs[:3])
	cancel()
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("failing took %v", took)
	}
	for i, err := range errs {
		if !errors.Is(err, ErrAllReduce) {
			t.Fatalf("member %d: %v, want ErrAllReduce", i, err)
		}
	}
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for i := range 3 {
		bufs[i] = randVec(n, uint64(i))
	}
	errs = reduceAll(ctx, ps[:3], ReduceID{Round: 2, Group: 2}, ids[:3], bufs[:3])
	for i, err := range errs {
		if err != nil {
			t.Fatalf("after the failure, member %d: %v", i, err)
		}
	}
	if !slices.Equal(bufs[0], bufs[2]) {
		t.Fatal("the survivors disagree")
	}
}

// Hostile messages are rejected with their reason and counted, and the
// reduction they were sent into fails fast instead of using them.
func TestAllReduceHostile(t *testing.T) {
	checkLeaks(t)
	const n = 2000
	id := ReduceID{Round: 5, Group: 9}
	good := func(kind byte, total, off uint64, count uint32) reduceHeader {
		return reduceHeader{kind: kind, id: id, total: total, offset: off, count: count}
	}
	nan := make([]float32, n/2)
	nan[3] = float32(math.NaN())
	// n/2 fp16 values, every one +Inf (0x7c00), in the bytes of n/4
	// float32s.
	halfInf := good(reduceScatter, n, n/2, n/2)
	halfInf.dtype = FP16
	fp16Infs := make([]float32, n/4)
	for i := range fp16Infs {
		fp16Infs[i] = math.Float32frombits(0x7c007c00)
	}
	cases := []struct {
		name    string
		hdr     func(b []byte)
		h       reduceHeader
		payload []float32
		reason  Reason
	}{
		{"bad magic", func(b []byte) { b[0] = 'X' }, good(reduceScatter, n, n/2, n/2), make([]float32, n/2), ReasonBadMagic},
		{"oversize buffer", nil, good(reduceScatter, 1<<21, 0, 10), make([]float32, 10), ReasonOversize},
		{"oversize message", nil, good(reduceScatter, n, 0, MaxReduceChunk+1), nil, ReasonOversize},
		{"outside the buffer", nil, good(reduceScatter, n, n-5, 10), make([]float32, 10), ReasonSizeMismatch},
		{"wrong buffer size", nil, good(reduceScatter, n+2, n/2, 10), make([]float32, 10), ReasonSizeMismatch},
		{"not our segment", nil, good(reduceScatter, n, 0, 10), make([]float32, 10), ReasonProtocol},
		{"NaN", nil, good(reduceScatter, n, n/2, n/2), nan, ReasonNonFinite},
		{"reserved bits", func(b []byte) { b[7] = 1 }, good(reduceScatter, n, n/2, n/2), make([]float32, n/2), ReasonProtocol},
		{"unknown payload type", func(b []byte) { b[6] = 1 }, good(reduceScatter, n, n/2, n/2), make([]float32, n/2), ReasonProtocol},
		{"fp16 infinity", nil, halfInf, fp16Infs, ReasonNonFinite},
		{"a left message with a payload", nil, good(reduceLeft, n, n/2, n/2), make([]float32, n/2), ReasonProtocol},
		{"a left message of an unknown payload type", func(b []byte) { b[6] = 2 }, good(reduceLeft, 0, 0, 0), nil, ReasonProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps, ids := newReducers(t, 2, reduceTestConfig())
			// The attacker is member 0 and sends to member 1, whose
			// segment is the second half.
			victim, attacker := ps[1], ps[0]
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
				defer cancel()
				done <- victim.r.AllReduce(ctx, id, ids, make([]float32, n))
			}()
			// A message that arrives before the reduction starts fails it
			// only at its deadline: send once it runs.
			eventually(t, "the reduction to start", func() bool {
				victim.r.mu.Lock()
				defer victim.r.mu.Unlock()
				return victim.r.cur != nil
			})
			st, err := attacker.h.NewStream(t.Context(), victim.h.ID(), AllReduceProtocolID)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Reset()
			hb := tc.h.marshal()
			if tc.hdr != nil {
				tc.hdr(hb[:])
			}
			_, _ = st.Write(hb[:])
			_, _ = st.Write(float32Bytes(tc.payload))
			start := time.Now()
			err = <-done
			if !errors.Is(err, ErrAllReduce) {
				t.Fatalf("reduction: %v, want ErrAllReduce", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("failing took %v: the bad message was not noticed", took)
			}
			if got := victim.r.c.Rejected(tc.reason); got != 1 {
				t.Fatalf("rejected %s: %d, want 1 (all: %v)", tc.reason, got, victim.r.c.Snapshot().Rejected)
			}
		})
	}
}

func TestAllReduceArgs(t *testing.T) {
	checkLeaks(t)
	ps, ids := newReducers(t, 2, reduceTestConfig())
	r := ps[0].r
	for _, tc := range []struct {
		name    string
		members []peer.ID
		n       int
	}{
		{"empty", ids, 0},
		{"oversize", ids, 1<<20 + 1},
		{"without us", ids[1:], 10},
		{"unsorted", []peer.ID{ids[1], ids[0]}, 10},
		{"more members than elements", ids, 1},
	} {
		if err := r.AllReduce(t.Context(), ReduceID{Round: 1}, tc.members, make([]float32, tc.n)); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v, want ErrBadSnapshot", tc.name, err)
		}
	}
	// Alone, the mean is our own buffer.
	v := randVec(10, 1)
	w := slices.Clone(v)
	if err := r.AllReduce(t.Context(), ReduceID{Round: 1}, ids[:1], w); err != nil || !slices.Equal(v, w) {
		t.Fatalf("alone: %v", err)
	}
	if _, err := NewAllReducer(ps[0].h, AllReduceConfig{}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("zero config: %v", err)
	}
}

func FuzzAllReduceHeader(f *testing.F) {
	h := reduceHeader{kind: reduceGather, id: ReduceID{Round: 3, Group: 4}, total: 100, offset: 10, count: 20}
	b := h.marshal()
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseReduceHeader(b, 1<<20)
		if err != nil {
			return
		}
		if h.offset+uint64(h.count) > h.total || h.total > 1<<20 || h.count == 0 {
			t.Fatalf("accepted %+v", h)
		}
		if rb := h.marshal(); string(rb[:]) != string(b[:ReduceHeaderSize]) {
			t.Fatalf("round trip differs")
		}
	})
}

// TestAllReduceFP16: members that send fp16 send half the bytes, every
// member ends with the same bits, the mean is within fp16 rounding of the
// exact one, and a segment an fp16 member owns holds fp16 values; a member
// that sends fp32 reduces with them; a value fp16 cannot hold travels as
// fp32 and arrives whole.
func TestAllReduceFP16(t *testing.T) {
	checkLeaks(t)
	const k, n = 4, 10007
	sent := func(ps []reducePeer) (b uint64) {
		for _, p := range ps {
			b += p.r.c.Snapshot().BytesSent
		}
		return b
	}
	run := func(ps []reducePeer, ids []peer.ID, round uint64, bufs [][]float32) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		for i, err := range reduceAll(ctx, ps, ReduceID{Round: round, Group: 9}, ids, bufs) {
			if err != nil {
				t.Fatalf("round %d member %d: %v", round, i, err)
			}
		}
		for i := range bufs {
			if !slices.Equal(bufs[i], bufs[0]) {
				t.Fatalf("round %d: member %d holds other values than member 0", round, i)
			}
		}
	}
	inputs := func(round uint64) (bufs [][]float32, mean, bound []float64) {
		bufs = make([][]float32, k)
		mean, bound = make([]float64, n), make([]float64, n)
		for i := range bufs {
			bufs[i] = randVec(n, round*10+uint64(i))
			for j, v := range bufs[i] {
				mean[j] += float64(v) / k
				bound[j] += math.Abs(float64(v)) / k
			}
		}
		return bufs, mean, bound
	}
	isFP16 := func(v float32) bool { return FP16Value(FP16Bits(v)) == v }

	for _, mixed := range []bool{false, true} {
		half := reduceTestConfig()
		half.DType = FP16
		ps, ids := newReducersWith(t, k, func(i int) AllReduceConfig {
			if mixed && i == 0 {
				return reduceTestConfig()
			}
			return half
		})
		bufs, mean, bound := inputs(1)
		run(ps, ids, 1, bufs)
		for j, m := range mean {
			// Each input rounded once, the mean once more: 2^-11
			// relative each, and below 2^-14 fp16's absolute step.
			if d := math.Abs(float64(bufs[0][j]) - m); d > (bound[j]+math.Abs(m))/2048+1e-7 {
				t.Fatalf("mixed %v: element %d is %g, the mean %g (off by %g)", mixed, j, bufs[0][j], m, d)
			}
		}
		for o, p := range ps {
			lo, hi := segment(n, k, o)
			wide := 0 // values fp16 cannot hold
			for j := lo; j < hi; j++ {
				if !isFP16(bufs[0][j]) {
					wide++
				}
			}
			if fp16 := p.r.cfg.DType == FP16; fp16 != (wide == 0) {
				t.Fatalf("mixed %v: member %d's segment holds %d values fp16 cannot; its owner sends %v", mixed, o, wide, p.r.cfg.DType)
			}
		}
		if mixed {
			continue
		}
		// The same reduction in fp32 on the same hosts sends twice the
		// payload bytes.
		halfBytes := sent(ps)
		full, fullIDs := newReducers(t, k, reduceTestConfig())
		bufs, _, _ = inputs(1)
		run(full, fullIDs, 1, bufs)
		if r := float64(halfBytes) / float64(sent(full)); r > 0.55 || r < 0.45 {
			t.Errorf("fp16 reduction sent %d bytes, fp32 %d (ratio %.3f), want about half", halfBytes, sent(full), r)
		}

		// A value beyond fp16's range goes as fp32, in the scatter and in
		// the owner's mean.
		bufs, mean, _ = inputs(2)
		const big = 1e6
		for i := range bufs {
			bufs[i][n-1] = big * float32(i+1)
		}
		mean[n-1] = big * (k + 1) / 2
		run(ps, ids, 2, bufs)
		if got := bufs[0][n-1]; math.IsInf(float64(got), 0) || math.Abs(float64(got)-mean[n-1]) > 1 {
			t.Fatalf("element beyond fp16: %g, want %g", got, mean[n-1])
		}
	}
}

// BenchmarkAllReduce: one all-reduce of 1 MB and of 100 MB of fp32 among 4
// hosts on loopback (TCP), sent as fp32 and as fp16 (-fp16: half the
// bytes, what sync and diloco send by default), next to a plain stream copy
// of the buffer's fp32 bytes between two of those hosts in the same run:
// ratio is all-reduce time / copy time.
// The all-reduce moves 1.5 x the buffer (its fp32 or fp16 bytes) out of and
// into every host, 6 x the copy's bytes in all at fp32, through the same
// CPUs; mesh-copy-ms is those same transfers as plain stream copies of the
// bytes sent, all at once with no reduction, and
// ratio-mesh the all-reduce's time over theirs: what the protocol adds to
// moving its bytes on this machine.
func BenchmarkAllReduce(b *testing.B) {
	for _, size := range []struct {
		name  string
		n     int
		dtype DType
	}{{"1MB", 250_000, FP32}, {"1MB-fp16", 250_000, FP16}, {"100MB", benchN, FP32}, {"100MB-fp16", benchN, FP16}} {
		b.Run(size.name, func(b *testing.B) {
			cfg := DefaultAllReduceConfig()
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.DType = size.dtype
			const k = 4
			ps, ids := newReducers(b, k, cfg)
			bufs := make([][]float32, k)
			for i := range bufs {
				bufs[i] = randVec(size.n, uint64(i))
			}
			payload := float32Bytes(randVec(size.n, 9))
			const copyProtocol = "/meshtrain/bench-copy/1"
			for _, p := range ps {
				p.h.SetStreamHandler(copyProtocol, func(s network.Stream) {
					if _, err := io.Copy(io.Discard, s); err != nil {
						_ = s.Reset()
						return
					}
					_, _ = s.Write([]byte{1})
					_ = s.Close()
				})
				defer p.h.RemoveStreamHandler(copyProtocol)
			}
			send := func(from, to host.Host, data []byte) error {
				s, err := from.NewStream(b.Context(), to.ID(), copyProtocol)
				if err != nil {
					return err
				}
				defer s.Close()
				if _, err := s.Write(data); err != nil {
					return err
				}
				if err := s.CloseWrite(); err != nil {
					return err
				}
				var ack [1]byte
				_, err = io.ReadFull(s, ack[:])
				return err
			}
			copyOnce := func() time.Duration {
				start := time.Now()
				if err := send(ps[0].h, ps[1].h, payload); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			// Every host sends a segment's worth to every other, twice (the
			// reduce-scatter's and the all-gather's bytes), all at once.
			seg := payload[:len(payload)/k*size.dtype.Size()/4]
			meshOnce := func() time.Duration {
				start := time.Now()
				var wg sync.WaitGroup
				errs := make(chan error, k*k)
				for i := range ps {
					for j := range ps {
						if i != j {
							wg.Go(func() {
								for range 2 {
									if err := send(ps[i].h, ps[j].h, seg); err != nil {
										errs <- err
									}
								}
							})
						}
					}
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			round := uint64(0)
			reduceOnce := func() time.Duration {
				round++
				start := time.Now()
				for i, err := range reduceAll(b.Context(), ps, ReduceID{Round: round, Group: 1}, ids, bufs) {
					if err != nil {
						b.Fatalf("member %d: %v", i, err)
					}
				}
				return time.Since(start)
			}
			// Warm up: streams opened, windows grown.
			copyOnce()
			meshOnce()
			reduceOnce()
			var red, cp, mesh []time.Duration
			b.ResetTimer()
			for b.Loop() {
				red = append(red, reduceOnce())
				b.StopTimer()
				cp = append(cp, copyOnce())
				mesh = append(mesh, meshOnce())
				b.StartTimer()
			}
			r, c, m := median(red), median(cp), median(mesh)
			b.ReportMetric(float64(r.Microseconds())/1e3, "allreduce-ms")
			b.ReportMetric(float64(c.Microseconds())/1e3, "copy-ms")
			b.ReportMetric(float64(m.Microseconds())/1e3, "mesh-copy-ms")
			b.ReportMetric(float64(r)/float64(c), "ratio")
			b.ReportMetric(float64(r)/float64(m), "ratio-mesh")
		})
	}
}

// TestAllReduceWire pins the header layout of docs/protocol.md.
func TestAllReduceWire(t *testing.T) {
	h := reduceHeader{kind: reduceScatter, dtype: FP32, id: ReduceID{Round: 258, Group: 0x0102030405060708, List: 0x0a0b0c0d}, total: 235146, offset: 58786, count: 58787}
	b := h.marshal()
	want := "4d544152" + "02" + "01" + "0000" + "0201000000000000" + "0807060504030201" +
		"8a96030000000000" + "a2e5000000000000" + "a3e50000" + "0d0c0b0a"
	if got := hex.EncodeToString(b[:]); got != want {
		t.Fatalf("header\n got %s\nwant %s", got, want)
	}
	// An fp16 payload says so in byte 6 (the exchange frame's dtype code).
	g := h
	g.kind, g.dtype = reduceGather, FP16
	gb := g.marshal()
	if got := hex.EncodeToString(gb[:8]); got != "4d544152"+"02"+"02"+"02"+"00" {
		t.Fatalf("fp16 gather header starts %s", got)
	}
	if got, err := parseReduceHeader(gb[:], 1<<20); err != nil || got != g {
		t.Fatalf("fp16 round trip: %+v, %v", got, err)
	}
	if lo, hi := segment(235146, 4, 1); lo != 58786 || hi != 117573 {
		t.Fatalf("member 1's segment [%d, %d)", lo, hi)
	}
	if got, err := parseReduceHeader(b[:], 1<<20); err != nil || got != h {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	// A left message is a header with kind 3 and no payload.
	l := reduceHeader{kind: reduceLeft, dtype: FP32, id: h.id}
	lb := l.marshal()
	wantLeft := "4d544152" + "02" + "03" + "0000" + "0201000000000000" + "0807060504030201" +
		"0000000000000000" + "0000000000000000" + "00000000" + "0d0c0b0a"
	if got := hex.EncodeToString(lb[:]); got != wantLeft {
		t.Fatalf("left header\n got %s\nwant %s", got, wantLeft)
	}
	if got, err := parseReduceHeader(lb[:], 1<<20); err != nil || got != l {
		t.Fatalf("left round trip: %+v, %v", got, err)
	}
}

// TestAllReduceWrongGuessIsDropped: a member that started a reduction among
// the members it expected (B, among A, B and C) while the round's members
// are A and B sent A a message A must not wait for. Once A settles the
// round's reduction, that message is dropped, not held in front of B's
// next ones; B abandons its guess without resetting a stream, reduces
// again among A and B, and both end with the same mean, long before A
// would give up waiting on B's guess (AheadWait).
func TestAllReduceWrongGuessIsDropped(t *testing.T) {
	checkLeaks(t)
	cfg := reduceTestConfig()
	cfg.AheadWait = time.Minute
	ps, ids := newReducers(t, 3, cfg)
	a, b := ps[0], ps[1]
	round := []peer.ID{ids[0], ids[1]}
	const n = 3000
	guess := ReduceID{Round: 7, Group: 11, List: ListHash(ids)}
	final := ReduceID{Round: 7, Group: 11, List: ListHash(round)}
	if guess == final {
		t.Fatal("two member lists share a hash")
	}
	va, vb := randVec(n, 1), randVec(n, 2)
	want := make([]float32, n)
	for i := range want {
		want[i] = (va[i] + vb[i]) * 0.5
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()

	// B's guess: it sends A and C their segments at once, and waits.
	guessed := make(chan error, 1)
	vbGuess := slices.Clone(vb)
	go func() { guessed <- b.r.AllReduce(ctx, guess, ids, vbGuess) }()
	lo, hi := segment(n, 3, 0)
	eventually(t, "A to read B's guessed scatter", func() bool {
		return a.r.c.Snapshot().BytesReceived >= uint64(ReduceHeaderSize+4*(hi-lo))
	})
	// A learns the round's members and runs their reduction; only then
	// does B learn it and give its guess up.
	a.r.Settle(final)
	got := make(chan error, 1)
	go func() { got <- a.r.AllReduce(ctx, final, round, va) }()
	b.r.Abandon(guess)
	if err := <-guessed; !errors.Is(err, ErrAbandoned) {
		t.Fatalf("B's guess: %v, want ErrAbandoned", err)
	}
	if err := b.r.AllReduce(ctx, final, round, vb); err != nil {
		t.Fatalf("B: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("A: %v", err)
	}
	if !slices.Equal(va, vb) {
		t.Fatal("A and B hold different results")
	}
	for i := range want {
		if d := math.Abs(float64(va[i] - want[i])); d > 1e-6 {
			t.Fatalf("element %d: %v, want %v", i, va[i], want[i])
		}
	}
	rejected := func(c *Counters) (sum uint64) {
		for _, v := range c.Snapshot().Rejected {
			sum += v
		}
		return sum
	}
	for i, p := range ps {
		if rejected(p.r.c) != 0 {
			t.Fatalf("member %d rejected %v", i, p.r.c.Snapshot().Rejected)
		}
		if s := p.r.Stats(); s.Failures != 0 {
			t.Fatalf("member %d: %+v", i, s)
		}
	}
	if s := b.r.Stats(); s.Abandoned != 1 || s.Reductions != 1 {
		t.Fatalf("B's stats %+v, want one abandoned and one reduction", s)
	}
	// An abandoned reduction that had not started does not start.
	never := ReduceID{Round: 8, Group: 11, List: ListHash(round)}
	a.r.Abandon(never)
	if err := a.r.AllReduce(ctx, never, round, va); !errors.Is(err, ErrAbandoned) {
		t.Fatalf("a reduction abandoned before it started: %v", err)
	}
}

// TestAllReduceUnstartedIsDropped: a message for a reduction we never start
// (its sender guessed members the round did not have) is dropped after
// AheadWait, with the rest of that reduction, and counts nothing against
// the sender, whose stream keeps serving the next reduction.
func TestAllReduceUnstartedIsDropped(t *testing.T) {
	checkLeaks(t)
	cfg := reduceTestConfig()
	cfg.AheadWait = 300 * time.Millisecond
	ps, ids := newReducers(t, 2, cfg)
	a, b := ps[0], ps[1]
	const n = 1000
	never := ReduceID{Round: 3, Group: 5, List: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	guessed := make(chan error, 1)
	go func() { guessed <- b.r.AllReduce(ctx, never, ids, randVec(n, 1)) }()
	eventually(t, "A to drop B's message", func() bool {
		a.r.mu.Lock()
		defer a.r.mu.Unlock()
		return slices.Contains(a.r.ended, never)
	})
	b.r.Abandon(never)
	if err := <-guessed; !errors.Is(err, ErrAbandoned) {
		t.Fatalf("B: %v, want ErrAbandoned", err)
	}
	for i, p := range ps {
		noRejections(t, fmt.Sprintf("member %d", i), p.r.c)
	}
	bufs := [][]float32{randVec(n, 2), randVec(n, 3)}
	for i, err := range reduceAll(ctx, ps, ReduceID{Round: 4, Group: 5}, ids, bufs) {
		if err != nil {
			t.Fatalf("member %d, the next reduction: %v", i, err)
		}
	}
	if !slices.Equal(bufs[0], bufs[1]) {
		t.Fatal("the next reduction's results differ")
	}
}
