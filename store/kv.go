package store

import (
	"bytes"
	"errors"
	"slices"
	"sort"
	"sync"
)

// kv is the ordered key-value storage the store's logic runs on. Badger and
// a map implement it, so both Store implementations share every rule about
// checkpoints, retention, history and formats, and the conformance suite
// tests that logic twice.
type kv interface {
	// view runs fn on a consistent snapshot.
	view(fn func(r kvReader) error) error
	// update applies fn's writes atomically. It is for small writes.
	update(fn func(w kvWriter) error) error
	// newBatch starts bulk writes that are not atomic as a whole. Values
	// handed to set must not change until flush or cancel returns.
	newBatch() kvBatch
	// dropPrefixes deletes every key with one of the prefixes, and makes
	// the space they held reclaimable.
	dropPrefixes(prefixes ...[]byte) error
	// sync makes everything written so far survive power loss.
	sync() error
	close() error
}

var errNoKey = errors.New("key not found")

type kvReader interface {
	// get calls fn with the value of key, or returns errNoKey. v is valid
	// only inside fn.
	get(key []byte, fn func(v []byte) error) error
	// scan calls fn for each key with the prefix, in key order or reversed.
	// k and v are valid only inside fn; v is nil unless values is set. fn
	// returns false to stop.
	scan(prefix []byte, reverse, values bool, fn func(k, v []byte) (bool, error)) error
}

type kvWriter interface {
	kvReader
	set(k, v []byte) error
	del(k []byte) error
}

type kvBatch interface {
	set(k, v []byte) error
	del(k []byte) error
	// flush commits everything set so far and waits for it.
	flush() error
	// cancel abandons the batch; committed parts stay. Safe after flush.
	cancel()
}

// memKV keeps everything in a map. Values are copied in, because the
// store hands set zero-copy views of callers' vectors.
type memKV struct {
	mu     sync.RWMutex
	m      map[string][]byte
	closed bool
}

func newMemKV() *memKV { return &memKV{m: make(map[string][]byte)} }

func (s *memKV) view(fn func(r kvReader) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return fn(memTxn{s})
}

func (s *memKV) update(fn func(w kvWriter) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	// Stage writes so a failing fn leaves nothing behind, like a discarded
	// badger transaction.
	tx := &memUpdate{memTxn: memTxn{s}, sets: map[string][]byte{}, dels: map[string]bool{}}
	if err := fn(tx); err != nil {
		return err
	}
	for k := range tx.dels {
		delete(s.m, k)
	}
	for k, v := range tx.sets {
		s.m[k] = v
	}
	return nil
}

func (s *memKV) newBatch() kvBatch { return &memBatch{s} }

func (s *memKV) dropPrefixes(prefixes ...[]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for k := range s.m {
		for _, p := range prefixes {
			if bytes.HasPrefix([]byte(k), p) {
				delete(s.m, k)
				break
			}
		}
	}
	return nil
}
func (s *memKV) sync() error { return nil }

func (s *memKV) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.m = nil
	return nil
}

type memTxn struct{ s *memKV }

func (t memTxn) get(key []byte, fn func(v []byte) error) error {
	v, ok := t.s.m[string(key)]
	if !ok {
		return errNoKey
	}
	return fn(v)
}

func (t memTxn) scan(prefix []byte, reverse, values bool, fn func(k, v []byte) (bool, error)) error {
	var keys []string
	for k := range t.s.m {
		if bytes.HasPrefix([]byte(k), prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if reverse {
		slices.Reverse(keys)
	}
	for _, k := range keys {
		var v []byte
		if values {
			v = t.s.m[k]
		}
		more, err := fn([]byte(k), v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// memUpdate reads through its own staged writes, as a badger update
// transaction does.
type memUpdate struct {
	memTxn
	sets map[string][]byte
	dels map[string]bool
}

func (u *memUpdate) get(key []byte, fn func(v []byte) error) error {
	if v, ok := u.sets[string(key)]; ok {
		return fn(v)
	}
	if u.dels[string(key)] {
		return errNoKey
	}
	return u.memTxn.get(key, fn)
}

func (u *memUpdate) set(k, v []byte) error {
	delete(u.dels, string(k))
	u.sets[string(k)] = slices.Clone(v)
	return nil
}

func (u *memUpdate) del(k []byte) error {
	delete(u.sets, string(k))
	u.dels[string(k)] = true
	return nil
}

type memBatch struct{ s *memKV }

func (b *memBatch) set(k, v []byte) error {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.s.closed {
		return ErrClosed
	}
	b.s.m[string(k)] = slices.Clone(v)
	return nil
}

func (b *memBatch) del(k []byte) error {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.s.closed {
		return ErrClosed
	}
	delete(b.s.m, string(k))
	return nil
}

func (b *memBatch) flush() error { return nil }
func (b *memBatch) cancel()      {}
