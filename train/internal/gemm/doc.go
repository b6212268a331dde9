// Package gemm owns the single-precision matrix multiply under the trainer:
// Sgemm computes C = alpha*op(A)*op(B) + beta*C on row-major float32 slices,
// and SgemmParallel splits the same work across goroutines.
//
// On amd64 CPUs with AVX2 and FMA the inner loop is an assembly micro-kernel
// over packed, cache-blocked panels of A and B; elsewhere, or built with the
// purego tag, a portable Go kernel runs the same blocking. Transposes cost
// nothing extra: packing reads either layout.
//
// A dense layer's forward pass, Y = X·Wᵀ with X batch×in and W out×in:
//
//	gemm.Sgemm(false, true, batch, out, in, 1, x, in, w, in, 0, y, out)
//
// and its weight gradient dW = dYᵀ·X:
//
//	gemm.Sgemm(true, false, out, in, batch, 1, dy, out, x, in, 0, dw, in)
//
// Shapes, strides and lengths are checked before any memory is touched; Check
// returns the same verdict as an error for callers that take shapes from
// outside the program.
package gemm
