package gemm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// eps32 is float32's unit roundoff.
const eps32 = 1.0 / (1 << 24)

type problem struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	lda, ldb, ldc  int
	a, b, c        []float32
}

// newProblem fills A, B and C with values in [-1, 1); padding beyond each
// row's width holds NaN, which would poison any result that reads it.
func newProblem(rng *rand.Rand, transA, transB bool, m, n, k int, alpha, beta float32, pad int) problem {
	p := problem{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	p.a, p.lda = fill(rng, ar, ac, pad)
	p.b, p.ldb = fill(rng, br, bc, pad)
	p.c, p.ldc = fill(rng, m, n, pad)
	return p
}

func fill(rng *rand.Rand, rows, cols, pad int) ([]float32, int) {
	ld := max(1, cols+pad)
	// The last row is cut at its width, as a tight caller would slice it.
	size := 0
	if rows > 0 && cols > 0 {
		size = (rows-1)*ld + cols
	}
	x := make([]float32, size)
	for i := range x {
		if i%ld < cols {
			x[i] = rng.Float32()*2 - 1
		} else {
			x[i] = float32(math.NaN())
		}
	}
	return x, ld
}

func (p problem) at(x []float32, ld int, trans bool, i, j int) float64 {
	if trans {
		return float64(x[j*ld+i])
	}
	return float64(x[i*ld+j])
}

// check runs got = Sgemm on a copy of C and compares every element, and the
// padding, with a float64 reference. The bound is the standard one for a
// float32 dot product of length k plus the final scaling, applied to the sum
// of magnitudes, so it holds for any summation order.
func (p problem) check(t *testing.T, run func(c []float32)) {
	t.Helper()
	got := append([]float32(nil), p.c...)
	run(got)
	for i := range p.m {
		for j := range p.n {
			var ref, mag float64
			for q := range p.k {
				x := p.at(p.a, p.lda, p.transA, i, q) * p.at(p.b, p.ldb, p.transB, q, j)
				ref += x
				mag += math.Abs(x)
			}
			ref *= float64(p.alpha)
			mag *= math.Abs(float64(p.alpha))
			if p.beta != 0 {
				c0 := float64(p.c[i*p.ldc+j])
				ref += float64(p.beta) * c0
				mag += math.Abs(float64(p.beta) * c0)
			}
			tol := float64(p.k+3)*eps32*mag + 1e-30
			g := float64(got[i*p.ldc+j])
			if !(math.Abs(g-ref) <= tol) {
				t.Fatalf("%s: C[%d,%d] = %g, want %g (tol %g)", p, i, j, g, ref, tol)
			}
		}
	}
	for idx := range got {
		if idx%p.ldc >= p.n && !math.IsNaN(float64(got[idx])) {
			t.Fatalf("%s: padding C[%d] was written: %g", p, idx, got[idx])
		}
	}
}

func (p problem) String() string {
	return fmt.Sprintf("tA=%v tB=%v m=%d n=%d k=%d alpha=%g beta=%g lda=%d ldb=%d ldc=%d",
		p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.beta, p.lda, p.ldb, p.ldc)
}

func (p problem) sgemm(c []float32) {
	Sgemm(p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
}

// withKernel runs the test once per kernel this CPU can run, the portable
// one included.
func withKernel(t *testing.T, f func(t *testing.T)) {
	saved := level
	t.Cleanup(func() { level = saved })
	for l := range detectLevel() + 1 {
		mk := kernels[l]
		t.Run(fmt.Sprintf("level%d_%dx%d", l, mk.mr, mk.nr), func(t *testing.T) {
			level = l
			f(t)
		})
	}
}

var (
	sizes  = []int{1, 2, 3, 5, 6, 7, 11, 16, 17, 23, 31, 33, 64}
	alphas = []float32{1, 0, -1, 0.5}
	betas  = []float32{0, 1, -0.75, float32(math.Copysign(0, -1))}
)

func TestSgemmShapes(t *testing.T) {
	withKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for range 300 {
			m, n, k := pick(rng, sizes), pick(rng, sizes), pick(rng, sizes)
			p := newProblem(rng, rng.IntN(2) == 0, rng.IntN(2) == 0, m, n, k,
				pick(rng, alphas), pick(rng, betas), rng.IntN(3))
			p.check(t, p.sgemm)
		}
	})
}

// TestSgemmBlocking crosses the cache-block and register-tile boundaries,
// where the packing and edge handling change.
func TestSgemmBlocking(t *testing.T) {
	withKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		shapes := [][3]int{
			{mcMax + 1, 17, 5}, {mcMax - 1, 35, kcMax + 1}, {mcMax + 17, 33, 3},
			{7, ncMax + 5, 3}, {13, 19, 2*kcMax + 7}, {6, 16, kcMax}, {16, 16, 9},
			{64, 10, 128}, {10, 128, 64}, {64, 128, 10}, {97, 89, 83},
		}
		for _, s := range shapes {
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					p := newProblem(rng, tA, tB, s[0], s[1], s[2], pick(rng, alphas[2:]), pick(rng, betas), rng.IntN(2)*5)
					p.check(t, p.sgemm)
				}
			}
		}
	})
}

// TestSgemmBetaZeroIgnoresC fills C with NaN: beta 0 must overwrite it.
func TestSgemmBetaZeroIgnoresC(t *testing.T) {
	withKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, s := range [][3]int{{1, 1, 1}, {6, 16, 4}, {7, 17, 9}, {40, 50, 300}, {3, 4, 0}} {
			for _, alpha := range []float32{1, 0} {
				p := newProblem(rng, false, true, s[0], s[1], s[2], alpha, 0, 1)
				for i := range p.c {
					p.c[i] = float32(math.NaN())
				}
				got := append([]float32(nil), p.c...)
				p.sgemm(got)
				for i := range p.m {
					for j := range p.n {
						if v := got[i*p.ldc+j]; math.IsNaN(float64(v)) {
							t.Fatalf("%s: C[%d,%d] is NaN", p, i, j)
						}
					}
				}
				p.c = make([]float32, len(p.c)) // reference reads C only through beta
				p.check(t, func(c []float32) { copy(c, got) })
			}
		}
	})
}

func TestSgemmEmpty(t *testing.T) {
	c := []float32{1, 2, 3, 4}
	Sgemm(false, false, 0, 2, 3, 1, nil, 3, make([]float32, 6), 2, 0, nil, 2)
	Sgemm(false, false, 2, 0, 3, 1, make([]float32, 6), 3, nil, 1, 0, nil, 1)
	Sgemm(false, false, 2, 2, 0, 1, nil, 1, nil, 2, 2, c, 2)
	if c[0] != 2 || c[3] != 8 {
		t.Fatalf("k=0 must scale C by beta, got %v", c)
	}
}

func TestSgemmParallelMatchesSgemm(t *testing.T) {
	withKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, s := range [][3]int{{64, 256, 100}, {256, 70, 64}, {61, 333, 37}, {2, 3, 4}} {
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					p := newProblem(rng, tA, tB, s[0], s[1], s[2], 0.5, -0.75, 3)
					want := append([]float32(nil), p.c...)
					p.sgemm(want)
					for _, threads := range []int{0, 2, 3, 7} {
						got := append([]float32(nil), p.c...)
						SgemmParallel(threads, p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, got, p.ldc)
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s threads=%d: C[%d] = %g, Sgemm gave %g", p, threads, i, got[i], want[i])
							}
						}
					}
				}
			}
		}
	})
}

func TestCheck(t *testing.T) {
	f := make([]float32, 12)
	cases := []struct {
		name           string
		transA, transB bool
		m, n, k        int
		a              []float32
		lda            int
		b              []float32
		ldb            int
		c              []float32
		ldc            int
		ok             bool
	}{
		{"fits", false, false, 3, 4, 2, f[:6], 2, f[:8], 4, f, 4, true},
		{"trans fits", true, true, 3, 4, 2, f[:6], 3, f[:8], 2, f, 4, true},
		{"tight last row", false, false, 2, 2, 2, f[:5], 3, f[:4], 2, f[:4], 2, true},
		{"empty", false, false, 0, 0, 0, nil, 1, nil, 1, nil, 1, true},
		{"negative m", false, false, -1, 4, 2, f, 2, f, 4, f, 4, false},
		{"short a", false, false, 3, 4, 2, f[:5], 2, f[:8], 4, f, 4, false},
		{"short trans b", false, true, 3, 4, 2, f[:6], 2, f[:7], 2, f, 4, false},
		{"lda below width", false, false, 3, 4, 2, f, 1, f, 4, f, 4, false},
		{"ldc below width", false, false, 3, 4, 2, f, 2, f, 4, f, 3, false},
		{"zero ld", false, false, 0, 4, 0, nil, 0, nil, 4, nil, 4, false},
		{"short c", false, false, 3, 4, 2, f, 2, f, 4, f[:11], 4, false},
		{"huge stride", false, false, 3, 1, 1, f, math.MaxInt, f, 1, f, 1, false},
	}
	for _, tc := range cases {
		err := Check(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.a, tc.lda, tc.b, tc.ldb, tc.c, tc.ldc)
		if (err == nil) != tc.ok {
			t.Errorf("%s: Check = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadArgs) {
			t.Errorf("%s: %v does not wrap ErrBadArgs", tc.name, err)
		}
	}
}

func TestSgemmPanicsOnBadArgs(t *testing.T) {
	short := func() { // A needs 6 floats, gets 5
		Sgemm(false, false, 3, 4, 2, 1, make([]float32, 5), 2, make([]float32, 8), 4, 0, make([]float32, 12), 4)
	}
	shortParallel := func() { // C needs 12 floats, gets 11
		SgemmParallel(2, false, false, 3, 4, 2, 1, make([]float32, 6), 2, make([]float32, 8), 4, 0, make([]float32, 11), 4)
	}
	for name, f := range map[string]func(){"Sgemm": short, "SgemmParallel": shortParallel} {
		func() {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, ErrBadArgs) {
					t.Errorf("%s: recovered %v, want ErrBadArgs", name, err)
				}
			}()
			f()
		}()
	}
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }
