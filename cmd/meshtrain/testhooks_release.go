//go:build !testhooks

package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
)

// A release build has no test hooks: no crash points, no adversary flags,
// no `testnet attack`. No flag, variable or settings file can make it kill
// itself mid-checkpoint or attack its peers. They are in the testhooks
// build (make build-testhooks; testhooks.go).

// armStoreHooks does nothing in a release build.
func armStoreHooks(*store.Options, *slog.Logger) {}

// attackSummary is the usage line of `meshtrain testnet attack`.
const attackSummary = "not in this build: see 'make build-testhooks'"

// nodeHooks registers no flags in a release build.
type nodeHooks struct{}

func registerNodeHooks(*flag.FlagSet) nodeHooks { return nodeHooks{} }
func (nodeHooks) apply(*node.Config) error      { return nil }
func (nodeHooks) warn(*env, node.Config)        {}

// testnetAttack refuses: the hostile-swarm suite runs attacking nodes,
// which only the testhooks build has.
func testnetAttack(_ context.Context, e *env, _ []string) int {
	fmt.Fprintf(e.stderr, "%s: this binary has no attack modes: build the test binary with 'make build-testhooks' "+
		"and run 'bin/meshtrain-testhooks testnet attack'\n", e.name)
	return exitUsage
}
