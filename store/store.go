package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// Store is a node's durable state: checkpoints, its identity key, the peer
// table and a short metric history. Both implementations (Open and
// NewMemory) are safe for concurrent use; Save calls are serialised.
type Store interface {
	// Save writes c as a new checkpoint and returns its metadata. c.ID is
	// ignored: IDs are assigned by the store and only ever increase. If
	// c.Created is zero it is set to the current time. c.Params and
	// c.OptState are read during the call and must not change until it
	// returns. After the new checkpoint is committed, old ones are pruned as
	// described in the package documentation.
	Save(ctx context.Context, c *Checkpoint) (Info, error)
	// List returns every checkpoint's metadata, newest first, without
	// reading parameter data. A checkpoint whose manifest fails its checksum
	// is listed with Corrupt set and only its ID filled in.
	List() ([]Info, error)
	// Load reads checkpoint id and verifies its checksum and sizes. A
	// failed check returns an error wrapping ErrCorrupt; an unknown id one
	// wrapping ErrNotFound.
	Load(ctx context.Context, id uint64) (*Checkpoint, error)
	// LoadLatest returns the newest checkpoint that verifies and whose
	// fingerprint is fp, and the newer checkpoints it passed over, each with
	// its reason. With no such checkpoint the error wraps ErrNotFound.
	// A returned checkpoint may have Final set: the caller decides whether
	// a finished run may be resumed.
	LoadLatest(ctx context.Context, fp params.Fingerprint) (*Checkpoint, []Skipped, error)

	// Identity returns the node's private key as stored by SetIdentity, or
	// an error wrapping ErrNotFound.
	Identity() ([]byte, error)
	// SetIdentity stores the node's private key (opaque, marshalled by the
	// caller) durably before returning.
	SetIdentity(key []byte) error

	// PutPeer inserts or replaces the record for p.ID.
	PutPeer(p Peer) error
	// Peer returns the record for id or an error wrapping ErrNotFound.
	Peer(id string) (Peer, error)
	// Peers returns every record, ordered by ID.
	Peers() ([]Peer, error)
	// DeletePeer removes the record for id; removing an absent one is not
	// an error.
	DeletePeer(id string) error

	// AppendHistory adds points after the existing ones, dropping the oldest
	// beyond Options.HistoryLimit.
	AppendHistory(points ...Point) error
	// History returns the last n points, oldest first (all of them if n <= 0).
	History(n int) ([]Point, error)

	// Close stops background work and releases the data dir. It is safe to
	// call more than once; later calls return the first call's result.
	// Every other method returns ErrClosed afterwards.
	Close() error
}

// Checkpoint is one saved model state.
type Checkpoint struct {
	// ID is assigned by Save; IDs only increase.
	ID          uint64
	Fingerprint params.Fingerprint
	Step        int64
	Progress    params.Progress
	Params      []float32
	// OptState is the optimizer's state (momentum buffers), possibly empty.
	OptState []float32
	Created  time.Time
	// Meta holds whatever the caller needs to resume: model spec, dataset,
	// seed, shard and so on. The store does not interpret it.
	Meta map[string]string
	// Final marks a run that finished; resuming it needs an explicit choice.
	Final bool
}

// Snapshot returns the checkpoint as a params.Snapshot sharing its Params.
func (c *Checkpoint) Snapshot() params.Snapshot {
	return params.Snapshot{Fingerprint: c.Fingerprint, Step: c.Step, Progress: c.Progress, Params: c.Params}
}

// Info is a checkpoint's metadata, as listed without reading its data.
type Info struct {
	ID          uint64             `json:"id"`
	Step        int64              `json:"step"`
	Progress    params.Progress    `json:"progress"`
	Fingerprint params.Fingerprint `json:"fingerprint"`
	Created     time.Time          `json:"created"`
	// Size is the parameter and optimizer data in bytes.
	Size      int64 `json:"size_bytes"`
	ParamsLen int   `json:"params_len"`
	OptLen    int   `json:"opt_len"`
	Final     bool  `json:"final"`
	// Corrupt is set when the manifest itself fails its checksum; the other
	// fields are then zero except ID. Data corruption is found only by Load.
	Corrupt bool `json:"corrupt"`
}

// Skipped says why LoadLatest passed over a newer checkpoint.
type Skipped struct {
	ID uint64
	// Err wraps ErrCorrupt or ErrFingerprint.
	Err error
}

func (s Skipped) String() string { return fmt.Sprintf("checkpoint %d: %v", s.ID, s.Err) }

// Peer is what a node remembers about another peer between runs.
type Peer struct {
	ID          string    `json:"id"`
	Addrs       []string  `json:"addrs"`
	LastSeen    time.Time `json:"last_seen"`
	Score       float64   `json:"score"`
	BannedUntil time.Time `json:"banned_until"`
	Notes       string    `json:"notes"`
}

// Point is one sample of the metric history shown on the dashboard.
type Point struct {
	Time          time.Time       `json:"time"`
	Step          int64           `json:"step"`
	Progress      params.Progress `json:"progress"`
	Loss          float64         `json:"loss"`
	Accuracy      float64         `json:"accuracy"`
	SamplesPerSec float64         `json:"samples_per_s"`
}

// Errors callers branch on with errors.Is.
var (
	ErrNotFound    = errors.New("store: not found")
	ErrCorrupt     = errors.New("store: corrupt data")
	ErrFingerprint = errors.New("store: fingerprint mismatch")
	ErrInvalid     = errors.New("store: invalid input")
	ErrClosed      = errors.New("store: closed")
	ErrLocked      = errors.New("store: data dir in use")
	ErrNewerFormat = errors.New("store: data dir format is newer than this binary")
	ErrBadOptions  = errors.New("store: bad options")
)

// LockedError is returned by Open when another process holds the data dir.
// It matches ErrLocked.
type LockedError struct {
	Dir string
	// PID is the holder's process ID as it wrote it, 0 if unreadable.
	PID int
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("store: data dir %s is in use by another meshtrain process (pid %d)", e.Dir, e.PID)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// FormatError is returned by Open for a data dir written by a newer binary.
// It matches ErrNewerFormat.
type FormatError struct {
	Dir       string
	Found     uint32
	Supported uint32
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("store: data dir %s has format version %d but this binary supports up to %d; "+
		"run a newer meshtrain or use another --data-dir", e.Dir, e.Found, e.Supported)
}

// Is makes errors.Is(err, ErrNewerFormat) true.
func (e *FormatError) Is(target error) bool { return target == ErrNewerFormat }

// Options configures a store. Zero fields take the defaults of DefaultOptions.
type Options struct {
	// Keep is how many verified checkpoints are retained (default 3). See
	// the package documentation for how corrupt ones are counted.
	Keep int
	// HistoryLimit is how many metric points are retained (default 10000).
	HistoryLimit int
	// ChunkSize is the size in bytes of one stored piece of checkpoint data
	// (default 1 MiB; a multiple of 4 between 4 KiB and 8 MiB). Changing it
	// between runs is fine: each checkpoint records its own.
	ChunkSize int
	// GCInterval is how often the value log is garbage collected
	// (default 10 minutes); a pass also runs after checkpoints are pruned.
	GCInterval time.Duration
	// Logger receives the store's and the database's warnings and errors
	// (default slog.Default()).
	Logger *slog.Logger
	// testHooks is empty in a release build. The testhooks build (make
	// build-testhooks) adds CrashHook, which crash-recovery tests use to
	// kill the process mid-save; see testhooks.go.
	//lint:ignore U1000 empty in a release build; the testhooks build fills it
	testHooks

	// valueLogFileSize overrides the value-log file size in this package's
	// tests, so that reclaiming space can be shown with little data.
	valueLogFileSize int64
}

// Defaults and limits.
const (
	DefaultKeep         = 3
	DefaultHistoryLimit = 10000
	DefaultChunkSize    = 1 << 20
	DefaultGCInterval   = 10 * time.Minute
	MinChunkSize        = 4 << 10
	MaxChunkSize        = 8 << 20
	// MaxMetaBytes bounds the total size of a checkpoint's Meta keys and values.
	MaxMetaBytes = 64 << 10
)

// DefaultOptions returns the options used for zero fields.
func DefaultOptions() Options {
	return Options{
		Keep:         DefaultKeep,
		HistoryLimit: DefaultHistoryLimit,
		ChunkSize:    DefaultChunkSize,
		GCInterval:   DefaultGCInterval,
	}
}

// Validate reports every bad field at once, wrapping ErrBadOptions.
func (o Options) Validate() error {
	var errs []error
	if o.Keep < 0 {
		errs = append(errs, fmt.Errorf("option Keep %d: must be >= 1 (0 for the default)", o.Keep))
	}
	if o.HistoryLimit < 0 {
		errs = append(errs, fmt.Errorf("option HistoryLimit %d: must be >= 1 (0 for the default)", o.HistoryLimit))
	}
	if o.ChunkSize != 0 && (o.ChunkSize < MinChunkSize || o.ChunkSize > MaxChunkSize || o.ChunkSize%4 != 0) {
		errs = append(errs, fmt.Errorf("option ChunkSize %d: must be a multiple of 4 in [%d, %d] (0 for the default)",
			o.ChunkSize, MinChunkSize, MaxChunkSize))
	}
	if o.GCInterval < 0 {
		errs = append(errs, fmt.Errorf("option GCInterval %v: must be positive (0 for the default)", o.GCInterval))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrBadOptions, errors.Join(errs...))
	}
	return nil
}

// withDefaults fills zero fields.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Keep == 0 {
		o.Keep = d.Keep
	}
	if o.HistoryLimit == 0 {
		o.HistoryLimit = d.HistoryLimit
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = d.ChunkSize
	}
	if o.GCInterval == 0 {
		o.GCInterval = d.GCInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Logger = o.Logger.With("component", "store")
	return o
}
