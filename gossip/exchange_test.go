package gossip

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/meshtrain/meshtrain/params"
)

const testN = 10000 // 40 KB as fp32: three chunks of 16 KiB

type node struct {
	h        host.Host
	svc      *Service
	snap     params.Snapshot
	received chan params.Snapshot
}

func newNode(t *testing.T, transport string, cfg Config, seed uint64) *node {
	t.Helper()
	n := &node{h: newHost(t, transport, cfg), snap: testSnapshot(testN, seed), received: make(chan params.Snapshot, 4)}
	cfg.OnReceive = func(_ peer.ID, s params.Snapshot) { n.received <- s }
	svc, err := NewService(n.h, cfg, func() (params.Snapshot, bool) { return n.snap, true })
	if err != nil {
		t.Fatal(err)
	}
	n.svc = svc
	t.Cleanup(func() { _ = svc.Close() })
	return n
}

func sameParams(t *testing.T, got, want params.Snapshot) {
	t.Helper()
	if got.Fingerprint != want.Fingerprint || got.Step != want.Step || got.Progress != want.Progress || len(got.Params) != len(want.Params) {
		t.Fatalf("got snapshot step %d progress %v n %d, want step %d progress %v n %d",
			got.Step, got.Progress, len(got.Params), want.Step, want.Progress, len(want.Params))
	}
	for i := range want.Params {
		if got.Params[i] != want.Params[i] {
			t.Fatalf("element %d: %g, want %g", i, got.Params[i], want.Params[i])
		}
	}
}

func TestExchangeBetweenHosts(t *testing.T) {
	for _, transport := range []string{"tcp", "quic"} {
		t.Run(transport, func(t *testing.T) {
			checkLeaks(t)
			a := newNode(t, transport, testConfig(testN), 1)
			b := newNode(t, transport, testConfig(testN), 2)
			b.snap.Step, b.snap.Progress = 99, 3168
			connect(t, a.h, b.h)
			ctx := t.Context()

			got, err := a.svc.Pull(ctx, b.h.ID())
			if err != nil {
				t.Fatal(err)
			}
			sameParams(t, got, b.snap)

			got, tm, err := a.svc.ExchangeTimed(ctx, b.h.ID(), a.snap)
			if err != nil {
				t.Fatal(err)
			}
			sameParams(t, got, b.snap)
			if tm.Answer <= 0 || tm.Answer > tm.Total {
				t.Errorf("timing %+v: want an answer within the exchange", tm)
			}
			select {
			case s := <-b.received:
				sameParams(t, s, a.snap)
			case <-time.After(10 * time.Second):
				t.Fatal("responder never delivered the initiator's snapshot")
			}

			// Both directions at once: two streams, no deadlock.
			var wg sync.WaitGroup
			errs := make([]error, 2)
			wg.Go(func() { _, errs[0] = a.svc.Exchange(ctx, b.h.ID(), a.snap) })
			wg.Go(func() { _, errs[1] = b.svc.Exchange(ctx, a.h.ID(), b.snap) })
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			<-a.received
			<-b.received

			sa, sb := a.svc.Stats(), b.svc.Stats()
			if sa.PullsDone != 1 || sa.ExchangesDone != 2 || sb.PullsServed != 1 || sb.ExchangesServed != 2 {
				t.Errorf("stats a %+v b %+v", sa, sb)
			}
			// Four frames of 40 KB crossed from b to a; one more from a to b.
			if min := uint64(4 * 4 * testN); sa.BytesReceived < min || sb.BytesSent < min {
				t.Errorf("a received %d bytes, b sent %d, want at least %d", sa.BytesReceived, sb.BytesSent, min)
			}
			for r, n := range sa.Rejected {
				if n != 0 || sb.Rejected[r] != 0 {
					t.Errorf("honest traffic counted as %v", r)
				}
			}
		})
	}
}

// An exchange's frame follows its request without waiting for the
// answer: a responder that reads the whole of the initiator's frame before
// it answers (as a slow link sees it, the frame arriving one round trip
// sooner) still completes the exchange. An initiator that waited for the
// answer first would stall here until its chunk timeout.
func TestExchangeFrameFollowsRequest(t *testing.T) {
	for _, transport := range []string{"tcp", "quic"} {
		t.Run(transport, func(t *testing.T) {
			checkLeaks(t)
			a := newNode(t, transport, testConfig(testN), 1)
			b := newAttackerHost(t, transport)
			connect(t, a.h, b)
			theirs := testSnapshot(testN, 2)
			hdr := FrameHeader{DType: FP32, Fingerprint: testFP, Elements: testN, Step: 7, Progress: 224, ChunkSize: MinChunkSize}
			ok := Response{Status: StatusOK}.Marshal()
			got := make(chan []byte, 1)
			b.SetStreamHandler(ProtocolID, func(s network.Stream) {
				_ = s.SetDeadline(time.Now().Add(10 * time.Second))
				// The request, then everything the initiator sends, up to
				// its CloseWrite, before a byte of answer.
				in, err := io.ReadAll(s)
				got <- in
				if err != nil {
					_ = s.Reset()
					return
				}
				var out []byte
				out = append(out, ok[:]...)
				out = append(out, frameOf(hdr, theirs.Params)...)
				out = append(out, ok[:]...) // the verdict on the initiator's frame
				if _, err := s.Write(out); err != nil {
					_ = s.Reset()
					return
				}
				_ = s.Close()
			})
			remote, err := a.svc.Exchange(t.Context(), b.ID(), a.snap)
			if err != nil {
				t.Fatal("exchange with a responder that reads the frame before it answers:", err)
			}
			if remote.Step != 7 || remote.Progress != 224 {
				t.Fatalf("got step %d progress %v, want 7 and 224", remote.Step, remote.Progress)
			}
			sameParams(t, params.Snapshot{Fingerprint: testFP, Step: 7, Progress: 224, Params: theirs.Params}, remote)
			in := <-got
			if want := RequestSize + FrameHeaderSize + 4*testN; len(in) != want {
				t.Fatalf("responder read %d bytes before answering, want the request and the whole frame, %d", len(in), want)
			}
			q, err := ParseRequest(in[:RequestSize])
			if err != nil || q.Kind != KindExchange {
				t.Fatalf("request %+v, err %v", q, err)
			}
			h, err := ParseFrameHeader(in[RequestSize : RequestSize+FrameHeaderSize])
			if err != nil || h.Elements != testN || h.Step != a.snap.Step {
				t.Fatalf("frame header %+v, err %v", h, err)
			}
		})
	}
}

// fp16Pair is two connected nodes that send fp16.
func fp16Pair(t *testing.T) (a, b *node) {
	t.Helper()
	cfg := testConfig(testN)
	cfg.SendDType = FP16
	a, b = newNode(t, "tcp", cfg, 1), newNode(t, "tcp", cfg, 2)
	connect(t, a.h, b.h)
	return a, b
}

func TestExchangeFP16(t *testing.T) {
	checkLeaks(t)
	a, b := fp16Pair(t)
	got, err := a.svc.Exchange(t.Context(), b.h.ID(), a.snap)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range b.snap.Params {
		if d := math.Abs(float64(got.Params[i] - want)); d > math.Abs(float64(want))/2048+1e-7 {
			t.Fatalf("element %d: %g, want %g", i, got.Params[i], want)
		}
	}
	// Half the payload bytes of fp32 each way, plus headers.
	if s := a.svc.Stats(); s.BytesSent > 2*testN+1024 || s.BytesReceived > 2*testN+1024 {
		t.Errorf("fp16 exchange moved %d/%d bytes", s.BytesSent, s.BytesReceived)
	}
}

// TestExchangeInTheInitiatorsPrecision: a node switched to int8 sends
// int8 and gets the responder's model as int8 too, though the responder
// sends fp16 on its own; switched back, fp16 both ways again. One that
// asks for fp32 gets fp16, never more bytes than the responder sends on
// its own; and a pull, whose model replaces ours, asks for fp16 at least.
func TestExchangeInTheInitiatorsPrecision(t *testing.T) {
	checkLeaks(t)
	a, b := fp16Pair(t)
	roundTrip := func(s params.Snapshot, dt DType) []float32 {
		var buf bytes.Buffer
		if err := (FrameWriter{DType: dt}).WriteFrame(&buf, s); err != nil {
			t.Fatal(err)
		}
		got, err := FrameReader{}.ReadFrame(&buf)
		if err != nil {
			t.Fatal(err)
		}
		return got.Params
	}
	for _, tc := range []struct{ asks, gets DType }{{INT8, INT8}, {FP16, FP16}, {FP32, FP16}} {
		dt := tc.gets
		if err := a.svc.SetSendDType(tc.asks); err != nil || a.svc.SendDType() != tc.asks {
			t.Fatalf("SetSendDType(%v): %v, now %v", tc.asks, err, a.svc.SendDType())
		}
		before := a.svc.Stats().BytesReceived
		got, err := a.svc.Exchange(t.Context(), b.h.ID(), a.snap)
		if err != nil {
			t.Fatal(err)
		}
		want := roundTrip(b.snap, dt)
		for i := range want {
			if got.Params[i] != want[i] {
				t.Fatalf("%v: element %d: %g, want %g as the responder's %v frame decodes", dt, i, got.Params[i], want[i], dt)
			}
		}
		if moved := a.svc.Stats().BytesReceived - before; moved > uint64(dt.Size()*testN+testN/64+1024) {
			t.Errorf("%v: %d bytes received for %d elements", dt, moved, testN)
		}
	}
	if err := a.svc.SetSendDType(INT8); err != nil {
		t.Fatal(err)
	}
	pulled, err := a.svc.Pull(t.Context(), b.h.ID())
	if err != nil {
		t.Fatal(err)
	}
	if want := roundTrip(b.snap, FP16); !slices.Equal(pulled.Params, want) {
		t.Error("an int8 node's pull did not come as fp16")
	}
	if err := a.svc.SetSendDType(9); !errors.Is(err, ErrBadConfig) {
		t.Errorf("SetSendDType(9): %v, want a config error", err)
	}
}

func TestUnavailableAndClosed(t *testing.T) {
	checkLeaks(t)
	a := newNode(t, "tcp", testConfig(testN), 1)
	h := newHost(t, "tcp", testConfig(testN))
	empty, err := NewService(h, testConfig(testN), func() (params.Snapshot, bool) { return params.Snapshot{}, false })
	if err != nil {
		t.Fatal(err)
	}
	connect(t, a.h, h)
	if _, err := a.svc.Pull(t.Context(), h.ID()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("pull from a peer with no snapshot: %v", err)
	}
	if st := a.svc.Stats(); st.RefusedByPeer != 1 {
		t.Errorf("refused_by_peer %d", st.RefusedByPeer)
	}
	if err := empty.Close(); err != nil {
		t.Fatal(err)
	}
	if err := empty.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := empty.Pull(t.Context(), a.h.ID()); !errors.Is(err, ErrClosed) {
		t.Fatalf("pull on a closed service: %v", err)
	}
	// A closed service no longer speaks the protocol.
	if _, err := a.svc.Pull(t.Context(), h.ID()); err == nil {
		t.Fatal("pull from a closed service succeeded")
	}
	bad := a.snap
	bad.Fingerprint[0] ^= 1
	if _, err := a.svc.Exchange(t.Context(), h.ID(), bad); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("exchange of a foreign snapshot: %v", err)
	}
}

// The service re-encodes when the node hands it another snapshot, even one
// that reuses the same vector with new metadata.
func TestServedSnapshotFollowsProvider(t *testing.T) {
	checkLeaks(t)
	a := newNode(t, "tcp", testConfig(testN), 1)
	h := newHost(t, "tcp", testConfig(testN))
	var cur atomic.Pointer[params.Snapshot]
	svc, err := NewService(h, testConfig(testN), func() (params.Snapshot, bool) { return *cur.Load(), true })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	connect(t, a.h, h)
	s1 := testSnapshot(testN, 7)
	s2 := s1
	s2.Step, s2.Progress = s1.Step+1, s1.Progress+32
	s3 := testSnapshot(testN, 8)
	for i, s := range []params.Snapshot{s1, s1, s2, s3, s1} {
		cur.Store(&s)
		got, err := a.svc.Pull(t.Context(), h.ID())
		if err != nil {
			t.Fatal(err)
		}
		if got.Step != s.Step || got.Progress != s.Progress || got.Params[0] != s.Params[0] {
			t.Fatalf("pull %d served step %d progress %v, want step %d progress %v", i, got.Step, got.Progress, s.Step, s.Progress)
		}
	}
}

// A diverged model (NaN) is neither served nor sent, and refusing to
// serve it is not held against anyone.
func TestDivergedModelNotSent(t *testing.T) {
	checkLeaks(t)
	a := newNode(t, "tcp", testConfig(testN), 1)
	b := newNode(t, "tcp", testConfig(testN), 2)
	b.snap = b.snap.Clone()
	b.snap.Params[17] = float32(math.Inf(1))
	connect(t, a.h, b.h)
	if _, err := a.svc.Pull(t.Context(), b.h.ID()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("pull of a diverged model: %v", err)
	}
	if _, err := b.svc.Exchange(t.Context(), a.h.ID(), b.snap); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("exchange of a diverged model: %v", err)
	}
	for _, n := range []*node{a, b} {
		for r, c := range n.svc.Stats().Rejected {
			if c != 0 {
				t.Errorf("counted %d as %v", c, r)
			}
		}
	}
	if st := b.svc.Stats(); st.BytesSent > ResponseSize {
		t.Errorf("the diverged node sent %d bytes", st.BytesSent)
	}
}

// attacker is a bare host that speaks the protocol by hand.
type attacker struct {
	t    *testing.T
	h    host.Host
	last *network.Stream
}

// open opens a stream to victim, resetting the previous one so the
// attacker stays within its own per-peer stream limits.
func (a attacker) open(victim peer.ID) network.Stream {
	a.t.Helper()
	if *a.last != nil {
		_ = (*a.last).Reset()
	}
	s, err := a.h.NewStream(a.t.Context(), victim, ProtocolID)
	if err != nil {
		a.t.Fatal(err)
	}
	*a.last = s
	a.t.Cleanup(func() { _ = s.Reset() })
	// Flush the lazy protocol handshake so the victim's handler runs even
	// if nothing else is written.
	if _, err := s.Write(nil); err != nil {
		a.t.Fatal(err)
	}
	return s
}

// send writes best-effort: the victim may hang up mid-write, which is the
// point; the counters tell whether it refused for the right reason.
func (a attacker) send(s network.Stream, chunks ...[]byte) {
	for _, c := range chunks {
		if _, err := s.Write(c); err != nil {
			return
		}
	}
}

// expectResponse reads one response header from the victim.
func (a attacker) expectResponse(s network.Stream, want Response) {
	a.t.Helper()
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [ResponseSize]byte
	if _, err := io.ReadFull(s, b[:]); err != nil {
		a.t.Fatalf("reading response: %v", err)
	}
	if got, err := ParseResponse(b[:]); err != nil || got != want {
		a.t.Fatalf("response %+v (%v), want %+v", got, err, want)
	}
}

// skipFrame reads the victim's own frame of an exchange, which comes
// before its verdict on ours.
func (a attacker) skipFrame(s network.Stream) {
	a.t.Helper()
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := (FrameReader{}).ReadFrame(s); err != nil {
		a.t.Fatalf("reading the victim's frame: %v", err)
	}
}

func req(kind RequestKind, fp params.Fingerprint, n uint64) []byte {
	b := Request{Kind: kind, Fingerprint: fp, Elements: n}.Marshal()
	return b[:]
}

func frameOf(h FrameHeader, v []float32) []byte { return craftFrame(h, fp32Payload(v)) }

// Hostile inputs against a running service, from a peer that speaks the
// protocol by hand and from peers that answer our requests with garbage.
// Every refusal is counted once under its reason, and afterwards an honest
// exchange still works.
func TestHostileInputs(t *testing.T) {
	for _, transport := range []string{"tcp", "quic"} {
		t.Run(transport, func(t *testing.T) { testHostile(t, transport) })
	}
}

func testHostile(t *testing.T, transport string) {
	checkLeaks(t)
	cfg := testConfig(testN)
	cfg.MaxInbound = 1
	victim := newNode(t, transport, cfg, 1)
	honest := newNode(t, transport, testConfig(testN), 2)
	atk := attacker{t, newAttackerHost(t, transport), new(network.Stream)}
	connect(t, atk.h, victim.h)
	connect(t, honest.h, victim.h)
	vid := victim.h.ID()
	good := testSnapshot(testN, 9).Params
	hdr := FrameHeader{DType: FP32, Fingerprint: testFP, Elements: testN, Step: 5, Progress: 160, ChunkSize: MinChunkSize}
	validFrame := frameOf(hdr, good)
	other := testFP
	other[5] ^= 0xff

	want := map[Reason]uint64{}
	expect := func(r Reason, what string) {
		t.Helper()
		want[r]++
		eventually(t, what+" counted as "+r.String(), func() bool { return victim.svc.Counters().Rejected(r) >= want[r] })
	}

	// As responder.
	s := atk.open(vid)
	atk.send(s, bytes.Repeat([]byte("garbage!"), 8))
	expect(ReasonBadMagic, "garbage")

	s = atk.open(vid)
	bad := req(KindPull, testFP, testN)
	bad[4] = 7
	atk.send(s, bad)
	expect(ReasonBadVersion, "future version")

	s = atk.open(vid)
	atk.send(s, req(KindPull, other, testN))
	atk.expectResponse(s, Response{Status: StatusRejected, Reason: ReasonFingerprint})
	expect(ReasonFingerprint, "other model")

	s = atk.open(vid)
	atk.send(s, req(KindExchange, testFP, 0))
	atk.expectResponse(s, Response{Status: StatusOK})
	h10 := hdr
	h10.Elements = 10 << 30 / 4 // 10 GB of fp32
	hb := h10.Marshal()
	atk.send(s, hb[:])
	expect(ReasonOversize, "10 GB header")

	s = atk.open(vid)
	atk.send(s, req(KindExchange, testFP, 0))
	atk.expectResponse(s, Response{Status: StatusOK})
	short := hdr
	short.Elements = testN - 1
	atk.send(s, frameOf(short, good[:testN-1]))
	expect(ReasonSizeMismatch, "wrong element count")

	s = atk.open(vid)
	atk.send(s, req(KindExchange, testFP, testN))
	atk.expectResponse(s, Response{Status: StatusOK})
	nan := append([]float32(nil), good...)
	nan[testN/2] = float32(math.NaN())
	atk.send(s, frameOf(hdr, nan))
	_ = s.CloseWrite()
	atk.skipFrame(s)
	atk.expectResponse(s, Response{Status: StatusRejected, Reason: ReasonNonFinite})
	expect(ReasonNonFinite, "NaN parameters")

	s = atk.open(vid)
	atk.send(s, req(KindExchange, testFP, testN))
	atk.expectResponse(s, Response{Status: StatusOK})
	corrupt := bytes.Clone(validFrame)
	corrupt[len(corrupt)-3] ^= 1
	atk.send(s, corrupt)
	_ = s.CloseWrite()
	atk.skipFrame(s)
	atk.expectResponse(s, Response{Status: StatusRejected, Reason: ReasonChecksum})
	expect(ReasonChecksum, "corrupted payload")

	s = atk.open(vid)
	atk.send(s, req(KindExchange, testFP, testN))
	atk.expectResponse(s, Response{Status: StatusOK})
	atk.send(s, validFrame[:len(validFrame)/2])
	_ = s.CloseWrite()
	expect(ReasonShortRead, "truncated transfer")

	s = atk.open(vid)
	atk.send(s, req(KindExchange, testFP, testN))
	atk.expectResponse(s, Response{Status: StatusOK})
	atk.send(s, validFrame[:FrameHeaderSize+100])
	_ = s.Reset()
	expect(ReasonShortRead, "reset mid-frame")

	s = atk.open(vid)
	atk.send(s, req(KindPull, testFP, testN), []byte("trailing junk"))
	expect(ReasonProtocol, "bytes after a pull request")

	// A stream that is opened and never written to.
	atk.open(vid)
	expect(ReasonTimeout, "silent stream")

	// A transfer that stalls mid-frame holds the only inbound slot; an
	// honest peer is refused as busy meanwhile, then served once the
	// staller is cut off.
	s = atk.open(vid)
	atk.send(s, req(KindExchange, testFP, testN))
	atk.expectResponse(s, Response{Status: StatusOK})
	atk.send(s, validFrame[:FrameHeaderSize+MinChunkSize])
	if _, err := honest.svc.Exchange(t.Context(), vid, honest.snap); !errors.Is(err, ErrPeerBusy) {
		t.Fatalf("exchange while the slot is held: %v", err)
	}
	expect(ReasonBusy, "exchange beyond MaxInbound")
	expect(ReasonTimeout, "stall mid-frame")

	// As initiator, against responders that misbehave.
	resp := func(r Response) []byte { b := r.Marshal(); return b[:] }
	h10b := h10.Marshal()
	var otherFrame []byte
	{
		h := hdr
		h.Fingerprint = other
		otherFrame = frameOf(h, good)
	}
	// Each responder reads the request, replies, then either ends its side
	// or stalls, and waits for the victim to hang up.
	responders := []struct {
		name  string
		reply []byte
		stall bool
		want  Reason // ReasonNone: refused without blame
	}{
		{"accepts and never writes", nil, true, ReasonTimeout},
		{"garbage response", []byte("HTTP/1.1 200 OK\r\n\r\n"), false, ReasonBadMagic},
		{"other model", append(resp(Response{}), otherFrame...), false, ReasonFingerprint},
		{"10 GB", append(resp(Response{}), h10b[:]...), true, ReasonOversize},
		{"NaN parameters", append(resp(Response{}), frameOf(hdr, nan)...), false, ReasonNonFinite},
		{"truncated frame", append(resp(Response{}), validFrame[:FrameHeaderSize+10]...), false, ReasonShortRead},
		{"stalls mid-frame", append(resp(Response{}), validFrame[:FrameHeaderSize+10]...), true, ReasonTimeout},
		{"hangs up at once", nil, false, ReasonNone},
	}
	for _, r := range responders {
		release := make(chan struct{})
		atk.h.SetStreamHandler(ProtocolID, func(s network.Stream) {
			_ = s.SetDeadline(time.Now().Add(10 * time.Second))
			var q [RequestSize]byte
			if _, err := io.ReadFull(s, q[:]); err != nil {
				_ = s.Reset()
				return
			}
			_, _ = s.Write(r.reply)
			if r.stall {
				<-release
				_ = s.Reset()
				return
			}
			// Close, not Reset: a reset may discard the reply in flight.
			_ = s.Close()
		})
		_, err := victim.svc.Pull(t.Context(), atk.h.ID())
		close(release)
		if got := ReasonOf(err); got != r.want || err == nil {
			t.Fatalf("pull from a peer that %s: %v (reason %v), want %v", r.name, err, got, r.want)
		}
		if r.want != ReasonNone {
			expect(r.want, r.name)
		}
	}
	atk.h.RemoveStreamHandler(ProtocolID)

	// Every refusal was counted exactly once, under its reason.
	eventually(t, "all counts settle", func() bool {
		got := victim.svc.Stats().Rejected
		for _, r := range Reasons() {
			if got[r] != want[r] {
				return false
			}
		}
		return true
	})
	for _, r := range Reasons() {
		if got := victim.svc.Counters().Rejected(r); got != want[r] {
			t.Errorf("%v counted %d times, want %d", r, got, want[r])
		}
	}

	// And the victim still trades models with an honest peer, both ways.
	eventually(t, "slot released", func() bool {
		victim.svc.mu.Lock()
		defer victim.svc.mu.Unlock()
		return victim.svc.active == 0
	})
	got, err := honest.svc.Exchange(t.Context(), vid, honest.snap)
	if err != nil {
		t.Fatal("honest exchange after the attacks:", err)
	}
	sameParams(t, got, victim.snap)
	if got, err = victim.svc.Pull(t.Context(), honest.h.ID()); err != nil {
		t.Fatal("victim's pull after the attacks:", err)
	}
	sameParams(t, got, honest.snap)
}

// Hundreds of streams that are opened and left idle: the resource manager
// and the service bound how many handlers exist at once, the rest are
// refused, the admitted ones time out, nothing piles up, and the service
// still works afterwards.
func TestIdleStreamsBounded(t *testing.T) {
	checkLeaks(t)
	cfg := testConfig(testN)
	cfg.MaxPending = 2
	victim := newNode(t, "tcp", cfg, 1)
	honest := newNode(t, "tcp", testConfig(testN), 2)
	atk := newAttackerHost(t, "tcp")
	connect(t, atk, victim.h)
	connect(t, honest.h, victim.h)
	baseline := goroutinesIn("(*Service).handle")

	const streams = 300
	opened := make([]network.Stream, 0, streams)
	peak := 0
	for range streams {
		s, err := atk.NewStream(t.Context(), victim.h.ID(), ProtocolID)
		if err != nil {
			continue // refused outright
		}
		opened = append(opened, s)
		_, _ = s.Write(nil)
		peak = max(peak, goroutinesIn("(*Service).handle")-baseline)
	}
	// Each stream ends one way or another: refused by the resource
	// manager or the service, or cut off after ChunkTimeout.
	var wg sync.WaitGroup
	for _, s := range opened {
		wg.Go(func() {
			_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := io.ReadAll(s)
			if err == nil || isTimeout(err) {
				t.Errorf("idle stream not ended by the victim: %v", err)
			}
			_ = s.Reset()
		})
	}
	wg.Wait()
	// The resource manager admits 2*(MaxPending+MaxInbound) streams of the
	// protocol (4 per peer); the service holds at most MaxPending waiting.
	if limit := 2 * (cfg.MaxPending + cfg.MaxInbound); peak > limit {
		t.Errorf("%d handlers at once, limit %d", peak, limit)
	}
	st := victim.svc.Stats()
	t.Logf("%d streams opened, peak %d handlers, %d timed out, %d refused busy",
		len(opened), peak, st.Rejected[ReasonTimeout], st.Rejected[ReasonBusy])
	if st.Rejected[ReasonTimeout] == 0 {
		t.Error("no idle stream was timed out")
	}
	if st.Rejected[ReasonTimeout] > streams || st.Rejected[ReasonBusy] > streams {
		t.Errorf("counted %d timeouts and %d busy for %d streams", st.Rejected[ReasonTimeout], st.Rejected[ReasonBusy], streams)
	}
	eventually(t, "handlers gone", func() bool { return goroutinesIn("(*Service).handle") == baseline })
	if n := victim.svc.pending.Load(); n != 0 {
		t.Errorf("%d streams still pending", n)
	}
	if _, err := honest.svc.Exchange(t.Context(), victim.h.ID(), honest.snap); err != nil {
		t.Fatal("honest exchange after the idle streams:", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("default config without fingerprint: %v", err)
	}
	if err := testConfig(10).Validate(); err != nil {
		t.Fatal(err)
	}
	c := testConfig(10)
	c.MaxElements = 5
	c.ChunkSize = 3
	c.MaxInbound = 0
	c.ChunkTimeout = 0
	err := c.Validate()
	for _, field := range []string{"Elements", "ChunkSize", "MaxInbound", "ChunkTimeout"} {
		if !bytes.Contains([]byte(err.Error()), []byte(field)) {
			t.Errorf("Validate did not report %s: %v", field, err)
		}
	}
	if _, err := NewService(nil, c, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("NewService with a bad config: %v", err)
	}
}

func TestUploadLimiter(t *testing.T) {
	checkLeaks(t)
	cfg := testConfig(testN)
	cfg.UploadLimiter = &countingLimiter{}
	a := newNode(t, "tcp", cfg, 1)
	b := newNode(t, "tcp", testConfig(testN), 2)
	connect(t, a.h, b.h)
	if _, err := a.svc.Exchange(t.Context(), b.h.ID(), a.snap); err != nil {
		t.Fatal(err)
	}
	lim := cfg.UploadLimiter.(*countingLimiter)
	if sent := a.svc.Stats().BytesSent; lim.total() != sent || sent < 4*testN {
		t.Errorf("limiter saw %d bytes, %d sent", lim.total(), sent)
	}
	if lim.maxN > limiterPiece {
		t.Errorf("limiter asked for %d bytes at once", lim.maxN)
	}
	// A real limiter paces: the burst is one piece.
	if l := NewUploadLimiter(1 << 20); l.Burst() != limiterPiece {
		t.Errorf("burst %d", l.Burst())
	}
}

type countingLimiter struct {
	mu   sync.Mutex
	n    uint64
	maxN int
}

func (c *countingLimiter) WaitN(ctx context.Context, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += uint64(n)
	c.maxN = max(c.maxN, n)
	return ctx.Err()
}

func (c *countingLimiter) total() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func TestProtocolLimits(t *testing.T) {
	cfg := testConfig(testN)
	limits := rcmgr.DefaultLimits
	ProtocolLimits(&limits, cfg)
	want := 2 * (cfg.MaxPending + cfg.MaxInbound)
	if got := limits.ProtocolLimits[ProtocolID].BaseLimit.StreamsInbound; got != want {
		t.Errorf("protocol inbound streams %d, want %d", got, want)
	}
	if got := limits.ServiceLimits[ServiceName].BaseLimit.StreamsInbound; got != want {
		t.Errorf("service inbound streams %d, want %d", got, want)
	}
	if got := limits.ProtocolPeerLimits[ProtocolID].BaseLimit.StreamsInbound; got < 1 || got >= want {
		t.Errorf("per-peer inbound streams %d", got)
	}
	if limits.ConnBaseLimit.Memory < 64<<20 || limits.PeerBaseLimit.Memory < 128<<20 {
		t.Errorf("connection memory %d, peer memory %d", limits.ConnBaseLimit.Memory, limits.PeerBaseLimit.Memory)
	}
	// The defaults it started from are untouched.
	if rcmgr.DefaultLimits.ConnBaseLimit.Memory != 32<<20 {
		t.Error("ProtocolLimits changed rcmgr.DefaultLimits")
	}
}
