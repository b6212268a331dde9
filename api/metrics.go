package api

import (
	"fmt"
	"log/slog"
	"runtime"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// collector reads the Source at scrape time, so /metrics is never older
// than the scrape and the node keeps no Prometheus state of its own.
// Counters come from the node's monotonic counters; a process restart
// resets them, which rate() handles.
type collector struct {
	src Source
	log *slog.Logger

	steps, samples, merges, catchUps, claimsCut, exchFailed, timeouts, inDropped            *prometheus.Desc
	rejected, bytesSent, bytesReceived, exchanges, refused, announces, pubsubBytes          *prometheus.Desc
	peers, loss, accuracy, samplesPerSec, busyFraction, busySeconds, networkWait            *prometheus.Desc
	progress, epoch, uptime, ckptStep, ckptTime, mergeStaleness, mergeWeight                *prometheus.Desc
	buildInfo, nodeInfo                                                                     *prometheus.Desc
	exchStarted, failedShare, reachable, peersByPath, holePunches, dials, dialsFailed       *prometheus.Desc
	relayedSkips, relayBytes, relayReservations, relayCircuits                              *prometheus.Desc
	mergesRefused, mergesClipped, mergesValidated, peersBanned, clipRadius, trainerRejected *prometheus.Desc
}

func newCollector(src Source, log *slog.Logger) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("meshtrain_"+name, help, labels, nil)
	}
	return &collector{
		src: src, log: log,
		steps:             d("steps_total", "Local optimizer steps taken (restored from the checkpoint on resume)."),
		samples:           d("samples_total", "Training samples processed by local steps."),
		merges:            d("merges_total", "Merges of a peer's model into this one, both directions."),
		catchUps:          d("catch_ups_total", "Times this node replaced its model with a far-ahead peer's."),
		claimsCut:         d("catch_up_claims_cut_total", "Catch-ups whose model was credited more than --catch-up less progress than it claimed."),
		exchFailed:        d("exchanges_failed_total", "Exchanges this node started that failed."),
		exchStarted:       d("exchanges_started_total", "Exchanges and pulls this node started."),
		failedShare:       d("exchange_failed_share", "Share of the latest 100 exchanges this node started that failed, in [0,1]."),
		reachable:         d("reachability", "Always 1; the label is what AutoNAT found: public, private or unknown.", "status"),
		peersByPath:       d("peers_by_path", "Fresh peers this node could merge with, by how it reaches them now (direct, relayed, none).", "path"),
		holePunches:       d("hole_punches_total", "Hole punches with peers, by outcome (succeeded, failed).", "outcome"),
		dials:             d("peer_dials_total", "Background dials to partners that were not connected."),
		dialsFailed:       d("peer_dials_failed_total", "Background dials that ended without a direct connection (the peer then backs off)."),
		relayedSkips:      d("relayed_skips_total", "Times a round left out a peer reached only through a relay (models never go over a relay)."),
		relayBytes:        d("relay_bytes_total", "Bytes the relay this node serves carried for other peers."),
		relayReservations: d("relay_reservations", "Relay slots other peers hold on this node now."),
		relayCircuits:     d("relay_circuits", "Relayed connections through this node open now."),
		timeouts:          d("exchange_timeouts_total", "Exchanges this node started that timed out."),
		inDropped:         d("inbound_dropped_total", "Models received from peers dropped because the merge queue was full."),
		rejected:          d("rejected_inputs_total", "Inputs from peers refused, by reason.", "reason"),
		bytesSent:         d("bytes_sent_total", "Bytes sent on parameter-exchange streams, headers included."),
		bytesReceived:     d("bytes_received_total", "Bytes received on parameter-exchange streams, headers included."),
		exchanges:         d("exchanges_total", "Completed parameter transfers by kind (exchange or pull) and direction (outbound: this node asked; inbound: a peer asked).", "kind", "direction"),
		refused:           d("refused_by_peer_total", "Requests of this node that a peer refused (busy, unavailable or rejected)."),
		announces:         d("announcements_total", "Announcements published (sent) and accepted from peers (received).", "direction"),
		pubsubBytes:       d("pubsub_bytes_total", "Bytes of pubsub RPCs (announcements as the mesh forwards them, gossipsub control messages) queued to peers (sent) and read from them (received); framing and encryption not counted.", "direction"),
		peers:             d("peers", "Fresh peers training the same model in a merging mode."),
		loss:              d("loss", "Training loss (moving average over recent steps)."),
		accuracy:          d("test_accuracy", "Accuracy of the latest evaluated snapshot on the test set, as a ratio in [0,1]."),
		samplesPerSec:     d("samples_per_second", "Training throughput in samples per second."),
		busyFraction:      d("busy_fraction", "Share of wall time the trainer spent stepping, in [0,1]."),
		busySeconds:       d("busy_seconds_total", "Wall time the trainer spent stepping (with gossip's slow-momentum steps)."),
		networkWait:       d("network_wait_seconds_total", "Wall time the trainer loop waited on the network."),
		progress:          d("progress_samples", "Progress of the model: the training samples it embodies (falls when a merge mixes in an older model)."),
		epoch:             d("epoch", "Current pass over the local shard."),
		uptime:            d("uptime_seconds", "Wall time since the node started."),
		ckptStep:          d("checkpoint_step", "Step of the latest checkpoint written by this process."),
		ckptTime:          d("checkpoint_timestamp_seconds", "Unix time of the latest checkpoint written by this process."),
		mergeStaleness:    d("last_merge_staleness_steps", "Staleness of the model in the latest merge, as --staleness-lag measures it: percent of this node's progress (the default) or its steps."),
		mergeWeight:       d("last_merge_weight", "Weight given to the remote model in the latest merge."),
		mergesRefused:     d("merges_refused_total", "Peer models refused by the trust checks, by reason (outlier, loss_jump, non_finite, ignored).", "reason"),
		mergesClipped:     d("merges_clipped_total", "Merges applied after clipping the remote model to the radius."),
		mergesValidated:   d("merges_validated_total", "Candidate merges checked on the holdout."),
		peersBanned:       d("peers_banned", "Peers banned now."),
		clipRadius:        d("clip_radius", "Current clipping radius around this node's model (0 while warming up)."),
		trainerRejected:   d("trainer_rejections_total", "Requests of the external trainer refused, by code (bad_shape, non_finite, busy, mismatch, ...; transfer: the trainer's connection broke mid-request).", "code"),
		buildInfo:         d("build_info", "Always 1; labels name the build.", "version", "goversion"),
		nodeInfo:          d("node_info", "Always 1; labels name the node and what it trains.", "peer_id", "network", "mode", "profile", "fingerprint"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.steps, c.samples, c.merges, c.catchUps, c.claimsCut, c.exchFailed, c.timeouts, c.inDropped,
		c.rejected, c.bytesSent, c.bytesReceived, c.exchanges, c.refused, c.announces, c.pubsubBytes,
		c.peers, c.loss, c.accuracy, c.samplesPerSec, c.busyFraction, c.busySeconds, c.networkWait,
		c.progress, c.epoch, c.uptime, c.ckptStep, c.ckptTime, c.mergeStaleness, c.mergeWeight,
		c.buildInfo, c.nodeInfo,
		c.exchStarted, c.failedShare, c.reachable, c.peersByPath, c.holePunches, c.dials, c.dialsFailed,
		c.relayedSkips, c.relayBytes, c.relayReservations, c.relayCircuits,
		c.mergesRefused, c.mergesClipped, c.mergesValidated, c.peersBanned, c.clipRadius, c.trainerRejected,
	} {
		ch <- d
	}
}

// Collect runs on a registry goroutine, outside the HTTP handler's recover:
// a panic here would end the process, so it is caught and reported as an
// invalid metric (the scrape then fails with 500 and the node lives on).
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	defer func() {
		if v := recover(); v != nil {
			c.log.Error("metrics collection panicked", "panic", fmt.Sprint(v))
			ch <- prometheus.NewInvalidMetric(c.steps, fmt.Errorf("api: collecting status panicked: %v", v))
		}
	}()
	st := c.src.Status()
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(d, t, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) { emit(d, prometheus.CounterValue, v, labels...) }
	gauge := func(d *prometheus.Desc, v float64, labels ...string) { emit(d, prometheus.GaugeValue, v, labels...) }

	counter(c.steps, float64(st.Step))
	if sc, ok := c.src.(SampleCounter); ok {
		counter(c.samples, float64(sc.SamplesTotal()))
	}
	counter(c.merges, float64(st.Merges))
	counter(c.catchUps, float64(st.CatchUps))
	counter(c.claimsCut, float64(st.CatchUpClaimsCut))
	counter(c.exchFailed, float64(st.ExchangesFailed))
	counter(c.exchStarted, float64(st.ExchangesStarted))
	gauge(c.failedShare, st.ExchangeFailedShare)
	if r := st.Reachability; r != nil {
		gauge(c.reachable, 1, r.Status)
		gauge(c.peersByPath, float64(r.PeersDirect), "direct")
		gauge(c.peersByPath, float64(r.PeersRelayed), "relayed")
		gauge(c.peersByPath, float64(r.PeersNotConnected), "none")
		counter(c.holePunches, float64(r.HolePunchesOK), "succeeded")
		counter(c.holePunches, float64(r.HolePunches-r.HolePunchesOK), "failed")
		counter(c.dials, float64(r.Dials))
		counter(c.dialsFailed, float64(r.DialsFailed))
		counter(c.relayedSkips, float64(r.RelayedSkips))
		if rs := r.RelayService; rs != nil {
			counter(c.relayBytes, float64(rs.BytesRelayed))
			gauge(c.relayReservations, float64(rs.Reservations))
			gauge(c.relayCircuits, float64(rs.Circuits))
		}
	}
	counter(c.timeouts, float64(st.ExchangeTimeouts))
	counter(c.inDropped, float64(st.InboundDropped))
	reasons := make([]string, 0, len(st.Gossip.Rejected))
	byName := make(map[string]uint64, len(st.Gossip.Rejected))
	for r, n := range st.Gossip.Rejected {
		reasons = append(reasons, r.String())
		byName[r.String()] = n
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		counter(c.rejected, float64(byName[r]), r)
	}
	g := st.Gossip
	counter(c.bytesSent, float64(g.BytesSent))
	counter(c.bytesReceived, float64(g.BytesReceived))
	counter(c.exchanges, float64(g.ExchangesDone), "exchange", "outbound")
	counter(c.exchanges, float64(g.ExchangesServed), "exchange", "inbound")
	counter(c.exchanges, float64(g.PullsDone), "pull", "outbound")
	counter(c.exchanges, float64(g.PullsServed), "pull", "inbound")
	counter(c.refused, float64(g.RefusedByPeer))
	counter(c.announces, float64(g.AnnouncesSent), "sent")
	counter(c.announces, float64(g.AnnouncesSeen), "received")
	counter(c.pubsubBytes, float64(g.PubsubBytesSent), "sent")
	counter(c.pubsubBytes, float64(g.PubsubBytesReceived), "received")

	if tr := st.Trust; tr.Enabled {
		for _, r := range []string{"ignored", "loss_jump", "non_finite", "outlier"} {
			counter(c.mergesRefused, float64(tr.Refused[r]), r)
		}
		counter(c.mergesClipped, float64(tr.Clipped))
		counter(c.mergesValidated, float64(tr.Validated))
		gauge(c.peersBanned, float64(tr.Banned))
		gauge(c.clipRadius, tr.Radius)
	}
	if t := st.Trainer; t != nil {
		codes := make([]string, 0, len(t.Rejected))
		for k := range t.Rejected {
			codes = append(codes, k)
		}
		sort.Strings(codes)
		for _, k := range codes {
			counter(c.trainerRejected, float64(t.Rejected[k]), k)
		}
	}
	gauge(c.peers, float64(st.Peers))
	gauge(c.loss, st.Loss)
	gauge(c.accuracy, st.TestAccuracy)
	gauge(c.samplesPerSec, st.SamplesPerSec)
	gauge(c.busyFraction, st.BusyFraction)
	counter(c.busySeconds, st.BusyS)
	counter(c.networkWait, st.NetworkWaitS)
	gauge(c.progress, st.Progress)
	gauge(c.epoch, float64(st.Epoch))
	gauge(c.uptime, st.UptimeS)
	// No checkpoint or merge yet: the series are absent rather than a
	// made-up zero.
	if ck := st.LastCheckpoint; ck != nil {
		gauge(c.ckptStep, float64(ck.Step))
		gauge(c.ckptTime, float64(ck.Created.UnixNano())/1e9)
	}
	if m := st.LastMerge; m != nil {
		gauge(c.mergeStaleness, m.Staleness)
		gauge(c.mergeWeight, m.Weight)
	}
	gauge(c.buildInfo, 1, st.Version, runtime.Version())
	gauge(c.nodeInfo, 1, st.PeerID, st.Network, st.Mode, st.Profile, st.Fingerprint)
}
