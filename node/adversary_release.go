//go:build !testhooks

package node

import (
	"context"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/params"
)

// A release build has no hostile-peer modes: no Config field, flag or
// variable can make its node attack its peers. They exist in the
// testhooks build only (make build-testhooks; adversary.go).

// testHooks is empty in a release build.
//
//lint:ignore U1000 empty in a release build; the testhooks build fills it
type testHooks struct{}

// validateHooks has nothing to check in a release build.
func (Config) validateHooks() []error { return nil }

// nodeHooks is empty in a release build.
//
//lint:ignore U1000 empty in a release build; the testhooks build fills it
type nodeHooks struct{}

// outgoing is what the node sends in place of s: s itself.
func (*Node) outgoing(s params.Snapshot) params.Snapshot { return s }

// announced is the announcement the node publishes in place of a: a itself.
func (*Node) announced(a gossip.Announcement) gossip.Announcement { return a }

// armHooks does nothing in a release build.
func (*Node) armHooks(*gossip.Config) {}

// unleash returns stop as it is in a release build.
func (*Node) unleash(_ context.Context, stop context.CancelFunc) context.CancelFunc { return stop }
