// Package node wires the pieces of a meshtrain peer together and owns their
// lifecycle: the built-in trainer, the checkpointer, the node's identity,
// the libp2p host (profiles, bootstrap, DHT, mDNS), the announce topic, the
// parameter exchange and the averaging loops of the three modes: gossip
// (own pace, staleness-weighted merges), sync (every step averaged across
// the group, DDP semantics) and local (no merges).
//
// Goroutines and what they own are listed on Node. The trainer loop never
// touches the network or the disk: merges reach it between two steps
// through Trainer.Apply, checkpoints leave it as copies.
//
//	st, _ := store.Open(dir, store.Options{})
//	defer st.Close()
//	cfg := node.DefaultConfig()
//	cfg.Host.Bootstrap, _ = node.ParseBootstrap([]string{"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooW..."})
//	n, err := node.New(ctx, cfg, st, logger, printEvent)
//	if err != nil { ... }
//	res, err := n.Run(ctx, printEvent) // until a stop condition or ctx ends
package node
