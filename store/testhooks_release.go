//go:build !testhooks

package store

// testHooks is empty in a release build: no crash hook (see testhooks.go).
//
//lint:ignore U1000 empty in a release build; the testhooks build fills it
type testHooks struct{}

// hook does nothing in a release build.
func (*kvStore) hook(string) {}
