// Package node wires the pieces of a meshtrain peer together and owns their
// lifecycle: the trainer loop, the checkpointer, the node's identity, and
// (with the mesh) the libp2p host and the averager.
//
// Goroutines and what they own:
//
//   - the trainer loop (the caller of RunLocal) owns the stepping; it hands
//     copies of the trainer state to the checkpointer and never waits for
//     the disk;
//
//   - the checkpointer goroutine owns the store's write path; one state
//     waits at most, and a newer one replaces it.
//
//     st, _ := store.Open(dir, store.Options{})
//     defer st.Close()
//     res, err := node.RunLocal(ctx, node.RunConfig{Train: train.DefaultConfig(), Dataset: "mnist",
//     CheckpointEvery: 30 * time.Second}, st, logger, func(e node.Event) { fmt.Println(e.Event, e.Step) })
package node
