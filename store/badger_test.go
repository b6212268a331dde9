package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Child process modes: the test binary re-executes itself with childEnv
// set to run one of these instead of the tests.
const (
	childEnv   = "MESHTRAIN_STORE_TEST_CHILD"
	childDir   = "MESHTRAIN_STORE_TEST_DIR"
	childPoint = "MESHTRAIN_STORE_TEST_POINT"

	childExitLocked = 3
	childExitNoKill = 4
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode, os.Getenv(childDir)))
	}
	os.Exit(m.Run())
}

func runChild(mode, dir string) int {
	switch mode {
	case "open":
		// Try to open and report the error text on stdout.
		s, err := Open(dir, Options{})
		if err != nil {
			fmt.Print(err)
			if errors.Is(err, ErrLocked) {
				return childExitLocked
			}
			return 1
		}
		s.Close()
		return 0
	case "hold":
		// Hold the dir until stdin closes.
		s, err := Open(dir, Options{})
		if err != nil {
			fmt.Print(err)
			return 1
		}
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		s.Close()
		return 0
	}
	if run, ok := childModes[mode]; ok {
		return run(dir)
	}
	return 1
}

// childModes are the child modes defined in other files (the crash tests
// of the testhooks build add "crash").
var childModes = map[string]func(dir string) int{}

func child(t *testing.T, mode, dir string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, childEnv+"="+mode, childDir+"="+dir)...)
	return cmd
}

func TestLockInProcess(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	var le *LockedError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) {
		t.Fatalf("second Open: got %v, want a *LockedError", err)
	}
	want := fmt.Sprintf("store: data dir %s is in use by another meshtrain process (pid %d)", dir, os.Getpid())
	if le.PID != os.Getpid() || err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s.Close()
}

func TestLockOtherProcess(t *testing.T) {
	dir := t.TempDir()

	// We hold the dir: a second process is refused and names our pid.
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := child(t, "open", dir).Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != childExitLocked {
		t.Fatalf("child open: %v, output %q; want exit %d", err, out, childExitLocked)
	}
	if want := fmt.Sprintf("is in use by another meshtrain process (pid %d)", os.Getpid()); !strings.Contains(string(out), want) {
		t.Errorf("child said %q, want it to contain %q", out, want)
	}
	s.Close()

	// Another process holds it: we are refused and told its pid.
	cmd := child(t, "hold", dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child hold: %q, %v", line, err)
	}
	_, err = Open(dir, Options{})
	var le *LockedError
	if !errors.As(err, &le) || le.PID != cmd.Process.Pid {
		t.Errorf("got %v, want a *LockedError naming pid %d", err, cmd.Process.Pid)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child hold: %v", err)
	}
	// The holder has gone: the dir is free again.
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("open after the holder exited: %v", err)
	}
	s.Close()
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	opts := Options{ChunkSize: MinChunkSize, Keep: 3, HistoryLimit: 4}
	s := openBadgerDir(t, dir, opts)
	c1, c2 := ckpt(fpA, 1, 3000, 100), ckpt(fpB, 2, 1000, 0)
	i1, i2 := mustSave(t, s, c1), mustSave(t, s, c2)
	key := []byte("ed25519 private key bytes")
	peer := Peer{ID: "12D3KooWX", Addrs: []string{"/ip4/127.0.0.1/tcp/1"}, LastSeen: time.Unix(5, 0).UTC(), Score: 0.5}
	if err := s.SetIdentity(key); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPeer(peer); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if err := s.AppendHistory(Point{Step: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openBadgerDir(t, dir, opts)
	if got := mustList(t, s); !reflect.DeepEqual(got, []Info{i2, i1}) {
		t.Errorf("list after reopen:\n got %+v\nwant %+v", got, []Info{i2, i1})
	}
	for _, tc := range []struct {
		id uint64
		c  *Checkpoint
		at time.Time
	}{{i1.ID, c1, i1.Created}, {i2.ID, c2, i2.Created}} {
		got, err := s.Load(t.Context(), tc.id)
		if err != nil {
			t.Fatal(err)
		}
		want := *tc.c
		want.Created = tc.at
		checkSame(t, got, &want)
	}
	if got, err := s.Identity(); err != nil || !bytes.Equal(got, key) {
		t.Errorf("identity after reopen: %q, %v", got, err)
	}
	if got, err := s.Peers(); err != nil || !reflect.DeepEqual(got, []Peer{peer}) {
		t.Errorf("peers after reopen: %+v, %v", got, err)
	}
	if err := s.AppendHistory(Point{Step: 100}); err != nil {
		t.Fatal(err)
	}
	h, err := s.History(0)
	var steps []int64
	for _, p := range h {
		steps = append(steps, p.Step)
	}
	if err != nil || !slices.Equal(steps, []int64{3, 4, 5, 100}) {
		t.Errorf("history after reopen and append: steps %v, %v; want [3 4 5 100]", steps, err)
	}
	if i3 := mustSave(t, s, ckpt(fpA, 3, 10, 0)); i3.ID <= i2.ID {
		t.Errorf("ID after reopen %d, want > %d", i3.ID, i2.ID)
	}
}

// flip changes one byte of the value stored under key, going through the
// store's own key-value layer as a failing disk would under Badger.
func flip(t *testing.T, s *kvStore, key []byte, at func(n int) int) {
	t.Helper()
	var v []byte
	err := s.kv.view(func(r kvReader) error {
		return r.get(key, func(b []byte) error { v = bytes.Clone(b); return nil })
	})
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	v[at(len(v))] ^= 0x5a
	if err := s.kv.update(func(w kvWriter) error { return w.set(key, v) }); err != nil {
		t.Fatal(err)
	}
}

func middle(n int) int { return n / 2 }

func TestCorruption(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, s *kvStore, id uint64)
		// manifestBad: List can tell without reading the data.
		manifestBad bool
	}{
		{"data byte", func(t *testing.T, s *kvStore, id uint64) {
			flip(t, s, chunkKey(id, sectionParam, 1), middle)
		}, false},
		{"optimizer byte", func(t *testing.T, s *kvStore, id uint64) {
			flip(t, s, chunkKey(id, sectionOpt, 0), func(int) int { return 0 })
		}, false},
		{"manifest byte", func(t *testing.T, s *kvStore, id uint64) {
			flip(t, s, manKey(id), middle)
		}, true},
		{"manifest checksum", func(t *testing.T, s *kvStore, id uint64) {
			flip(t, s, manKey(id), func(n int) int { return n - 1 })
		}, true},
		{"missing chunk", func(t *testing.T, s *kvStore, id uint64) {
			if err := s.kv.update(func(w kvWriter) error { return w.del(chunkKey(id, sectionParam, 2)) }); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"short chunk", func(t *testing.T, s *kvStore, id uint64) {
			if err := s.kv.update(func(w kvWriter) error {
				return w.set(chunkKey(id, sectionParam, 0), make([]byte, 8))
			}); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{ChunkSize: MinChunkSize}
			s := openBadgerDir(t, dir, opts)
			c1 := ckpt(fpA, 1, 3*MinChunkSize/4, 10)
			i1 := mustSave(t, s, c1)
			i2 := mustSave(t, s, ckpt(fpA, 2, 3*MinChunkSize/4, 10))
			tc.spoil(t, s, i2.ID)

			check := func(s *kvStore) {
				t.Helper()
				if _, err := s.Load(t.Context(), i2.ID); !errors.Is(err, ErrCorrupt) {
					t.Errorf("Load: got %v, want ErrCorrupt", err)
				}
				got, skipped, err := s.LoadLatest(t.Context(), fpA)
				if err != nil {
					t.Fatalf("LoadLatest: %v", err)
				}
				if got.ID != i1.ID {
					t.Errorf("LoadLatest gave checkpoint %d, want the previous one %d", got.ID, i1.ID)
				}
				c := *c1
				c.Created = i1.Created
				checkSame(t, got, &c)
				if len(skipped) != 1 || skipped[0].ID != i2.ID || !errors.Is(skipped[0].Err, ErrCorrupt) {
					t.Errorf("skipped %v: want checkpoint %d as corrupt", skipped, i2.ID)
				}
				infos := mustList(t, s)
				if len(infos) != 2 || infos[0].ID != i2.ID || infos[0].Corrupt != tc.manifestBad {
					t.Errorf("list %+v: want the corrupt checkpoint kept, Corrupt=%v", infos, tc.manifestBad)
				}
			}
			check(s)
			// The damage is on disk, not in a cache.
			s.Close()
			check(openBadgerDir(t, dir, opts))
		})
	}
}

func TestFormatVersion(t *testing.T) {
	dir := t.TempDir()
	opts := Options{ChunkSize: MinChunkSize}
	s := openBadgerDir(t, dir, opts)
	info := mustSave(t, s, ckpt(fpA, 1, 100, 0))
	s.Close()
	formatOf := func() string {
		s := openBadgerDir(t, dir, opts)
		defer s.Close()
		var v string
		err := s.kv.view(func(r kvReader) error {
			return r.get(keyFormat, func(b []byte) error { v = string(b); return nil })
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := formatOf(); got != strconv.Itoa(int(FormatVersion)) {
		t.Fatalf("new store has format %q, want %d", got, FormatVersion)
	}

	// Play a newer binary with a migration from this format.
	runs := 0
	defer func(cur uint32) { currentFormat = cur; delete(migrations, FormatVersion) }(currentFormat)
	currentFormat = FormatVersion + 1
	migrations[FormatVersion] = migration{desc: "test: add a marker", run: func(db kv) error {
		runs++
		return db.update(func(w kvWriter) error { return w.set([]byte("test/marker"), []byte("migrated")) })
	}}
	s = openBadgerDir(t, dir, opts)
	if runs != 1 || countKeys(t, s, []byte("test/marker")) != 1 {
		t.Errorf("migration ran %d times, marker present: %d", runs, countKeys(t, s, []byte("test/marker")))
	}
	if got := ids(mustList(t, s)); !slices.Equal(got, []uint64{info.ID}) {
		t.Errorf("after migration listed %v, want %d", got, info.ID)
	}
	s.Close()
	if got := formatOf(); got != strconv.Itoa(int(FormatVersion+1)) || runs != 1 {
		t.Errorf("format %q after migration, %d runs; want %d and one run", got, runs, FormatVersion+1)
	}

	// Back to this binary: the dir is now too new.
	currentFormat = FormatVersion
	_, err := Open(dir, opts)
	var fe *FormatError
	if !errors.Is(err, ErrNewerFormat) || !errors.As(err, &fe) || fe.Found != FormatVersion+1 || fe.Supported != FormatVersion {
		t.Fatalf("got %v, want a *FormatError with found %d, supported %d", err, FormatVersion+1, FormatVersion)
	}
	for _, want := range []string{dir, fmt.Sprintf("format version %d", FormatVersion+1), fmt.Sprintf("supports up to %d", FormatVersion)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not mention %q", err, want)
		}
	}
	// The refusal released the lock and left the dir usable by a newer binary.
	currentFormat = FormatVersion + 1
	s = openBadgerDir(t, dir, opts)
	s.Close()

	// A gap in the migration table is an error, not a silent skip.
	currentFormat = FormatVersion + 3
	if _, err := Open(dir, opts); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("no migration from format version %d", FormatVersion+1)) {
		t.Errorf("got %v, want a missing-migration error", err)
	}
}

func TestDataWithoutFormatIsRefused(t *testing.T) {
	dir := t.TempDir()
	s := openBadgerDir(t, dir, Options{})
	if err := s.kv.update(func(w kvWriter) error { return w.del(keyFormat) }); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPeer(Peer{ID: "p"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("got %v, want ErrCorrupt", err)
	}
}

func TestBadOptions(t *testing.T) {
	err := Options{Keep: -1, HistoryLimit: -2, ChunkSize: 1000, GCInterval: -time.Second}.Validate()
	if !errors.Is(err, ErrBadOptions) {
		t.Fatalf("got %v, want ErrBadOptions", err)
	}
	for _, field := range []string{"Keep", "HistoryLimit", "ChunkSize", "GCInterval"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("%q does not report %s", err, field)
		}
	}
	if _, err := Open(t.TempDir(), Options{ChunkSize: MaxChunkSize + 4}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("Open: got %v, want ErrBadOptions", err)
	}
	if err := DefaultOptions().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestValueLogGCRunsUntilClose(t *testing.T) {
	s := openBadger(t, Options{ChunkSize: 64 << 10, Keep: 1, GCInterval: time.Millisecond})
	for step := range int64(4) {
		mustSave(t, s, ckpt(fpA, step, 1<<18, 0))
	}
	for s.gc.ticks.Load() < 3 {
		select {
		case <-t.Context().Done():
			t.Fatal("GC loop never ran")
		case <-time.After(time.Millisecond):
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.gc.done:
	default:
		t.Fatal("GC loop still running after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// captureHandler records log records for inspection.
type captureHandler struct {
	mu   *sync.Mutex
	recs *[]slog.Record
}

func (h captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.recs = append(*h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h captureHandler) WithGroup(string) slog.Handler      { return h }

func TestBadgerLogsOnlyWarnings(t *testing.T) {
	var recs []slog.Record
	l := badgerLogger{slog.New(captureHandler{&sync.Mutex{}, &recs})}
	l.Debugf("debug %d", 1)
	l.Infof("info %d\n", 2)
	l.Warningf("warn %d\n", 3)
	l.Errorf("error %d", 4)
	if len(recs) != 2 || recs[0].Level != slog.LevelWarn || recs[0].Message != "warn 3" ||
		recs[1].Level != slog.LevelError || recs[1].Message != "error 4" {
		var got []string
		for _, r := range recs {
			got = append(got, r.Level.String()+" "+r.Message)
		}
		t.Errorf("logged %q, want only the warning and the error, trimmed", got)
	}

	// A real open, saves and close say nothing at all.
	recs = nil
	s := openBadger(t, Options{Logger: slog.New(captureHandler{&sync.Mutex{}, &recs}), ChunkSize: MinChunkSize})
	mustSave(t, s, ckpt(fpA, 1, 10000, 0))
	s.Close()
	if len(recs) != 0 {
		t.Errorf("a clean run logged %d lines, first %q", len(recs), recs[0].Message)
	}
}

// bigVec is n floats made of one random MiB repeated, each copy stamped
// with its index, so that swapped or repeated chunks still fail to compare;
// filling 100 MiB this way is much cheaper than generating it.
func bigVec(n int) []float32 {
	const block = 1 << 20 / 4
	v := make([]float32, n)
	copy(v, randVec(99, min(n, block)))
	for off := block; off < n; off += block {
		copy(v[off:], v[:block])
	}
	for i := 0; i*block < n; i++ {
		v[i*block] = float32(i)
	}
	return v
}

// TestLargeCheckpoint round-trips a 100 MiB parameter vector, far above
// Badger's 1 MB value and transaction limits, through a real dir.
func TestLargeCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := openBadgerDir(t, dir, Options{})
	c := &Checkpoint{Fingerprint: fpA, Step: 1, Params: bigVec(100 << 20 / 4), OptState: randVec(2, 1<<20)}
	info := mustSave(t, s, c)
	if info.Size != 100<<20+4<<20 {
		t.Errorf("size %d, want %d", info.Size, 100<<20+4<<20)
	}
	if n := countKeys(t, s, chunkPrefix(info.ID)); n != 104 {
		t.Errorf("%d chunks, want 104 of 1 MiB", n)
	}
	c.Created = info.Created
	got, err := s.Load(t.Context(), info.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, got, c)
	got = nil
	s.Close()
	// Still whole after a restart: verify it again from disk.
	s = openBadgerDir(t, dir, Options{})
	if _, err := s.read(t.Context(), info.ID, false); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
}

// diskUsage is the space files under dir really take (not their apparent
// size: Badger preallocates value-log files sparsely).
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDiskSpaceIsReclaimed saves many checkpoints with Keep 1 and checks
// that the space of deleted ones comes back: without compaction credit for
// deleted values, value-log GC finds nothing to do and the log grows by
// every checkpoint ever written.
func TestDiskSpaceIsReclaimed(t *testing.T) {
	const (
		vlogFile = 1 << 20
		size     = 1 << 20
		saves    = 32
	)
	dir := t.TempDir()
	s := openBadgerDir(t, dir, Options{Keep: 1, ChunkSize: 64 << 10, GCInterval: time.Hour, valueLogFileSize: vlogFile})
	c := ckpt(fpA, 1, size/4, 0)
	for range saves {
		c.Step++
		mustSave(t, s, c)
	}
	bk := s.kv.(*badgerKV)
	for {
		err := bk.runGC()
		if errors.Is(err, badger.ErrNoRewrite) {
			break
		}
		if err != nil && !errors.Is(err, badger.ErrRejected) {
			t.Fatal(err)
		}
	}
	// One live checkpoint, the value-log file being written (preallocated
	// to twice its size), a partly dead file or two, and the memtable
	// files: far below the 32 MiB written.
	if used, limit := diskUsage(t, dir), int64(8*size+12<<20); used > limit {
		t.Errorf("%d saves of %d bytes with Keep 1 use %d bytes on disk, want at most %d", saves, size, used, limit)
	}
	got, err := s.Load(t.Context(), mustList(t, s)[0].ID)
	if err != nil || got.Step != c.Step {
		t.Fatalf("newest after GC: %v, %v", got, err)
	}
}

// TestEmptyLogFileLeftByAKill: badger creates a value-log or memtable log
// file by opening it and then sizing it, and deletes a value-log file by
// truncating it to zero bytes and then unlinking it; a kill between the two
// steps leaves an empty file that badger itself refuses to open ("Create a
// new file"). Such a file holds no entries, so Open removes it and the
// store keeps its data.
func TestEmptyLogFileLeftByAKill(t *testing.T) {
	for _, kind := range []struct{ ext, name string }{
		{"vlog", "%06d.vlog"},
		{"mem", "%05d.mem"},
	} {
		for _, tc := range []struct {
			name string
			fid  func(have []int) int
		}{
			{"below the others", func(have []int) int { return 0 }},
			{"above the others", func(have []int) int { return slices.Max(append(have, 0)) + 1 }},
		} {
			t.Run(kind.ext+" "+tc.name, func(t *testing.T) {
				dir := t.TempDir()
				opts := Options{ChunkSize: MinChunkSize, Keep: 3}
				s := openBadgerDir(t, dir, opts)
				c := ckpt(fpA, 1, 3000, 100)
				info := mustSave(t, s, c)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				files, err := filepath.Glob(filepath.Join(dir, dbDir, "*."+kind.ext))
				if err != nil {
					t.Fatal(err)
				}
				var have []int
				for _, p := range files {
					var fid int
					if _, err := fmt.Sscanf(filepath.Base(p), kind.name, &fid); err != nil {
						t.Fatalf("%s: %v", p, err)
					}
					have = append(have, fid)
				}
				empty := filepath.Join(dir, dbDir, fmt.Sprintf(kind.name, tc.fid(have)))
				if err := os.WriteFile(empty, nil, 0o600); err != nil {
					t.Fatal(err)
				}

				s = openBadgerDir(t, dir, opts)
				got, err := s.Load(t.Context(), info.ID)
				if err != nil {
					t.Fatalf("load after reopen: %v", err)
				}
				want := *c
				want.Created = info.Created
				checkSame(t, got, &want)
				// Badger may reuse the name for a fresh file; an empty one
				// must not be left.
				if fi, err := os.Stat(empty); err == nil && fi.Size() == 0 {
					t.Errorf("empty %s still there", filepath.Base(empty))
				}
			})
		}
	}
}
