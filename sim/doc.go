// Package sim owns the discrete-event simulator of a gossip swarm
// (`meshtrain sim`): thousands of nodes on virtual time, with no sockets,
// goroutines or clock, running the node's own merge decision and partner
// choice (merge.Core with the trust checks off, merge.ChoosePartner,
// merge.Pace, averaging.Merger) on real training: every node trains its
// model on a shard of one shared in-memory dataset, and only the time a
// step or a transfer takes is virtual. Sessions come from a lifetime model
// (Weibull or Pareto, an arrival rate that keeps the population around its
// size, a share of leavers that never return) or from a trace file.
//
// One run of the same Config gives the same Result: every draw comes from
// PCG generators seeded by Config.Seed, events at the same virtual time run
// in the order they were scheduled, and nothing reads the wall clock.
// Run is one goroutine; only the scoring of models uses Config.Threads.
//
// What it models, per node: a step is the trainer's (the next batch of the
// shard, gradient, SGD with momentum at the learning rate of the run
// clock) and takes the node's virtual step time; its averager starts a
// round after merge.Pace's wait (with the step time as a node measures
// it: unknown, so the pace's floor, until its first step has ended) and
// picks a partner among the live nodes it knows with merge.ChoosePartner. An exchange crosses as the gossip
// service's does: the request reaches the partner after Latency, which
// then snapshots its model; each model takes model bytes / Bandwidth to
// cross, so the partner merges the initiator's model at start + Latency +
// transfer and the initiator merges the partner's at start + 2 Latency +
// transfer. A catch-up pull takes as long and replaces the puller's model.
// A transfer from or to a node that leaves meanwhile is cut. What it does
// not model: announcements (every node sees every live node's progress at
// once), the trust checks, link sharing between simultaneous transfers,
// fp16 rounding of the values, and compute contention.
//
// Use:
//
//	cfg := sim.DefaultConfig()
//	cfg.Nodes, cfg.Duration = 200, 300*time.Second
//	res, err := sim.Run(ctx, cfg, func(p sim.Point) { fmt.Println(p.T, p.AverageAccuracy) })
//	if err != nil { ... }
//	err = sim.Write("out", cfg, res, wall) // results.json, report.md, *.png
package sim
