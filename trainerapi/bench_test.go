package trainerapi

import (
	"testing"

	"github.com/meshtrain/meshtrain/params"
)

// BenchmarkRoundTrip100MB: one push of a 100 MB model (25M float32s) over
// the Unix socket and its reply with a delta of the same size, after a
// merge each time: the trainer's whole wait per push.
func BenchmarkRoundTrip100MB(b *testing.B) {
	const n = 25_000_000
	srv, ext := testServer(b)
	c, err := Dial(srv.Addr(), "")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	spec := Spec{Run: "bench", TrainSamples: 1000, Batch: 10, Tensors: []TensorSpec{{Name: "w", Dtype: "F32", Shape: []int{n}}}}
	if _, err := c.Register(spec); err != nil {
		b.Fatal(err)
	}
	w, delta := make([]float32, n), make([]float32, n)
	if _, err := c.Push(w, nil, 0, 0, 0, delta); err != nil {
		b.Fatal(err)
	}
	merge := func(w, _ []float32, _ *params.Progress) error { w[0] += 1; return nil }
	b.SetBytes(2 * 4 * n)
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		if err := ext().Apply(merge); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		p, err := c.Push(w, nil, 10, 1, 1, delta)
		if err != nil || !p.Delta {
			b.Fatalf("%+v %v", p, err)
		}
	}
}
