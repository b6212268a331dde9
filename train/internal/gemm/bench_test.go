package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// mlpShapes are the products of one training step of a 784-256-128-10 MLP at
// batch 64 with weights stored [out, in].
var mlpShapes = []struct {
	name           string
	transA, transB bool
	m, n, k        int
}{
	{"fwd1", false, true, 64, 256, 784},
	{"fwd2", false, true, 64, 128, 256},
	{"fwd3", false, true, 64, 10, 128},
	{"dW1", true, false, 256, 784, 64},
	{"dW2", true, false, 128, 256, 64},
	{"dW3", true, false, 10, 128, 64},
	{"dX2", false, false, 64, 256, 128},
	{"dX3", false, false, 64, 128, 10},
}

// impl is one way to run a product on tight row-major operands.
type impl struct {
	name string
	run  func(p *problem)
}

var allImpls = []impl{
	{"ours", func(p *problem) {
		Sgemm(p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, p.c, p.ldc)
	}},
	{"blas32", func(p *problem) {
		tA, tB := blas.NoTrans, blas.NoTrans
		ar, ac, br, bc := p.m, p.k, p.k, p.n
		if p.transA {
			tA, ar, ac = blas.Trans, p.k, p.m
		}
		if p.transB {
			tB, br, bc = blas.Trans, p.n, p.k
		}
		blas32.Gemm(tA, tB, p.alpha,
			blas32.General{Rows: ar, Cols: ac, Stride: p.lda, Data: p.a},
			blas32.General{Rows: br, Cols: bc, Stride: p.ldb, Data: p.b},
			p.beta, blas32.General{Rows: p.m, Cols: p.n, Stride: p.ldc, Data: p.c})
	}},
}

var parallelImpl = impl{"ours", func(p *problem) {
	SgemmParallel(0, p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, p.c, p.ldc)
}}

func stepProblems() ([]problem, float64) {
	rng := rand.New(rand.NewPCG(9, 10))
	var ps []problem
	flops := 0.0
	for _, s := range mlpShapes {
		ps = append(ps, newProblem(rng, s.transA, s.transB, s.m, s.n, s.k, 1, 0, 0))
		flops += 2 * float64(s.m*s.n*s.k)
	}
	return ps, flops
}

func benchImpls(b *testing.B, ps []problem, flops float64, impls ...impl) {
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for i := range ps {
					im.run(&ps[i])
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkShapes times each product of the step on its own.
func BenchmarkShapes(b *testing.B) {
	ps, _ := stepProblems()
	for i, s := range mlpShapes {
		b.Run(fmt.Sprintf("%s_%dx%dx%d", s.name, s.m, s.n, s.k), func(b *testing.B) {
			benchImpls(b, ps[i:i+1], 2*float64(s.m*s.n*s.k), allImpls...)
		})
	}
}

// BenchmarkStep times all products of one training step back to back.
func BenchmarkStep(b *testing.B) {
	ps, flops := stepProblems()
	benchImpls(b, ps, flops, allImpls...)
}

// BenchmarkStepParallel times the step with SgemmParallel on GOMAXPROCS
// goroutines (set with -cpu); blas32 parallelises large products itself.
func BenchmarkStepParallel(b *testing.B) {
	ps, flops := stepProblems()
	benchImpls(b, ps, flops, parallelImpl, allImpls[1])
}

// BenchmarkStepKernel times the step on each kernel this CPU can run.
func BenchmarkStepKernel(b *testing.B) {
	saved := level
	defer func() { level = saved }()
	ps, flops := stepProblems()
	for l := range detectLevel() + 1 {
		mk := kernels[l]
		b.Run(fmt.Sprintf("level%d_%dx%d", l, mk.mr, mk.nr), func(b *testing.B) {
			level = l
			benchImpls(b, ps, flops, allImpls[0])
		})
	}
}
