//go:build testhooks

// The crash-point tests: they need Options.CrashHook, which only the
// testhooks build has (make test-unit runs them with -tags testhooks).
package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
)

func init() { childModes["crash"] = crashChild }

// crashChild saves a checkpoint and dies by SIGKILL at the crash point
// named by childPoint.
func crashChild(dir string) int {
	point := os.Getenv(childPoint)
	opts := Options{ChunkSize: MinChunkSize, Keep: 1}
	opts.CrashHook = func(p string) {
		if p == point {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	s, err := Open(dir, opts)
	if err != nil {
		fmt.Print(err)
		return 1
	}
	if _, err := s.Save(context.Background(), ckpt(fpA, 2, 10*MinChunkSize/4, MinChunkSize/4)); err != nil {
		fmt.Print(err)
		return 1
	}
	return childExitNoKill
}

// TestRetentionKeepsLastGood writes a run of checkpoints that fail
// verification and checks that they never push out the verified ones.
func TestRetentionKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	var s *kvStore
	spoil := false
	opts := Options{ChunkSize: MinChunkSize, Keep: 2}
	opts.CrashHook = func(p string) {
		if p == CrashAfterCommit && spoil {
			// Damage the newest checkpoint between commit and read-back.
			infos := mustList(t, s)
			flip(t, s, chunkKey(infos[0].ID, sectionParam, 0), middle)
		}
	}
	s = openBadgerDir(t, dir, opts)
	save := func(step int64) (uint64, error) {
		info, err := s.Save(t.Context(), ckpt(fpA, step, 1000, 0))
		return info.ID, err
	}
	var good, bad []uint64
	for step := int64(1); step <= 2; step++ {
		id, err := save(step)
		if err != nil {
			t.Fatal(err)
		}
		good = append(good, id)
	}
	spoil = true
	for step := int64(3); step <= 6; step++ {
		id, err := save(step)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("save of a checkpoint damaged before read-back: got %v, want ErrCorrupt", err)
		}
		bad = append(bad, id)
	}
	spoil = false
	want := []uint64{bad[3], bad[2], good[1], good[0]}
	if got := ids(mustList(t, s)); !slices.Equal(got, want) {
		t.Fatalf("after a corrupt run kept %v, want %v (two newest corrupt, both good)", got, want)
	}
	c, skipped, err := s.LoadLatest(t.Context(), fpA)
	if err != nil || c.ID != good[1] || len(skipped) != 2 {
		t.Fatalf("LoadLatest: %v, skipped %v, %v; want checkpoint %d", c, skipped, err, good[1])
	}

	id7, err := save(7)
	if err != nil {
		t.Fatal(err)
	}
	want = []uint64{id7, bad[3], bad[2], good[1]}
	if got := ids(mustList(t, s)); !slices.Equal(got, want) {
		t.Fatalf("after a good save kept %v, want %v", got, want)
	}

	// Damage 7 on disk. A new process knows nothing of it yet and must
	// verify before it counts 7 as good; trusting it would delete the
	// last good checkpoint.
	flip(t, s, chunkKey(id7, sectionParam, 0), middle)
	s.Close()
	s = openBadgerDir(t, dir, opts)
	id8, err := save(8)
	if err != nil {
		t.Fatal(err)
	}
	want = []uint64{id8, id7, bad[3], good[1]}
	if got := ids(mustList(t, s)); !slices.Equal(got, want) {
		t.Fatalf("after reopen and save kept %v, want %v", got, want)
	}
}

// orphanChunks counts chunk keys whose checkpoint has no manifest.
func orphanChunks(t *testing.T, s *kvStore) int {
	t.Helper()
	n := 0
	err := s.kv.view(func(r kvReader) error {
		return r.scan(prefixChunk, false, false, func(k, _ []byte) (bool, error) {
			id, _ := idFromChunkKey(k)
			if err := r.get(manKey(id), func([]byte) error { return nil }); errors.Is(err, errNoKey) {
				n++
			}
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkRecovered opens dir after a crash while saving checkpoint 2 and
// checks that the store is whole: no orphans, the right checkpoints, and
// the newest of them verifies.
func checkRecovered(t *testing.T, dir, point string, first Info) {
	t.Helper()
	s := openBadgerDir(t, dir, Options{ChunkSize: MinChunkSize, Keep: 1})
	if n := orphanChunks(t, s); n != 0 {
		t.Errorf("%d orphan chunks after reopen", n)
	}
	infos := mustList(t, s)
	wantN := 1
	if point == CrashAfterCommit {
		// Committed, then killed before pruning: both exist until the next save prunes.
		wantN = 2
	} else if s.orphansRemoved == 0 {
		t.Errorf("open removed no orphan chunks; a crash at %s must leave some", point)
	}
	if len(infos) != wantN || infos[len(infos)-1] != first {
		t.Fatalf("after a crash at %s: listed %+v, want %d checkpoints ending with %+v", point, infos, wantN, first)
	}
	c, err := s.Load(t.Context(), infos[0].ID)
	if err != nil {
		t.Fatalf("newest checkpoint after a crash at %s: %v", point, err)
	}
	if wantStep := int64(wantN); c.Step != wantStep {
		t.Errorf("newest checkpoint has step %d, want %d", c.Step, wantStep)
	}
	// The store goes on working, and IDs are not reused.
	next := mustSave(t, s, ckpt(fpA, 3, 100, 0))
	if next.ID <= infos[0].ID+1 && point != CrashAfterCommit {
		t.Errorf("ID %d after a crash may reuse the interrupted save's ID %d", next.ID, infos[0].ID+1)
	}
	if got := ids(mustList(t, s)); !slices.Equal(got, []uint64{next.ID}) {
		t.Errorf("after the next save listed %v, want only %d", got, next.ID)
	}
}

var crashPoints = []string{CrashMidChunks, CrashBeforeCommit, CrashAfterCommit}

type crashed string

// TestCrashPointsPanic simulates a crash at each point with a panicking
// hook, then abandons the store the way a dying process would (Close only
// releases the lock; it cannot undo what was committed).
func TestCrashPointsPanic(t *testing.T) {
	for _, point := range crashPoints {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			armed := false
			opts := Options{ChunkSize: MinChunkSize, Keep: 1}
			opts.CrashHook = func(p string) {
				if armed && p == point {
					panic(crashed(p))
				}
			}
			s, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			first := mustSave(t, s, ckpt(fpA, 1, 10*MinChunkSize/4, 10))
			armed = true
			func() {
				defer func() {
					if r := recover(); r != crashed(point) {
						t.Fatalf("recovered %v, want the hook's panic at %s", r, point)
					}
				}()
				s.Save(t.Context(), ckpt(fpA, 2, 10*MinChunkSize/4, MinChunkSize/4))
			}()
			if err := s.Close(); err != nil {
				t.Fatalf("Close after the simulated crash: %v", err)
			}
			checkRecovered(t, dir, point, first)
		})
	}
}

// TestCrashPointsKill kills a real process with SIGKILL at each point.
func TestCrashPointsKill(t *testing.T) {
	for _, point := range crashPoints {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			s := openBadgerDir(t, dir, Options{ChunkSize: MinChunkSize, Keep: 1})
			first := mustSave(t, s, ckpt(fpA, 1, 10*MinChunkSize/4, 10))
			s.Close()

			out, err := child(t, "crash", dir, childPoint+"="+point).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child: %v, output %q; want death by SIGKILL", err, out)
			}
			checkRecovered(t, dir, point, first)
		})
	}
}
