package main

import (
	"flag"
	"log/slog"
	"os"
	"syscall"

	"github.com/meshtrain/meshtrain/store"
)

// crashEnv names a crash point (store.Crash*) at which the process kills
// itself with SIGKILL; crashAfterEnv says at which occurrence (default 1).
// They exist for the crash-recovery tests of the real binary.
const (
	crashEnv      = "MESHTRAIN_TEST_CRASH_AT"
	crashAfterEnv = "MESHTRAIN_TEST_CRASH_AFTER"
)

// storeFlags are the flags of every command that opens a data dir.
type storeFlags struct {
	dir  string
	keep int
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.dir, "data-dir", "./meshtrain-data", "folder holding identity, checkpoints and history")
}

func (s *storeFlags) registerKeep(fs *flag.FlagSet) {
	fs.IntVar(&s.keep, "keep", store.DefaultKeep, "how many verified checkpoints to keep (>= 1)")
}

func (s *storeFlags) open(log *slog.Logger) (store.Store, error) {
	opts := store.Options{Keep: s.keep, Logger: log}
	if point := os.Getenv(crashEnv); point != "" {
		after := 1
		if n, err := parsePositive(os.Getenv(crashAfterEnv)); err == nil {
			after = n
		}
		seen := 0
		opts.CrashHook = func(p string) {
			if p != point {
				return
			}
			if seen++; seen >= after {
				log.Warn("test crash point reached: killing this process", "point", p)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		}
	}
	return store.Open(s.dir, opts)
}
