//go:build race

package train

// raceEnabled: the race detector makes sync.Pool drop items on purpose, so
// pooled buffers below the trainer allocate in race builds only.
const raceEnabled = true
