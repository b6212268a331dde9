// Package gemm owns the single-precision matrix multiply under the trainer:
// Sgemm computes C = alpha*op(A)*op(B) + beta*C on row-major float32 slices,
// and SgemmParallel splits the same work across goroutines.
//
// The work is blocked for the caches and both operands are packed into
// panels that a register-tile micro-kernel walks. The kernel is chosen once,
// at start-up, from what the CPU offers: on amd64 a 16×16 AVX-512 kernel, or
// a 6×16 AVX2+FMA kernel, both in assembly with gather-based packing of
// transposed panels; elsewhere, or built with the purego tag, a portable Go
// kernel over the same blocking. Transposes cost nothing extra: packing reads
// either layout. Products too small to repay packing take a direct loop.
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
