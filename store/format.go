package store

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
)

// FormatVersion is the data format this binary writes. Bump it whenever a
// key or record changes meaning, and register a migration from the
// previous version.
const FormatVersion uint32 = 1

// currentFormat is FormatVersion except in tests that play a newer binary.
var currentFormat = FormatVersion

// migration upgrades a store from format `from` to from+1. run must be
// idempotent: the new version is recorded only after run returns, so a
// crash in between runs it again on the next open.
type migration struct {
	desc string
	run  func(db kv) error
}

// migrations is keyed by the version a migration starts from. There is no
// released format older than 1 yet; tests register one to exercise the
// path.
var migrations = map[uint32]migration{}

// The format key holds the version as decimal text: unlike every other
// value it must stay readable by every future binary, so it gets the
// simplest encoding there is.
func readFormat(db kv) (v uint32, found bool, err error) {
	err = db.view(func(r kvReader) error {
		return r.get(keyFormat, func(b []byte) error {
			n, err := strconv.ParseUint(string(b), 10, 32)
			if err != nil || n == 0 {
				return fmt.Errorf("%w: format version %q", ErrCorrupt, b)
			}
			v, found = uint32(n), true
			return nil
		})
	})
	if errors.Is(err, errNoKey) {
		err = nil
	}
	return v, found, err
}

func writeFormat(db kv, v uint32) error {
	err := db.update(func(w kvWriter) error {
		return w.set(keyFormat, []byte(strconv.FormatUint(uint64(v), 10)))
	})
	if err != nil {
		return err
	}
	return db.sync()
}

func isEmpty(db kv) (bool, error) {
	empty := true
	err := db.view(func(r kvReader) error {
		return r.scan(nil, false, false, func(_, _ []byte) (bool, error) {
			empty = false
			return false, nil
		})
	})
	return empty, err
}

// checkFormat runs before anything else reads or writes the store: it
// stamps a new store, refuses one from a newer binary and migrates an older
// one step by step.
func checkFormat(db kv, dir string, log *slog.Logger) error {
	v, found, err := readFormat(db)
	if err != nil {
		return fmt.Errorf("store: data dir %s: %w", dir, err)
	}
	if !found {
		empty, err := isEmpty(db)
		if err != nil {
			return fmt.Errorf("store: data dir %s: %w", dir, err)
		}
		if !empty {
			return fmt.Errorf("%w: data dir %s holds data but no format version", ErrCorrupt, dir)
		}
		if err := writeFormat(db, currentFormat); err != nil {
			return fmt.Errorf("store: data dir %s: write format version: %w", dir, err)
		}
		return nil
	}
	if v > currentFormat {
		return &FormatError{Dir: dir, Found: v, Supported: currentFormat}
	}
	for ; v < currentFormat; v++ {
		m, ok := migrations[v]
		if !ok {
			return fmt.Errorf("store: data dir %s: no migration from format version %d to %d", dir, v, v+1)
		}
		log.Info("migrating data dir", "dir", dir, "from", v, "to", v+1, "what", m.desc)
		if err := m.run(db); err != nil {
			return fmt.Errorf("store: data dir %s: migrate format %d to %d (%s): %w", dir, v, v+1, m.desc, err)
		}
		if err := writeFormat(db, v+1); err != nil {
			return fmt.Errorf("store: data dir %s: record format version %d: %w", dir, v+1, err)
		}
	}
	return nil
}
