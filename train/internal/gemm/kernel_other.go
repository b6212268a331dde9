//go:build !amd64 || purego

package gemm

// useAsm is always false here: there is no assembly kernel for this target.
var useAsm = false

func kernel(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	kernelGeneric(kc, a, b, c, ldc, alpha, beta)
}
