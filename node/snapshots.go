package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// Snapshot files are how a benchmark harness sees a run without slowing it
// down: the node writes its model and counters every SnapshotConfig.Every,
// and the harness scores them on the test set after the run, outside the
// nodes' busy time. Each file is a safetensors model (readable by `meshtrain
// eval`) whose metadata carries the keys below besides the checkpoint ones
// (MetaModel, MetaDataset, MetaNetwork, MetaFingerprint, MetaSeed, MetaStep,
// MetaProgress, MetaRunSamples). Counters are cumulative since the trainer
// was built.
const (
	// SnapshotGlob matches the snapshot files in a snapshot dir. A mesh
	// node names its files snap-<peer ID>-<seq>.safetensors, so the nodes of
	// a swarm can share one dir; an offline node snap-<seq>.safetensors.
	SnapshotGlob = "snap-*.safetensors"

	MetaSnapshotSeq  = "snapshot_seq"    // 0, 1, 2, ... in write order
	MetaPeerID       = "peer_id"         // the writer ("" offline)
	MetaShard        = "shard"           // the writer's --shard
	MetaTimeUnixNano = "time_unix_ns"    // wall clock when taken
	MetaSamples      = "samples"         // training samples processed
	MetaBusyNanos    = "busy_ns"         // compute plus emulated slowness, the slow momentum included
	MetaNetWaitNanos = "network_wait_ns" // trainer loop waiting on the network
	MetaBytesSent    = "bytes_sent"      // parameter-exchange bytes sent
	MetaMerges       = "merges"          // merges applied
	MetaSlowdown     = "slowdown"        // the node's --slowdown
	MetaBaseStepNano = "base_step_ns"    // the base step time it multiplies
	MetaFinal        = "final"           // "true" on the snapshot taken as the run stops
	MetaLR           = "lr"              // the latest step's learning rate, --lr-scaling's factor in it
)

// ErrSnapshots is wrapped by snapshot setup errors.
var ErrSnapshots = errors.New("node: snapshots")

// SnapshotConfig asks a node for snapshot files and a common start.
type SnapshotConfig struct {
	// Dir receives the snapshot files; "" writes none.
	Dir string
	// Every is the wall time between snapshots (> 0 when Dir is set). One
	// is also taken as training starts and one as it stops.
	Every time.Duration
	// StartFile, when set, holds the trainer loop until the file exists,
	// so a harness can start a whole swarm at one instant after every node
	// is up and has found the others. The host serves and announces while
	// it waits.
	StartFile string
	// NoEval turns off the node's own test-set evaluations while it
	// trains (a harness scores the snapshots instead): on one core they
	// would take time from the trainer. --until-accuracy then never fires.
	NoEval bool
}

// SetSnapshots configures snapshot files and the start file; call it before
// Run. The snapshot dir is created if needed.
func (n *Node) SetSnapshots(c SnapshotConfig) error {
	if c.Dir != "" {
		if c.Every <= 0 {
			return fmt.Errorf("%w: interval %v must be > 0", ErrSnapshots, c.Every)
		}
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return fmt.Errorf("%w: %w", ErrSnapshots, err)
		}
	}
	n.snaps = c
	return nil
}

// awaitStart holds the caller until the start file exists or ctx ends.
func (n *Node) awaitStart(ctx context.Context) {
	if n.snaps.StartFile != "" {
		waitForFile(ctx, n.snaps.StartFile)
	}
}

// snapshotter writes a snapshot now, every Every, and a final one when ctx
// ends (after the trainer loop's last step). It only reads the trainer
// through Snapshot and Stats, so it never holds up a step for longer than
// the copy.
func (n *Node) snapshotter(ctx context.Context) {
	if n.snaps.Dir == "" {
		return
	}
	info := n.trainer.Info()
	meta := map[string]string{
		MetaModel: info.Model, MetaDataset: info.Dataset, MetaNetwork: info.Network,
		MetaFingerprint: n.fp.String(), MetaSeed: strconv.FormatUint(info.Seed, 10),
		MetaSlowdown: strconv.FormatFloat(info.Slowdown, 'g', -1, 64),
		MetaPeerID:   n.id.String(), MetaShard: info.Shard,
	}
	var seq int
	var buf []float32
	var failures int
	write := func(final bool) {
		// The model and the counters are read under separate locks; retry
		// until no step landed in between, so they describe one moment.
		var snap params.Snapshot
		var stats TrainerStats
		for range 5 {
			stats = n.trainer.Stats()
			snap = n.reported(buf)
			buf = snap.Params
			if snap.Step == stats.Steps {
				break
			}
		}
		err := n.writeSnapshot(seq, snap, stats, meta, final)
		if err != nil {
			// Logged once: a full disk would otherwise log every interval.
			if failures++; failures == 1 {
				n.log.Warn("snapshot failed; later failures are not logged", "dir", n.snaps.Dir, "err", err)
			}
			return
		}
		seq++
	}
	write(false)
	t := time.NewTicker(n.snaps.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			write(true)
			return
		case <-t.C:
			write(false)
		}
	}
}

// writeSnapshot writes one snapshot file atomically (temp file, rename), so
// a reader never sees half a file.
func (n *Node) writeSnapshot(seq int, snap params.Snapshot, s TrainerStats, base map[string]string, final bool) error {
	meta := make(map[string]string, len(base)+14)
	for k, v := range base {
		meta[k] = v
	}
	itoa := func(v int64) string { return strconv.FormatInt(v, 10) }
	meta[MetaSnapshotSeq] = strconv.Itoa(seq)
	meta[MetaTimeUnixNano] = itoa(time.Now().UnixNano())
	meta[MetaStep] = itoa(snap.Step)
	meta[MetaProgress] = strconv.FormatFloat(float64(snap.Progress), 'g', -1, 64)
	meta[MetaSamples] = itoa(s.Samples)
	meta[MetaBusyNanos] = itoa(int64(n.busy(s)))
	meta[MetaBaseStepNano] = itoa(int64(s.BaseStep))
	meta[MetaNetWaitNanos] = itoa(n.networkWait.Load())
	meta[MetaBytesSent] = strconv.FormatUint(n.counters.Snapshot().BytesSent, 10)
	meta[MetaMerges] = itoa(n.Merges())
	meta[MetaFinal] = strconv.FormatBool(final)
	meta[MetaRunSamples] = strconv.FormatFloat(n.runPosition(time.Now(), float64(s.Samples)), 'g', -1, 64)
	lr, _ := n.rep.lr()
	meta[MetaLR] = strconv.FormatFloat(lr, 'g', -1, 64)
	name := fmt.Sprintf("snap-%06d.safetensors", seq)
	if n.id != "" {
		name = fmt.Sprintf("snap-%s-%06d.safetensors", n.id, seq)
	}
	path := filepath.Join(n.snaps.Dir, name)
	tmp, err := os.CreateTemp(n.snaps.Dir, ".snap-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := params.WriteSafetensors(tmp, n.trainer.Layout(), snap.Params, meta); err != nil {
		tmp.Close()
		return fmt.Errorf("%w: write %s: %w", ErrSnapshots, path, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
