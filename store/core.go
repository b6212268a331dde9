package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/meshtrain/meshtrain/params"
)

// kvStore implements Store on any kv.
//
// Locking: life is held for reading by every method for its whole call and
// for writing by Close, so Close waits for calls in flight. ckptMu
// serialises Save (and the pruning it does) and owns nextID. dropMu is
// described on the field. statusMu owns status, histMu owns the history
// counters. Lock order: life, ckptMu, dropMu, histMu, statusMu.
type kvStore struct {
	kv   kv
	opts Options
	log  *slog.Logger

	life     sync.RWMutex
	closed   bool
	closeErr error
	// shutdown releases what the implementation holds beyond kv (background
	// loops, the dir lock); it runs once, after kv is closed.
	shutdown func() error

	ckptMu sync.Mutex
	nextID uint64

	// dropMu keeps the deletion of checkpoint data out of reads in flight:
	// Badger's DropPrefix does not respect read snapshots, so a Load racing
	// with pruning could see chunks vanish and call a deleted checkpoint
	// corrupt. Reads hold it shared, deleteChunks exclusively.
	dropMu sync.RWMutex

	statusMu sync.Mutex
	// status caches verification results of this process: true verified,
	// false corrupt. Unknown IDs are verified when retention needs them.
	status map[uint64]bool

	histMu    sync.Mutex
	histFirst uint64 // oldest sequence number that may exist
	histNext  uint64 // sequence number of the next point

	// gc is the Badger store's value-log GC loop, nil in memory.
	gc *gcLoop

	// orphansRemoved counts chunk keys deleted at open, for tests.
	orphansRemoved int
}

// NewMemory returns a Store that keeps everything in memory, for tests and
// for runs that must leave nothing on disk. It follows the same rules as
// the Badger store, minus locking and durability.
func NewMemory() Store {
	s, err := newMemory(Options{})
	if err != nil {
		// Unreachable: a fresh map cannot fail the open checks.
		panic(err)
	}
	return s
}

func newMemory(opts Options) (*kvStore, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return newKVStore(newMemKV(), opts.withDefaults(), "memory")
}

// newKVStore checks the format, migrates, removes orphan chunks and loads
// the counters. opts must already have defaults applied.
func newKVStore(db kv, opts Options, dir string) (*kvStore, error) {
	s := &kvStore{kv: db, opts: opts, log: opts.Logger, status: make(map[uint64]bool)}
	if err := checkFormat(db, dir, s.log); err != nil {
		return nil, err
	}
	if err := s.removeOrphans(); err != nil {
		return nil, err
	}
	if err := s.loadHistoryCounters(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *kvStore) enter() error {
	s.life.RLock()
	if s.closed {
		s.life.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *kvStore) leave() { s.life.RUnlock() }

func (s *kvStore) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return s.closeErr
	}
	s.closed = true
	var errs []error
	if s.shutdown != nil {
		errs = append(errs, s.shutdown())
	} else {
		errs = append(errs, s.kv.close())
	}
	s.closeErr = errors.Join(errs...)
	return s.closeErr
}

// removeOrphans deletes data chunks that no manifest names: what a crash
// while saving leaves behind. It also sets nextID past every ID seen, so an
// ID is never reused even for orphans that fail to delete.
func (s *kvStore) removeOrphans() error {
	have := map[uint64]bool{}
	var maxID, seq uint64
	// orphans holds one chunk prefix per unfinished checkpoint.
	var orphans [][]byte
	orphanKeys := 0
	err := s.kv.view(func(r kvReader) error {
		err := r.get(keyCkptSeq, func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: checkpoint sequence is %d bytes", ErrCorrupt, len(v))
			}
			seq = binary.BigEndian.Uint64(v)
			return nil
		})
		if err != nil && !errors.Is(err, errNoKey) {
			return err
		}
		err = r.scan(prefixMan, false, false, func(k, _ []byte) (bool, error) {
			if id, ok := idFromManKey(k); ok {
				have[id] = true
				maxID = max(maxID, id)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		return r.scan(prefixChunk, false, false, func(k, _ []byte) (bool, error) {
			id, ok := idFromChunkKey(k)
			if ok {
				maxID = max(maxID, id)
			}
			switch {
			case !ok:
				// Not a key this store writes: drop just this key.
				orphans = append(orphans, slices.Clone(k))
				orphanKeys++
			case !have[id]:
				if len(orphans) == 0 || !bytes.Equal(orphans[len(orphans)-1], chunkPrefix(id)) {
					orphans = append(orphans, chunkPrefix(id))
				}
				orphanKeys++
			}
			return true, nil
		})
	})
	if err != nil {
		return fmt.Errorf("store: scan checkpoints: %w", err)
	}
	s.nextID = max(seq, maxID+1, 1)
	if len(orphans) == 0 {
		return nil
	}
	if err := s.kv.dropPrefixes(orphans...); err != nil {
		return fmt.Errorf("store: remove data of %d unfinished checkpoints: %w", len(orphans), err)
	}
	s.orphansRemoved = orphanKeys
	s.log.Warn("removed data of unfinished checkpoints", "checkpoints", len(orphans), "chunks", orphanKeys)
	return nil
}

// The moments of a save at which s.hook is called. Only the testhooks
// build acts on them (store.Crash* there; testhooks.go); in a release
// build hook does nothing (testhooks_release.go).
const (
	pointMidChunks    = "checkpoint-mid-chunks"    // about half the data chunks committed
	pointBeforeCommit = "checkpoint-before-commit" // all chunks committed, manifest not
	pointAfterCommit  = "checkpoint-after-commit"  // manifest committed and synced, old ones not pruned
)

func validateCheckpoint(c *Checkpoint) error {
	var errs []error
	if c == nil {
		return fmt.Errorf("%w: nil checkpoint", ErrInvalid)
	}
	if len(c.Params) == 0 {
		errs = append(errs, errors.New("no parameters"))
	}
	if uint64(len(c.Params)) > maxVectorLen || uint64(len(c.OptState)) > maxVectorLen {
		errs = append(errs, errors.New("vector too long"))
	}
	if c.Step < 0 {
		errs = append(errs, fmt.Errorf("step %d is negative", c.Step))
	}
	if !c.Progress.Valid() {
		errs = append(errs, fmt.Errorf("progress %v is not a finite non-negative number", c.Progress))
	}
	metaBytes := 0
	for k, v := range c.Meta {
		metaBytes += len(k) + len(v)
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
			errs = append(errs, fmt.Errorf("meta key %q: keys must be non-empty and keys and values UTF-8", k))
		}
	}
	if metaBytes > MaxMetaBytes {
		errs = append(errs, fmt.Errorf("meta holds %d bytes, limit %d", metaBytes, MaxMetaBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: checkpoint: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// littleEndian is true where a []float32 is already laid out as the stored
// little-endian bytes, so chunks can be views of the caller's vector
// instead of copies (a 100 MB model would otherwise double its memory).
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// floatBytes returns v as little-endian bytes, sharing memory when it can.
func floatBytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*4)
	}
	b := make([]byte, len(v)*4)
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// putFloats decodes little-endian bytes into dst starting at element off.
func putFloats(dst []float32, off int, b []byte) {
	if littleEndian {
		copy(floatBytes(dst)[off*4:], b)
		return
	}
	for i := 0; i+4 <= len(b); i += 4 {
		dst[off+i/4] = math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
	}
}

// appendFloats appends the little-endian floats in b to dst, doubling its
// capacity when it must grow, but never past total elements: a vector read
// in one chunk is allocated once, at its size.
func appendFloats(dst []float32, b []byte, total int) []float32 {
	n := len(dst)
	if need := n + len(b)/4; need > cap(dst) {
		grown := make([]float32, n, min(max(2*cap(dst), need), total))
		copy(grown, dst)
		dst = grown
	}
	dst = dst[:n+len(b)/4]
	putFloats(dst, n, b)
	return dst
}

func numChunks(elems uint64, chunkSize uint32) uint32 {
	return uint32((elems*4 + uint64(chunkSize) - 1) / uint64(chunkSize))
}

func (s *kvStore) Save(ctx context.Context, c *Checkpoint) (Info, error) {
	if err := s.enter(); err != nil {
		return Info{}, err
	}
	defer s.leave()
	if err := validateCheckpoint(c); err != nil {
		return Info{}, err
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()

	id := s.nextID
	s.nextID++
	m := &manifest{
		id:          id,
		step:        c.Step,
		progress:    c.Progress,
		fingerprint: c.Fingerprint,
		created:     c.Created,
		final:       c.Final,
		chunkSize:   uint32(s.opts.ChunkSize),
		paramsLen:   uint64(len(c.Params)),
		optLen:      uint64(len(c.OptState)),
		meta:        c.Meta,
	}
	if m.created.IsZero() {
		m.created = time.Now()
	}
	// Round-trip the time through its stored form so the Info returned
	// now equals what List returns later.
	m.created = time.Unix(0, m.created.UnixNano()).UTC()

	sum, err := s.writeChunks(ctx, m, c)
	if err != nil {
		s.dropUnfinished(id)
		return Info{}, fmt.Errorf("store: save checkpoint %d: %w", id, err)
	}
	m.sum = sum
	s.hook(pointBeforeCommit)

	err = s.kv.update(func(w kvWriter) error {
		if err := w.set(manKey(id), m.encode()); err != nil {
			return err
		}
		return w.set(keyCkptSeq, binary.BigEndian.AppendUint64(nil, id+1))
	})
	if err != nil {
		s.dropUnfinished(id)
		return Info{}, fmt.Errorf("store: commit checkpoint %d: %w", id, err)
	}
	info := m.info()
	if err := s.kv.sync(); err != nil {
		// Committed and readable, but a power loss may still take it.
		return info, fmt.Errorf("store: sync checkpoint %d: %w", id, err)
	}
	s.hook(pointAfterCommit)

	// Read the new checkpoint back before pruning, so that retention counts
	// it as good only if it really is: otherwise a broken write path could
	// push every good checkpoint out.
	_, verr := s.read(ctx, id, false)
	if ctx.Err() != nil {
		// Committed and synced: the caller is shutting down, and checking
		// and pruning can wait for the next save.
		return info, nil
	}
	// Prune even when the new one failed: it does not count as good, so no
	// good checkpoint is lost, and old corrupt ones still get bounded.
	if err := s.prune(ctx); err != nil {
		s.log.Warn("pruning old checkpoints failed; will retry after the next save", "err", err)
	}
	if verr != nil {
		return info, fmt.Errorf("store: checkpoint %d failed verification after write: %w", id, verr)
	}
	return info, nil
}

// writeChunks stores c's vectors as chunks of m.chunkSize bytes and returns
// the SHA-256 of all their bytes, parameters first.
func (s *kvStore) writeChunks(ctx context.Context, m *manifest, c *Checkpoint) ([32]byte, error) {
	var sum [32]byte
	cs := int(m.chunkSize)
	total := numChunks(m.paramsLen, m.chunkSize) + numChunks(m.optLen, m.chunkSize)
	mid := max(1, total/2)
	h := sha256.New()
	b := s.kv.newBatch()
	defer func() { b.cancel() }()
	var written uint32
	for _, sec := range []struct {
		tag byte
		v   []float32
	}{{sectionParam, c.Params}, {sectionOpt, c.OptState}} {
		raw := floatBytes(sec.v)
		for idx, off := uint32(0), 0; off < len(raw); idx, off = idx+1, off+cs {
			if err := ctx.Err(); err != nil {
				return sum, err
			}
			piece := raw[off:min(off+cs, len(raw))]
			h.Write(piece)
			if err := b.set(chunkKey(m.id, sec.tag, idx), piece); err != nil {
				return sum, err
			}
			written++
			if written == mid {
				// Commit the first half on its own so a crash here really
				// leaves partial data behind, the case recovery must handle.
				if err := b.flush(); err != nil {
					return sum, err
				}
				s.hook(pointMidChunks)
				b = s.kv.newBatch()
			}
		}
	}
	if err := b.flush(); err != nil {
		return sum, err
	}
	h.Sum(sum[:0])
	return sum, nil
}

// dropUnfinished removes the chunks of a checkpoint whose save failed; if
// that fails too, the next open removes them.
func (s *kvStore) dropUnfinished(id uint64) {
	if err := s.deleteChunks(id); err != nil {
		s.log.Warn("could not remove data of a failed checkpoint", "id", id, "err", err)
	}
}

func (s *kvStore) deleteChunks(id uint64) error {
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	return s.kv.dropPrefixes(chunkPrefix(id))
}

// deleteCheckpoint removes the manifest first: once it is gone the
// checkpoint no longer exists and its chunks are orphans, which the next
// open removes if this process dies before it does.
func (s *kvStore) deleteCheckpoint(id uint64) error {
	if err := s.kv.update(func(w kvWriter) error { return w.del(manKey(id)) }); err != nil {
		return err
	}
	err := s.deleteChunks(id)
	// After deleteChunks no read of id is in flight to record a verdict.
	s.statusMu.Lock()
	delete(s.status, id)
	s.statusMu.Unlock()
	return err
}

// entry is one listed manifest; err is set (wrapping ErrCorrupt) when it
// does not decode, and m is nil then.
type entry struct {
	id  uint64
	m   *manifest
	err error
}

func (s *kvStore) entries() ([]entry, error) {
	var out []entry
	err := s.kv.view(func(r kvReader) error {
		var err error
		out, err = entriesIn(r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list checkpoints: %w", err)
	}
	return out, nil
}

// entriesIn lists manifests newest first.
func entriesIn(r kvReader) ([]entry, error) {
	var out []entry
	err := r.scan(prefixMan, true, true, func(k, v []byte) (bool, error) {
		id, ok := idFromManKey(k)
		if !ok {
			return true, nil
		}
		m, err := decodeManifest(v)
		if err == nil && m.id != id {
			err = fmt.Errorf("%w: manifest under key %d names checkpoint %d", ErrCorrupt, id, m.id)
			m = nil
		}
		out = append(out, entry{id: id, m: m, err: err})
		return true, nil
	})
	return out, err
}

func (s *kvStore) List() ([]Info, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	es, err := s.entries()
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(es))
	for _, e := range es {
		if e.err != nil {
			out = append(out, Info{ID: e.id, Corrupt: true})
			continue
		}
		out = append(out, e.m.info())
	}
	return out, nil
}

func (s *kvStore) Load(ctx context.Context, id uint64) (*Checkpoint, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	return s.read(ctx, id, true)
}

// read verifies checkpoint id inside one snapshot, so pruning running at
// the same time cannot pull chunks away mid-read. With decode false it
// only verifies, allocating no vectors.
func (s *kvStore) read(ctx context.Context, id uint64, decode bool) (*Checkpoint, error) {
	s.dropMu.RLock()
	defer s.dropMu.RUnlock()
	var c *Checkpoint
	err := s.kv.view(func(r kvReader) error {
		var err error
		c, err = s.readIn(ctx, r, id, decode)
		return err
	})
	return c, err
}

// readIn reads checkpoint id from r and records the verdict in status.
func (s *kvStore) readIn(ctx context.Context, r kvReader, id uint64, decode bool) (*Checkpoint, error) {
	c, err := readCheckpoint(ctx, r, id, decode)
	switch {
	case err == nil:
		s.setStatus(id, true)
	case errors.Is(err, ErrCorrupt):
		s.setStatus(id, false)
	}
	if err != nil {
		return nil, fmt.Errorf("store: load checkpoint %d: %w", id, err)
	}
	return c, nil
}

func readCheckpoint(ctx context.Context, r kvReader, id uint64, decode bool) (*Checkpoint, error) {
	var m *manifest
	err := r.get(manKey(id), func(v []byte) error {
		var err error
		m, err = decodeManifest(v)
		return err
	})
	switch {
	case errors.Is(err, errNoKey):
		return nil, ErrNotFound
	case err != nil:
		return nil, err
	case m.id != id:
		return nil, fmt.Errorf("%w: manifest names checkpoint %d", ErrCorrupt, m.id)
	}
	h := sha256.New()
	var vecs [2][]float32
	for i, sec := range []struct {
		tag byte
		n   uint64
	}{{sectionParam, m.paramsLen}, {sectionOpt, m.optLen}} {
		if decode && sec.n > uint64(math.MaxInt/4) {
			return nil, fmt.Errorf("store: checkpoint %d holds %d floats, too many for this platform", id, sec.n)
		}
		// The vector grows as its chunks arrive rather than being sized
		// from the manifest up front: a manifest claiming more data than
		// the store holds is corrupt, and must not cost the memory it
		// claims before that shows.
		size := sec.n * 4
		for idx := range numChunks(sec.n, m.chunkSize) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			off := uint64(idx) * uint64(m.chunkSize)
			want := min(uint64(m.chunkSize), size-off)
			err := r.get(chunkKey(id, sec.tag, idx), func(v []byte) error {
				if uint64(len(v)) != want {
					return fmt.Errorf("%w: chunk %c%d holds %d bytes, want %d", ErrCorrupt, sec.tag, idx, len(v), want)
				}
				h.Write(v)
				if decode {
					vecs[i] = appendFloats(vecs[i], v, int(sec.n))
				}
				return nil
			})
			if errors.Is(err, errNoKey) {
				return nil, fmt.Errorf("%w: chunk %c%d is missing", ErrCorrupt, sec.tag, idx)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	var sum [32]byte
	if h.Sum(sum[:0]); sum != m.sum {
		return nil, fmt.Errorf("%w: data checksum mismatch", ErrCorrupt)
	}
	if !decode {
		return nil, nil
	}
	return &Checkpoint{
		ID:          id,
		Fingerprint: m.fingerprint,
		Step:        m.step,
		Progress:    m.progress,
		Params:      vecs[0],
		OptState:    vecs[1],
		Created:     m.created,
		Meta:        m.meta,
		Final:       m.final,
	}, nil
}

func (s *kvStore) setStatus(id uint64, good bool) {
	s.statusMu.Lock()
	s.status[id] = good
	s.statusMu.Unlock()
}

// LoadLatest lists and reads in one snapshot, so a save pruning old
// checkpoints meanwhile cannot make it miss the one it should return.
func (s *kvStore) LoadLatest(ctx context.Context, fp params.Fingerprint) (*Checkpoint, []Skipped, error) {
	if err := s.enter(); err != nil {
		return nil, nil, err
	}
	defer s.leave()
	var (
		found   *Checkpoint
		skipped []Skipped
	)
	s.dropMu.RLock()
	defer s.dropMu.RUnlock()
	err := s.kv.view(func(r kvReader) error {
		es, err := entriesIn(r)
		if err != nil {
			return fmt.Errorf("store: list checkpoints: %w", err)
		}
		for _, e := range es {
			if e.err != nil {
				skipped = append(skipped, Skipped{ID: e.id, Err: e.err})
				continue
			}
			if e.m.fingerprint != fp {
				skipped = append(skipped, Skipped{ID: e.id, Err: fmt.Errorf("%w: checkpoint has %s, want %s",
					ErrFingerprint, e.m.fingerprint.Short(), fp.Short())})
				continue
			}
			c, err := s.readIn(ctx, r, e.id, true)
			if err == nil {
				found = c
				return nil
			}
			if !errors.Is(err, ErrCorrupt) {
				return err
			}
			skipped = append(skipped, Skipped{ID: e.id, Err: err})
		}
		return nil
	})
	if err != nil {
		return nil, skipped, err
	}
	if found == nil {
		return nil, skipped, fmt.Errorf("%w: no usable checkpoint with fingerprint %s", ErrNotFound, fp.Short())
	}
	return found, skipped, nil
}

// prune applies retention, newest first: the first Keep checkpoints that
// verify are kept and do count; checkpoints that fail verification are
// kept for inspection but do not count, at most Keep of them, so a run of
// corrupt checkpoints can never push out the last good one and cannot
// fill the disk either. Everything older than the Keep-th good checkpoint
// is deleted. Checkpoints not verified by this process are verified here
// before they are counted.
func (s *kvStore) prune(ctx context.Context) error {
	es, err := s.entries()
	if err != nil {
		return err
	}
	good, bad := 0, 0
	var drop []uint64
	for _, e := range es {
		if good >= s.opts.Keep {
			drop = append(drop, e.id)
			continue
		}
		ok, err := s.verified(ctx, e)
		if err != nil {
			return err
		}
		switch {
		case ok:
			good++
		case bad < s.opts.Keep:
			bad++
		default:
			drop = append(drop, e.id)
		}
	}
	for _, id := range drop {
		if err := s.deleteCheckpoint(id); err != nil {
			return fmt.Errorf("delete checkpoint %d: %w", id, err)
		}
	}
	if len(drop) > 0 && s.gc != nil {
		s.gc.kick()
	}
	return nil
}

// verified reports whether e is known or now found to verify. err is set
// only when that could not be decided.
func (s *kvStore) verified(ctx context.Context, e entry) (bool, error) {
	if e.err != nil {
		return false, nil
	}
	s.statusMu.Lock()
	good, known := s.status[e.id]
	s.statusMu.Unlock()
	if known {
		return good, nil
	}
	_, err := s.read(ctx, e.id, false)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrCorrupt):
		return false, nil
	default:
		return false, err
	}
}

func (s *kvStore) Identity() ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	var key []byte
	err := s.kv.view(func(r kvReader) error {
		return r.get(keyIdentity, func(v []byte) error {
			var err error
			key, err = decodeIdentity(v)
			return err
		})
	})
	if errors.Is(err, errNoKey) {
		return nil, fmt.Errorf("%w: no identity key", ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: read identity: %w", err)
	}
	return key, nil
}

func (s *kvStore) SetIdentity(key []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if len(key) == 0 {
		return fmt.Errorf("%w: empty identity key", ErrInvalid)
	}
	v := encodeIdentity(key)
	if err := s.kv.update(func(w kvWriter) error { return w.set(keyIdentity, v) }); err != nil {
		return fmt.Errorf("store: write identity: %w", err)
	}
	// Losing the key to a power cut would make the node a different peer.
	if err := s.kv.sync(); err != nil {
		return fmt.Errorf("store: sync identity: %w", err)
	}
	return nil
}

// maxPeerIDLen is far above any libp2p peer ID string.
const maxPeerIDLen = 1024

func checkPeerID(id string) error {
	if id == "" || len(id) > maxPeerIDLen || !utf8.ValidString(id) {
		return fmt.Errorf("%w: peer ID %q: must be 1 to %d bytes of UTF-8", ErrInvalid, id, maxPeerIDLen)
	}
	return nil
}

func (s *kvStore) PutPeer(p Peer) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if err := checkPeerID(p.ID); err != nil {
		return err
	}
	v := encodePeer(p)
	if err := s.kv.update(func(w kvWriter) error { return w.set(peerKey(p.ID), v) }); err != nil {
		return fmt.Errorf("store: put peer %s: %w", p.ID, err)
	}
	return nil
}

func (s *kvStore) Peer(id string) (Peer, error) {
	if err := s.enter(); err != nil {
		return Peer{}, err
	}
	defer s.leave()
	if err := checkPeerID(id); err != nil {
		return Peer{}, err
	}
	var p Peer
	err := s.kv.view(func(r kvReader) error {
		return r.get(peerKey(id), func(v []byte) error {
			var err error
			p, err = decodePeer(v)
			return err
		})
	})
	if errors.Is(err, errNoKey) {
		return Peer{}, fmt.Errorf("%w: peer %s", ErrNotFound, id)
	}
	if err != nil {
		return Peer{}, fmt.Errorf("store: get peer %s: %w", id, err)
	}
	return p, nil
}

func (s *kvStore) Peers() ([]Peer, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	var out []Peer
	bad := 0
	err := s.kv.view(func(r kvReader) error {
		return r.scan(prefixPeer, false, true, func(k, v []byte) (bool, error) {
			p, err := decodePeer(v)
			if err != nil || p.ID != string(k[len(prefixPeer):]) {
				bad++
				return true, nil
			}
			out = append(out, p)
			return true, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: list peers: %w", err)
	}
	if bad > 0 {
		// A peer table is a cache of what the network will say again:
		// skipping a damaged record beats refusing the whole list.
		s.log.Warn("skipped corrupt peer records", "count", bad)
	}
	return out, nil
}

func (s *kvStore) DeletePeer(id string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if err := checkPeerID(id); err != nil {
		return err
	}
	if err := s.kv.update(func(w kvWriter) error { return w.del(peerKey(id)) }); err != nil {
		return fmt.Errorf("store: delete peer %s: %w", id, err)
	}
	return nil
}

func (s *kvStore) loadHistoryCounters() error {
	first, last, any := uint64(0), uint64(0), false
	err := s.kv.view(func(r kvReader) error {
		err := r.scan(prefixPoint, false, false, func(k, _ []byte) (bool, error) {
			seq, ok := seqFromPointKey(k)
			if ok {
				first, any = seq, true
			}
			return !ok, nil
		})
		if err != nil || !any {
			return err
		}
		return r.scan(prefixPoint, true, false, func(k, _ []byte) (bool, error) {
			seq, ok := seqFromPointKey(k)
			if ok {
				last = seq
			}
			return !ok, nil
		})
	})
	if err != nil {
		return fmt.Errorf("store: scan history: %w", err)
	}
	if any {
		s.histFirst, s.histNext = first, last+1
	}
	return nil
}

func (s *kvStore) AppendHistory(points ...Point) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if len(points) == 0 {
		return nil
	}
	s.histMu.Lock()
	defer s.histMu.Unlock()
	limit := uint64(s.opts.HistoryLimit)
	if uint64(len(points)) > limit {
		// Points that would be trimmed at once are not written at all.
		s.histNext += uint64(len(points)) - limit
		points = points[uint64(len(points))-limit:]
	}
	b := s.kv.newBatch()
	defer b.cancel()
	for _, p := range points {
		if err := b.set(pointKey(s.histNext), encodePoint(p)); err != nil {
			return fmt.Errorf("store: append history: %w", err)
		}
		s.histNext++
	}
	first := s.histFirst
	if s.histNext-first > limit {
		first = s.histNext - limit
	}
	for seq := s.histFirst; seq < first; seq++ {
		if err := b.del(pointKey(seq)); err != nil {
			return fmt.Errorf("store: trim history: %w", err)
		}
	}
	if err := b.flush(); err != nil {
		return fmt.Errorf("store: append history: %w", err)
	}
	s.histFirst = first
	return nil
}

func (s *kvStore) History(n int) ([]Point, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	var out []Point
	bad := 0
	err := s.kv.view(func(r kvReader) error {
		return r.scan(prefixPoint, true, true, func(k, v []byte) (bool, error) {
			p, err := decodePoint(v)
			if err != nil {
				bad++
				return true, nil
			}
			out = append(out, p)
			return n <= 0 || len(out) < n, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: read history: %w", err)
	}
	if bad > 0 {
		s.log.Warn("skipped corrupt history points", "count", bad)
	}
	slices.Reverse(out)
	return out, nil
}
