package gemm

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// ErrBadArgs reports a call whose sizes, strides or slice lengths do not
// describe the matrices they claim to.
var ErrBadArgs = errors.New("gemm: bad arguments")

// Check reports whether the arguments of a Sgemm call with the same
// parameters are consistent: non-negative sizes, strides at least the stored
// row width, and slices long enough for every element the call touches.
// Callers with shapes from outside the program should call it first, since
// Sgemm treats a violation as a programming error.
func Check(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) error {
	var errs []error
	if m < 0 || n < 0 || k < 0 {
		errs = append(errs, fmt.Errorf("negative size m=%d n=%d k=%d", m, n, k))
	}
	// Stored shapes: A is m×k or, transposed, k×m; likewise B.
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if err := checkMatrix("a", ar, ac, len(a), lda); err != nil {
		errs = append(errs, err)
	}
	if err := checkMatrix("b", br, bc, len(b), ldb); err != nil {
		errs = append(errs, err)
	}
	if err := checkMatrix("c", m, n, len(c), ldc); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrBadArgs, errors.Join(errs...))
	}
	return nil
}

func checkMatrix(name string, rows, cols, length, ld int) error {
	if rows < 0 || cols < 0 {
		return nil // reported once as a negative size
	}
	if ld < max(1, cols) {
		return fmt.Errorf("ld%s=%d is less than the %d columns of %s", name, ld, cols, name)
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	// Compare without overflow: (rows-1)*ld+cols <= length.
	if length < cols || rows-1 > (length-cols)/ld {
		return fmt.Errorf("len(%s)=%d is shorter than %d rows with stride %d and %d columns", name, length, rows, ld, cols)
	}
	return nil
}

// Sgemm computes C = alpha*op(A)*op(B) + beta*C for row-major matrices, where
// op(X) is X or its transpose. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb
// and ldc are the row strides of A, B and C as stored.
//
// When beta is 0, C is only written, never read, so it may hold anything,
// NaN included; when alpha is 0 or k is 0, A and B are not read. C must not
// overlap A or B. Arguments that fail Check are a programming error and panic
// with an error wrapping ErrBadArgs, before any memory is touched. Sgemm is
// safe for concurrent use on distinct C.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if err := Check(transA, transB, m, n, k, a, lda, b, ldb, c, ldc); err != nil {
		panic(err)
	}
	sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmParallel is Sgemm with the work split across up to threads
// goroutines; threads < 1 means runtime.GOMAXPROCS(0). Problems too small to
// gain from more cores run on the calling goroutine. Results are identical to
// Sgemm's: each element of C is summed in the same order either way.
func SgemmParallel(threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if err := Check(transA, transB, m, n, k, a, lda, b, ldb, c, ldc); err != nil {
		panic(err)
	}
	if threads < 1 {
		threads = runtime.GOMAXPROCS(0)
	}
	// Below this much work a goroutine handoff costs more than it saves.
	const minWorkPerThread = 1 << 18
	threads = min(threads, max(1, m*n*k/minWorkPerThread))
	// Split the dimension whose split duplicates the cheaper packing: each
	// part packs the whole of the operand it does not split.
	splitN := m <= n
	mk := kernels[level]
	span, unit := m, mk.mr
	if splitN {
		span, unit = n, mk.nr
	}
	threads = min(threads, (span+unit-1)/unit)
	if threads <= 1 {
		sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	units := (span + unit - 1) / unit
	var wg sync.WaitGroup
	start := 0
	for t := range threads {
		end := min(span, (units*(t+1)/threads)*unit)
		if end <= start {
			continue
		}
		lo, size := start, end-start
		start = end
		if splitN {
			bOff := lo
			if transB {
				bOff = lo * ldb
			}
			wg.Go(func() {
				sgemm(transA, transB, m, size, k, alpha, a, lda, b[bOff:], ldb, beta, c[lo:], ldc)
			})
		} else {
			aOff := lo * lda
			if transA {
				aOff = lo
			}
			wg.Go(func() {
				sgemm(transA, transB, size, n, k, alpha, a[aOff:], lda, b, ldb, beta, c[lo*ldc:], ldc)
			})
		}
	}
	wg.Wait()
}

// sgemm runs a checked call.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	if m*n*k <= smallWork {
		small(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	blocked(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// scale sets C = beta*C, writing zeros without reading C when beta is 0.
func scale(m, n int, beta float32, c []float32, ldc int) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

// small handles problems where packing would cost more than it saves. The
// i-p-j order reads rows of B and C contiguously when B is not transposed;
// with B transposed a dot product reads both operands contiguously.
func small(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := range m {
		crow := c[i*ldc : i*ldc+n]
		if transB {
			for j := range crow {
				brow := b[j*ldb : j*ldb+k]
				var s float32
				if transA {
					for p, bv := range brow {
						s += a[p*lda+i] * bv
					}
				} else {
					arow := a[i*lda : i*lda+k]
					for p, bv := range brow {
						s += arow[p] * bv
					}
				}
				if beta == 0 {
					crow[j] = alpha * s
				} else {
					crow[j] = alpha*s + beta*crow[j]
				}
			}
			continue
		}
		switch beta {
		case 0:
			clear(crow)
		case 1:
		default:
			for j := range crow {
				crow[j] *= beta
			}
		}
		for p := range k {
			var av float32
			if transA {
				av = a[p*lda+i]
			} else {
				av = a[i*lda+p]
			}
			av *= alpha
			brow := b[p*ldb : p*ldb+n]
			for j, bv := range brow {
				crow[j] += av * bv
			}
		}
	}
}
