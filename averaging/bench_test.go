package averaging

import (
	"math/rand/v2"
	"testing"

	"github.com/meshtrain/meshtrain/params"
)

const benchN = 1 << 20 // 1M float32 = 4 MiB, about a 1M-parameter model

// BenchmarkMix reports the throughput of w <- (1-a) w + a w_remote over
// the bytes it touches: two vectors read, one written.
func BenchmarkMix(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	dst, src := randVec(r, benchN, 1), randVec(r, benchN, 1)
	b.SetBytes(3 * 4 * benchN)
	for b.Loop() {
		if err := Mix(dst, src, 0.5); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMerge is a full merge as a node runs it: checks (a finiteness
// pass over the remote), the parameter mix, the momentum policy, progress.
// Bytes are counted per parameter of the model (4 per float32).
//
// The mix policy without a remote momentum scales m by (1-a) every
// iteration, which in a loop sinks m into subnormals that real training
// never reaches (every step refreshes m); so that case is measured with a
// remote momentum, which costs the same as a scale or more.
func BenchmarkMerge(b *testing.B) {
	for _, policy := range []MomentumPolicy{MomentumKeep, MomentumReset, MomentumMix} {
		b.Run(policy.String(), func(b *testing.B) {
			r := rand.New(rand.NewPCG(2, 2))
			p := params.Progress(1e6)
			local := Local{Params: randVec(r, benchN, 1), Momentum: randVec(r, benchN, 1), Progress: &p, Batch: 64}
			remote := params.Snapshot{Params: randVec(r, benchN, 1), Progress: 9e5}
			var remoteMomentum []float32
			if policy == MomentumMix {
				remoteMomentum = randVec(r, benchN, 1)
			}
			m := DefaultMerger()
			m.Momentum = policy
			b.SetBytes(4 * benchN)
			for b.Loop() {
				if _, err := m.Merge(local, remote, remoteMomentum); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkClipDelta(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	local, remote := randVec(r, benchN, 1), randVec(r, benchN, 1)
	dst := make([]float32, benchN)
	b.SetBytes(3 * 4 * benchN)
	for b.Loop() {
		if _, err := ClipDelta(dst, local, remote, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTrimmedMean(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	const k, n = 8, benchN / 8
	vs := make([][]float32, k)
	for j := range vs {
		vs[j] = randVec(r, n, 1)
	}
	dst := make([]float32, n)
	b.SetBytes((k + 1) * 4 * n)
	for b.Loop() {
		if err := TrimmedMean(dst, vs, 2); err != nil {
			b.Fatal(err)
		}
	}
}
