package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// waitReturns runs wait in a goroutine and reports whether it returned
// within limit (a generous bound: the test is of whether, not how fast).
func waitReturns(wait func(), limit time.Duration) bool {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}

func TestWaitForFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string) // creates the file while the wait runs
	}{
		{"written", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Error(err)
			}
		}},
		{"renamed into place", func(t *testing.T, path string) {
			tmp := filepath.Join(t.TempDir(), "tmp")
			if err := os.WriteFile(tmp, nil, 0o644); err != nil {
				t.Error(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Error(err)
			}
		}},
		{"in a directory made again", func(t *testing.T, path string) {
			dir := filepath.Dir(path)
			if err := os.RemoveAll(dir); err != nil {
				t.Error(err)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Error(err)
			}
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Error(err)
			}
		}},
		{"in a directory that did not exist", func(t *testing.T, path string) {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Error(err)
			}
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "gate")
			if tc.name != "in a directory that did not exist" {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, "start")
			done := make(chan struct{})
			go func() { waitForFile(t.Context(), path); close(done) }()
			select {
			case <-done:
				t.Fatal("returned before the file existed")
			case <-time.After(20 * time.Millisecond):
			}
			tc.make(t, path)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("still waiting 30 s after the file was made")
			}
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("returned without the file: %v", err)
			}
		})
	}
}

func TestWaitForFileEndsWithContext(t *testing.T) {
	for name, wait := range map[string]func(context.Context, string){"watch": waitForFile, "poll": pollForFile} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			path := filepath.Join(t.TempDir(), "never")
			cancel()
			if !waitReturns(func() { wait(ctx, path) }, 30*time.Second) {
				t.Fatal("a cancelled wait did not return")
			}
			ctx, cancel = context.WithTimeout(t.Context(), 30*time.Millisecond)
			defer cancel()
			if !waitReturns(func() { wait(ctx, path) }, 30*time.Second) {
				t.Fatal("a wait did not return at its context's deadline")
			}
			if _, err := os.Stat(path); err == nil {
				t.Fatal("the file exists")
			}
		})
	}
}

func TestPollForFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "start")
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = os.WriteFile(path, nil, 0o644)
	}()
	if !waitReturns(func() { pollForFile(t.Context(), path) }, 30*time.Second) {
		t.Fatal("still polling 30 s after the file was made")
	}
}
