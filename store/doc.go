// Package store owns a node's durable state: model checkpoints, the node's
// identity key, the peer table and a short metric history. Store is the
// interface; Open gives the Badger implementation on a data dir and
// NewMemory an in-memory one with the same rules, for tests.
//
//	s, err := store.Open(dataDir, store.Options{}) // fails with ErrLocked if another process has dataDir
//	if err != nil { ... }
//	defer s.Close()
//	info, err := s.Save(ctx, &store.Checkpoint{Fingerprint: fp, Step: step, Progress: p,
//		Params: w, OptState: momentum, Meta: map[string]string{"model": spec}})
//	c, skipped, err := s.LoadLatest(ctx, fp) // newest that verifies and matches fp
//	for _, sk := range skipped {
//		log.Warn("skipped checkpoint", "id", sk.ID, "err", sk.Err)
//	}
//
// # Crash safety
//
// Volunteer machines crash, get preempted and reboot. A checkpoint's data is
// written first, as fixed-size chunks (Options.ChunkSize, 1 MiB by default,
// so a 100 MB model fits Badger's transaction and value limits); a small
// manifest is committed last and the database is synced. The manifest is
// what makes a checkpoint exist, so a crash at any point leaves either the
// previous state plus orphan chunks, which the next Open deletes, or the new
// checkpoint complete. Deleting goes the other way round: manifest first,
// then chunks. Checkpoint IDs increase and are never reused, also across
// crashes.
//
// Every manifest carries a SHA-256 of the checkpoint's data, and every
// record (manifest, peer, point, identity) a CRC-32C of itself, all
// independent of Badger's own checks. Load verifies both and the vector
// sizes, and reports a failure as ErrCorrupt. LoadLatest returns the newest
// checkpoint that verifies and matches a fingerprint, with every newer one
// it passed over and why. Corrupt checkpoints are never deleted on load:
// they stay for inspection.
//
// # Retention
//
// After each save the new checkpoint is read back and verified, then
// retention runs over all checkpoints, newest first: the first Keep that
// verify are kept and count; ones that fail verification are kept for
// inspection but do not count, at most Keep of them (older corrupt ones are
// deleted); everything older than the Keep-th verified checkpoint is
// deleted. So a run of corrupt checkpoints, for example from a failing disk,
// can never push out the last good one, and still cannot fill the disk.
// Verification results are cached per process; checkpoints written by an
// earlier run are verified when retention first needs them.
//
// # Key space
//
// Integers in keys are big-endian, so key order is numeric order.
//
//	meta/format                  format version, decimal text ("1")
//	ckpt/seq                     next checkpoint ID, uint64
//	ckpt/m/<id:8>                checkpoint manifest record
//	ckpt/d/<id:8><sec:1><idx:4>  data chunk; sec 'p' parameters, 'o' optimizer
//	                             state; raw little-endian float32 bytes
//	node/identity                identity key record (opaque key bytes)
//	peer/<peer ID>               peer record
//	hist/<seq:8>                 metric history point record
//
// A record is a kind byte ('M', 'I', 'P', 'H'), a version byte, the fields
// (big-endian integers, length-prefixed strings, times as Unix nanoseconds
// with 0 for the zero time) and a CRC-32C (Castagnoli) of everything before
// it.
//
// # Formats
//
// The format version (FormatVersion) is checked first on Open. A data dir
// written by a newer binary is refused with a *FormatError naming both
// versions; an older one is upgraded by registered migrations, one version
// at a time, each recorded as soon as it completes.
//
// # Processes and resources
//
// Open takes an exclusive flock on <dir>/meshtrain.lock and writes its pid
// there before Badger is opened (in <dir>/db), so a second process gets a
// *LockedError naming the holder instead of a corrupt store. The kernel
// releases the lock however the process dies.
//
// Badger is configured for several nodes per machine: 4 MiB memtables, no
// block cache, no compression, two compactors. Measured on linux/amd64: an
// idle store holds about 6 MiB of Go heap (Badger's defaults reserve 86 MiB)
// and 10-16 MiB RSS; after saving 100 MB checkpoints the anonymous memory
// stays near 10 MiB, while up to a few hundred MiB of the memory-mapped
// value log show up as file-backed RSS (page cache the kernel can reclaim).
// Badger's info and debug output is dropped; warnings and errors go to
// Options.Logger.
//
// Checkpoint chunks live in Badger's value log, whose space comes back only
// through value-log GC, and GC only rewrites files that compactions have
// credited with deleted values. Chunks are therefore deleted with
// DropPrefix, which compacts and credits at once, and a GC pass runs right
// after each pruning as well as every Options.GCInterval, until Close. With
// Keep 3 and 100 MB checkpoints the data dir stays near 400 MB.
//
// Writes are synced after each checkpoint and identity write; peer and
// history writes survive a process crash but may lose the last seconds to a
// power cut.
package store
