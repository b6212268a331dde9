//go:build amd64 && !purego

package gemm

import "golang.org/x/sys/cpu"

// useAsm selects the AVX2+FMA kernel. Tests turn it off to exercise the
// portable kernel on the same machine.
var useAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// kernel computes C[0:mr, 0:nr] = alpha*Ap*Bp + beta*C; see kernelGeneric.
func kernel(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	if !useAsm {
		kernelGeneric(kc, a, b, c, ldc, alpha, beta)
		return
	}
	// The assembly trusts its pointers; these checks keep a driver bug a
	// Go panic instead of a stray write.
	_ = a[kc*mr-1]
	_ = b[kc*nr-1]
	_ = c[(mr-1)*ldc+nr-1]
	kernelAVX2(kc, &a[0], &b[0], &c[0], ldc, alpha, beta)
}

//go:noescape
func kernelAVX2(kc int, a, b, c *float32, ldc int, alpha, beta float32)
