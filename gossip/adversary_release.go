//go:build !testhooks

package gossip

// testHooks is empty in a release build: no frame tampering (see
// adversary.go, in the testhooks build).
//
//lint:ignore U1000 empty in a release build; the testhooks build fills it
type testHooks struct{}

// hostile is false in a release build: a service never plays a hostile peer.
func (*Service) hostile() bool { return false }

// rewrite leaves every frame as encoded in a release build.
func (*Service) rewrite(f *Frame) *Frame { return f }
