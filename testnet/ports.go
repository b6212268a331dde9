package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// freePortFloor is the lowest port FreePort picks: below it are the ports
// services are configured on.
const freePortFloor = 10000

// ephemeralRange is where the kernel's ephemeral ports lie (Linux's
// default when its setting cannot be read).
var ephemeralRange = func() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return lo, hi
	}
	return l, h
}

// FreePort picks a port on 127.0.0.1 that is free for network ("tcp" or
// "udp") when probed, for a process that binds it later.
//
// A port the kernel chose for a bind to port 0 and that is then freed is
// up for grabs: the kernel hands it to the next socket that asks for an
// ephemeral port (another process's outgoing connection, a QUIC dial, a
// DNS lookup) before the process we picked it for binds it. FreePort
// picks at random outside the ephemeral range instead, where only another
// explicit bind to the same port can take it.
func FreePort(network string) (int, error) {
	lo, hi := ephemeralRange()
	// The widest stretch of non-ephemeral ports at or above the floor.
	from, to := freePortFloor, lo-1
	if hi+1 <= 65535 && 65535-hi > to-from {
		from, to = max(hi+1, freePortFloor), 65535
	}
	if to-from < 100 {
		return 0, fmt.Errorf("testnet: no free port: the ephemeral range %d-%d leaves too few ports", lo, hi)
	}
	var last error
	for range 100 {
		port := from + rand.IntN(to-from+1)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		var err error
		switch network {
		case "tcp":
			var l net.Listener
			if l, err = net.Listen("tcp4", addr); err == nil {
				l.Close()
				return port, nil
			}
		case "udp":
			var c net.PacketConn
			if c, err = net.ListenPacket("udp4", addr); err == nil {
				c.Close()
				return port, nil
			}
		default:
			return 0, fmt.Errorf("testnet: free port: network %q, want tcp or udp", network)
		}
		last = err
	}
	return 0, fmt.Errorf("testnet: no free %s port in %d-%d after 100 tries: %w", network, from, to, last)
}
