package testnet

import (
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestParseNetReadsLoopbackAndWANAndWritesThemBack(t *testing.T) {
	for _, tc := range []struct {
		in, canonical string
		want          Net
	}{
		{"loopback", "loopback", Loopback},
		{"wan:40ms,100mbit", "wan:40ms,100mbit", Net{Kind: NetWAN, WAN: WANSpec{RTT: 40 * time.Millisecond, Rate: 1e8}}},
		{" wan:40ms, 100Mbit , 0.5% ", "wan:40ms,100mbit,0.5%", Net{Kind: NetWAN, WAN: WANSpec{RTT: 40 * time.Millisecond, Rate: 1e8, Loss: 0.005}}},
		{"wan:0s,1.5gbit", "wan:0s,1.5gbit", Net{Kind: NetWAN, WAN: WANSpec{Rate: 1.5e9}}},
		{"wan:250ms,512kbit,2%", "wan:250ms,512kbit,2%", Net{Kind: NetWAN, WAN: WANSpec{RTT: 250 * time.Millisecond, Rate: 512e3, Loss: 0.02}}},
	} {
		got, err := ParseNet(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got.Kind != tc.want.Kind || got.WAN.RTT != tc.want.WAN.RTT || math.Abs(got.WAN.Rate-tc.want.WAN.Rate) > 1e-6 ||
			math.Abs(got.WAN.Loss-tc.want.WAN.Loss) > 1e-12 {
			t.Errorf("%q: got %+v, want %+v", tc.in, got, tc.want)
		}
		if got.String() != tc.canonical {
			t.Errorf("%q: String %q, want %q", tc.in, got.String(), tc.canonical)
		}
		if again, err := ParseNet(got.String()); err != nil || again.String() != got.String() {
			t.Errorf("%q: %q does not parse back (%v)", tc.in, got.String(), err)
		}
		if strings.ContainsAny(got.Slug(), ":,%/ ") {
			t.Errorf("%q: slug %q is not a file name", tc.in, got.Slug())
		}
	}
}

func TestParseNetNamesWhatIsWrong(t *testing.T) {
	for in, want := range map[string][]string{
		"lan":                  {"want loopback or wan"},
		"wan:40ms":             {"want wan:RTT,RATE"},
		"wan:40,100mbit":       {"rtt \"40\""},
		"wan:40ms,100mbps":     {"rate \"100mbps\""},
		"wan:40ms,100":         {"rate \"100\""},
		"wan:40ms,100mbit,0.1": {"loss \"0.1\""},
		"wan:40ms,100mbit,60%": {"loss 0.6 not in"},
		"wan:1h,1bit,1%":       {"rtt 1h0m0s not in", "rate 1 bit/s not in"},
		"wan:x,y,z":            {"rtt \"x\"", "rate \"y\"", "loss \"z\""},
	} {
		_, err := ParseNet(in)
		if !errors.Is(err, ErrBench) {
			t.Errorf("%q: error %v, want ErrBench", in, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not say %q", in, err, w)
			}
		}
	}
}

func TestQueueIsOneBandwidthDelayProductAtLeast64KiB(t *testing.T) {
	if q := (WANSpec{RTT: 40 * time.Millisecond, Rate: 1e8}).QueueBytes(); q != 500_000 {
		t.Errorf("40 ms at 100 mbit: queue %d bytes, want 500000", q)
	}
	if q := (WANSpec{RTT: time.Millisecond, Rate: 1e6}).QueueBytes(); q != 64<<10 {
		t.Errorf("1 ms at 1 mbit: queue %d bytes, want the 64 KiB floor", q)
	}
}

// tx is the serialization time of size bytes at rate bit/s, as the model
// computes it.
func tx(size int, rate float64) time.Duration {
	return time.Duration(float64(size) / (rate / 8) * float64(time.Second))
}

func newTestModel(spec WANSpec, endpoints int) *linkModel {
	m := newLinkModel(spec, rand.New(rand.NewPCG(1, 2)))
	for range endpoints {
		m.addEndpoint()
	}
	return m
}

// drain hands over everything the model will ever deliver, as if the
// caller woke exactly at each event.
func drain(m *linkModel) []wanDelivery {
	var out []wanDelivery
	for {
		at, ok := m.next()
		if !ok {
			return out
		}
		out = m.due(at, out)
	}
}

func TestOnePacketTakesBothSerializationsAndHalfTheRTT(t *testing.T) {
	spec := WANSpec{RTT: 40 * time.Millisecond, Rate: 1e8}
	m := newTestModel(spec, 2)
	start := 3 * time.Second
	m.send(start, wanPacket{from: 0, to: 1, data: make([]byte, 1200)})
	if out := m.due(start+20*time.Millisecond, nil); len(out) != 0 {
		t.Fatalf("delivered %d packets before RTT/2 and the serializations had passed", len(out))
	}
	out := drain(m)
	want := start + tx(1200, spec.Rate) + 20*time.Millisecond + tx(1200, spec.Rate)
	if len(out) != 1 || out[0].at != want || out[0].from != 0 || out[0].to != 1 || len(out[0].data) != 1200 {
		t.Fatalf("got %+v, want one 1200-byte packet 0->1 at %v", out, want)
	}
	c := m.counters
	if c[0].SentBytes != 1200 || c[0].SentPackets != 1 || c[1].RecvBytes != 1200 || c[1].RecvPackets != 1 || m.pairs[0][1] != 1200 ||
		m.pairs[1][0] != 0 {
		t.Errorf("counters %+v, pairs %v", c, m.pairs)
	}
}

func TestABurstLeavesAtTheLinkRate(t *testing.T) {
	spec := WANSpec{RTT: 40 * time.Millisecond, Rate: 1e8}
	m := newTestModel(spec, 2)
	const n, size = 300, 1400 // 420 kB: within the 500 kB queue
	for range n {
		m.send(0, wanPacket{from: 0, to: 1, data: make([]byte, size)})
	}
	out := drain(m)
	if len(out) != n {
		t.Fatalf("delivered %d of %d packets (drops %+v)", len(out), n, m.counters)
	}
	one := tx(size, spec.Rate)
	for k, d := range out {
		// The uplink sends packet k by (k+1) tx; the downlink, at the
		// same rate, passes each on one tx after it arrives.
		if want := time.Duration(k+2)*one + spec.RTT/2; d.at != want {
			t.Fatalf("packet %d delivered at %v, want %v", k, d.at, want)
		}
	}
	span := (out[n-1].at - out[0].at).Seconds()
	if rate := float64((n-1)*size*8) / span; math.Abs(rate-spec.Rate)/spec.Rate > 1e-6 {
		t.Errorf("burst delivered at %.0f bit/s, want %.0f", rate, spec.Rate)
	}
}

func TestAFullUplinkDropsTheTail(t *testing.T) {
	spec := WANSpec{RTT: time.Millisecond, Rate: 1e6} // queue: the 64 KiB floor
	m := newTestModel(spec, 2)
	const size = 1000
	for range 100 {
		m.send(0, wanPacket{from: 0, to: 1, data: make([]byte, size)})
	}
	// Packet k finds k packets ahead of it: it fits while (k+1) x 1000
	// bytes are within 65536.
	if c := m.counters[0]; c.UplinkDrops != 35 || c.SentPackets != 100 {
		t.Errorf("uplink drops %d of %d packets, want 35", c.UplinkDrops, c.SentPackets)
	}
	if out := drain(m); len(out) != 65 {
		t.Errorf("delivered %d packets, want 65", len(out))
	}
	// Once the queue has drained, the link takes packets again.
	m.send(10*time.Second, wanPacket{from: 0, to: 1, data: make([]byte, size)})
	if out := drain(m); len(out) != 1 {
		t.Errorf("an idle link refused a packet")
	}
}

func TestTwoSendersShareTheReceiversDownlink(t *testing.T) {
	spec := WANSpec{RTT: 10 * time.Millisecond, Rate: 1e7}
	m := newTestModel(spec, 3)
	const n, size = 20, 1000
	for range n {
		m.send(0, wanPacket{from: 0, to: 2, data: make([]byte, size)})
		m.send(0, wanPacket{from: 1, to: 2, data: make([]byte, size)})
	}
	out := drain(m)
	if len(out) != 2*n {
		t.Fatalf("delivered %d of %d", len(out), 2*n)
	}
	// Both uplinks send at the full rate; the downlink passes on one
	// packet per tx, so the last leaves 2n tx after the first arrived.
	one := tx(size, spec.Rate)
	first := one + spec.RTT/2
	if want := first + time.Duration(2*n)*one; out[2*n-1].at != want {
		t.Errorf("last packet at %v, want %v (the downlink at its rate)", out[2*n-1].at, want)
	}
	for k := 1; k < len(out); k++ {
		if out[k].at < out[k-1].at {
			t.Fatalf("deliveries out of order at %d", k)
		}
	}
	if m.pairs[0][2] != n*size || m.pairs[1][2] != n*size {
		t.Errorf("pairs %v", m.pairs)
	}
}

func TestTheTwoDirectionsDoNotShareALink(t *testing.T) {
	spec := WANSpec{RTT: 10 * time.Millisecond, Rate: 1e7}
	m := newTestModel(spec, 2)
	for range 50 {
		m.send(0, wanPacket{from: 0, to: 1, data: make([]byte, 1000)})
	}
	m.send(0, wanPacket{from: 1, to: 0, data: make([]byte, 1000)})
	var back *wanDelivery
	for _, d := range drain(m) {
		if d.from == 1 {
			back = &d
		}
	}
	if want := 2*tx(1000, spec.Rate) + spec.RTT/2; back == nil || back.at != want {
		t.Errorf("the reply arrived at %v, want %v: not behind the other direction's burst", back, want)
	}
}

func TestALateCallDeliversOnTheModelsSchedule(t *testing.T) {
	spec := WANSpec{RTT: 20 * time.Millisecond, Rate: 1e7}
	exact, late := newTestModel(spec, 2), newTestModel(spec, 2)
	for k := range 10 {
		at := time.Duration(k) * time.Millisecond
		exact.send(at, wanPacket{from: 0, to: 1, data: make([]byte, 1200)})
		late.send(at, wanPacket{from: 0, to: 1, data: make([]byte, 1200)})
	}
	want := drain(exact)
	got := late.due(time.Second, nil)
	if len(got) != len(want) {
		t.Fatalf("late call delivered %d, want %d", len(got), len(want))
	}
	for k := range got {
		if got[k].at != want[k].at {
			t.Errorf("packet %d due at %v, want %v", k, got[k].at, want[k].at)
		}
	}
}

func TestLossTakesItsShareOfPacketsInEachDirection(t *testing.T) {
	const p, n = 0.1, 100_000
	m := newTestModel(WANSpec{RTT: time.Millisecond, Rate: 1e9, Loss: p}, 2)
	for k := range n {
		at := time.Duration(k) * time.Millisecond // spaced: no queueing
		m.send(at, wanPacket{from: 0, to: 1, data: make([]byte, 100)})
		m.send(at, wanPacket{from: 1, to: 0, data: make([]byte, 100)})
	}
	out := drain(m)
	// Five standard deviations of a binomial share: about 0.0047.
	bound := 5 * math.Sqrt(p*(1-p)/n)
	for i, c := range m.counters {
		if share := float64(c.Lost) / n; math.Abs(share-p) > bound {
			t.Errorf("endpoint %d: lost %.4f of its packets, want %.2f ± %.4f", i, share, p, bound)
		}
		if c.UplinkDrops+c.DownlinkDrops != 0 {
			t.Errorf("endpoint %d: queue drops %+v with no queueing", i, c)
		}
	}
	if lost := m.counters[0].Lost + m.counters[1].Lost; uint64(len(out))+lost != 2*n {
		t.Errorf("delivered %d and lost %d of %d", len(out), lost, 2*n)
	}
}

// udpPeer is a socket standing in for a node.
func udpPeer(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func addrOf(c *net.UDPConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

// recv reads one datagram, failing the test after a generous wait.
func recv(t *testing.T, c *net.UDPConn) (string, netip.AddrPort) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2048)
	n, src, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("no datagram: %v", err)
	}
	return string(buf[:n]), src
}

func TestRelayDeliversFromTheSendersPublicAddress(t *testing.T) {
	defer goleak.VerifyNone(t)
	w, err := StartWAN(WANSpec{RTT: 2 * time.Millisecond, Rate: 1e8}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a, b, stranger := udpPeer(t), udpPeer(t), udpPeer(t)
	ia, pubA, err := w.AddEndpoint("a")
	if err != nil {
		t.Fatal(err)
	}
	ib, pubB, err := w.AddEndpoint("b")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Attach(ia, addrOf(a)); err != nil {
		t.Fatal(err)
	}
	if err := w.Attach(ib, addrOf(b)); err != nil {
		t.Fatal(err)
	}
	if err := w.Attach(ib, addrOf(b)); err == nil {
		t.Error("attached an endpoint twice")
	}
	if _, err := a.WriteToUDPAddrPort([]byte("hello"), pubB); err != nil {
		t.Fatal(err)
	}
	msg, src := recv(t, b)
	if msg != "hello" || src != pubA {
		t.Fatalf("b got %q from %v, want hello from a's public address %v", msg, src, pubA)
	}
	if _, err := b.WriteToUDPAddrPort([]byte("back"), src); err != nil {
		t.Fatal(err)
	}
	if msg, src := recv(t, a); msg != "back" || src != pubB {
		t.Fatalf("a got %q from %v, want back from b's public address %v", msg, src, pubB)
	}
	// A socket that is no endpoint's listen address becomes a stranger,
	// with a public address of its own, and its traffic is emulated too.
	if _, err := stranger.WriteToUDPAddrPort([]byte("who"), pubB); err != nil {
		t.Fatal(err)
	}
	msg, src = recv(t, b)
	if msg != "who" || src == pubA || src == pubB || src == addrOf(stranger) {
		t.Fatalf("b got %q from %v, want who from a new public address", msg, src)
	}
	if _, err := b.WriteToUDPAddrPort([]byte("you"), src); err != nil {
		t.Fatal(err)
	}
	if msg, _ := recv(t, stranger); msg != "you" {
		t.Fatalf("stranger got %q", msg)
	}
	// An endpoint with no listen address yet gets nothing.
	_, pubC, err := w.AddEndpoint("c")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteToUDPAddrPort([]byte("lost"), pubC); err != nil {
		t.Fatal(err)
	}
	var s WANStats
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if s = w.Stats(); s.Unattached == 1 {
			break
		}
	}
	// Endpoints in the order they came: a, b, the stranger, c.
	if s.Unattached != 1 || s.Strangers != 1 || len(s.Endpoints) != 4 || !s.Endpoints[2].Stranger ||
		s.Endpoints[2].Listen != addrOf(stranger).String() || s.Endpoints[3].Listen != "" {
		t.Fatalf("stats %+v: want 1 unattached datagram and 1 stranger, the third of 4 endpoints", s)
	}
	if s.Pairs[ia][ib] != 5 || s.Pairs[ib][ia] != 4 || s.Pairs[2][ib] != 3 || s.Pairs[ib][2] != 3 {
		t.Errorf("pairs %v", s.Pairs)
	}
	// The datagram to c never entered the network.
	if e := s.Endpoints[ia]; e.SentPackets != 1 || e.SentBytes != 5 || e.RecvBytes != 4 || e.Listen != addrOf(a).String() ||
		e.Public != pubA.String() {
		t.Errorf("a's stats %+v", e)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.AddEndpoint("late"); err == nil {
		t.Error("added an endpoint to a closed relay")
	}
}

// BenchmarkWANRelay is the relay's cost per packet: 1200-byte datagrams
// from one endpoint to another, in windows in flight, through an emulated
// network with no delay and
//   - unlimited: a rate far above what it carries (windows of 64), so
//     the relay hands over whole bursts at once;
//   - 100mbit: the WAN's rate (windows of 32, within the 64 KiB queue),
//     so it hands packets over one at a time, at the link's pace, as in
//     a run.
//
// b.N packets; ns/op is the wall time per packet with the sender and
// receiver on the same machine, cpu-ns/op the process's CPU time per
// packet (the relay's, the sender's and the receiver's).
func BenchmarkWANRelay(b *testing.B) {
	for _, bc := range []struct {
		name   string
		rate   float64
		window int
	}{{"unlimited", maxWANRate, 64}, {"100mbit", 1e8, 32}} {
		b.Run(bc.name, func(b *testing.B) { benchRelay(b, bc.rate, bc.window) })
	}
}

func benchRelay(b *testing.B, rate float64, window int) {
	w, err := StartWAN(WANSpec{Rate: rate}, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	conn := func() *net.UDPConn {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		_ = c.SetReadBuffer(wanSocketBuffer)
		return c
	}
	a, c := conn(), conn()
	defer a.Close()
	defer c.Close()
	ia, _, _ := w.AddEndpoint("a")
	ic, pubC, _ := w.AddEndpoint("c")
	if w.Attach(ia, addrOf(a)) != nil || w.Attach(ic, addrOf(c)) != nil {
		b.Fatal("attach")
	}
	msg, buf := make([]byte, 1200), make([]byte, 2048)
	b.SetBytes(int64(len(msg)))
	b.ResetTimer()
	cpu0 := processCPU()
	for sent := 0; sent < b.N; {
		n := min(window, b.N-sent)
		for range n {
			if _, err := a.WriteToUDPAddrPort(msg, pubC); err != nil {
				b.Fatal(err)
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for range n {
			if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
				b.Fatalf("after %d packets: %v", sent, err)
			}
		}
		sent += n
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

func TestEventHeapPopsInTimeThenSequenceOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var (
		h    eventHeap
		left []wanEvent // what the heap holds, kept sorted
		seq  uint64
	)
	before := func(a, b wanEvent) bool { return a.at < b.at || a.at == b.at && a.seq < b.seq }
	for i := 0; i < 4000 || len(h) > 0; i++ {
		// Few distinct times, so ties are common and seq must break them;
		// pushes and pops interleaved, then everything drained.
		if i < 4000 && (len(h) == 0 || rng.IntN(3) > 0) {
			seq++
			e := wanEvent{at: time.Duration(rng.IntN(50)), seq: seq}
			h.push(e)
			at, _ := slices.BinarySearchFunc(left, e, func(x, y wanEvent) int {
				if before(x, y) {
					return -1
				}
				return 1
			})
			left = slices.Insert(left, at, e)
			continue
		}
		got := h.pop()
		if want := left[0]; got.at != want.at || got.seq != want.seq {
			t.Fatalf("step %d: popped %v/%d, want the least, %v/%d", i, got.at, got.seq, want.at, want.seq)
		}
		left = left[1:]
	}
	if len(h) != 0 || len(left) != 0 {
		t.Fatalf("%d events left in the heap, %d expected", len(h), len(left))
	}
}

// Bursts of datagrams of every size from one byte to near UDP's largest
// cross the relay whole and in order.
func TestRelayCarriesABurstWholeAndInOrder(t *testing.T) {
	defer goleak.VerifyNone(t)
	w, err := StartWAN(WANSpec{RTT: time.Millisecond, Rate: maxWANRate}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a, b := udpPeer(t), udpPeer(t)
	_ = b.SetReadBuffer(wanSocketBuffer)
	ia, pubA, _ := w.AddEndpoint("a")
	ib, pubB, _ := w.AddEndpoint("b")
	if w.Attach(ia, addrOf(a)) != nil || w.Attach(ib, addrOf(b)) != nil {
		t.Fatal("attach")
	}
	sizes := []int{1, 1200, 60000, 7, 1452}
	const count = 160
	msg := func(i int) []byte {
		p := make([]byte, sizes[i%len(sizes)])
		for j := range p {
			p[j] = byte(i + j)
		}
		return p
	}
	// Windows of 8, small enough (at most about 130 kB) for any socket
	// buffer on the way.
	buf := make([]byte, wanMaxDatagram)
	for start := 0; start < count; start += 8 {
		for i := start; i < start+8; i++ {
			if _, err := a.WriteToUDPAddrPort(msg(i), pubB); err != nil {
				t.Fatal(err)
			}
		}
		for i := start; i < start+8; i++ {
			_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, src, err := b.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatalf("datagram %d of %d: %v", i, count, err)
			}
			if want := msg(i); src != pubA || string(buf[:n]) != string(want) {
				t.Fatalf("datagram %d: %d bytes from %v, want %d bytes (the %dth sent) from %v", i, n, src, len(want), i, pubA)
			}
		}
	}
	s := w.Stats()
	if s.WriteErrors != 0 || s.Endpoints[ia].SentPackets != count || s.Endpoints[ib].RecvPackets != count {
		t.Errorf("stats %+v", s)
	}
}
