package testnet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// The networks a benchmark or testnet can run its nodes on (Net.Kind).
const (
	// NetLoopback: the nodes talk over 127.0.0.1 directly, on TCP (the
	// local profile's default).
	NetLoopback = "loopback"
	// NetWAN: every packet between two nodes crosses an emulated wide-area
	// network (WAN, wanrelay.go).
	NetWAN = "wan"
)

// Net is the network between a swarm's nodes: loopback, or an emulated WAN
// with the given round-trip time, rate and loss. ParseNet reads the
// command line's form; String writes it back.
type Net struct {
	Kind string
	// WAN is the emulated link's shape (zero on loopback).
	WAN WANSpec
}

// Loopback is the default network: nothing emulated.
var Loopback = Net{Kind: NetLoopback}

// WANSpec is the shape of an emulated WAN. Every node has an access link
// of Rate bits/s up and Rate bits/s down, each a FIFO queue of QueueBytes;
// between any two access links, packets take RTT/2 and are lost with
// probability Loss, independently, in each direction. This is the model
// of go-libp2p's simnet (per-node uplink and downlink), run over real
// UDP sockets so that separate processes can share it.
type WANSpec struct {
	// RTT is the round-trip time between two idle nodes: RTT/2 each way.
	RTT time.Duration
	// Rate is each node's uplink and downlink rate, in bits per second.
	Rate float64
	// Loss is the probability, in [0,1), that a packet is dropped on its
	// way between two access links (each direction on its own).
	Loss float64
}

// Limits of a WAN spec: wide enough for any link a volunteer has, narrow
// enough that a typo (a missing unit) is caught.
const (
	maxWANRTT  = 10 * time.Second
	minWANRate = 8e3  // 1 kB/s
	maxWANRate = 1e11 // 100 gbit
	maxWANLoss = 0.5
	// minQueueBytes keeps a link's queue at least about 45 full-size
	// packets deep however small its bandwidth-delay product.
	minQueueBytes = 64 << 10
)

// QueueBytes is the size of each access link's queue: one bandwidth-delay
// product (Rate x RTT, the classic rule for a router's buffer), at least
// 64 KiB. A full queue adds up to one more RTT of delay; a packet that
// finds it full is dropped (drop-tail), which is how a congested link
// signals the sender's congestion control.
func (s WANSpec) QueueBytes() int {
	bdp := s.Rate / 8 * s.RTT.Seconds()
	return max(minQueueBytes, int(math.Ceil(bdp)))
}

// Validate reports every bad field at once.
func (s WANSpec) Validate() error {
	var errs []string
	if s.RTT < 0 || s.RTT > maxWANRTT {
		errs = append(errs, fmt.Sprintf("rtt %v not in [0,%v]", s.RTT, maxWANRTT))
	}
	if !(s.Rate >= minWANRate && s.Rate <= maxWANRate) {
		errs = append(errs, fmt.Sprintf("rate %g bit/s not in [%g,%g]", s.Rate, minWANRate, maxWANRate))
	}
	if !(s.Loss >= 0 && s.Loss <= maxWANLoss) {
		errs = append(errs, fmt.Sprintf("loss %g not in [0,%g]", s.Loss, maxWANLoss))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: wan: %s", ErrBench, strings.Join(errs, "; "))
	}
	return nil
}

// ParseNet reads a network: "loopback", or "wan:RTT,RATE[,LOSS]" with RTT a
// duration (40ms), RATE a number of bit, kbit, mbit or gbit per second
// (decimal, as tc counts them: 100mbit is 10^8 bit/s) and LOSS a
// percentage (0.1%).
func ParseNet(s string) (Net, error) {
	s = strings.TrimSpace(s)
	if s == NetLoopback {
		return Loopback, nil
	}
	spec, ok := strings.CutPrefix(s, NetWAN+":")
	if !ok {
		return Net{}, fmt.Errorf("%w: network %q: want loopback or wan:RTT,RATE[,LOSS] (e.g. wan:40ms,100mbit,0.1%%)", ErrBench, s)
	}
	parts := strings.Split(spec, ",")
	if len(parts) < 2 || len(parts) > 3 {
		return Net{}, fmt.Errorf("%w: network %q: want wan:RTT,RATE[,LOSS] (e.g. wan:40ms,100mbit,0.1%%)", ErrBench, s)
	}
	var w WANSpec
	var errs []string
	rtt, err := time.ParseDuration(strings.TrimSpace(parts[0]))
	if err != nil {
		errs = append(errs, fmt.Sprintf("rtt %q: want a duration such as 40ms", parts[0]))
	}
	w.RTT = rtt
	if w.Rate, err = parseRate(parts[1]); err != nil {
		errs = append(errs, err.Error())
	}
	if len(parts) == 3 {
		p := strings.TrimSpace(parts[2])
		v, ok := strings.CutSuffix(p, "%")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			errs = append(errs, fmt.Sprintf("loss %q: want a percentage such as 0.1%%", p))
		}
		w.Loss = f / 100
	}
	if len(errs) > 0 {
		return Net{}, fmt.Errorf("%w: network %q: %s", ErrBench, s, strings.Join(errs, "; "))
	}
	if err := w.Validate(); err != nil {
		return Net{}, fmt.Errorf("network %q: %w", s, err)
	}
	return Net{Kind: NetWAN, WAN: w}, nil
}

// rateUnits are the rate suffixes ParseNet takes, largest first (bit/s).
var rateUnits = []struct {
	name string
	bits float64
}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}}

func parseRate(s string) (float64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, u := range rateUnits {
		if v, ok := strings.CutSuffix(s, u.name); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil && f > 0 {
				return f * u.bits, nil
			}
			break
		}
	}
	return 0, fmt.Errorf("rate %q: want a number of bit, kbit, mbit or gbit (per second), such as 100mbit", s)
}

// formatRate is parseRate's inverse, in the largest unit that keeps the
// number short.
func formatRate(bits float64) string {
	for _, u := range rateUnits {
		if bits >= u.bits {
			return strconv.FormatFloat(bits/u.bits, 'g', 6, 64) + u.name
		}
	}
	return strconv.FormatFloat(bits, 'g', 6, 64) + "bit"
}

// String is the network in ParseNet's form.
func (n Net) String() string {
	if n.Kind != NetWAN {
		return NetLoopback
	}
	s := fmt.Sprintf("%s:%v,%s", NetWAN, n.WAN.RTT, formatRate(n.WAN.Rate))
	if n.WAN.Loss > 0 {
		s += "," + strconv.FormatFloat(100*n.WAN.Loss, 'g', 6, 64) + "%"
	}
	return s
}

// Slug is the network's name in a file name: letters, digits, dots and
// dashes only.
func (n Net) Slug() string {
	r := strings.NewReplacer(":", "-", ",", "-", "%", "pct")
	return r.Replace(n.String())
}

// Describe says in a sentence what the network is and how it is emulated,
// for the report.
func (n Net) Describe() string {
	if n.Kind != NetWAN {
		return "the nodes talk over 127.0.0.1 directly (TCP), nothing emulated"
	}
	w := n.WAN
	loss := "no random loss"
	if w.Loss > 0 {
		loss = fmt.Sprintf("a random loss of %g%% per packet, each direction on its own", 100*w.Loss)
	}
	return fmt.Sprintf("emulated WAN in user space (the benchmark's own UDP relay; no kernel queueing discipline): "+
		"every node listens for QUIC on 127.0.0.1 only and announces (--announce) an address of the relay instead, "+
		"so every packet between two nodes, the bootstrap dial, DHT, pubsub and model traffic alike, crosses it; "+
		"the relay gives each node an access link of %s up and %s down (FIFO queues of %.0f kB, one bandwidth-delay product, drop-tail), "+
		"and between access links a one-way delay of %v (RTT %v) and %s; "+
		"TCP is not used (a byte stream cannot lose packets)", formatRate(w.Rate), formatRate(w.Rate), float64(w.QueueBytes())/1e3,
		w.RTT/2, w.RTT, loss)
}

// wanPacket is one datagram in the emulated network, from one endpoint to
// another (indices into the model's links).
type wanPacket struct {
	from, to int
	data     []byte
}

// wanDelivery is a packet that has crossed the network, and when it was
// due at its destination (model time).
type wanDelivery struct {
	wanPacket
	at time.Duration
}

// linkQueue is one direction of an access link: a FIFO serializer at the
// link's rate with a bounded queue.
type linkQueue struct {
	// free is when the link will have sent everything queued on it.
	free time.Duration
}

// admit queues a packet of size bytes arriving at t and returns when its
// last bit leaves the link, or false if the queue is full (the bytes
// still to send ahead of it plus its own exceed limit). An idle link
// always takes a packet.
func (q *linkQueue) admit(t time.Duration, size int, bytesPerS float64, limit int) (time.Duration, bool) {
	start := max(t, q.free)
	if backlog := (start - t).Seconds() * bytesPerS; backlog > 0 && backlog+float64(size) > float64(limit) {
		return 0, false
	}
	q.free = start + time.Duration(float64(size)/bytesPerS*float64(time.Second))
	return q.free, true
}

// LinkCounters are what one endpoint's access link carried.
type LinkCounters struct {
	// SentBytes and SentPackets: what the endpoint offered the network
	// (UDP payloads, so QUIC's headers and every protocol's bytes count).
	SentBytes   uint64 `json:"sent_bytes"`
	SentPackets uint64 `json:"sent_packets"`
	// RecvBytes and RecvPackets: what the network delivered to it.
	RecvBytes   uint64 `json:"recv_bytes"`
	RecvPackets uint64 `json:"recv_packets"`
	// UplinkDrops and DownlinkDrops: packets dropped because its uplink's
	// (sending) or downlink's (receiving) queue was full; Lost: packets it
	// sent that the random loss took.
	UplinkDrops   uint64 `json:"uplink_drops"`
	DownlinkDrops uint64 `json:"downlink_drops"`
	Lost          uint64 `json:"lost"`
}

// linkModel is the emulated network's state and arithmetic, free of
// sockets and clocks: time is a duration since the model's origin, passed
// in by the caller, and randomness comes from the rng it is given, so a
// test drives it in virtual time. A packet sent at t from endpoint a to b
// leaves a's uplink after queueing and serialization, is lost with
// probability Loss, reaches b's downlink RTT/2 later, and is delivered
// after queueing and serialization there. Endpoints are added, never
// removed. Not safe for concurrent use: the relay's loop owns it.
type linkModel struct {
	spec      WANSpec
	delay     time.Duration // one way
	bytesPerS float64
	queue     int
	rng       *rand.Rand

	up, down []linkQueue
	counters []LinkCounters
	// pairs[a][b] is the bytes delivered from a to b.
	pairs [][]uint64
	// events holds the packets on their way to a downlink (enter) and
	// those leaving it (deliver), by time.
	events eventHeap
	seq    uint64
}

func newLinkModel(spec WANSpec, rng *rand.Rand) *linkModel {
	return &linkModel{spec: spec, delay: spec.RTT / 2, bytesPerS: spec.Rate / 8, queue: spec.QueueBytes(), rng: rng}
}

// addEndpoint adds an endpoint with idle links and returns its index.
func (m *linkModel) addEndpoint() int {
	m.up, m.down = append(m.up, linkQueue{}), append(m.down, linkQueue{})
	m.counters = append(m.counters, LinkCounters{})
	for i := range m.pairs {
		m.pairs[i] = append(m.pairs[i], 0)
	}
	m.pairs = append(m.pairs, make([]uint64, len(m.up)))
	return len(m.up) - 1
}

// send offers p to the network at now.
func (m *linkModel) send(now time.Duration, p wanPacket) {
	c := &m.counters[p.from]
	c.SentBytes += uint64(len(p.data))
	c.SentPackets++
	left, ok := m.up[p.from].admit(now, len(p.data), m.bytesPerS, m.queue)
	if !ok {
		c.UplinkDrops++
		return
	}
	if m.spec.Loss > 0 && m.rng.Float64() < m.spec.Loss {
		c.Lost++
		return
	}
	m.push(wanEvent{at: left + m.delay, p: p})
}

func (m *linkModel) push(e wanEvent) {
	m.seq++
	e.seq = m.seq
	m.events.push(e)
}

// next is when the earliest pending event is due (false: none).
func (m *linkModel) next() (time.Duration, bool) {
	if len(m.events) == 0 {
		return 0, false
	}
	return m.events[0].at, true
}

// due appends to out, in the order they are due, the packets delivered at
// or before now, and moves the packets that reached a downlink by now
// onto it. Events are handled at their own time, not at now, so a late
// call changes nothing but when the caller hands the packets over.
func (m *linkModel) due(now time.Duration, out []wanDelivery) []wanDelivery {
	for len(m.events) > 0 && m.events[0].at <= now {
		e := m.events.pop()
		if e.deliver {
			c := &m.counters[e.p.to]
			c.RecvBytes += uint64(len(e.p.data))
			c.RecvPackets++
			m.pairs[e.p.from][e.p.to] += uint64(len(e.p.data))
			out = append(out, wanDelivery{wanPacket: e.p, at: e.at})
			continue
		}
		left, ok := m.down[e.p.to].admit(e.at, len(e.p.data), m.bytesPerS, m.queue)
		if !ok {
			m.counters[e.p.to].DownlinkDrops++
			continue
		}
		m.push(wanEvent{at: left, deliver: true, p: e.p})
	}
	return out
}

// wanEvent is a packet reaching a downlink (deliver false) or leaving it
// for its destination (deliver true) at a model time.
type wanEvent struct {
	at      time.Duration
	seq     uint64 // ties go to the earlier event
	deliver bool
	p       wanPacket
}

// eventHeap is a binary min-heap of events by (at, seq), written out
// rather than through container/heap, whose interface boxes every event
// pushed and popped: two allocations per event, four per packet.
type eventHeap []wanEvent

func (h eventHeap) less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}

func (h *eventHeap) push(e wanEvent) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

// pop removes and returns the earliest event; the heap must not be empty.
func (h *eventHeap) pop() wanEvent {
	s := *h
	e, last := s[0], len(s)-1
	s[0] = s[last]
	s[last] = wanEvent{}
	s = s[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(s) && s.less(l, least) {
			least = l
		}
		if r < len(s) && s.less(r, least) {
			least = r
		}
		if least == i {
			break
		}
		s[i], s[least] = s[least], s[i]
		i = least
	}
	*h = s
	return e
}
