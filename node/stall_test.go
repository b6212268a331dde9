package node_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/node"
)

// staller is a peer that announces itself as a gossip partner training the
// victim's model, accepts parameter-exchange streams and then never reads
// or writes a byte. It holds every stream until the test ends.
type staller struct {
	host     *node.Host
	ann      *gossip.Announcer
	stopPS   context.CancelFunc
	accepted atomic.Int64
	streams  chan struct{} // one value per accepted stream
	release  chan struct{}
}

// newStaller starts a staller on the local profile, connects it to the
// victim and announces the victim's fingerprint every 200 ms, so the victim
// sees it as a partner at once.
func newStaller(t *testing.T, victim *node.Node, netName string) *staller {
	t.Helper()
	key, _, err := crypto.GenerateKeyPair(crypto.Ed25519, -1)
	if err != nil {
		t.Fatal(err)
	}
	// Gossip sets the resource-manager limits that let exchange streams in
	// at all.
	h, err := node.NewHost(key, node.HostConfig{Profile: node.ProfileLocal, Network: netName,
		Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: bootstrapOff(t, victim), Gossip: gossip.DefaultConfig()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &staller{host: h, stopPS: cancel, streams: make(chan struct{}, 64), release: make(chan struct{})}
	t.Cleanup(s.close)
	h.SetStreamHandler(gossip.ProtocolID, func(st network.Stream) {
		s.accepted.Add(1)
		select {
		case s.streams <- struct{}{}:
		default:
		}
		<-s.release
		_ = st.Reset()
	})
	ps, err := pubsub.NewGossipSub(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	ac := gossip.DefaultAnnounceConfig()
	ac.Network, ac.Fingerprint = netName, node.TrainerOf(victim).Fingerprint()
	// At most three announcements per 5 s window of the node (the
	// announcer's default): faster ones are ignored as a flood and count
	// against the staller, whose reputation could then fall below the
	// graylist before its second exchange and hide it from the node.
	ac.Interval, ac.FreshWindow, ac.MaxAge = 2*time.Second, 6*time.Second, 6*time.Second
	s.ann, err = gossip.NewAnnouncer(h, ps, ac, func() gossip.Announcement {
		return gossip.Announcement{Mode: string(node.ModeGossip)}
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// close lets the held streams go and shuts the peer down.
func (s *staller) close() {
	close(s.release)
	if s.ann != nil {
		_ = s.ann.Close()
	}
	s.stopPS()
	_ = s.host.Close()
}

// stalled waits for the next stream the staller accepts.
func (s *staller) stalled(t *testing.T) {
	t.Helper()
	select {
	case <-s.streams:
	case <-time.After(time.Minute):
		t.Fatal("the node never opened an exchange with the stalling peer")
	}
}

// TestStalledPartnerTimesOut: a partner that accepts the exchange stream
// and then says nothing costs the node an exchange that times out and is
// counted, never a step: the trainer keeps stepping while the exchange
// hangs.
func TestStalledPartnerTimesOut(t *testing.T) {
	checkGoroutines(t)
	cfg := meshConfig("stall")
	cfg.Train.Slowdown, cfg.Train.BaseStep = 1, 0 // steps back to back, no emulated sleep
	cfg.Exchange.ChunkTimeout = 300 * time.Millisecond
	cfg.Exchange.ExchangeTimeout = time.Second
	cfg.ExchangeTimeout = time.Second
	cfg.AvgInterval = 50 * time.Millisecond
	v := newMeshNode(t, cfg, nil)
	s := newStaller(t, v.Node, cfg.Host.Network)
	v.start(t)

	// Steps taken while an exchange with the staller was open. Every stream
	// the staller accepts is one exchange that can only end by failing, so
	// while fewer exchanges failed than streams were accepted one is open.
	// Read the step count then, again once ten more steps are done, and
	// count them only if no exchange ended in between. On a slow machine
	// an exchange may time out first; then the next one gets its chance.
	const steps = 10
	var during int64
	for attempt := 0; attempt < 5 && during == 0; attempt++ {
		s.stalled(t)
		st0 := v.Status()
		if st0.ExchangesFailed >= s.accepted.Load() {
			continue
		}
		var st node.Status
		eventually(t, time.Minute, "steps or the end of the exchange", func() bool {
			st = v.Status()
			return st.Step >= st0.Step+steps || st.ExchangesFailed != st0.ExchangesFailed
		})
		if v.Status().ExchangesFailed == st0.ExchangesFailed {
			during = st.Step - st0.Step
		}
	}
	if during == 0 {
		t.Fatalf("in 5 stalled exchanges the trainer never took %d steps before the exchange ended", steps)
	}

	deadline := time.Now().Add(time.Minute)
	for v.Status().ExchangeTimeouts < 2 {
		if time.Now().After(deadline) {
			st := v.Status()
			t.Fatalf("after a minute: %d exchanges failed, %d timed out, %d streams held, rejected %v, started %d, peers %d, alone %+v, reachability %+v",
				st.ExchangesFailed, st.ExchangeTimeouts, s.accepted.Load(), st.Gossip.Rejected, st.ExchangesStarted, st.Peers, st.Alone, st.Reachability)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := v.Status()
	t.Logf("%d steps while an exchange hung; after %.1fs: %d steps, %d exchanges failed (%d timeouts), %d streams held, busy %.2f",
		during, st.UptimeS, st.Step, st.ExchangesFailed, st.ExchangeTimeouts, s.accepted.Load(), st.BusyFraction)
	if st.ExchangesFailed < st.ExchangeTimeouts {
		t.Errorf("%d exchanges failed but %d timed out", st.ExchangesFailed, st.ExchangeTimeouts)
	}
	if got := st.Gossip.Rejected[gossip.ReasonTimeout]; got < 2 {
		t.Errorf("%d timeouts counted against peers, want >= 2", got)
	}
	if st.Merges != 0 || st.NetworkWaitS != 0 {
		t.Errorf("%d merges and %.3gs network wait with a partner that never answers, want none", st.Merges, st.NetworkWaitS)
	}
}

// TestTrainerNeverWaitsOnTheNetwork: with its only partner stalling the
// first exchange for longer than the whole run, the node still takes every
// step it was asked to and stops on time; its status says it never waited
// on the network.
func TestTrainerNeverWaitsOnTheNetwork(t *testing.T) {
	checkGoroutines(t)
	const maxSteps = 2000
	cfg := meshConfig("nowait")
	// Steps of 400 us (200 us base, slowdown 2): the run lasts about 0.8 s,
	// so the first exchange (after about 10 ms) starts long before the last
	// step however busy the machine is; back-to-back steps of the synthetic
	// model would finish 2000 steps in about 20 ms, a race with the timer.
	cfg.Train.BaseStep, cfg.Train.Slowdown = 200*time.Microsecond, 2
	cfg.MaxSteps = maxSteps
	cfg.AvgInterval = 10 * time.Millisecond // the exchange starts right after the first steps
	cfg.Exchange.ChunkTimeout = 10 * time.Minute
	cfg.Exchange.ExchangeTimeout = 10 * time.Minute
	cfg.ExchangeTimeout = 10 * time.Minute
	v := newMeshNode(t, cfg, nil)
	s := newStaller(t, v.Node, cfg.Host.Network)
	eventually(t, time.Minute, "the node to see the stalling peer", func() bool { return v.Status().Peers == 1 })
	began := time.Now()
	v.start(t)
	s.stalled(t)
	atStall := v.Status().Step
	res := v.wait(t)
	ran := time.Since(began)
	st := v.Status()
	t.Logf("exchange held from step %d; run finished at step %d after %.2fs; busy %.2fs = %.2f of the run (%.2f of the node's uptime); network wait %gs",
		atStall, st.Step, ran.Seconds(), st.BusyS, st.BusyS/ran.Seconds(), st.BusyFraction, st.NetworkWaitS)
	if !res.Finished || st.Step != maxSteps {
		t.Errorf("run stopped at step %d (finished %v), want %d", st.Step, res.Finished, maxSteps)
	}
	if atStall >= maxSteps {
		t.Fatalf("the exchange started only after the last step (%d): nothing shown", atStall)
	}
	// One stream, never failed: the averager sat in that one exchange from
	// step atStall to the end, and the steps went on without it.
	if n := s.accepted.Load(); n != 1 || st.ExchangesFailed != 0 {
		t.Errorf("%d exchanges opened and %d failed, want 1 and 0", n, st.ExchangesFailed)
	}
	if st.NetworkWaitS != 0 {
		t.Errorf("the trainer waited %gs on the network", st.NetworkWaitS)
	}
}
