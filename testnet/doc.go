// Package testnet runs meshtrain swarms on one machine: a local testnet of
// node processes on 127.0.0.1 (the `local` profile, one bootstrap node, free
// ports, per-node logs and data dirs), the docker-compose swarm's files, and
// the benchmark harness.
//
//	tn, err := testnet.Up(ctx, testnet.Config{Binary: exe, Dir: "meshtrain-testnet",
//		Nodes: 4, Slowdowns: []float64{2, 2, 4, 8}})
//	defer tn.Stop(10 * time.Second)
//	for range time.Tick(2 * time.Second) {
//		testnet.WriteTable(os.Stdout, tn.Summary())
//	}
package testnet
