//go:build unix

package gossip

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) this process has used: on a
// machine shared with other work it measures a transfer's cost far more
// steadily than wall time does.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
