package train

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestScalePixEveryByte: every byte value scales, through the vector loop
// where there is one, to exactly float32(b) / 255, pixFloat's bits. Each
// value is checked at every position in a vector, so a lane or block that
// drifts shows up.
func TestScalePixEveryByte(t *testing.T) {
	pix := make([]uint8, 256+7)
	dst := make([]float32, len(pix))
	for shift := range 8 {
		for i := range pix {
			pix[i] = uint8(i + shift)
		}
		scalePix(dst, pix)
		for i, b := range pix {
			want := float32(b) / 255
			if got := dst[i]; math.Float32bits(got) != math.Float32bits(want) || math.Float32bits(got) != math.Float32bits(pixFloat[b]) {
				t.Fatalf("shift %d: byte %d at %d scales to %v (%#x), want %v (%#x)",
					shift, b, i, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
}

// TestScalePixMatchesGo: scalePix (the vector loop and the Go tail) gives
// the Go loop's bits for random lengths 0..100 at random offsets into both
// slices (so neither is aligned), and leaves dst beyond len(pix) alone.
func TestScalePixMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const maxN, slack = 100, 16
	pixBuf := make([]uint8, maxN+slack)
	dstBuf, wantBuf := make([]float32, maxN+2*slack), make([]float32, maxN+2*slack)
	sentinel := math.Float32frombits(0x7fc0dead) // a NaN no scaling yields
	for range 2000 {
		n := r.IntN(maxN + 1)
		po, do, extra := r.IntN(slack), r.IntN(slack), r.IntN(slack)
		for i := range pixBuf {
			pixBuf[i] = uint8(r.Uint32())
		}
		for i := range dstBuf {
			dstBuf[i], wantBuf[i] = sentinel, sentinel
		}
		pix := pixBuf[po : po+n]
		scalePix(dstBuf[do:do+n+extra], pix)
		scalePixGo(wantBuf[do:do+n+extra], pix)
		for i := range dstBuf {
			got, want := math.Float32bits(dstBuf[i]), math.Float32bits(wantBuf[i])
			if i >= do+n && got != math.Float32bits(sentinel) {
				t.Fatalf("n=%d offsets %d,%d: dst[%d] beyond len(pix) written: %v", n, po, do, i-do, dstBuf[i])
			}
			if got != want {
				t.Fatalf("n=%d offsets %d,%d: dst[%d] = %v (%#x), Go loop %v (%#x)", n, po, do, i-do, dstBuf[i], got, wantBuf[i], want)
			}
		}
	}
}

// BenchmarkScalePix times scaling one MNIST row (784 bytes, as RowTo does
// per sample) and a batch of 64 rows (as RowsTo does): scalePix as built
// ("vec", the vector loop where there is one) and the Go table loop alone
// ("go"). Bytes are counted per pixel read.
func BenchmarkScalePix(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		name string
		n    int
	}{{"row784", 784}, {"batch64", 64 * 784}} {
		pix, dst := make([]uint8, c.n), make([]float32, c.n)
		for i := range pix {
			if r.IntN(5) == 0 { // MNIST is mostly background
				pix[i] = uint8(r.Uint32())
			}
		}
		b.Run(c.name+"/vec", func(b *testing.B) {
			b.SetBytes(int64(c.n))
			for b.Loop() {
				scalePix(dst, pix)
			}
		})
		b.Run(c.name+"/go", func(b *testing.B) {
			b.SetBytes(int64(c.n))
			for b.Loop() {
				scalePixGo(dst, pix)
			}
		})
	}
}
