//go:build !unix

package testnet

import "time"

// processCPU is 0 where rusage is not available.
func processCPU() time.Duration { return 0 }
