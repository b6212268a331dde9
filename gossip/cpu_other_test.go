//go:build !unix

package gossip

import "time"

// processCPU is not measured here; CPU metrics read as zero.
func processCPU() time.Duration { return 0 }
