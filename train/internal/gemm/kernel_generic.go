package gemm

// level indexes kernels: the micro-kernel in use. It starts at the best one
// the CPU runs; tests lower it to cover the others.
var level = detectLevel()

const levelGeneric = 0

// The portable kernel's tile: six rows keep three 2×4 passes per column
// group, sixteen columns match the AVX2 layout.
const (
	genericMR = 6
	genericNR = 16
)

// kernelGeneric is the portable kernelFunc for a genericMR×genericNR tile.
//
// It works on 2×4 sub-tiles so the eight running sums fit in registers; the
// packed panels are small enough to stay in L1 across the twelve passes.
func kernelGeneric(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	const mr, nr = genericMR, genericNR
	a = a[:kc*mr]
	b = b[:kc*nr]
	for i := 0; i < mr; i += 2 {
		for j := 0; j < nr; j += 4 {
			var s00, s01, s02, s03, s10, s11, s12, s13 float32
			// Loading each b value right before its two uses keeps the live
			// values within the register file.
			for p := range kc {
				av := (*[2]float32)(a[p*mr+i:])
				bv := (*[4]float32)(b[p*nr+j:])
				a0, a1 := av[0], av[1]
				b0 := bv[0]
				s00 += a0 * b0
				s10 += a1 * b0
				b1 := bv[1]
				s01 += a0 * b1
				s11 += a1 * b1
				b2 := bv[2]
				s02 += a0 * b2
				s12 += a1 * b2
				b3 := bv[3]
				s03 += a0 * b3
				s13 += a1 * b3
			}
			r0 := c[i*ldc+j : i*ldc+j+4]
			r1 := c[(i+1)*ldc+j : (i+1)*ldc+j+4]
			if beta == 0 {
				r0[0], r0[1], r0[2], r0[3] = alpha*s00, alpha*s01, alpha*s02, alpha*s03
				r1[0], r1[1], r1[2], r1[3] = alpha*s10, alpha*s11, alpha*s12, alpha*s13
				continue
			}
			r0[0] = alpha*s00 + beta*r0[0]
			r0[1] = alpha*s01 + beta*r0[1]
			r0[2] = alpha*s02 + beta*r0[2]
			r0[3] = alpha*s03 + beta*r0[3]
			r1[0] = alpha*s10 + beta*r1[0]
			r1[1] = alpha*s11 + beta*r1[1]
			r1[2] = alpha*s12 + beta*r1[2]
			r1[3] = alpha*s13 + beta*r1[3]
		}
	}
}
