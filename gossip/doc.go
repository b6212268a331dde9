// Package gossip owns meshtrain's libp2p protocols: the parameter exchange
// (/meshtrain/params/2.1.0), which moves frozen snapshots between two peers
// over a stream; the announce topic (/meshtrain/<network>/announce/1), on
// which every peer tells the mesh its step, progress, metrics and
// addresses; and sync mode's rounds, a leader's coordination
// (/meshtrain/sync/2.0.0) around a bandwidth-optimal all-reduce among the
// members (/meshtrain/allreduce/2.1.0: reduce-scatter and all-gather of one
// flat fp32 buffer, one long-lived stream per pair, no member reducing for
// everyone). Both are built to face strangers on an open mesh: every input
// is bounded, checked and, if refused, counted under a small fixed set of
// reasons (Reason) and reported to an optional hook for reputation.
//
// The wire codec (codec.go, synccodec.go, fp16.go, announce.go) is pure:
// byte layouts, limits, checksums, fp16 conversion, validation verdicts and
// the fresh peer table, with no goroutines, clock or network. The libp2p
// shell adds deadlines, concurrency limits, the upload limiter, the
// connection manager and pubsub: stream.go is the stream base that the
// request-response protocols, the exchange (exchange.go) and sync mode's
// coordinator (sync.go), embed; allreduce.go is the all-reduce's data path
// (AllReducer, usable on its own); announcer.go runs the topic.
// docs/protocol.md specifies the protocols byte for byte.
//
// The node builds the host (with ProtocolLimits applied to its resource
// manager) and the gossipsub router, then:
//
//	cfg := gossip.DefaultConfig()
//	cfg.Fingerprint, cfg.Elements = fp, layout.Size()
//	cfg.OnReceive = func(p peer.ID, s params.Snapshot) { merges <- s }
//	svc, err := gossip.NewService(h, cfg, latestSnapshot)
//	defer svc.Close()
//	remote, err := svc.Exchange(ctx, partner, mine)
//
//	acfg := gossip.DefaultAnnounceConfig()
//	acfg.Network, acfg.Fingerprint = "main", fp
//	ann, err := gossip.NewAnnouncer(h, ps, acfg, func() gossip.Announcement {
//		return gossip.Announcement{Step: step, Progress: float64(p), Mode: "gossip"}
//	})
//	defer ann.Close()
//	partners := ann.Fresh()
//
// Sync mode's members all-reduce a buffer once the leader has named them:
//
//	res, err := syncSvc.Contribute(ctx, leader, gossip.Contribution{
//		Round: step, Progress: p, Base: last.Group, Params: w}) // w <- mean
package gossip
