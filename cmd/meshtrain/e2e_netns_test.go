//go:build e2e

// End-to-end tests of the network profiles inside Linux network namespaces
// that the tests create and delete: the lan profile finds its peers by mDNS
// with no bootstrap address, and the local profile stays on loopback. They
// need root and iproute2 (`ip`); without them they fail, they do not skip.
// Nothing runs in the machine's own network namespace: every link is made
// inside a namespace of the test's.
package main

import (
	"bufio"
	byteorder "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// netnsPrefix starts the name of every namespace these tests create; the
// process ID that follows lets a later run delete what a killed run left.
const netnsPrefix = "meshtrain-e2e-"

// mdnsGroup is the IPv4 mDNS multicast group.
var mdnsGroup = net.IPv4(224, 0, 0, 251)

// nodeFlags make a short gossip run on the synthetic set that lasts its full
// --duration: no epoch limit, and a constant learning rate since the default
// cosine warmup does not fit the synthetic set's shard. One thread and an
// emulated slowdown keep the CPU demand of several nodes low.
func nodeFlags(profile string, duration time.Duration) []string {
	return []string{"node", "--profile", profile, "--no-data-dir", "--dataset", "synthetic", "--json",
		"--duration", duration.String(), "--avg-interval", "200ms", "--announce-interval", "1s",
		"--epochs", "0", "--schedule", "const", "--threads", "1", "--slowdown", "4", "--base-step", "5ms"}
}

// Three nodes on a bridged LAN of namespaces, started without --bootstrap:
// the only way they can meet is mDNS, and each must end up merging with
// both others.
func TestE2EMDNSInNetns(t *testing.T) {
	// Mostly waiting, in namespaces of its own: it runs beside the other
	// tests that wait.
	t.Parallel()
	lab := newNetnsLab(t, "mdns")
	br := lab.add("br")
	// Snooping off: with no IGMP querier on this LAN, the bridge must
	// flood multicast to every port.
	lab.ip("-n", br, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	lab.ip("-n", br, "link", "set", "br0", "up")
	const n = 3
	var nss []string
	for i := 1; i <= n; i++ {
		ns := lab.add(fmt.Sprintf("n%d", i))
		port := fmt.Sprintf("p%d", i)
		lab.ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", br)
		lab.ip("-n", br, "link", "set", port, "master", "br0", "up")
		lab.ip("-n", ns, "link", "set", "lo", "up")
		lab.ip("-n", ns, "addr", "add", fmt.Sprintf("10.77.0.%d/24", i), "dev", "eth0")
		lab.ip("-n", ns, "link", "set", "eth0", "multicast", "on", "up")
		lab.ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
		nss = append(nss, ns)
	}

	procs := make([]*nsProc, n)
	for i, ns := range nss {
		procs[i] = startInNetns(t, ns, nodeFlags("lan", 30*time.Second)...)
	}
	ids := make([]string, n)
	for i, p := range procs {
		ev := p.waitEvent(t, "listening", time.Minute)
		ids[i] = ev.PeerID
		lan := fmt.Sprintf("/ip4/10.77.0.%d/", i+1)
		if !slices.ContainsFunc(ev.Addrs, func(a string) bool { return strings.HasPrefix(a, lan) }) {
			t.Errorf("node %d (%s) does not listen on its LAN address %s: %v", i+1, nss[i], lan, ev.Addrs)
		}
	}
	for i, p := range procs {
		evs := p.waitExit(t, 2*time.Minute)
		fin := evs[len(evs)-1]
		if fin.Event != "final" || fin.Status == nil {
			t.Fatalf("node %d: last event %+v is not a final event with a status\n%s", i+1, fin, p.log())
		}
		s := fin.Status
		var maxPeers int
		var maxMerges int64
		for _, e := range evs {
			if e.Event == "progress" {
				maxPeers, maxMerges = max(maxPeers, e.Peers), max(maxMerges, e.Merges)
			}
		}
		t.Logf("node %d %s: %d merges, by peer %v; progress events peaked at peers %d, merges %d; mDNS log lines: %d",
			i+1, ids[i], s.Merges, s.PeerMerges, maxPeers, maxMerges, strings.Count(p.log(), "mDNS"))
		if s.Profile != "lan" {
			t.Errorf("node %d ran profile %q, want lan", i+1, s.Profile)
		}
		for j, other := range ids {
			if j != i && s.PeerMerges[other] == 0 {
				t.Errorf("node %d never merged with node %d (%s): peer_merges %v\n%s", i+1, j+1, other, s.PeerMerges, p.log())
			}
		}
	}
}

// A local-profile node in a namespace whose eth0 has an address, a default
// route and a multicast route, so anything it tried to send off the machine
// (mDNS, UPnP, NAT-PMP, a dial to a public address) would leave through
// eth0. It must listen on 127.0.0.1 only, join no multicast group and send
// nothing. Then a lan node in the same place is the control: the same probes
// must see its mDNS, or their silence above proves nothing.
func TestE2ELocalProfileStaysOnLoopback(t *testing.T) {
	lab := newNetnsLab(t, "local")
	node, wire := lab.add("node"), lab.add("wire")
	lab.ip("-n", node, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", wire)
	lab.ip("-n", wire, "addr", "add", "10.78.0.2/24", "dev", "eth0")
	lab.ip("-n", wire, "link", "set", "eth0", "up")
	lab.ip("-n", node, "link", "set", "lo", "up")
	lab.ip("-n", node, "addr", "add", "10.78.0.1/24", "dev", "eth0")
	lab.ip("-n", node, "link", "set", "eth0", "multicast", "on", "up")
	lab.ip("-n", node, "route", "add", "default", "via", "10.78.0.2")
	lab.ip("-n", node, "route", "add", "224.0.0.0/4", "dev", "eth0")
	capture := startCapture(t, wire, "eth0")

	t.Run("local", func(t *testing.T) {
		capture.reset()
		tx0, rx0 := lab.counters(node, "eth0"), lab.counters(wire, "eth0")
		p := startInNetns(t, node, nodeFlags("local", 10*time.Second)...)
		ev := p.waitEvent(t, "listening", time.Minute)
		for _, a := range ev.Addrs {
			if !strings.HasPrefix(a, "/ip4/127.0.0.1/") {
				t.Errorf("local node announces a non-loopback address %s", a)
			}
		}
		socks := netnsSockets(t, p.cmd.Process.Pid)
		groups := netnsIGMPGroups(t, p.cmd.Process.Pid)
		t.Logf("sockets in the node's namespace: %v; multicast groups on eth0: %v", socks, groups["eth0"])
		listening := 0
		for _, s := range socks {
			if !s.local.IsLoopback() {
				t.Errorf("local node has a %s socket on %s", s.proto, net.JoinHostPort(s.local.String(), strconv.Itoa(s.port)))
			}
			if s.proto == "tcp" && s.listen {
				listening++
			}
		}
		if listening == 0 {
			t.Errorf("local node has no listening TCP socket at all: %v", socks)
		}
		for _, g := range groups["eth0"] {
			if !g.Equal(net.IPv4allsys) {
				t.Errorf("local node joined multicast group %s on eth0", g)
			}
		}
		evs := p.waitExit(t, 2*time.Minute)
		if fin := evs[len(evs)-1]; fin.Event != "final" {
			t.Fatalf("local node: last event %+v, want final\n%s", fin, p.log())
		}
		// Let anything still queued on the veth arrive before counting.
		time.Sleep(500 * time.Millisecond)
		tx1, rx1 := lab.counters(node, "eth0"), lab.counters(wire, "eth0")
		pkts := capture.packets()
		t.Logf("node eth0 tx packets %d -> %d; wire side rx packets %d -> %d; captured on the wire side: %d packets",
			tx0.TxPackets, tx1.TxPackets, rx0.RxPackets, rx1.RxPackets, len(pkts))
		if tx1.TxPackets != tx0.TxPackets || rx1.RxPackets != rx0.RxPackets || len(pkts) > 0 {
			t.Errorf("the local node's namespace sent %d packets out of eth0 (%d arrived on the other end); captured: %v",
				tx1.TxPackets-tx0.TxPackets, rx1.RxPackets-rx0.RxPackets, pkts)
		}
	})

	t.Run("lan control", func(t *testing.T) {
		capture.reset()
		tx0, rx0 := lab.counters(node, "eth0"), lab.counters(wire, "eth0")
		p := startInNetns(t, node, nodeFlags("lan", 30*time.Second)...)
		p.waitEvent(t, "listening", time.Minute)
		pid := p.cmd.Process.Pid
		var joined, bound5353 bool
		var mdns []string
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			joined = slices.ContainsFunc(netnsIGMPGroups(t, pid)["eth0"], mdnsGroup.Equal)
			bound5353 = slices.ContainsFunc(netnsSockets(t, pid), func(s socket) bool { return s.proto == "udp" && s.port == 5353 })
			mdns = slices.DeleteFunc(capture.packets(), func(pkt string) bool { return !strings.HasSuffix(pkt, ":5353") })
			if joined && bound5353 && len(mdns) > 0 {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		tx1, rx1 := lab.counters(node, "eth0"), lab.counters(wire, "eth0")
		_ = p.cmd.Process.Signal(os.Interrupt)
		p.waitExit(t, time.Minute)
		t.Logf("lan node: joined %s on eth0: %v, UDP socket on port 5353: %v; node eth0 tx packets %d -> %d; wire side rx packets %d -> %d; captured %v",
			mdnsGroup, joined, bound5353, tx0.TxPackets, tx1.TxPackets, rx0.RxPackets, rx1.RxPackets, capture.packets())
		if !joined || !bound5353 || len(mdns) == 0 || tx1.TxPackets == tx0.TxPackets || rx1.RxPackets == rx0.RxPackets {
			t.Errorf("the probes did not see the lan node's mDNS, so they cannot vouch for the local profile\n%s", p.log())
		}
	})
}

// netnsLab creates network namespaces and deletes them when the test ends,
// after the processes started in them (t.Cleanup runs last-in, first-out).
type netnsLab struct {
	t      *testing.T
	prefix string
}

func newNetnsLab(t *testing.T, name string) *netnsLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test creates network namespaces and needs root (euid %d): run it as root, e.g. "+
			"sudo env PATH=$PATH go test -tags e2e -run 'MDNSInNetns|LocalProfileStaysOnLoopback' ./cmd/meshtrain/", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("this test needs the ip command from iproute2 (apt-get install -y iproute2): %v", err)
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		t.Fatalf("this kernel has no network namespaces: %v", err)
	}
	sweepStaleNetns(t)
	return &netnsLab{t: t, prefix: fmt.Sprintf("%s%d-%s-", netnsPrefix, os.Getpid(), name)}
}

// sweepStaleNetns deletes namespaces of this test whose process is gone (a
// run killed before its cleanup), so they do not pile up.
func sweepStaleNetns(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v (does this kernel support network namespaces?)", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, netnsPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Logf("deleting stale namespace %s: %v: %s", name, err, out)
		}
	}
}

// add creates a namespace with IPv6 off, so the kernel itself sends no
// router solicitations or MLD reports that would blur the counters.
func (l *netnsLab) add(name string) string {
	l.t.Helper()
	ns := l.prefix + name
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		l.t.Fatalf("cannot create network namespace %s (needs root and kernel netns support): %v: %s", ns, err, out)
	}
	l.t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			l.t.Errorf("deleting network namespace %s: %v: %s", ns, err, out)
		}
	})
	// Set before any link exists, "default" covers the links made later.
	for _, scope := range []string{"all", "default"} {
		path := "/proc/sys/net/ipv6/conf/" + scope + "/disable_ipv6"
		out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", `[ ! -e "$1" ] || echo 1 > "$1"`, "sh", path).CombinedOutput()
		if err != nil {
			l.t.Fatalf("disabling IPv6 in %s: %v: %s", ns, err, out)
		}
	}
	return ns
}

func (l *netnsLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

type linkCounters struct {
	TxPackets, RxPackets uint64
}

// counters reads a link's packet counters, as `ip -s link` shows them.
func (l *netnsLab) counters(ns, dev string) linkCounters {
	l.t.Helper()
	out, err := exec.Command("ip", "-j", "-s", "-n", ns, "link", "show", "dev", dev).Output()
	if err != nil {
		l.t.Fatalf("ip -s link in %s: %v", ns, err)
	}
	var links []struct {
		Stats64 struct {
			Rx struct{ Packets uint64 }
			Tx struct{ Packets uint64 }
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		l.t.Fatalf("ip -s link in %s: unexpected output %s: %v", ns, out, err)
	}
	s := links[0].Stats64
	return linkCounters{TxPackets: s.Tx.Packets, RxPackets: s.Rx.Packets}
}

// socket is one line of /proc/PID/net/{tcp,udp}[6].
type socket struct {
	proto  string // tcp or udp
	local  net.IP
	port   int
	listen bool
}

func (s socket) String() string {
	state := ""
	if s.listen {
		state = " LISTEN"
	}
	return s.proto + " " + net.JoinHostPort(s.local.String(), strconv.Itoa(s.port)) + state
}

// netnsSockets lists every TCP and UDP socket in the network namespace of
// process pid (the kernel's view, like `ss -antu` run there).
func netnsSockets(t *testing.T, pid int) []socket {
	t.Helper()
	var out []socket
	for _, file := range []string{"tcp", "tcp6", "udp", "udp6"} {
		path := filepath.Join("/proc", strconv.Itoa(pid), "net", file)
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) && strings.HasSuffix(file, "6") {
			continue // a kernel without IPv6
		}
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for _, line := range lines[1:] {
			f := strings.Fields(line)
			if len(f) < 4 {
				t.Fatalf("%s: malformed line %q", path, line)
			}
			hexIP, hexPort, ok := strings.Cut(f[1], ":")
			ip, err1 := procIP(hexIP)
			port, err2 := strconv.ParseUint(hexPort, 16, 16)
			if !ok || err1 != nil || err2 != nil {
				t.Fatalf("%s: malformed address %q", path, f[1])
			}
			proto := strings.TrimSuffix(file, "6")
			// TCP state 0A is LISTEN.
			out = append(out, socket{proto: proto, local: ip, port: int(port), listen: proto == "tcp" && f[3] == "0A"})
		}
	}
	return out
}

// procIP decodes an address of /proc/net: 32-bit words in host byte order.
func procIP(s string) (net.IP, error) {
	b, err := hex.DecodeString(s)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return nil, fmt.Errorf("bad /proc address %q", s)
	}
	ip := make(net.IP, len(b))
	for i := 0; i < len(b); i += 4 {
		byteorder.NativeEndian.PutUint32(ip[i:], byteorder.BigEndian.Uint32(b[i:]))
	}
	return ip, nil
}

// netnsIGMPGroups lists the IPv4 multicast groups joined per device in the
// network namespace of process pid, from /proc/PID/net/igmp.
func netnsIGMPGroups(t *testing.T, pid int) map[string][]net.IP {
	t.Helper()
	path := filepath.Join("/proc", strconv.Itoa(pid), "net", "igmp")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	groups := map[string][]net.IP{}
	dev := ""
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case !strings.HasPrefix(line, "\t") && len(f) >= 2:
			dev = f[1] // "1	lo        :     1      V3"
		default:
			ip, err := procIP(f[0])
			if err != nil {
				t.Fatalf("%s: %v in %q", path, err, line)
			}
			groups[dev] = append(groups[dev], ip)
		}
	}
	return groups
}

// captureEnv names the device a re-executed test binary captures on; see
// init.
const captureEnv = "E2E_NETNS_CAPTURE_DEV"

// init turns the test binary into a small packet sniffer when it is started
// with captureEnv set (inside a namespace, by startCapture), so the tests
// need no tcpdump: it prints "ready", then one line per packet received on
// the device, until killed.
func init() {
	if dev := os.Getenv(captureEnv); dev != "" {
		if err := sniff(dev, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "capture:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

func sniff(dev string, w *os.File) error {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return err
	}
	all := int(htons(syscall.ETH_P_ALL))
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, all)
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		return fmt.Errorf("bind to %s: %w", dev, err)
	}
	fmt.Fprintln(w, "ready")
	buf := make([]byte, 1<<16)
	for {
		n, from, err := syscall.Recvfrom(fd, buf, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		// What this end sends itself (ARP replies) is not the node's doing.
		if ll, ok := from.(*syscall.SockaddrLinklayer); ok && ll.Pkttype == syscall.PACKET_OUTGOING {
			continue
		}
		fmt.Fprintln(w, describePacket(buf[:n]))
	}
}

// htons puts v in network byte order, as packet sockets want it.
func htons(v uint16) uint16 {
	var b [2]byte
	byteorder.BigEndian.PutUint16(b[:], v)
	return byteorder.NativeEndian.Uint16(b[:])
}

// describePacket summarises an Ethernet frame in one line; UDP ends in the
// destination port ("udp 10.78.0.1:5353 > 224.0.0.251:5353").
func describePacket(b []byte) string {
	if len(b) < 14 {
		return fmt.Sprintf("runt frame of %d bytes", len(b))
	}
	typ, ip := byteorder.BigEndian.Uint16(b[12:]), b[14:]
	switch {
	case typ == 0x0806:
		return "arp"
	case typ == 0x86dd:
		return "ipv6"
	case typ != 0x0800 || len(ip) < 20:
		return fmt.Sprintf("ethertype %#04x", typ)
	}
	src, dst := net.IP(ip[12:16]), net.IP(ip[16:20])
	hl := int(ip[0]&0x0f) * 4
	switch proto := ip[9]; {
	case proto == 2:
		return fmt.Sprintf("igmp %s > %s", src, dst)
	case (proto == 6 || proto == 17) && len(ip) >= hl+4:
		name := map[byte]string{6: "tcp", 17: "udp"}[proto]
		sp, dp := byteorder.BigEndian.Uint16(ip[hl:]), byteorder.BigEndian.Uint16(ip[hl+2:])
		return fmt.Sprintf("%s %s:%d > %s:%d", name, src, sp, dst, dp)
	default:
		return fmt.Sprintf("ip proto %d %s > %s", proto, src, dst)
	}
}

// wireCapture is a sniffer running in a namespace of the test's.
type wireCapture struct {
	mu   sync.Mutex
	pkts []string
}

// startCapture re-executes the test binary inside ns as a sniffer on dev and
// returns once it is listening.
func startCapture(t *testing.T, ns, dev string) *wireCapture {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, exe)
	cmd.Env = append(os.Environ(), captureEnv+"="+dev)
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the packet capture in %s: %v", ns, err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	c := &wireCapture{}
	ready := make(chan bool, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(out)
		ready <- sc.Scan() && sc.Text() == "ready"
		for sc.Scan() {
			c.mu.Lock()
			c.pkts = append(c.pkts, sc.Text())
			c.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-exited
			t.Fatalf("the packet capture in %s did not start: %s", ns, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the packet capture in %s did not start within 30s", ns)
	}
	return c
}

func (c *wireCapture) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pkts = nil
}

// packets returns the summaries of the packets captured since reset.
func (c *wireCapture) packets() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.pkts)
}

// nsEvent is the part of a node's JSON events these tests read.
type nsEvent struct {
	Event  string   `json:"event"`
	PeerID string   `json:"peer_id"`
	Addrs  []string `json:"addrs"`
	Peers  int      `json:"peers"`
	Merges int64    `json:"merges"`
	Status *struct {
		Profile    string           `json:"profile"`
		Merges     int64            `json:"merges"`
		PeerMerges map[string]int64 `json:"peer_merges"`
	} `json:"status"`
	// Raw is the whole line of a final event, for tests that read more of
	// its status.
	Raw json.RawMessage `json:"-"`
}

// nsProc is a meshtrain process in a network namespace.
type nsProc struct {
	cmd    *exec.Cmd
	events chan nsEvent
	seen   []nsEvent // events read by waitEvent, in order
	stderr *lockedWriter
	done   chan struct{} // closed once the process has exited
	err    error         // the exit error, set before done is closed
}

func startInNetns(t *testing.T, ns string, args ...string) *nsProc {
	t.Helper()
	// `ip netns exec` execs the binary in place: the process ID is meshtrain's.
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, binary}, args...)...)
	// Settings come from the flags alone, never from the caller's
	// MESHTRAIN_* variables.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &nsProc{cmd: cmd, events: make(chan nsEvent, 1<<12), stderr: &lockedWriter{w: &strings.Builder{}}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting meshtrain in %s: %v", ns, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var e nsEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err == nil {
				if e.Event == "final" {
					e.Raw = append(json.RawMessage(nil), sc.Bytes()...)
				}
				p.events <- e
			}
		}
		close(p.events)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
	})
	return p
}

// log returns what the process wrote to stderr so far.
func (p *nsProc) log() string {
	p.stderr.mu.Lock()
	defer p.stderr.mu.Unlock()
	return p.stderr.w.(*strings.Builder).String()
}

// waitEvent returns the first event of the given kind.
func (p *nsProc) waitEvent(t *testing.T, kind string, timeout time.Duration) nsEvent {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-p.events:
			if !ok {
				<-p.done
				t.Fatalf("meshtrain exited before a %q event: %v\n%s", kind, p.err, p.log())
			}
			p.seen = append(p.seen, e)
			if e.Event == kind {
				return e
			}
		case <-timer.C:
			t.Fatalf("no %q event within %v\n%s", kind, timeout, p.log())
		}
	}
}

// waitExit returns every event of the run once the process has exited
// cleanly; it kills the process after timeout.
func (p *nsProc) waitExit(t *testing.T, timeout time.Duration) []nsEvent {
	t.Helper()
	var killed atomic.Bool
	timer := time.AfterFunc(timeout, func() { killed.Store(true); _ = p.cmd.Process.Kill() })
	defer timer.Stop()
	evs := p.seen
	for e := range p.events {
		evs = append(evs, e)
	}
	<-p.done
	if err := p.err; err != nil {
		if killed.Load() {
			err = fmt.Errorf("still running after %v, killed", timeout)
		}
		t.Fatalf("meshtrain %s: %v\n%s", strings.Join(p.cmd.Args[5:], " "), err, p.log())
	}
	if len(evs) == 0 {
		t.Fatalf("meshtrain printed no events\n%s", p.log())
	}
	return evs
}
