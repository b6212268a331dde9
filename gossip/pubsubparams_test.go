package gossip

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
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

// span returns the times of the first and last sends and their number.
func (t *ihaveTracer) span() (first, last time.Time, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.sends) == 0 {
		return
	}
	return t.sends[0].at, t.sends[len(t.sends)-1].at, len(t.sends)
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

// joinDraining starts gossipsub on h with opts, joins topic and reads its
// subscription until ctx ends.
func joinDraining(ctx context.Context, t *testing.T, h host.Host, topic string, opts ...pubsub.Option) *pubsub.Topic {
	t.Helper()
	ps, err := pubsub.NewGossipSub(ctx, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := ps.Join(topic)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := tp.Subscribe()
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
	return tp
}

// A hub with 60 peers on the topic keeps at most Dhi in its mesh; each
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
				topic := joinDraining(ctx, t, h, "announce-test", opts...)
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
			if tc.wantAbove {
				if most <= params.Dlazy {
					t.Errorf("no heartbeat sent IHAVE to more than Dlazy %d peers: %v", params.Dlazy, b)
				}
				return
			}
			// Bursts are told apart by time, and a loaded machine can
			// delay a heartbeat until it runs right before the next, so
			// the bound is on the sum: a heartbeat ticker fires at most
			// once an interval (and once more for a tick it held), and
			// each heartbeat gossips to at most Dlazy peers.
			first, last, total := tr.span()
			beats := int(last.Sub(first)/params.HeartbeatInterval) + 2
			if total > beats*params.Dlazy {
				t.Errorf("IHAVE sent %d times in %v, at most %d heartbeats of Dlazy %d", total, last.Sub(first), beats, params.Dlazy)
			}
		})
	}
}

// copyTracer counts the messages a node received: first copies and
// duplicates.
type copyTracer struct {
	*PubsubMeter
	mu                sync.Mutex
	delivered, copies int
}

func (t *copyTracer) DeliverMessage(*pubsub.Message) {
	t.mu.Lock()
	t.delivered++
	t.copies++
	t.mu.Unlock()
}

func (t *copyTracer) DuplicateMessage(*pubsub.Message) {
	t.mu.Lock()
	t.copies++
	t.mu.Unlock()
}

// A swarm of 30, each node connected to 10 others, every node publishing:
// with PubsubParams's mesh (D 4) every node still receives every message,
// and fewer copies of each than with the library's mesh (D 6, up to 12).
func TestPubsubParamsMeshCopies(t *testing.T) {
	const nodes, links, rounds = 30, 10, 5
	copies := map[string]float64{}
	for _, tc := range []struct {
		name   string
		params pubsub.GossipSubParams
	}{
		{"PubsubParams", PubsubParams()},
		{"library defaults", pubsub.DefaultGossipSubParams()},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		mn, err := mocknet.WithNPeers(nodes)
		if err != nil {
			t.Fatal(err)
		}
		if err := mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		hosts := mn.Hosts()
		params := tc.params
		params.HeartbeatInterval = 100 * time.Millisecond
		params.HeartbeatInitialDelay = 10 * time.Millisecond
		var topics []*pubsub.Topic
		tracers := make([]*copyTracer, nodes)
		for i, h := range hosts {
			tracers[i] = &copyTracer{PubsubMeter: NewPubsubMeter(&Counters{})}
			topics = append(topics, joinDraining(ctx, t, h, "copies-test", pubsub.WithGossipSubParams(params), pubsub.WithRawTracer(tracers[i])))
		}
		// Node i links to the next 10 (a ring with chords): every node
		// has 20 neighbours, so a mesh of 6 to 12 is possible.
		for i := range nodes {
			for k := 1; k <= links; k++ {
				if _, err := mn.ConnectPeers(hosts[i].ID(), hosts[(i+k)%nodes].ID()); err != nil {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(10 * params.HeartbeatInterval) // the meshes form
		for r := range rounds {
			for i, tp := range topics {
				if err := tp.Publish(ctx, []byte{byte(r), byte(i)}); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(params.HeartbeatInterval)
		}
		want := rounds * (nodes - 1) // at least the others' messages
		deadline := time.Now().Add(30 * time.Second)
		for {
			short := 0
			for _, tr := range tracers {
				tr.mu.Lock()
				if tr.delivered < want {
					short++
				}
				tr.mu.Unlock()
			}
			if short == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d nodes did not receive all %d messages", tc.name, short, nodes, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(3 * params.HeartbeatInterval) // late duplicates
		total, msgs := 0, 0
		for _, tr := range tracers {
			tr.mu.Lock()
			total, msgs = total+tr.copies, msgs+tr.delivered
			tr.mu.Unlock()
		}
		copies[tc.name] = float64(total) / float64(msgs)
		t.Logf("%s: %.2f copies received per message per node", tc.name, copies[tc.name])
		cancel()
		_ = mn.Close()
	}
	if copies["PubsubParams"] >= copies["library defaults"] {
		t.Errorf("copies per message: %.2f with PubsubParams, %.2f with the library's defaults; want fewer", copies["PubsubParams"], copies["library defaults"])
	}
}
