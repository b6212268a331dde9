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
//
// With churn (Config.Churn, `testnet up --churn 20%`) the testnet replaces a
// share of its live nodes per minute once released: each event stops a
// random live node and starts a newcomer or a node that left before, on its
// data dir. The schedule is pure (churn.go: churnPlan); the goroutine that
// runs it, in churn_run.go. Every process is a session (Sessions), and the
// report says which lasted long enough and reached the target accuracy:
//
//	cfg.Churn = testnet.ChurnConfig{Rate: 0.2, NeverReturn: 0.3, Seed: 1}
//	tn, err := testnet.Up(ctx, cfg)
//	_, err = tn.Release(ctx, 30*time.Second)
//	tn.StartChurn(ctx)
//	time.Sleep(10 * time.Minute)
//	tn.Stop(30 * time.Second)
//	r := testnet.Summarize(tn.Sessions(), 0.9, 2*time.Minute)
//	fmt.Println(r.Verdict())
//
// The benchmark (`meshtrain bench`) runs every mode on such a swarm, seed
// after seed, releases each swarm's nodes together, scores the models they
// snapshot after each run, and writes results.json, report.md and plots:
//
//	cfg := testnet.DefaultBenchConfig()
//	cfg.Binary, cfg.Out, cfg.Progress = exe, "bench-out", os.Stdout
//	res, err := testnet.RunBench(ctx, cfg)
//	if err == nil {
//		err = testnet.WriteAll(cfg.Out, res)
//	}
//
// On an emulated WAN (BenchConfig.Networks, `--net wan:40ms,100mbit`) every
// node sits behind a UDP relay in this process that gives it an access link
// of a rate up and down, a delay and a loss (WAN, wanrelay.go; the model in
// wan.go is free of sockets and clocks):
//
//	w, err := testnet.StartWAN(testnet.WANSpec{RTT: 40 * time.Millisecond, Rate: 100e6}, seed)
//	defer w.Close()
//	tn, err := testnet.Up(ctx, testnet.Config{Binary: exe, Dir: dir, Nodes: 4, WAN: w})
//
// The arithmetic (times to target, efficiency, the ideal, medians) is in
// metrics.go and analyze.go, free of processes and clocks.
package testnet
