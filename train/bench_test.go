package train

import (
	"context"
	"testing"
)

// BenchmarkTrainStep times one step of the default model and batch on MNIST
// images (the embedded test set serves as the training pool; the work per
// step does not depend on which images). Run with -cpu 1.
func BenchmarkTrainStep(b *testing.B) {
	d, err := embeddedTestSet()
	if err != nil {
		b.Fatal(err)
	}
	c := DefaultConfig()
	c.Epochs = 0
	c.Schedule = "const"
	tr := newTestTrainer(b, c, d)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Step(ctx); err != nil {
			b.Fatal(err)
		}
	}
	_, flops := tr.Model().FLOPs(c.Batch)
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N*c.Batch)/sec, "samples/s")
	b.ReportMetric(float64(b.N)*float64(flops)/sec/1e9, "GFLOP/s")
}

// BenchmarkEval scores the default model on the 10000 MNIST test images in
// one goroutine.
func BenchmarkEval(b *testing.B) {
	d, err := embeddedTestSet()
	if err != nil {
		b.Fatal(err)
	}
	m := mustModel(b, DefaultConfig().Model, d.Dim, d.Classes)
	w := make([]float32, m.Size())
	_ = m.Init(w, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Evaluate(m, w, d, 0, 1); err != nil {
			b.Fatal(err)
		}
	}
	fwd, _ := m.FLOPs(d.N)
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N*d.N)/sec, "samples/s")
	b.ReportMetric(float64(b.N)*float64(fwd)/sec/1e9, "GFLOP/s")
}
