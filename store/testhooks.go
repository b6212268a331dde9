//go:build testhooks

package store

// The crash points of the testhooks build (make build-testhooks), passed to
// Options.CrashHook while a checkpoint is saved. A release binary has
// neither: nothing in its environment can make it kill itself mid-save.
const (
	CrashMidChunks    = pointMidChunks    // about half the data chunks committed
	CrashBeforeCommit = pointBeforeCommit // all chunks committed, manifest not
	CrashAfterCommit  = pointAfterCommit  // manifest committed and synced, old ones not pruned
)

// testHooks are the Options fields of the testhooks build.
type testHooks struct {
	// CrashHook, when set, is called with one of the Crash* points while a
	// checkpoint is saved, so tests can kill the process there.
	CrashHook func(point string)
}

func (s *kvStore) hook(point string) {
	if s.opts.CrashHook != nil {
		s.opts.CrashHook(point)
	}
}
