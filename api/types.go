package api

import "time"

// The REST API's JSON objects. They are this package's own, not the node's:
// the node may rename or retype its fields without changing what the API
// sends, and a client decodes exactly what the server encodes (convert.go
// is the one place node, store and gossip values become these). Field
// names, types and omitempty are the contract; api/testdata pins them and
// docs/openapi.yaml describes them under the same names.

// StatusResponse is the body of GET /v1/status.
type StatusResponse struct {
	PeerID      string   `json:"peer_id"` // empty when offline
	Addrs       []string `json:"addrs"`   // full multiaddrs, with /p2p/<peer ID>
	Network     string   `json:"network"`
	Mode        string   `json:"mode"`    // gossip, local, sync, diloco or offline
	Profile     string   `json:"profile"` // local, lan or public; empty when offline
	Fingerprint string   `json:"fingerprint"`
	Version     string   `json:"version"`

	Step          int64   `json:"step"`
	Progress      float64 `json:"progress"` // samples the model embodies
	Epoch         int     `json:"epoch"`
	Loss          float64 `json:"loss"`
	TestAccuracy  float64 `json:"test_accuracy"`
	SamplesPerSec float64 `json:"samples_per_s"`
	BusyFraction  float64 `json:"busy_fraction"`
	BusyS         float64 `json:"busy_s"`
	UptimeS       float64 `json:"uptime_s"`
	NetworkWaitS  float64 `json:"network_wait_s"`

	Peers      int              `json:"peers"`
	Merges     int64            `json:"merges"`
	PeerMerges map[string]int64 `json:"peer_merges"`
	LastMerge  *MergeInfo       `json:"last_merge,omitempty"`
	CatchUps   int64            `json:"catch_ups"`
	// CatchUpClaimsCut: catch-ups whose model was credited more than
	// --catch-up less progress than it claimed.
	CatchUpClaimsCut int64 `json:"catch_up_claims_cut"`
	// ExchangesStarted counts the exchanges and pulls this node started;
	// ExchangeFailedShare is the share of the latest 100 that failed.
	ExchangesStarted    int64   `json:"exchanges_started"`
	ExchangeFailedShare float64 `json:"exchange_failed_share"`
	ExchangesFailed     int64   `json:"exchanges_failed"`
	ExchangeTimeouts    int64   `json:"exchange_timeouts"`
	InboundDropped      int64   `json:"inbound_dropped"`
	// ModelAgeS: seconds since the model last took in a peer's model (what
	// peers measure its staleness by); ExchangeS: the average exchange this
	// node started; ExchangeAnswerS: the average time their answer took
	// (about a round trip); AvgWaitS: the latest wait between them;
	// WireDType: the precision the node sends its models in now.
	ModelAgeS       float64         `json:"model_age_s"`
	ExchangeS       float64         `json:"exchange_s"`
	ExchangeAnswerS float64         `json:"exchange_answer_s"`
	AvgWaitS        float64         `json:"avg_wait_s"`
	WireDType       string          `json:"wire_dtype"`
	Gossip          GossipStats     `json:"gossip"`
	Trust           TrustStats      `json:"trust"`
	LastCheckpoint  *CheckpointInfo `json:"last_checkpoint,omitempty"`
	// Reachability: whether peers can dial this node and how it reaches
	// them (absent offline).
	Reachability *Reachability `json:"reachability,omitempty"`
	Run          RunStatus     `json:"run"`
	Alone        *Alone        `json:"alone,omitempty"` // absent while the node has a partner
	// Trainer: an external trainer's connection (absent for the built-in one).
	Trainer *TrainerStatus `json:"trainer,omitempty"`
}

// MergeInfo is the latest merge of a status.
type MergeInfo struct {
	Partner   string    `json:"partner"`
	Staleness float64   `json:"staleness"` // as --staleness-lag measures it: percent of our progress or our steps
	Weight    float64   `json:"weight"`    // of the remote model
	Inbound   bool      `json:"inbound"`   // the peer started the exchange
	Time      time.Time `json:"time"`
}

// GossipStats are a status's protocol counters.
type GossipStats struct {
	// Rejected counts refused inputs by reason name (gossip.Reason's
	// String); every reason is present.
	Rejected        map[string]uint64 `json:"rejected"`
	BytesSent       uint64            `json:"bytes_sent"`
	BytesReceived   uint64            `json:"bytes_received"`
	PullsServed     uint64            `json:"pulls_served"`
	ExchangesServed uint64            `json:"exchanges_served"`
	PullsDone       uint64            `json:"pulls_done"`
	ExchangesDone   uint64            `json:"exchanges_done"`
	RefusedByPeer   uint64            `json:"refused_by_peer"`
	AnnouncesSent   uint64            `json:"announces_sent"`
	AnnouncesSeen   uint64            `json:"announces_seen"`
	// PubsubBytesSent and PubsubBytesReceived count the pubsub RPC bytes
	// (announcements as the mesh forwards them, and gossipsub's control
	// messages) this node queued to and read from peers.
	PubsubBytesSent     uint64 `json:"pubsub_bytes_sent"`
	PubsubBytesReceived uint64 `json:"pubsub_bytes_received"`
}

// TrustStats are what a status says of the defences against hostile peers.
type TrustStats struct {
	Enabled        bool             `json:"enabled"`
	Refused        map[string]int64 `json:"refused"` // outlier, loss_jump, non_finite, ignored
	Clipped        int64            `json:"clipped"`
	Validated      int64            `json:"validated"`
	Holdout        bool             `json:"holdout"` // false: loss checks skipped (external trainer without a holdout)
	Radius         float64          `json:"radius"`
	MedianDistance float64          `json:"median_distance"`
	Banned         int              `json:"banned"`
	GateRefused    uint64           `json:"gate_refused"`
}

// Reachability is what a status says of the node's reachability: what
// AutoNAT found, the relayed addresses it advertises, the hole punches,
// the relay it serves for others, and how it reaches the peers it could
// merge with.
type Reachability struct {
	Status           string        `json:"status"` // public, private or unknown
	Forced           bool          `json:"forced"` // set by the profile or --dht-server, not probed
	ReachableAddrs   []string      `json:"reachable_addrs"`
	UnreachableAddrs []string      `json:"unreachable_addrs"`
	RelayAddrs       []string      `json:"relay_addrs"`
	HolePunches      int64         `json:"hole_punches"`
	HolePunchesOK    int64         `json:"hole_punches_ok"`
	RelayService     *RelayService `json:"relay_service,omitempty"` // absent: this node relays for no one
	PeersDirect      int           `json:"peers_direct"`
	PeersRelayed     int           `json:"peers_relayed"`
	PeersNotConn     int           `json:"peers_not_connected"`
	RelayedSkips     int64         `json:"relayed_skips"`
	Dials            int64         `json:"dials"`
	DialsFailed      int64         `json:"dials_failed"`
	BackingOff       int           `json:"backing_off"`
}

// RelayService is what the circuit relay a node serves carries.
type RelayService struct {
	Reservations      int64   `json:"reservations"`
	ReservationsTotal int64   `json:"reservations_total"`
	Circuits          int64   `json:"circuits"`
	CircuitsTotal     int64   `json:"circuits_total"`
	BytesRelayed      int64   `json:"bytes_relayed"`
	Denied            int64   `json:"denied"`
	LimitS            float64 `json:"limit_s"`     // each relayed connection is cut after this long
	LimitBytes        int64   `json:"limit_bytes"` // or after this many bytes in either direction
}

// TrainerStatus is an external trainer's connection to the node.
type TrainerStatus struct {
	Kind      string           `json:"kind"`
	Connected bool             `json:"connected"`
	LastPushS float64          `json:"last_push_s"` // -1: no push yet
	Rejected  map[string]int64 `json:"rejected"`    // refused trainer requests by code
}

// RunStatus is where the swarm's run stands on the run clock.
type RunStatus struct {
	Epochs       float64 `json:"epochs"`        // 0: no end
	TotalSamples float64 `json:"total_samples"` // 0: no end
	Samples      float64 `json:"samples"`       // the run clock
	OwnSamples   float64 `json:"own_samples"`
	Fraction     float64 `json:"fraction"`
	LR           float64 `json:"lr"`
	Schedule     string  `json:"schedule"`
	LRScale      float64 `json:"lr_scale"` // the --lr-scaling factor in lr
	ClockClamped int64   `json:"clock_clamped"`
}

// Alone says why a node trains without a partner.
type Alone struct {
	Reason  string  `json:"reason"` // node.AloneReason values
	Message string  `json:"message"`
	SinceS  float64 `json:"since_s"`
}

// PeerStatus is one entry of GET /v1/peers.
type PeerStatus struct {
	PeerID        string   `json:"peer_id"`
	Addrs         []string `json:"addrs"`
	Mode          string   `json:"mode"` // empty for a peer listed for its reputation only
	Step          int64    `json:"step"`
	Progress      float64  `json:"progress"`
	Loss          float64  `json:"loss"`
	Accuracy      float64  `json:"accuracy"`
	SamplesPerSec float64  `json:"samples_per_s"`
	Staleness     float64  `json:"staleness"` // as --staleness-lag measures it: percent of our progress or our steps
	// Reputation is nil with --trust=false.
	Reputation      *float64         `json:"reputation"`
	ReputationState string           `json:"reputation_state,omitempty"` // ok, ignored, disconnected, banned
	BannedUntil     *time.Time       `json:"banned_until,omitempty"`
	Verdicts        map[string]int64 `json:"verdicts,omitempty"`
	RTTS            float64          `json:"rtt_s"`
	LastSeenS       float64          `json:"last_seen_s"`
	Connected       bool             `json:"connected"`
	Merges          int64            `json:"merges"`
	// Path: direct, relayed (no models go over it) or none.
	Path          string `json:"path"`
	RemoteAddr    string `json:"remote_addr,omitempty"`
	HolePunched   bool   `json:"hole_punched"` // a hole punch made the direct connection
	HolePunches   int64  `json:"hole_punches"`
	HolePunchesOK int64  `json:"hole_punches_ok"`
	LastHolePunch string `json:"last_hole_punch,omitempty"` // succeeded or failed
	// Exchanges this node started with the peer, by path: direct or
	// hole_punched.
	Exchanges map[string]int64 `json:"exchanges"`
}

// Point is one entry of GET /v1/history.
type Point struct {
	Time          time.Time `json:"time"`
	Step          int64     `json:"step"`
	Progress      float64   `json:"progress"`
	Loss          float64   `json:"loss"`
	Accuracy      float64   `json:"accuracy"`
	SamplesPerSec float64   `json:"samples_per_s"`
}

// CheckpointInfo is one entry of GET /v1/checkpoints, and a status's
// last_checkpoint.
type CheckpointInfo struct {
	ID          uint64    `json:"id"`
	Step        int64     `json:"step"`
	Progress    float64   `json:"progress"`
	Fingerprint string    `json:"fingerprint"` // 64 hex digits
	Created     time.Time `json:"created"`
	SizeBytes   int64     `json:"size_bytes"`
	ParamsLen   int       `json:"params_len"`
	OptLen      int       `json:"opt_len"`
	Final       bool      `json:"final"`
	// Corrupt: the manifest failed its checksum; only ID is filled in.
	Corrupt bool `json:"corrupt"`
}

// Bodies of the list endpoints. A top-level object (not a bare array)
// leaves room for fields later without breaking clients.
type (
	// PeersResponse is the body of GET /v1/peers.
	PeersResponse struct {
		Peers []PeerStatus `json:"peers"`
	}
	// HistoryResponse is the body of GET /v1/history.
	HistoryResponse struct {
		Points []Point `json:"points"`
	}
	// CheckpointsResponse is the body of GET /v1/checkpoints.
	CheckpointsResponse struct {
		Checkpoints []CheckpointInfo `json:"checkpoints"`
	}
)

// HealthResponse is the body of GET /healthz and GET /readyz.
type HealthResponse struct {
	Status string `json:"status"` // "ok" or "unavailable"
	// Reason says why the node is not ready; empty when it is.
	Reason string `json:"reason,omitempty"`
}

// ErrorResponse is the body of every 4xx and 5xx answer.
type ErrorResponse struct {
	Status int    `json:"status"`
	Error  string `json:"error"`
}
