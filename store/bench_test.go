package store

import (
	"log/slog"
	"testing"
)

var benchSizes = []struct {
	name string
	n    int // float32 elements
}{
	{"1MB", 1 << 20 / 4},
	{"100MB", 100 << 20 / 4},
}

func benchStore(b *testing.B) Store {
	s, err := Open(b.TempDir(), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkCheckpointWrite measures a whole Save in steady state: chunks,
// manifest, sync, read-back verification, and pruning the oldest of the
// DefaultKeep checkpoints saved before timing starts.
func BenchmarkCheckpointWrite(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			s := benchStore(b)
			c := &Checkpoint{Fingerprint: fpA, Params: randVec(1, sz.n)}
			for range DefaultKeep {
				c.Step++
				if _, err := s.Save(b.Context(), c); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(sz.n) * 4)
			for b.Loop() {
				c.Step++
				if _, err := s.Save(b.Context(), c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckpointRead measures Load: reading, verifying and decoding.
func BenchmarkCheckpointRead(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			s := benchStore(b)
			info, err := s.Save(b.Context(), &Checkpoint{Fingerprint: fpA, Params: randVec(1, sz.n)})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(sz.n) * 4)
			for b.Loop() {
				if _, err := s.Load(b.Context(), info.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
