package testnet

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePort: the port is outside the kernel's ephemeral range, so no
// socket bound to port 0 can be handed it, and a process can bind it.
func TestFreePort(t *testing.T) {
	lo, hi := ephemeralRange()
	for _, network := range []string{"tcp", "udp"} {
		seen := map[int]bool{}
		for range 20 {
			port, err := FreePort(network)
			if err != nil {
				t.Fatal(err)
			}
			if port >= lo && port <= hi || port < freePortFloor || port > 65535 {
				t.Fatalf("%s port %d: want outside the ephemeral range %d-%d, at least %d", network, port, lo, hi, freePortFloor)
			}
			seen[port] = true
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			if network == "tcp" {
				l, err := net.Listen("tcp4", addr)
				if err != nil {
					t.Fatalf("bind the free port: %v", err)
				}
				l.Close()
			} else {
				c, err := net.ListenPacket("udp4", addr)
				if err != nil {
					t.Fatalf("bind the free port: %v", err)
				}
				c.Close()
			}
		}
		// Picked at random: 20 picks from thousands of ports are not all one.
		if len(seen) < 2 {
			t.Errorf("%s: 20 picks gave %v", network, seen)
		}
	}
	if _, err := FreePort("sctp"); err == nil {
		t.Error("FreePort(sctp): no error")
	}
}
