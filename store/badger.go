package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// dbDir is the database's directory inside the data dir; the lock file
// sits next to it, outside, so it is taken before the database is touched.
const dbDir = "db"

// Open opens (creating if needed) the store in data dir dir. Another
// process, or another Open in this one, that holds dir makes it fail with a
// *LockedError before the database is touched; a dir written by a newer
// binary fails with a *FormatError. Open removes the data of checkpoints
// whose save was interrupted.
func Open(dir string, opts Options) (Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if dir == "" {
		return nil, fmt.Errorf("%w: empty data dir", ErrInvalid)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create data dir: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	if err := removeEmptyLogFiles(filepath.Join(dir, dbDir), opts.Logger); err != nil {
		return nil, errors.Join(err, unlock())
	}
	bo := badgerOptions(filepath.Join(dir, dbDir), opts.Logger)
	if opts.valueLogFileSize > 0 {
		bo = bo.WithValueLogFileSize(opts.valueLogFileSize)
	}
	db, err := badger.Open(bo)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("store: open database in %s: %w", dir, err), unlock())
	}
	bk := &badgerKV{db: db}
	s, err := newKVStore(bk, opts, dir)
	if err != nil {
		return nil, errors.Join(err, db.Close(), unlock())
	}
	gc := startGC(bk, opts.GCInterval, opts.Logger)
	s.gc = gc
	s.shutdown = func() error {
		gc.stop()
		return errors.Join(db.Close(), unlock())
	}
	return s, nil
}

// removeEmptyLogFiles deletes the zero-byte value-log (.vlog) and memtable
// write-ahead log (.mem) files in the database dir db. Badger creates
// either file by opening it and then sizing it, and deletes a value-log
// file by truncating it to zero and then unlinking it, so a kill between
// the two steps leaves an empty file, which badger then refuses to open
// ("Create a new file", badger issue 2207). An empty file holds no entries
// (not even the header every written file starts with), so removing it
// loses nothing.
func removeEmptyLogFiles(db string, log *slog.Logger) error {
	for _, ext := range []string{".vlog", ".mem"} {
		paths, err := filepath.Glob(filepath.Join(db, "*"+ext))
		if err != nil {
			return fmt.Errorf("store: list %s files: %w", ext, err)
		}
		for _, p := range paths {
			fi, err := os.Stat(p)
			if err != nil {
				return fmt.Errorf("store: %w", err)
			}
			if !fi.Mode().IsRegular() || fi.Size() != 0 {
				continue
			}
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("store: remove empty log file: %w", err)
			}
			log.Warn("removed an empty log file left by an interrupted create or delete", "file", filepath.Base(p))
		}
	}
	return nil
}

// badgerOptions are sized for several nodes on one machine: small
// memtables, no block cache, no compression (float32 data does not
// compress), two compactors. Checkpoint chunks (>= ValueThreshold) go to
// the value log; small records stay in the LSM tree. Writes are not synced
// one by one: the store syncs after each checkpoint commit and identity
// write, so the rest survives a process crash but may lose the last
// seconds to a power cut.
func badgerOptions(path string, log *slog.Logger) badger.Options {
	return badger.DefaultOptions(path).
		WithLogger(badgerLogger{log.With("db", "badger")}).
		WithLoggingLevel(badger.WARNING).
		WithMetricsEnabled(false).
		WithDetectConflicts(false).
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithMemTableSize(4 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(1 << 20).
		WithBaseLevelSize(4 << 20).
		WithValueThreshold(64 << 10).
		WithValueLogFileSize(64 << 20).
		WithNumCompactors(2).
		WithNumGoroutines(2)
}

// badgerLogger forwards badger's warnings and errors to slog; its info and
// debug lines (one per compaction, flush and GC pass) are dropped.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}

// gcLoop runs value-log GC on a timer. Deleted checkpoint chunks live in
// the value log; without GC their space is never returned.
type gcLoop struct {
	done chan struct{}
	quit chan struct{}
	// kicks asks for a pass now, after checkpoints were deleted, so disk
	// use does not wait for the timer.
	kicks chan struct{}
	// passes counts GC calls that rewrote a file, for tests.
	passes atomic.Int64
	// ticks counts rounds started by the timer or a kick, for tests.
	ticks atomic.Int64
}

func startGC(db *badgerKV, every time.Duration, log *slog.Logger) *gcLoop {
	g := &gcLoop{done: make(chan struct{}), quit: make(chan struct{}), kicks: make(chan struct{}, 1)}
	go func() {
		defer close(g.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-g.quit:
				return
			case <-t.C:
			case <-g.kicks:
			}
			g.ticks.Add(1)
			// Each successful call rewrites one file; keep going until
			// badger says nothing is worth rewriting.
			for {
				select {
				case <-g.quit:
					return
				default:
				}
				err := db.runGC()
				if err == nil {
					g.passes.Add(1)
					continue
				}
				if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
					log.Warn("value log GC failed", "err", err)
				}
				break
			}
		}
	}()
	return g
}

// kick requests a pass without waiting for it.
func (g *gcLoop) kick() {
	select {
	case g.kicks <- struct{}{}:
	default:
	}
}

// stop is idempotent only through Close, which calls it once.
func (g *gcLoop) stop() {
	close(g.quit)
	<-g.done
}

type badgerKV struct {
	db *badger.DB
	// gate keeps our writes out while DropPrefix or value-log GC runs:
	// DropPrefix would fail them with ErrBlockedWrites, and GC's rewrite
	// reads memtable state that concurrent writes change without a lock
	// (a data race in badger v4.9.6). Writers hold gate for reading and
	// wait; those two hold it exclusively.
	gate sync.RWMutex
}

func (b *badgerKV) view(fn func(r kvReader) error) error {
	return b.db.View(func(txn *badger.Txn) error { return fn(badgerTxn{txn}) })
}

func (b *badgerKV) update(fn func(w kvWriter) error) error {
	b.gate.RLock()
	defer b.gate.RUnlock()
	return b.db.Update(func(txn *badger.Txn) error { return fn(badgerTxn{txn}) })
}

func (b *badgerKV) newBatch() kvBatch {
	b.gate.RLock()
	return &badgerBatch{wb: b.db.NewWriteBatch(), release: sync.OnceFunc(b.gate.RUnlock)}
}

// dropPrefixes uses DropPrefix rather than deleting keys one by one:
// deleted values in the value log become reclaimable only once a
// compaction has seen both them and their tombstones, and with checkpoint
// data in the value log the LSM tree stays so small that such compactions
// would hardly ever run. DropPrefix flushes and compacts at once and
// credits the dropped values to the value-log GC.
func (b *badgerKV) dropPrefixes(prefixes ...[]byte) error {
	b.gate.Lock()
	defer b.gate.Unlock()
	return b.db.DropPrefix(prefixes...)
}

// runGC is one value-log GC call.
func (b *badgerKV) runGC() error {
	b.gate.Lock()
	defer b.gate.Unlock()
	return b.db.RunValueLogGC(0.5)
}

func (b *badgerKV) sync() error  { return b.db.Sync() }
func (b *badgerKV) close() error { return b.db.Close() }

type badgerTxn struct{ txn *badger.Txn }

func (t badgerTxn) get(key []byte, fn func(v []byte) error) error {
	item, err := t.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return errNoKey
	}
	if err != nil {
		return err
	}
	// The value may point into a memory-mapped file: fn must not keep it.
	return item.Value(fn)
}

// reverseSeekPad follows a prefix to seek past every key with that prefix
// when iterating backwards; our keys never hold 0xff runs this long.
var reverseSeekPad = bytes.Repeat([]byte{0xff}, 32)

func (t badgerTxn) scan(prefix []byte, reverse, values bool, fn func(k, v []byte) (bool, error)) error {
	o := badger.DefaultIteratorOptions
	o.Prefix = prefix
	o.Reverse = reverse
	// Prefetching would read ahead up to 100 values; for chunk keys that is
	// 100 MiB nobody asked for. Small values are read on demand below.
	o.PrefetchValues = false
	it := t.txn.NewIterator(o)
	defer it.Close()
	if reverse {
		it.Seek(append(bytes.Clone(prefix), reverseSeekPad...))
	} else {
		it.Seek(prefix)
	}
	for ; it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		k := item.Key()
		var more bool
		var err error
		if values {
			err = item.Value(func(v []byte) error {
				var ferr error
				more, ferr = fn(k, v)
				return ferr
			})
		} else {
			more, err = fn(k, nil)
		}
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (t badgerTxn) set(k, v []byte) error { return t.txn.Set(k, v) }
func (t badgerTxn) del(k []byte) error    { return t.txn.Delete(k) }

// badgerBatch holds the gate for reading from creation to flush or cancel.
type badgerBatch struct {
	wb      *badger.WriteBatch
	release func()
}

func (b *badgerBatch) set(k, v []byte) error { return b.wb.Set(k, v) }
func (b *badgerBatch) del(k []byte) error    { return b.wb.Delete(k) }

func (b *badgerBatch) flush() error {
	defer b.release()
	return b.wb.Flush()
}

func (b *badgerBatch) cancel() {
	defer b.release()
	b.wb.Cancel()
}
