package gossip

import (
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"
)

// PubsubMeter is a pubsub.RawTracer that counts the bytes of the pubsub
// RPCs a node sends and receives into Counters (PubsubBytesSent and
// PubsubBytesReceived): announcements, their forwarding by the mesh, and
// gossipsub's control messages (IHAVE, IWANT, GRAFT, PRUNE) and
// subscriptions. A byte is the RPC's protobuf size; the length prefix and
// the transport's framing and encryption are not counted. Sent bytes are
// counted when an RPC is queued for a peer; one pubsub drops instead (the
// peer's queue full) is not, nor the hello (our subscriptions) pubsub
// writes to a peer when it connects.
//
// Pass it to pubsub.NewGossipSub with pubsub.WithRawTracer. pubsub calls
// it from its own goroutines; it only adds to atomic counters.
type PubsubMeter struct{ c *Counters }

// NewPubsubMeter returns a meter counting into c.
func NewPubsubMeter(c *Counters) *PubsubMeter { return &PubsubMeter{c: c} }

var _ pubsub.RawTracer = (*PubsubMeter)(nil)

// RecvRPC counts an RPC read from a peer.
func (m *PubsubMeter) RecvRPC(rpc *pubsub.RPC) {
	m.c.pubsubReceived.Add(uint64(proto.Size(&rpc.RPC)))
}

// SendRPC counts an RPC queued for a peer.
func (m *PubsubMeter) SendRPC(rpc *pubsub.RPC, _ peer.ID) {
	m.c.pubsubSent.Add(uint64(proto.Size(&rpc.RPC)))
}

// The rest of pubsub.RawTracer: nothing to count.

func (*PubsubMeter) OnNewOutboundStream(peer.ID, protocol.ID)             {}
func (*PubsubMeter) OnClosedOutboundStream(peer.ID)                       {}
func (*PubsubMeter) Join(string)                                          {}
func (*PubsubMeter) Leave(string)                                         {}
func (*PubsubMeter) Graft(peer.ID, string)                                {}
func (*PubsubMeter) Prune(peer.ID, string)                                {}
func (*PubsubMeter) ValidateMessage(*pubsub.Message)                      {}
func (*PubsubMeter) DeliverMessage(*pubsub.Message)                       {}
func (*PubsubMeter) RejectMessage(*pubsub.Message, string)                {}
func (*PubsubMeter) DuplicateMessage(*pubsub.Message)                     {}
func (*PubsubMeter) ThrottlePeer(peer.ID)                                 {}
func (*PubsubMeter) SendRPCCompleted(*pubsub.RPC, peer.ID, time.Duration) {}
func (*PubsubMeter) UndeliverableMessage(*pubsub.Message)                 {}
func (*PubsubMeter) DropRPC(*pubsub.RPC, peer.ID)                         {}

// PubsubParams are gossipsub's parameters for the announce topic: the
// library's defaults but for GossipFactor, which is 0. Gossipsub sends its
// IHAVE gossip (the ids of the last three heartbeats' messages) each
// heartbeat to max(Dlazy, GossipFactor x the peers outside its mesh); at
// the default factor of 0.25 that is 6 peers in a swarm of 30 and 23 in
// one of 100, so a node's control traffic grew with the swarm (measured:
// 2.0x the pubsub bytes per node at 100 nodes as at 10). With 0 it is
// Dlazy (6) peers whatever the swarm's size.
//
// The mesh is 4 peers (3 to 6), not the library's 6 (5 to 12): every node
// receives each announcement about once per mesh peer, and the mesh still
// pushes every announcement to every node. With 30 nodes of 20 neighbours
// each, 3.7 copies per message against 7.3 (TestPubsubParamsMeshCopies);
// 60 testnet nodes waiting to start received 22 to 27 KB/s of pubsub each
// against 40 KB/s, and used about 9% less CPU (docs/scale.md).
func PubsubParams() pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	p.GossipFactor = 0
	p.D, p.Dlo, p.Dhi, p.Dscore, p.Dout = 4, 3, 6, 2, 1
	return p
}
