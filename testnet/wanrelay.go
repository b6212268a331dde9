package testnet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"
)

// WAN is an emulated wide-area network between processes on this machine,
// in user space (no root, no kernel queueing discipline: this kernel has
// no netem). Each endpoint (a node) gets a public UDP address on
// 127.0.0.1, a socket of the relay, which the node announces in place of
// the address it listens on (node --announce). A datagram that endpoint a
// sends from its listen address to b's public address enters the model
// (linkModel: a's uplink, RTT/2 and the loss, b's downlink) and is
// delivered to b's listen address from a's public address, so b sees a at
// the address a announces, replies there, and the reply crosses the
// network the other way. Nodes only ever learn public addresses, so no
// packet between them can go around the relay.
//
// A datagram from an address that is no endpoint's listen address (a
// process dialing from another socket) makes that address a stranger: an
// endpoint of its own with a public address and access links of its own,
// so its traffic is emulated too; Stats counts them.
//
// Only UDP is relayed: nodes on a WAN speak QUIC, whose congestion control
// sees the queues and losses a real path has. One goroutine owns the model
// and the endpoint table (loop); each public socket has a reader that
// hands it what arrives. The relay adds its own scheduling delay when the
// machine is busy; Stats reports how late it delivered.
type WAN struct {
	spec  WANSpec
	start time.Time
	in    chan inbound
	cmds  chan func()
	done  chan struct{}
	// loopDone is closed when loop has returned: the endpoint table is
	// then Close's.
	loopDone chan struct{}
	once     sync.Once
	readers  sync.WaitGroup

	// Owned by loop.
	model  *linkModel
	eps    []*wanEndpoint
	byReal map[netip.AddrPort]int
	// unattached counts datagrams to an endpoint whose listen address is
	// not known yet; writeErrs failed deliveries (a node gone).
	unattached, writeErrs uint64
	// lateMax and lateSum (over lateN deliveries) measure how far behind
	// the model's schedule the relay handed packets over.
	lateMax, lateSum time.Duration
	lateN            uint64
}

// wanEndpoint is one process on the emulated network.
type wanEndpoint struct {
	name     string
	conn     *net.UDPConn
	public   netip.AddrPort
	real     netip.AddrPort // zero until attached
	stranger bool
}

// inbound is a datagram that arrived at endpoint to's public socket.
type inbound struct {
	to   int
	src  netip.AddrPort
	data []byte
}

// Sizes of the relay's buffers: a socket buffer holds a burst of a few
// milliseconds at 100 mbit while the loop is busy (the kernel caps it at
// net.core.rmem_max); the inbound queue as much again.
const (
	wanSocketBuffer = 4 << 20
	wanInboundQueue = 4096
	wanMaxDatagram  = 64 << 10
)

// StartWAN starts an emulated WAN of the given shape with no endpoints.
// seed drives the random loss. Close stops it.
func StartWAN(spec WANSpec, seed uint64) (*WAN, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	w := &WAN{spec: spec, start: time.Now(), in: make(chan inbound, wanInboundQueue), cmds: make(chan func()),
		done: make(chan struct{}), loopDone: make(chan struct{}), model: newLinkModel(spec, rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))),
		byReal: map[netip.AddrPort]int{}}
	go w.loop()
	return w, nil
}

// Spec is the network's shape.
func (w *WAN) Spec() WANSpec { return w.spec }

// do runs f on the loop goroutine and waits for it; false once closed.
func (w *WAN) do(f func()) bool {
	ran := make(chan struct{})
	select {
	case w.cmds <- func() { f(); close(ran) }:
	case <-w.done:
		return false
	}
	select {
	case <-ran:
		return true
	case <-w.done:
		return false
	}
}

var errWANClosed = errors.New("testnet: wan: closed")

// AddEndpoint gives a new endpoint its public address (a fresh socket on
// 127.0.0.1) and returns its index. Attach must name its listen address
// before anything can reach it.
func (w *WAN) AddEndpoint(name string) (int, netip.AddrPort, error) {
	var (
		idx int
		pub netip.AddrPort
		err error
	)
	if !w.do(func() { idx, pub, err = w.addEndpoint(name, netip.AddrPort{}, false) }) {
		return 0, netip.AddrPort{}, errWANClosed
	}
	return idx, pub, err
}

// Attach names the address endpoint i listens on (and sends from): what
// arrives at its public address is delivered there, and what comes from
// there is its traffic.
func (w *WAN) Attach(i int, listen netip.AddrPort) error {
	var err error
	if !w.do(func() {
		switch {
		case i < 0 || i >= len(w.eps):
			err = fmt.Errorf("%w: wan: no endpoint %d", ErrBench, i)
		case w.eps[i].real.IsValid():
			err = fmt.Errorf("%w: wan: endpoint %d is already attached to %v", ErrBench, i, w.eps[i].real)
		default:
			if j, taken := w.byReal[listen]; taken {
				err = fmt.Errorf("%w: wan: %v is already endpoint %d (%s)", ErrBench, listen, j, w.eps[j].name)
				return
			}
			w.eps[i].real = listen
			w.byReal[listen] = i
		}
	}) {
		return errWANClosed
	}
	return err
}

// Join makes a new endpoint for a process about to start: it picks a free
// UDP port on 127.0.0.1 for the process to listen on (FreePort: free when
// probed, and outside the kernel's ephemeral range, so no other socket is
// handed it before the process binds it), names it to the network before
// the process can send from it, so that its very first packet counts as
// its own, and returns it with the public address the process must
// announce.
func (w *WAN) Join(name string) (listen, public netip.AddrPort, err error) {
	port, err := FreePort("udp")
	if err != nil {
		return listen, public, fmt.Errorf("%w: wan: %w", ErrBench, err)
	}
	listen = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port))
	ep, public, err := w.AddEndpoint(name)
	if err != nil {
		return listen, public, err
	}
	return listen, public, w.Attach(ep, listen)
}

// addEndpoint opens an endpoint's public socket and starts its reader.
// Loop goroutine only.
func (w *WAN) addEndpoint(name string, real netip.AddrPort, stranger bool) (int, netip.AddrPort, error) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, netip.AddrPort{}, fmt.Errorf("%w: wan: %w", ErrBench, err)
	}
	_ = conn.SetReadBuffer(wanSocketBuffer)
	_ = conn.SetWriteBuffer(wanSocketBuffer)
	pub := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	idx := w.model.addEndpoint()
	w.eps = append(w.eps, &wanEndpoint{name: name, conn: conn, public: pub, real: real, stranger: stranger})
	if real.IsValid() {
		w.byReal[real] = idx
	}
	w.readers.Add(1)
	go w.read(idx, conn)
	return idx, pub, nil
}

// read hands the loop every datagram that reaches one public socket, until
// the socket is closed.
func (w *WAN) read(to int, conn *net.UDPConn) {
	defer w.readers.Done()
	buf := make([]byte, wanMaxDatagram)
	for {
		n, src, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. an ICMP error from an earlier write
		}
		select {
		case w.in <- inbound{to: to, src: src, data: append([]byte(nil), buf[:n]...)}:
		case <-w.done:
			return
		}
	}
}

// now is the model's time.
func (w *WAN) now() time.Duration { return time.Since(w.start) }

// loop owns the model and the endpoints: it routes what arrives and hands
// over what is due.
func (w *WAN) loop() {
	defer close(w.loopDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var out []wanDelivery
	for {
		if at, ok := w.model.next(); ok {
			timer.Reset(at - w.now())
		} else {
			timer.Reset(time.Hour)
		}
		select {
		case <-w.done:
			return
		case f := <-w.cmds:
			f()
		case p := <-w.in:
			w.route(p)
			// Take what else has arrived (a bounded batch) before
			// handing anything over.
			for more := 256; more > 0; more-- {
				select {
				case p := <-w.in:
					w.route(p)
				default:
					more = 0
				}
			}
		case <-timer.C:
		}
		now := w.now()
		out = w.model.due(now, out[:0])
		for _, d := range out {
			w.deliver(now, d)
		}
	}
}

// route puts one datagram on the network. Loop goroutine only.
func (w *WAN) route(p inbound) {
	from, ok := w.byReal[p.src]
	if !ok {
		var err error
		if from, _, err = w.addEndpoint("stranger "+p.src.String(), p.src, true); err != nil {
			return
		}
	}
	if !w.eps[p.to].real.IsValid() || from == p.to {
		w.unattached++
		return
	}
	w.model.send(w.now(), wanPacket{from: from, to: p.to, data: p.data})
}

// deliver hands one packet to its destination, from its sender's public
// address. Loop goroutine only.
func (w *WAN) deliver(now time.Duration, d wanDelivery) {
	if _, err := w.eps[d.from].conn.WriteToUDPAddrPort(d.data, w.eps[d.to].real); err != nil {
		w.writeErrs++
	}
	late := max(0, now-d.at)
	w.lateMax = max(w.lateMax, late)
	w.lateSum += late
	w.lateN++
}

// WANStats is what an emulated network carried, per endpoint in the order
// they were added (strangers last), and how faithfully the relay kept the
// model's schedule.
type WANStats struct {
	Endpoints []WANEndpointStats `json:"endpoints"`
	// Pairs[a][b] is the bytes delivered from endpoint a to b.
	Pairs [][]uint64 `json:"pairs"`
	// Strangers is how many endpoints were made for datagrams from an
	// address that was no endpoint's listen address.
	Strangers int `json:"strangers"`
	// Unattached counts datagrams to an endpoint with no listen address
	// yet (dropped); WriteErrors failed deliveries.
	Unattached  uint64 `json:"unattached"`
	WriteErrors uint64 `json:"write_errors"`
	// LateMaxS and LateMeanS: how far behind the model's schedule the
	// relay handed packets over, at worst and on average (its own
	// scheduling on a busy machine, on top of the emulated delay).
	LateMaxS  float64 `json:"late_max_s"`
	LateMeanS float64 `json:"late_mean_s"`
}

// WANEndpointStats is one endpoint's traffic.
type WANEndpointStats struct {
	Name     string `json:"name"`
	Public   string `json:"public"`
	Listen   string `json:"listen"`
	Stranger bool   `json:"stranger,omitempty"`
	LinkCounters
}

// Stats is what the network carried so far.
func (w *WAN) Stats() WANStats {
	var s WANStats
	w.do(func() {
		for i, ep := range w.eps {
			listen := ""
			if ep.real.IsValid() {
				listen = ep.real.String()
			}
			s.Endpoints = append(s.Endpoints, WANEndpointStats{Name: ep.name, Public: ep.public.String(), Listen: listen,
				Stranger: ep.stranger, LinkCounters: w.model.counters[i]})
			s.Pairs = append(s.Pairs, append([]uint64(nil), w.model.pairs[i]...))
			if ep.stranger {
				s.Strangers++
			}
		}
		s.Unattached, s.WriteErrors = w.unattached, w.writeErrs
		s.LateMaxS = w.lateMax.Seconds()
		if w.lateN > 0 {
			s.LateMeanS = (w.lateSum / time.Duration(w.lateN)).Seconds()
		}
	})
	return s
}

// Close stops the relay and closes every socket. Safe to call twice.
func (w *WAN) Close() error {
	w.once.Do(func() {
		close(w.done)
		<-w.loopDone
		for _, ep := range w.eps {
			ep.conn.Close()
		}
		w.readers.Wait()
	})
	return nil
}
