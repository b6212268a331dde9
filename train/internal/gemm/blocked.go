package gemm

import (
	"sync"
	"unsafe"
)

// kernelFunc computes C[0:mr, 0:nr] = alpha*Ap*Bp + beta*C, where Ap is an
// mr-row panel and Bp an nr-column panel of length kc as packA and packB lay
// them out. C is read only when beta is not 0.
type kernelFunc func(kc int, a, b, c []float32, ldc int, alpha, beta float32)

// microKernel is a register tile shape and the code that computes it.
type microKernel struct {
	mr, nr int
	run    kernelFunc
}

// maxTile bounds mr*nr over all kernels, for the edge scratch tile.
const maxTile = 16 * 16

// Cache blocking. A kc×nr panel of packed B (16 KiB at nr=16) stays in L1
// while the kernel streams mr×kc panels of packed A from an mc×kc block
// (144 KiB) kept in L2; nc bounds the packed B block.
const (
	kcMax = 256
	mcMax = 144
	ncMax = 1024
)

// smallWork is the m*n*k below which packing costs more than it saves.
const smallWork = 4096

// workspace holds the packed blocks and the edge tile of one call; pooled so
// a steady stream of calls does not allocate.
type workspace struct {
	buf  []float32
	tile [maxTile]float32
}

var workspaces = sync.Pool{New: func() any { return new(workspace) }}

// floats returns n floats starting on a cache line, growing the buffer when
// needed, so packed panel rows never straddle a line.
func (w *workspace) floats(n int) []float32 {
	const align = 64 / 4
	if cap(w.buf) < n+align {
		w.buf = make([]float32, n+align)
	}
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(w.buf)))%64) / 4
	if off != 0 {
		off = align - off
	}
	return w.buf[off : off+n]
}

// blocked computes C = alpha*op(A)*op(B) + beta*C for m, n, k > 0 by packing
// op(A) and op(B) into the micro-kernel's panel layout block by block.
func blocked(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	mk := kernels[level]
	mr, nr := mk.mr, mk.nr
	// Equal k blocks avoid a thin last block that would pay the packing and
	// C update cost for little work.
	kb := (k + kcMax - 1) / kcMax
	kc0 := (k + kb - 1) / kb
	mc0 := min(mcMax/mr*mr, roundUp(m, mr))
	nc0 := min(ncMax, roundUp(n, nr))

	ws := workspaces.Get().(*workspace)
	defer workspaces.Put(ws)
	buf := ws.floats(mc0*kc0 + kc0*nc0)
	pa, pb := buf[:mc0*kc0], buf[mc0*kc0:]

	for jc := 0; jc < n; jc += nc0 {
		nc := min(nc0, n-jc)
		for pc := 0; pc < k; pc += kc0 {
			kc := min(kc0, k-pc)
			packB(transB, b, ldb, pc, kc, jc, nc, nr, pb)
			// Later k blocks add to what the first one stored.
			bet := beta
			if pc > 0 {
				bet = 1
			}
			for ic := 0; ic < m; ic += mc0 {
				mc := min(mc0, m-ic)
				packA(transA, a, lda, ic, mc, pc, kc, mr, pa)
				macro(mk, mc, nc, kc, alpha, pa, pb, bet, c[ic*ldc+jc:], ldc, ws.tile[:])
			}
		}
	}
}

func roundUp(x, unit int) int { return (x + unit - 1) / unit * unit }

// macro multiplies a packed mc×kc block of A by a packed kc×nc block of B
// into C. Edge tiles go through the scratch tile so the kernel never touches
// memory outside C.
func macro(mk microKernel, mc, nc, kc int, alpha float32, pa, pb []float32, beta float32, c []float32, ldc int, tile []float32) {
	mr, nr := mk.mr, mk.nr
	for jr := 0; jr < nc; jr += nr {
		nw := min(nr, nc-jr)
		bp := pb[jr*kc : jr*kc+kc*nr]
		for ir := 0; ir < mc; ir += mr {
			mh := min(mr, mc-ir)
			ap := pa[ir*kc : ir*kc+kc*mr]
			if mh == mr && nw == nr {
				mk.run(kc, ap, bp, c[ir*ldc+jr:], ldc, alpha, beta)
				continue
			}
			mk.run(kc, ap, bp, tile, nr, 1, 0)
			for i := range mh {
				row := c[(ir+i)*ldc+jr : (ir+i)*ldc+jr+nw]
				t := tile[i*nr : i*nr+nw]
				if beta == 0 {
					for j := range row {
						row[j] = alpha * t[j]
					}
				} else {
					for j := range row {
						row[j] = alpha*t[j] + beta*row[j]
					}
				}
			}
		}
	}
}

// packA copies op(A)[i0:i0+mc, p0:p0+kc] into panels of mr rows: panel r
// holds, for each p, the mr values op(A)[i0+r*mr+0..mr-1, p0+p] in a row.
// Rows past mc are zero so edge tiles need no special kernel.
func packA(trans bool, a []float32, lda, i0, mc, p0, kc, mr int, dst []float32) {
	for ir := 0; ir < mc; ir += mr {
		mh := min(mr, mc-ir)
		panel := dst[ir*kc : ir*kc+kc*mr]
		if mh < mr {
			clear(panel)
		}
		if trans {
			// op(A)[i][p] = A[p][i]: each p is a contiguous run of rows.
			if mh == 16 && copy16(a[p0*lda+i0+ir:], lda, kc, panel) {
				continue
			}
			for p := range kc {
				src := a[(p0+p)*lda+i0+ir:]
				d := panel[p*mr:]
				switch {
				case mh == 16:
					*(*[16]float32)(d) = *(*[16]float32)(src)
				case mh == 6:
					*(*[6]float32)(d) = *(*[6]float32)(src)
				default:
					copy(d[:mh], src)
				}
			}
			continue
		}
		src := a[(i0+ir)*lda+p0:]
		if mh != 16 || !transpose16(src, lda, kc, panel) {
			transpose(src, lda, mh, kc, panel, mr)
		}
	}
}

// packB copies op(B)[p0:p0+kc, j0:j0+nc] into panels of nr columns: panel r
// holds, for each p, the nr values op(B)[p0+p, j0+r*nr+0..nr-1] in a row.
// Columns past nc are zero.
func packB(trans bool, b []float32, ldb, p0, kc, j0, nc, nr int, dst []float32) {
	for jr := 0; jr < nc; jr += nr {
		nw := min(nr, nc-jr)
		panel := dst[jr*kc : jr*kc+kc*nr]
		if nw < nr {
			clear(panel)
		}
		if trans {
			// op(B)[p][j] = B[j][p]: each column of the panel is a row of B.
			src := b[(j0+jr)*ldb+p0:]
			if nw != 16 || !transpose16(src, ldb, kc, panel) {
				transpose(src, ldb, nw, kc, panel, nr)
			}
			continue
		}
		if nw == 16 && copy16(b[p0*ldb+j0+jr:], ldb, kc, panel) {
			continue
		}
		for p := range kc {
			src := b[(p0+p)*ldb+j0+jr:]
			d := panel[p*nr:]
			if nw == 16 {
				*(*[16]float32)(d) = *(*[16]float32)(src)
				continue
			}
			copy(d[:nw], src)
		}
	}
}

// transpose sets dst[p*stride+j] = src[j*ld+p] for j < w, p < kc. Reading
// four rows per pass writes four neighbouring floats of each output row at
// once, twice as fast as one row per pass.
func transpose(src []float32, ld, w, kc int, dst []float32, stride int) {
	j := 0
	for ; j+4 <= w; j += 4 {
		s0 := src[j*ld:][:kc]
		s1 := src[(j+1)*ld:][:kc]
		s2 := src[(j+2)*ld:][:kc]
		s3 := src[(j+3)*ld:][:kc]
		for p := range kc {
			d := (*[4]float32)(dst[p*stride+j:])
			d[0], d[1], d[2], d[3] = s0[p], s1[p], s2[p], s3[p]
		}
	}
	for ; j < w; j++ {
		s := src[j*ld:][:kc]
		d := dst[j:]
		for p, v := range s {
			d[p*stride] = v
		}
	}
}
