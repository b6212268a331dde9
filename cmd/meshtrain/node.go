package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/api"
	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/node"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}

func runNodeCmd(ctx context.Context, e *env, args []string) int {
	fs := newFlags(e, "[flags]")
	var f runFlags
	d := node.DefaultConfig()
	f.register(fs, d)
	mode := fs.String("mode", string(d.Mode),
		"averaging mode: gossip (merge with one peer at a time, at our own pace), sync (every step all members average: the DDP baseline, paced by the slowest), diloco (every --inner-steps local steps, an all-reduce of the pseudo-gradient and an outer Nesterov step: DiLoCo) or local (no merges)")
	profile := fs.String("profile", string(d.Host.Profile),
		"network profile: local (127.0.0.1 only, no mDNS/NAT traffic), lan (all interfaces, mDNS), public (NAT mapping, AutoNAT, relays, hole punching)")
	network := fs.String("network", d.Train.Network, "network name: keeps meshes apart (part of the model fingerprint)")
	var listen, announceAddrs, bootstrap listFlag
	fs.Var(&listen, "listen", "multiaddr to listen on (repeatable; default TCP and QUIC on a free port; TCP only with --psk or --profile local)")
	fs.Var(&announceAddrs, "announce",
		"multiaddr to tell peers in place of the listen addresses, without /p2p/ (repeatable): where a port forward or an emulated network in front of this node reaches it")
	fs.Var(&bootstrap, "bootstrap", "multiaddr of a peer to join through, with /p2p/<peer ID> (repeatable)")
	dhtServer := fs.Bool("dht-server", false,
		"a bootstrap node: serve the DHT even on the public profile, and (public) count as reachable from the start: relay for peers behind NAT")
	discovery := fs.Duration("discovery-interval", 0, "how often to advertise on and search the DHT (0: 10 s, or 1 min on --profile public)")
	relayBoot := fs.Duration("relay-boot-delay", node.DefaultRelayBootDelay,
		"public profile, behind NAT: how long after the start to collect relay candidates before reserving a slot with fewer")
	pskFile := fs.String("psk", "", "private network key (meshtrain keygen --psk); TCP only: go-libp2p's QUIC does not support private networks")
	var allowPeers listFlag
	fs.Var(&allowPeers, "allow-peers", "talk only to these peers: peer IDs, comma-separated, or @FILE with one per line (repeatable; default: anyone)")
	avgInterval := fs.Duration("avg-interval", d.AvgInterval, "wall time between the merges this node starts")
	alpha := fs.Float64("alpha", d.Merger.Alpha, "base merge weight a0 in (0,1]: a = a0 * f(staleness)")
	staleness := fs.String("staleness", d.Merger.Staleness.String(), "staleness decay f: const, poly:P, exp:D or hinge:A,B")
	lag := fs.String("staleness-lag", d.Merger.Lag.String(),
		"how staleness is measured: age (seconds since the peer's model last took in a peer's model, plus its trip to us), relative (percent of our progress behind) or steps (our steps behind)")
	momentum := fs.String("momentum-policy", d.Merger.Momentum.String(), "optimizer momentum on merge: keep, reset or mix")
	ahead := fs.String("staleness-ahead", d.Merger.Ahead.String(),
		"weight of a peer's model ahead of ours: fresh (the base weight) or pull (1 - a0 * f(our own staleness as the peer measures it): both sides land where the peer does)")
	lrScaling := fs.String("lr-scaling", string(d.LRScaling),
		"gossip: merges (scale the learning rate by up to 2x while merges come every few local steps: sqrt(48 / steps per merge)), speed (by the median announced samples/s over ours, so every node's data moves the swarm alike) or none")
	catchUp := fs.Float64("catch-up", d.CatchUp, "pull the model of the second most advanced peer when it is ahead by more than this many samples (0: never)")
	trust := fs.Bool("trust", d.Trust.Enabled,
		"gossip mode: score peers, clip their models to an adaptive radius, refuse outliers and models that hurt a holdout, ban attackers (false: merge every well-formed model)")
	holdout := fs.Int("holdout", d.Trust.Holdout, "samples of the local shard candidate merges are validated on (with --trust)")
	syncTimeout := fs.Duration("sync-timeout", d.SyncTimeout,
		"sync and diloco modes: how long a round waits for a member before dropping it (must exceed the slowest member's step; in diloco mode, its inner steps)")
	syncOverlap := fs.Bool("sync-overlap", d.SyncOverlap,
		"sync mode: run each round's all-reduce during the next local step, then swap the member's own update for the round's mean (one step of delay: for iid data; on label-skewed data it needs far more samples; false: DDP's exact step)")
	innerSteps := fs.Int("inner-steps", d.InnerSteps, "diloco mode: local steps between two outer rounds (H)")
	innerScaling := fs.String("inner-steps-scaling", d.InnerScaling,
		"diloco mode: none, or speed (scale each member's inner steps by its speed over the group's fastest, so all finish a round together: DyLU)")
	outerLR := fs.Float64("outer-lr", d.OuterLR, "diloco mode: outer learning rate (Nesterov step on the mean pseudo-gradient); gossip mode: the slow momentum's")
	outerMomentum := fs.Float64("outer-momentum", d.OuterMomentum, "diloco mode and gossip's slow momentum: outer Nesterov momentum, in [0,1)")
	outerEvery := fs.Int("outer-every", d.OuterEvery, "gossip mode, built-in trainer: local steps between two slow-momentum steps, an outer Nesterov step at --outer-lr and --outer-momentum on what the model moved since the last, merges included (0: none)")
	maxUpload := fs.Int("max-upload", d.MaxUpload, "cap on bytes/s sent to peers (0: no cap)")
	wire := fs.String("wire-dtype", d.WireName(), "precision of what is sent: gossip's models, sync's and diloco's all-reduced updates; fp32, fp16, int8 (gossip's models only: a byte per value and a scale per 256; the all-reduce then sends fp16) or auto (fp16, and gossip's models as int8 while that makes exchanges faster: on a slow link)")
	evalEvery := fs.Duration("eval-every", d.EvalEvery, "wall time between test-set evaluations (0: only at epoch ends)")
	announce := fs.Duration("announce-interval", d.Announce.Interval, "wall time between announcements (the shortest: --announce-rate stretches it in a large swarm)")
	announceRate := fs.Float64("announce-rate", d.Announce.TopicRate,
		"announcements per second the whole swarm aims at: each node waits max(--announce-interval, (peers+1)/rate) between its own (0: always --announce-interval)")
	apiAddr := fs.String("api", api.DefaultAddr, "serve the REST API, /metrics and the dashboard on this host:port (empty: off)")
	var snaps node.SnapshotConfig
	fs.StringVar(&snaps.Dir, "snapshot-dir", "", "write the model and counters here every --snapshot-every, to score after the run (benchmarks)")
	fs.DurationVar(&snaps.Every, "snapshot-every", time.Second, "wall time between snapshots")
	fs.StringVar(&snaps.StartFile, "start-file", "", "hold training until this file exists, so a swarm starts at one instant")
	fs.BoolVar(&snaps.NoEval, "no-eval", false, "no test-set evaluation while training (score --snapshot-dir files instead); --until-accuracy never fires")
	trainerKind := fs.String("trainer", trainerBuiltin,
		"who trains: builtin (this process trains --model on --dataset) or external (a trainer process on this machine trains its own model through the local trainer API: see python/)")
	trainerListen := fs.String("trainer-listen", "",
		"with --trainer external: unix:PATH, or tcp:HOST:PORT with a token written to the data dir (default: unix socket trainer.sock in the data dir)")
	hooks := registerNodeHooks(fs) // none in a release build
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(e, "unexpected argument %q", fs.Arg(0))
	}
	// Every bad setting is reported at once, wherever it came from.
	var errs []string
	if err := applySettings(fs, os.Environ()); err != nil {
		errs = append(errs, err.Error())
	}
	cfg := d
	if err := f.config(&cfg); err != nil {
		errs = append(errs, err.Error())
	}
	var err error
	if cfg.Mode, err = node.ParseMode(*mode); err != nil {
		errs = append(errs, err.Error())
	}
	if cfg.Host.Profile, err = node.ParseProfile(*profile); err != nil {
		errs = append(errs, err.Error())
	}
	if cfg.Host.Bootstrap, err = node.ParseBootstrap(bootstrap); err != nil {
		errs = append(errs, err.Error())
	}
	if _, err = node.ParseAnnounce(announceAddrs); err != nil {
		errs = append(errs, err.Error())
	}
	if cfg.Merger.Staleness, err = averaging.ParseStaleness(*staleness); err != nil {
		errs = append(errs, err.Error())
	}
	if cfg.Merger.Lag, err = averaging.ParseLag(*lag); err != nil {
		errs = append(errs, err.Error())
	}
	if cfg.Merger.Ahead, err = averaging.ParseAhead(*ahead); err != nil {
		errs = append(errs, err.Error())
	}
	if cfg.LRScaling, err = node.ParseLRScaling(*lrScaling); err != nil {
		errs = append(errs, err.Error())
	}
	if cfg.Merger.Momentum, err = averaging.ParseMomentumPolicy(*momentum); err != nil {
		errs = append(errs, err.Error())
	}
	if cfg.Exchange.SendDType, cfg.WireAuto, err = node.ParseWire(*wire); err != nil {
		errs = append(errs, err.Error())
	}
	if err = hooks.apply(&cfg); err != nil {
		errs = append(errs, err.Error())
	}
	if *pskFile != "" {
		if cfg.Host.PSK, err = readPSK(*pskFile); err != nil {
			errs = append(errs, err.Error())
		}
		for _, a := range listen {
			if strings.Contains(a, "/quic") {
				errs = append(errs, fmt.Sprintf("--listen %s: a private network (--psk) is TCP only", a))
			}
		}
	}
	if cfg.Host.AllowPeers, err = readAllowPeers(allowPeers); err != nil {
		errs = append(errs, err.Error())
	}
	if err := checkAPIFlag(*apiAddr); err != nil {
		errs = append(errs, err.Error())
	}
	external := *trainerKind == trainerExternal
	if *trainerKind != trainerBuiltin && !external {
		errs = append(errs, fmt.Sprintf("--trainer %q: want builtin or external", *trainerKind))
	}
	listenTrainer, err := externalListen(*trainerListen, f.dir, f.noStore)
	switch {
	case !external && *trainerListen != "":
		errs = append(errs, "--trainer-listen needs --trainer external")
	case external && err != nil:
		errs = append(errs, err.Error())
	case external && (*mode == string(node.ModeSync) || *mode == string(node.ModeDiloco)):
		errs = append(errs, "--trainer external runs in gossip or local mode (sync and diloco modes drive the built-in trainer's steps)")
	}
	if *discovery < 0 {
		errs = append(errs, fmt.Sprintf("--discovery-interval %v: must be >= 0", *discovery))
	}
	if *relayBoot <= 0 {
		errs = append(errs, fmt.Sprintf("--relay-boot-delay %v: must be > 0", *relayBoot))
	}
	if snaps.Dir != "" && snaps.Every <= 0 {
		errs = append(errs, fmt.Sprintf("--snapshot-every %v: must be > 0", snaps.Every))
	}
	if len(errs) > 0 {
		return usageError(e, "%s", strings.Join(errs, "; "))
	}
	cfg.Train.Network, cfg.Host.Network = *network, *network
	shardSet := false
	fs.Visit(func(f *flag.Flag) { shardSet = shardSet || f.Name == "shard" })
	if !shardSet && cfg.Host.Profile == node.ProfilePublic {
		// Volunteers who join an open mesh with no coordination need a
		// shard of their own: the one their peer ID picks.
		cfg.Train.Shard = "auto"
	}
	cfg.Host.Listen, cfg.Host.Announce, cfg.Host.DHTServer = listen, announceAddrs, *dhtServer
	cfg.Host.DiscoveryInterval, cfg.Host.RelayBootDelay = *discovery, *relayBoot
	cfg.AvgInterval, cfg.Merger.Alpha, cfg.CatchUp, cfg.MaxUpload = *avgInterval, *alpha, *catchUp, *maxUpload
	cfg.Trust.Enabled, cfg.Trust.Holdout = *trust, *holdout
	cfg.SyncTimeout, cfg.SyncOverlap = *syncTimeout, *syncOverlap
	cfg.InnerSteps, cfg.InnerScaling, cfg.OuterLR, cfg.OuterMomentum = *innerSteps, *innerScaling, *outerLR, *outerMomentum
	cfg.OuterEvery = *outerEvery
	cfg.EvalEvery = *evalEvery
	cfg.Announce.Interval, cfg.Announce.TopicRate = *announce, *announceRate
	if cfg.Announce.FreshWindow < 3**announce {
		// A longer interval widens the fresh window and the age limit to
		// three intervals; a shorter one leaves them.
		cfg.Announce.FreshWindow, cfg.Announce.MaxAge = 3**announce, 3**announce
	}
	if snaps.Dir != "" {
		if err := os.MkdirAll(snaps.Dir, 0o755); err != nil {
			return failure(e, fmt.Errorf("--snapshot-dir: %w", err))
		}
	}
	srv, err := listenNodeAPI(e, fs, *apiAddr, f.jsonOut)
	if err != nil {
		return failure(e, err)
	}
	defer srv.stop()
	before := func(n *node.Node) {
		hooks.warn(e, cfg)
		if !f.jsonOut && cfg.Host.Profile == node.ProfileLocal {
			fmt.Fprintln(e.stdout, "profile local: reachable from this machine only; use --profile lan or public to join other machines")
		}
		if err := n.SetSnapshots(snaps); err != nil {
			fmt.Fprintf(e.stderr, "%s: no snapshots: %v\n", e.name, err)
		}
		log, _ := f.logger(e.stderr)
		if err := srv.start(n, log); err != nil {
			fmt.Fprintf(e.stderr, "%s: API not started: %v\n", e.name, err)
		}
	}
	if external {
		return runExternal(ctx, e, &f, cfg, listenTrainer, before)
	}
	return runNode(ctx, e, &f, cfg, before)
}

// readAllowPeers parses --allow-peers: peer IDs separated by commas, or
// @FILE for a file of IDs, one per line (blank lines and # comments
// skipped). Every bad entry is named.
func readAllowPeers(list []string) ([]peer.ID, error) {
	var entries, errs []string
	for _, item := range list {
		path, ok := strings.CutPrefix(strings.TrimSpace(item), "@")
		if !ok {
			entries = append(entries, item)
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Sprintf("--allow-peers: %v", err))
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			line, _, _ = strings.Cut(line, "#")
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			if _, err := node.ParsePeerIDs([]string{line}); err != nil {
				errs = append(errs, fmt.Sprintf("--allow-peers %s line %d: %v", path, i+1, err))
				continue
			}
			entries = append(entries, line)
		}
	}
	ids, err := node.ParsePeerIDs(entries)
	if err != nil {
		errs = append(errs, "--allow-peers: "+strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return ids, nil
}
