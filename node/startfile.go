package node

import (
	"context"
	"os"
	"time"
)

// startPoll is how often a start file is looked for where the platform
// cannot tell us when it appears: the release of a benchmark's swarm is
// its time 0, so every node must see it within a few milliseconds.
const startPoll = 5 * time.Millisecond

// pollForFile returns once path exists or ctx ends, looking every startPoll.
func pollForFile(ctx context.Context, path string) {
	t := time.NewTicker(startPoll)
	defer t.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
