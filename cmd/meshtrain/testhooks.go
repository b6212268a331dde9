//go:build testhooks

package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"syscall"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
)

// The test hooks of the testhooks build (make build-testhooks, which makes
// bin/meshtrain-testhooks): crash points for the crash-recovery tests and
// the adversary flags of hostile test nodes. A release build has none of
// them (testhooks_release.go).

// crashEnv names a crash point (store.Crash*) at which the process kills
// itself with SIGKILL; crashAfterEnv says at which occurrence (default 1).
// They exist for the crash-recovery tests of the real binary.
const (
	crashEnv      = "MESHTRAIN_TEST_CRASH_AT"
	crashAfterEnv = "MESHTRAIN_TEST_CRASH_AFTER"
)

// armStoreHooks sets the store's crash hook if crashEnv names a point.
func armStoreHooks(opts *store.Options, log *slog.Logger) {
	point := os.Getenv(crashEnv)
	if point == "" {
		return
	}
	after := 1
	if n, err := strconv.Atoi(os.Getenv(crashAfterEnv)); err == nil && n > 0 {
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

// attackSummary is the usage line of `meshtrain testnet attack`.
const attackSummary = "run swarms with attacking test nodes and report"

// nodeHooks are the adversary flags of `meshtrain node`.
type nodeHooks struct{ kind, strength *string }

func registerNodeHooks(fs *flag.FlagSet) nodeHooks {
	return nodeHooks{
		kind: fs.String("adversary", "", "TEST SWARMS ONLY: this node attacks its peers, KIND [default strength X]: "+
			"noise [1] sends params + N(0,(X*rms)^2) noise, signflip [1] -X*params, scale [10] X*params, nan [0.01] a fraction X of the values NaN, "+
			"replay [5] the model of X s after start forever under its current progress, wrongdim [1] X more elements (fewer if negative), "+
			"flood [200] X announcements/s and back-to-back exchanges with every peer, boast [1000] claims X times its progress; "+
			"refused unless the environment has "+
			node.UnlockAdversaryEnv+"="+node.UnlockAdversaryValue),
		strength: fs.String("adversary-strength", "", "strength X of --adversary (empty: the kind's default)"),
	}
}

// apply sets cfg.Adversary from the flags (Validate checks the unlock).
func (h nodeHooks) apply(cfg *node.Config) error {
	var err error
	cfg.Adversary, err = node.ParseAdversary(*h.kind, *h.strength)
	return err
}

// warn says, on stderr, that the node attacks its peers, if it does.
func (h nodeHooks) warn(e *env, cfg node.Config) {
	if a := cfg.Adversary; a.Kind != "" {
		fmt.Fprintf(e.stderr, "%s: WARNING: ADVERSARY MODE %s (strength %g): this node attacks its peers; for test swarms only\n",
			e.name, a.Kind, a.Strength)
	}
}
