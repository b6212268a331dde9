//go:build !linux

package node

import "context"

// waitForFile returns once path exists or ctx ends.
func waitForFile(ctx context.Context, path string) { pollForFile(ctx, path) }
