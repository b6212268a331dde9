package gossip

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

func testAnnounceConfig() AnnounceConfig {
	c := DefaultAnnounceConfig()
	c.Network = "test"
	c.Fingerprint = testFP
	c.Interval = 200 * time.Millisecond
	// Generous against a slow, shared machine: freshness is not what
	// these tests measure.
	c.FreshWindow = 5 * time.Second
	c.MaxAge = 5 * time.Second
	c.Logger = slog.New(slog.DiscardHandler)
	return c
}

// newPubSub starts gossipsub with strict signing (the default, made
// explicit) and stops it when the test ends.
func newPubSub(t *testing.T, h host.Host) *pubsub.PubSub {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithMessageSignaturePolicy(pubsub.StrictSign))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return ps
}

func localStatus(step int64) LocalFunc {
	return func() Announcement {
		return Announcement{Step: step, Progress: float64(32 * step), Loss: 0.5, Accuracy: 0.8, SamplesPerSec: 1000, Mode: "gossip"}
	}
}

// announcerLine starts n hosts, each with an announcer of cfg announcing
// localStatus(i), connected in a line (so announcements must be relayed).
func announcerLine(t *testing.T, n int, cfg AnnounceConfig) ([]host.Host, []*Announcer) {
	t.Helper()
	hosts := make([]host.Host, n)
	anns := make([]*Announcer, n)
	for i := range hosts {
		hosts[i] = newHost(t, "tcp", testConfig(testN))
		a, err := NewAnnouncer(hosts[i], newPubSub(t, hosts[i]), cfg, localStatus(int64(i)))
		if err != nil {
			t.Fatal(err)
		}
		anns[i] = a
		t.Cleanup(func() { _ = a.Close() })
		if i > 0 {
			connect(t, hosts[i-1], hosts[i])
		}
	}
	return hosts, anns
}

// Six hosts in a line (so announcements must be relayed) all end up with
// the other five in their fresh tables.
func TestAnnounceMesh(t *testing.T) {
	checkLeaks(t)
	const n = 6
	hosts, anns := announcerLine(t, n, testAnnounceConfig())
	for i, a := range anns {
		eventually(t, "every host sees the other five", func() bool { return len(a.Fresh()) == n-1 })
		for _, pi := range a.Fresh() {
			if pi.Peer == hosts[i].ID() {
				t.Fatalf("host %d lists itself", i)
			}
			if len(pi.Addrs) == 0 || pi.Mode != "gossip" || pi.Fingerprint != testFP {
				t.Errorf("host %d has %+v", i, pi)
			}
			if pi.Progress != float64(32*pi.Step) {
				t.Errorf("announcement fields mixed up: %+v", pi)
			}
		}
	}
	st := anns[0].Counters().Snapshot()
	if st.AnnouncesSent == 0 || st.AnnouncesSeen == 0 {
		t.Errorf("counters %+v", st)
	}
	for _, r := range Reasons() {
		if st.Rejected[r] != 0 {
			t.Errorf("honest mesh counted %d as %v", st.Rejected[r], r)
		}
	}
	if err := anns[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := anns[0].Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// A peer that publishes by hand: malformed, forged, foreign, stale and
// flooding announcements are refused or ignored under their reasons, and
// its one honest announcement still gets it into the table.
func TestAnnounceHostile(t *testing.T) {
	checkLeaks(t)
	victimHost := newHost(t, "tcp", testConfig(testN))
	cfg := testAnnounceConfig()
	cfg.Interval = time.Hour // one rate window for the whole test
	cfg.FreshWindow = time.Hour
	var mu sync.Mutex
	var rejected []Reason
	var foreigners []peer.ID
	cfg.OnReject = func(p peer.ID, r Reason) {
		mu.Lock() // validators run concurrently
		defer mu.Unlock()
		rejected = append(rejected, r)
	}
	cfg.OnForeign = func(p peer.ID) {
		mu.Lock()
		defer mu.Unlock()
		foreigners = append(foreigners, p)
	}
	victim, err := NewAnnouncer(victimHost, newPubSub(t, victimHost), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Close() })

	atkHost := newAttackerHost(t, "tcp")
	atkPS := newPubSub(t, atkHost)
	topic, err := atkPS.Join(AnnounceTopic(cfg.Network))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topic.Close() })
	connect(t, atkHost, victimHost)
	eventually(t, "attacker sees the victim on the topic", func() bool { return len(topic.ListPeers()) == 1 })

	honest := func() Announcement {
		return Announcement{Peer: atkHost.ID(), Fingerprint: testFP, Step: 7, Progress: 224, Mode: "gossip", TimeMs: time.Now().UnixMilli()}
	}
	publish := func(v any) {
		t.Helper()
		b, ok := v.([]byte)
		if !ok {
			b, _ = json.Marshal(v)
		}
		if err := topic.Publish(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	count := func(r Reason) uint64 { return victim.Counters().Rejected(r) }

	publish([]byte("not json"))
	eventually(t, "malformed counted", func() bool { return count(ReasonMalformed) == 1 })

	forged := honest()
	forged.Peer = victimHost.ID()
	publish(forged)
	eventually(t, "forged sender counted", func() bool { return count(ReasonInconsistent) == 1 })

	foreign := honest()
	foreign.Fingerprint[0] ^= 1
	publish(foreign)
	eventually(t, "other model counted", func() bool { return count(ReasonFingerprint) == 1 })

	stale := honest()
	stale.TimeMs -= time.Hour.Milliseconds()
	publish(stale)
	eventually(t, "stale counted", func() bool { return count(ReasonStale) == 1 })

	publish(append([]byte(`{"mode":"`), make([]byte, MaxAnnounceSize)...))
	eventually(t, "oversize counted", func() bool { return count(ReasonOversize) == 1 })

	// None of that got the attacker into the table.
	if len(victim.Fresh()) != 0 {
		t.Fatalf("refused announcements reached the table: %+v", victim.Fresh())
	}

	// A flood of valid announcements: MaxPerInterval get through, the rest
	// are ignored and counted (some may be dropped by pubsub's queues
	// before validation, so only a lower bound is certain).
	const flood = 20
	for i := range flood {
		a := honest()
		a.Step = int64(i)
		publish(a)
	}
	eventually(t, "the flood counted", func() bool { return count(ReasonFlood) >= 1 })
	eventually(t, "the attacker's first valid announcements accepted", func() bool { return len(victim.Fresh()) == 1 })
	if got := victim.Counters().Snapshot().AnnouncesSeen; got > uint64(cfg.MaxPerInterval) {
		t.Errorf("%d announcements accepted from one peer in one window, limit %d", got, cfg.MaxPerInterval)
	}
	if fresh := victim.Fresh(); fresh[0].Peer != atkHost.ID() {
		t.Errorf("table holds %+v", fresh)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range rejected {
		if r == ReasonNone {
			t.Error("hook told of a non-reason")
		}
		// A peer training another model or run is not at fault: it is
		// counted and told to OnForeign, never judged.
		if r == ReasonFingerprint {
			t.Error("reject hook told of an announcement for another fingerprint")
		}
	}
	if len(rejected) < 5 {
		t.Errorf("reject hook heard %d rejections", len(rejected))
	}
	if len(foreigners) != 1 || foreigners[0] != atkHost.ID() {
		t.Errorf("foreign hook heard %v, want the attacker once", foreigners)
	}
}

// With TopicRate set, a mesh's announcers stretch their interval to
// (peers + 1) / TopicRate once they know each other, and say so in what
// they announce.
func TestAnnounceTopicRate(t *testing.T) {
	checkLeaks(t)
	const n = 4
	cfg := testAnnounceConfig()
	cfg.TopicRate = 4 // 4 nodes: one announcement a second each
	_, anns := announcerLine(t, n, cfg)
	for _, a := range anns {
		eventually(t, "every host stretches its interval to 1 s", func() bool { return a.Interval() == time.Second })
	}
	for _, a := range anns {
		eventually(t, "every peer says it announces every second", func() bool {
			fresh := a.Fresh()
			for _, pi := range fresh {
				if pi.IntervalMs != 1000 {
					return false
				}
			}
			return len(fresh) == n-1
		})
	}
}

// A PubsubMeter passed to gossipsub counts what the announce topic costs:
// every announcement the listener saw left the speaker's queue and
// reached the listener in at least its own bytes.
func TestPubsubMeter(t *testing.T) {
	checkLeaks(t)
	var counters [2]Counters
	hosts := make([]host.Host, 2)
	anns := make([]*Announcer, 2)
	for i := range hosts {
		hosts[i] = newHost(t, "tcp", testConfig(testN))
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		ps, err := pubsub.NewGossipSub(ctx, hosts[i], pubsub.WithRawTracer(NewPubsubMeter(&counters[i])))
		if err != nil {
			t.Fatal(err)
		}
		cfg := testAnnounceConfig()
		cfg.Counters = &counters[i]
		local := localStatus(7)
		if i == 1 {
			local = nil // listens only
		}
		a, err := NewAnnouncer(hosts[i], ps, cfg, local)
		if err != nil {
			t.Fatal(err)
		}
		anns[i] = a
		t.Cleanup(func() { _ = a.Close() })
	}
	connect(t, hosts[0], hosts[1])
	eventually(t, "the listener sees three announcements", func() bool { return counters[1].Snapshot().AnnouncesSeen >= 3 })
	b, err := EncodeAnnouncement(Announcement{Peer: hosts[0].ID(), Fingerprint: testFP, Mode: "gossip", TimeMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	listener, speaker := counters[1].Snapshot(), counters[0].Snapshot()
	if min := listener.AnnouncesSeen * uint64(len(b)); listener.PubsubBytesReceived < min {
		t.Errorf("listener received %d pubsub bytes for %d announcements of at least %d bytes", listener.PubsubBytesReceived, listener.AnnouncesSeen, len(b))
	}
	if min := listener.AnnouncesSeen * uint64(len(b)); speaker.PubsubBytesSent < min {
		t.Errorf("speaker sent %d pubsub bytes, the listener saw %d announcements of at least %d bytes", speaker.PubsubBytesSent, listener.AnnouncesSeen, len(b))
	}
}

// A Kick announces at once, out of schedule: with half an hour between
// scheduled announcements, a peer hears the kicked node's new step within
// the test's patience only through a kick.
func TestKickAnnouncesAtOnce(t *testing.T) {
	checkLeaks(t)
	cfg := testAnnounceConfig()
	cfg.Interval, cfg.FreshWindow = 30*time.Minute, time.Hour
	var step atomic.Int64
	local := func() Announcement {
		return Announcement{Step: step.Load(), SamplesPerSec: 1000, Mode: "gossip"}
	}
	ha, hb := newHost(t, "tcp", testConfig(testN)), newHost(t, "tcp", testConfig(testN))
	a, err := NewAnnouncer(ha, newPubSub(t, ha), cfg, local)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b, err := NewAnnouncer(hb, newPubSub(t, hb), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	connect(t, ha, hb)
	// The scheduled first announcement went out before the two were
	// connected, and pubsub drops what it publishes to a peer whose
	// subscription it has heard but to which its own stream is not yet
	// open: kick until the listener hears one.
	heard := func(s int64) func() bool {
		return func() bool {
			fresh := b.Fresh()
			return len(fresh) == 1 && fresh[0].Step == s
		}
	}
	eventually(t, "the listener to hear step 0", func() bool {
		a.Kick()
		return heard(0)()
	})
	sent := a.Counters().Snapshot().AnnouncesSent
	step.Store(7)
	a.Kick()
	eventually(t, "the listener to hear step 7", heard(7))
	if got := a.Counters().Snapshot().AnnouncesSent; got < sent+1 || got > sent+2 {
		t.Errorf("announcements sent %d after %d and one kick (a kick of the loop above may have been pending)", got, sent)
	}
}
