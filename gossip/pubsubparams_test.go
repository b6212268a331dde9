package gossip

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// ihaveTracer records when the node sends IHAVE gossip, to whom (the
// meter brings the rest of pubsub.RawTracer).
type ihaveTracer struct {
	*PubsubMeter
	mu    sync.Mutex
	sends []ihaveSend
}

type ihaveSend struct {
	at time.Time
	to peer.ID
}

func (t *ihaveTracer) SendRPC(rpc *pubsub.RPC, p peer.ID) {
	if len(rpc.GetControl().GetIhave()) == 0 {
		return
	}
	t.mu.Lock()
	t.sends = append(t.sends, ihaveSend{time.Now(), p})
	t.mu.Unlock()
}

// bursts groups the sends into heartbeats (a heartbeat sends its gossip in
// one loop; heartbeats are gap or more apart) and returns how many peers
// each one reached.
func (t *ihaveTracer) bursts(gap time.Duration) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []int
	var last time.Time
	for _, s := range t.sends {
		if len(out) == 0 || s.at.Sub(last) >= gap {
			out = append(out, 0)
		}
		out[len(out)-1]++
		last = s.at
	}
	return out
}

// A hub with 60 peers on the topic keeps at most 12 in its mesh; each
// heartbeat it sends IHAVE for what it published to peers outside the
// mesh: with PubsubParams always Dlazy of them, with the library's default
// gossip factor a quarter of the others (about 12 here), so its traffic
// grows with the swarm.
func TestPubsubParamsBoundGossip(t *testing.T) {
	const spokes = 60
	for _, tc := range []struct {
		name      string
		params    pubsub.GossipSubParams
		wantAbove bool // some heartbeat reaches more than Dlazy peers
	}{
		{"PubsubParams", PubsubParams(), false},
		{"library defaults", pubsub.DefaultGossipSubParams(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			mn, err := mocknet.WithNPeers(spokes + 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = mn.Close() })
			if err := mn.LinkAll(); err != nil {
				t.Fatal(err)
			}
			hosts := mn.Hosts()
			tr := &ihaveTracer{PubsubMeter: NewPubsubMeter(&Counters{})}
			params := tc.params
			params.HeartbeatInterval = 200 * time.Millisecond
			params.HeartbeatInitialDelay = 10 * time.Millisecond
			var hub *pubsub.Topic
			for i, h := range hosts {
				opts := []pubsub.Option{pubsub.WithGossipSubParams(params)}
				if i == 0 {
					opts = append(opts, pubsub.WithRawTracer(tr))
				}
				ps, err := pubsub.NewGossipSub(ctx, h, opts...)
				if err != nil {
					t.Fatal(err)
				}
				topic, err := ps.Join("announce-test")
				if err != nil {
					t.Fatal(err)
				}
				sub, err := topic.Subscribe()
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					for {
						if _, err := sub.Next(ctx); err != nil {
							return
						}
					}
				}()
				if i == 0 {
					hub = topic
				}
			}
			for _, h := range hosts[1:] {
				if _, err := mn.ConnectPeers(hosts[0].ID(), h.ID()); err != nil {
					t.Fatal(err)
				}
			}
			// Publish for a dozen heartbeats: every heartbeat has ids to gossip.
			deadline := time.Now().Add(12 * params.HeartbeatInterval)
			for time.Now().Before(deadline) {
				if err := hub.Publish(ctx, []byte("hello")); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(2 * params.HeartbeatInterval)
			b := tr.bursts(params.HeartbeatInterval / 2)
			if len(b) < 3 {
				t.Fatalf("IHAVE sent in %d heartbeats, want several", len(b))
			}
			most := slices.Max(b)
			t.Logf("IHAVE recipients per heartbeat: %v (Dlazy %d)", b, params.Dlazy)
			if above := most > params.Dlazy; above != tc.wantAbove {
				t.Errorf("a heartbeat sent IHAVE to %d peers (Dlazy %d): above Dlazy %v, want %v", most, params.Dlazy, above, tc.wantAbove)
			}
		})
	}
}
