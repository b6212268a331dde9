package node

import (
	"time"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/store"
)

// Status is a point-in-time view of a node, for the REST API, the CLI and
// tests. Durations are seconds, sizes bytes.
type Status struct {
	PeerID      string   `json:"peer_id"`
	Addrs       []string `json:"addrs"`
	Network     string   `json:"network"`
	Mode        string   `json:"mode"`
	Profile     string   `json:"profile"`
	Fingerprint string   `json:"fingerprint"`
	Version     string   `json:"version"`

	Step          int64   `json:"step"`
	Progress      float64 `json:"progress"`
	Epoch         int     `json:"epoch"`
	Loss          float64 `json:"loss"`
	TestAccuracy  float64 `json:"test_accuracy"`
	SamplesPerSec float64 `json:"samples_per_s"`
	BusyFraction  float64 `json:"busy_fraction"`
	BusyS         float64 `json:"busy_s"`
	UptimeS       float64 `json:"uptime_s"`
	// NetworkWaitS is the time the trainer loop spent waiting on the
	// network. Gossip and local modes never do; the counter is here so the
	// synchronous baseline can be compared on the same terms.
	NetworkWaitS float64 `json:"network_wait_s"`

	Peers      int              `json:"peers"`
	Merges     int64            `json:"merges"`
	PeerMerges map[string]int64 `json:"peer_merges"`
	LastMerge  *MergeInfo       `json:"last_merge,omitempty"`
	CatchUps   int64            `json:"catch_ups"`
	// CatchUpClaimsCut counts the catch-ups whose model was credited more
	// than the catch-up threshold less progress than it claimed
	// (merge.Credit, merge.ClaimCut; none counted when we heard of no
	// other peer): the model was taken, its claim not.
	CatchUpClaimsCut int64 `json:"catch_up_claims_cut"`
	// ExchangesStarted counts the exchanges and pulls this node started,
	// ExchangesFailed those that failed; ExchangeFailedShare is the share
	// of the latest 100 started that failed.
	ExchangesStarted    int64   `json:"exchanges_started"`
	ExchangeFailedShare float64 `json:"exchange_failed_share"`
	ExchangesFailed     int64   `json:"exchanges_failed"`
	ExchangeTimeouts    int64   `json:"exchange_timeouts"`
	InboundDropped      int64   `json:"inbound_dropped"`
	// ModelAgeS is the model's age (params.Snapshot.Age): seconds since it
	// last took in a peer's model. ExchangeS is the moving average of the
	// exchanges this node started, ExchangeAnswerS of the time their
	// answer took (about the round trip to the peers), and AvgWaitS the
	// latest wait between them (merge.Pace: --avg-interval, or half the
	// exchange's transfer time on a slow link).
	ModelAgeS       float64 `json:"model_age_s"`
	ExchangeS       float64 `json:"exchange_s"`
	ExchangeAnswerS float64 `json:"exchange_answer_s"`
	AvgWaitS        float64 `json:"avg_wait_s"`
	// WireDType is the precision the node sends its models in now
	// (--wire-dtype; with auto, fp16 or int8 as merge.Precision picks).
	WireDType      string       `json:"wire_dtype"`
	Gossip         gossip.Stats `json:"gossip"`
	Trust          TrustStats   `json:"trust"`
	LastCheckpoint *store.Info  `json:"last_checkpoint,omitempty"`
	// Reachability is what the node knows of its own reachability and how
	// it reaches its peers (absent offline).
	Reachability *NodeReachability `json:"reachability,omitempty"`
	// Run is where the swarm's run stands; Alone says why the node trains
	// alone (absent while it has a partner).
	Run   RunStatus `json:"run"`
	Alone *Alone    `json:"alone,omitempty"`
	// Trainer describes an external trainer (absent for the built-in one).
	Trainer *TrainerStatus `json:"trainer,omitempty"`
}

// NodeReachability is the host's Reachability and how the averager
// reaches the peers it could merge with.
type NodeReachability struct {
	Reachability
	// PeersDirect, PeersRelayed and PeersNotConnected count the fresh peers
	// on our run, in a merging mode, by how this node reaches them now.
	// Models go to direct peers only.
	PeersDirect       int `json:"peers_direct"`
	PeersRelayed      int `json:"peers_relayed"`
	PeersNotConnected int `json:"peers_not_connected"`
	// RelayedSkips counts the times a round left out a peer reached only
	// through a relay; Dials the background dials to peers not connected,
	// DialsFailed those that ended without a direct connection; BackingOff
	// the peers waiting out a backoff after a failed dial or exchange.
	RelayedSkips int64 `json:"relayed_skips"`
	Dials        int64 `json:"dials"`
	DialsFailed  int64 `json:"dials_failed"`
	BackingOff   int   `json:"backing_off"`
}

// TrainerStatus is an external trainer's side of the status: whether one
// is connected, when it last pushed, and the requests refused, by code.
type TrainerStatus struct {
	Kind      string           `json:"kind"` // "external"
	Connected bool             `json:"connected"`
	LastPushS float64          `json:"last_push_s"` // seconds since the last push (-1: none yet)
	Rejected  map[string]int64 `json:"rejected"`
}

// TrainerStatusReporter is implemented by a trainer with a status of its
// own (an external one).
type TrainerStatusReporter interface {
	TrainerStatus() TrainerStatus
}

// RunStatus is where the run stands on the run clock (every node's samples
// added up; see runclock.go).
type RunStatus struct {
	// Epochs and TotalSamples are the run's length (0: no end).
	Epochs       float64 `json:"epochs"`
	TotalSamples float64 `json:"total_samples"`
	// Samples is the run clock; OwnSamples this node's share of it.
	Samples    float64 `json:"samples"`
	OwnSamples float64 `json:"own_samples"`
	// Fraction is Samples / TotalSamples, at most 1 (0 with no end).
	Fraction float64 `json:"fraction"`
	// LR is the learning rate of the latest step (the schedule at the run
	// clock, times LRScale), Schedule the schedule.
	LR       float64 `json:"lr"`
	Schedule string  `json:"schedule"`
	// LRScale is the factor --lr-scaling applied to that step's rate (1
	// without one).
	LRScale float64 `json:"lr_scale"`
	// ClockClamped counts peer announcements whose sample count was
	// clamped as implausible.
	ClockClamped int64 `json:"clock_clamped"`
}

// OuterSteps is the slow-momentum steps the node has taken in this
// process (0 with --outer-every 0, in other modes and with an external
// trainer).
func (n *Node) OuterSteps() int64 { return n.outerSteps.Load() }

// busy is the node's busy time: the trainer's steps and the slow
// momentum's.
func (n *Node) busy(s TrainerStats) time.Duration {
	return s.Busy + time.Duration(n.outerBusy.Load())
}

// Status returns the node's current status.
func (n *Node) Status() Status {
	s := n.trainer.Stats()
	s.Busy = n.busy(s)
	up := time.Since(n.started)
	st := Status{
		Network: n.cfg.Train.Network, Mode: string(n.cfg.Mode), Profile: string(n.cfg.Host.Profile),
		Fingerprint: n.fp.String(), Version: Version(),
		Step: s.Steps, Progress: float64(s.Progress), Epoch: s.Epoch, Loss: f64(&n.rep.lastLoss),
		TestAccuracy: f64(&n.rep.lastAcc), SamplesPerSec: s.SamplesPerSec, BusyS: s.Busy.Seconds(), UptimeS: up.Seconds(),
		NetworkWaitS: time.Duration(n.networkWait.Load()).Seconds(),
		PeerMerges:   n.PeerMerges(),
		Gossip:       n.counters.Snapshot(), LastCheckpoint: n.rep.lastCkpt.Load(), Trust: n.TrustStats(),
	}
	if a := n.avg; a != nil {
		st.Merges, st.LastMerge, st.CatchUps, st.CatchUpClaimsCut = a.merges.Load(), a.last.Load(), a.catchups.Load(), a.claimsCut.Load()
		st.ExchangesFailed, st.ExchangeTimeouts, st.InboundDropped = a.failed.Load(), a.timeouts.Load(), a.dropped.Load()
		st.ExchangesStarted, st.ExchangeFailedShare = a.reach.started.Load(), a.reach.failedShare()
		st.ExchangeS, st.AvgWaitS = time.Duration(a.exchange.Load()).Seconds(), time.Duration(a.wait.Load()).Seconds()
		st.ExchangeAnswerS = time.Duration(a.answer.Load()).Seconds()
	}
	if n.svc != nil {
		st.WireDType = n.svc.SendDType().String()
	}
	if n.cfg.Mode != ModeLocal && !n.cfg.Offline {
		st.ModelAgeS = n.modelAge(time.Now()).Seconds()
	}
	if n.cfg.Offline {
		st.Mode, st.Profile = "offline", ""
	}
	if r, ok := n.trainer.(TrainerStatusReporter); ok {
		ts := r.TrainerStatus()
		st.Trainer = &ts
	}
	// The busy fraction counts from the start of training (after any start
	// file), over the busy time since then.
	if start := n.trainStart.Load(); start != nil {
		if wall := time.Since(*start); wall > 0 {
			busy := s.Busy - time.Duration(n.busyAtStart.Load())
			st.BusyFraction = min(1, max(0, busy.Seconds()/wall.Seconds()))
		}
	}
	st.Run = RunStatus{Epochs: n.cfg.Epochs, TotalSamples: n.runTotal, OwnSamples: float64(s.Samples),
		Samples: n.runPosition(time.Now(), float64(s.Samples)), Schedule: s.Schedule,
		ClockClamped: n.clock.clampedTotal()}
	st.Run.LR, st.Run.LRScale = n.rep.lr()
	if n.runTotal > 0 {
		st.Run.Fraction = min(1, st.Run.Samples/n.runTotal)
	}
	st.Alone = n.Alone()
	if n.host != nil {
		st.PeerID, st.Addrs = n.id.String(), n.Addrs()
		partners := n.partners()
		st.Peers = len(partners)
		st.Reachability = n.reachability(partners)
	}
	return st
}

// SamplesTotal is how many training samples this node has processed (the
// Prometheus counter meshtrain_samples_total).
func (n *Node) SamplesTotal() int64 { return n.trainer.Stats().Samples }
