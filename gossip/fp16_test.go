package gossip

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFP16Bits(t *testing.T) {
	p2 := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"one third", 1.0 / 3, 0x3555},
		{"0.1", 0.1, 0x2e66},
		{"max finite", 65504, 0x7bff},
		{"just below overflow tie rounds down", 65519.99, 0x7bff},
		{"overflow tie rounds to inf", 65520, 0x7c00},
		{"large overflows to inf", 1e6, 0x7c00},
		{"negative overflow", -1e6, 0xfc00},
		{"+inf", float32(math.Inf(1)), 0x7c00},
		{"-inf", float32(math.Inf(-1)), 0xfc00},
		{"nan is quiet nan", float32(math.NaN()), 0x7e00},
		{"smallest normal", p2(-14), 0x0400},
		{"largest subnormal", p2(-14) - p2(-24), 0x03ff},
		{"smallest subnormal", p2(-24), 0x0001},
		{"negative smallest subnormal", -p2(-24), 0x8001},
		{"half smallest subnormal ties to zero", p2(-25), 0x0000},
		{"above half smallest subnormal rounds up", p2(-25) + p2(-40), 0x0001},
		{"1.5 subnormal ulps ties to even 2", 3 * p2(-25), 0x0002},
		{"2.5 subnormal ulps ties to even 2", 5 * p2(-25), 0x0002},
		{"below subnormal range", p2(-30), 0x0000},
		{"float32 subnormal", math.Float32frombits(1), 0x0000},
		{"subnormal rounds up into normal", p2(-14) - p2(-26), 0x0400},
		{"tie between 1 and next rounds to even 1", 1 + p2(-11), 0x3c00},
		{"tie above odd rounds up to even", 1 + 3*p2(-11), 0x3c02},
		{"just above tie rounds up", 1 + p2(-11) + p2(-20), 0x3c01},
		{"mantissa carry bumps exponent", 2 - p2(-12), 0x4000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FP16Bits(tc.in); got != tc.want {
				t.Errorf("FP16Bits(%g) = %#04x, want %#04x", tc.in, got, tc.want)
			}
		})
	}
}

func TestFP16Value(t *testing.T) {
	tests := []struct {
		in   uint16
		want float32
	}{
		{0x0000, 0},
		{0x3c00, 1},
		{0xc000, -2},
		{0x7bff, 65504},
		{0x0400, float32(math.Ldexp(1, -14))},
		{0x0001, float32(math.Ldexp(1, -24))},
		{0x03ff, float32(math.Ldexp(1023, -24))},
		{0x8001, -float32(math.Ldexp(1, -24))},
		{0x7c00, float32(math.Inf(1))},
		{0xfc00, float32(math.Inf(-1))},
	}
	for _, tc := range tests {
		if got := FP16Value(tc.in); got != tc.want {
			t.Errorf("FP16Value(%#04x) = %g, want %g", tc.in, got, tc.want)
		}
	}
	if got := FP16Value(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("FP16Value(0x8000) = %g, want -0", got)
	}
	if got := FP16Value(0x7e00); !math.IsNaN(float64(got)) {
		t.Errorf("FP16Value(0x7e00) = %g, want NaN", got)
	}
}

// Every fp16 value survives widening and narrowing, and every midpoint
// between two neighbours rounds to the even one (and a hair either side of
// it to the nearer one): that is round-to-nearest-even over the whole
// range, subnormals included.
func TestFP16Exhaustive(t *testing.T) {
	for h := range 0x7c00 { // all finite non-negative values
		v := FP16Value(uint16(h))
		if got := FP16Bits(v); got != uint16(h) {
			t.Fatalf("round trip of %#04x (%g) gave %#04x", h, v, got)
		}
		if got := FP16Bits(-v); got != uint16(h)|0x8000 {
			t.Fatalf("round trip of -%#04x gave %#04x", h, got)
		}
		if h == 0x7bff {
			continue
		}
		next := FP16Value(uint16(h + 1))
		mid := (v + next) / 2 // exact: needs one bit more than fp16 has
		even := uint16(h)
		if h%2 == 1 {
			even = uint16(h + 1)
		}
		if got := FP16Bits(mid); got != even {
			t.Fatalf("midpoint of %#04x and next: got %#04x, want %#04x", h, got, even)
		}
		if got := FP16Bits(math.Nextafter32(mid, 0)); got != uint16(h) {
			t.Fatalf("just below midpoint above %#04x: got %#04x", h, got)
		}
		if got := FP16Bits(math.Nextafter32(mid, 1e9)); got != uint16(h+1) {
			t.Fatalf("just above midpoint above %#04x: got %#04x", h, got)
		}
	}
}

func TestEncodeFP16Overflow(t *testing.T) {
	b := make([]byte, 6)
	if encodeFP16(b, []float32{1, -65504, float32(math.Inf(1))}) {
		t.Error("max finite and an input Inf reported as overflow")
	}
	if !encodeFP16(b, []float32{1, 70000, 0}) {
		t.Error("70000 not reported as overflow")
	}
	if encodeFP16(nil, nil) {
		t.Error("empty input reported as overflow")
	}
}

// The F16C path gives the portable path's bytes and overflow report, bit
// for bit: on every fp16 value, every midpoint and its neighbours, float32
// subnormals, values at and beyond the overflow threshold, Inf, and a
// spread of random values, in lengths that leave a tail for the portable
// loop.
func TestEncodeF16CMatchesGo(t *testing.T) {
	if !useF16C {
		t.Skip("this CPU has no F16C: the portable path is the only one")
	}
	var in []float32
	for h := range 0x7c00 {
		v := FP16Value(uint16(h))
		next := FP16Value(uint16(h + 1))
		mid := (v + next) / 2
		in = append(in, v, -v, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1e9))
	}
	in = append(in, math.Float32frombits(1), math.Float32frombits(0x7fffff), 65504, 65519.99, 65520, 65536, 1e9,
		float32(math.Inf(1)), float32(math.Inf(-1)), -70000)
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		in = append(in, math.Float32frombits(r.Uint32()&0xff7fffff|uint32(r.IntN(2))<<31)) // no NaN: exponent < 0xff
	}
	for _, n := range []int{len(in), len(in) - 3, 8, 9, 15} {
		src := in[:n]
		want, got := make([]byte, 2*n), make([]byte, 2*n)
		wantOver := encodeFP16Go(want, src)
		gotOver := encodeFP16(got, src)
		if gotOver != wantOver {
			t.Fatalf("n=%d: overflow %v, portable path says %v", n, gotOver, wantOver)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("n=%d: value %d (%g): %#04x, portable path %#04x", n, i/2, src[i/2],
				uint16(got[i&^1])|uint16(got[i|1])<<8, uint16(want[i&^1])|uint16(want[i|1])<<8)
		}
	}
	// Overflow inside an 8-wide block, and an Inf (not an overflow) there.
	b := make([]byte, 32)
	if !encodeFP16(b, []float32{1, 2, 3, 70000, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}) {
		t.Error("70000 in a block not reported as overflow")
	}
	if encodeFP16(b, []float32{1, 2, 3, float32(math.Inf(-1)), 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}) {
		t.Error("an input -Inf in a block reported as overflow")
	}
}

// Widening with F16C gives the table's float32 for every one of the 65,536
// bit patterns (a NaN for a NaN).
func TestDecodeF16CMatchesGo(t *testing.T) {
	if !useF16C {
		t.Skip("this CPU has no F16C: the portable path is the only one")
	}
	src := make([]byte, 2*(1<<16)+6) // three values of tail
	for h := range 1 << 16 {
		src[2*h], src[2*h+1] = byte(h), byte(h>>8)
	}
	n := len(src) / 2
	want, got := make([]float32, n), make([]float32, n)
	decodeFP16Go(want, src)
	decodeFP16(got, src)
	for i := range got {
		w, g := want[i], got[i]
		if w != w && g != g {
			continue
		}
		if math.Float32bits(w) != math.Float32bits(g) {
			t.Fatalf("%#04x: %g (%#08x), table %g (%#08x)", i, g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// decodeFP16 reports whether every value it widened is finite, on both
// paths, for every bit pattern in every lane of a vector and in the tail.
func TestDecodeFP16ReportsNonFinite(t *testing.T) {
	paths := []struct {
		name string
		f    func(dst []float32, src []byte) bool
	}{{"portable", decodeFP16Go}, {"decodeFP16", decodeFP16}}
	const n = 19 // two vectors and a tail of three
	for h := range 1 << 16 {
		bad := h&0x7c00 == 0x7c00
		for _, at := range []int{0, 5, 7, 8, 15, 16, 18} {
			if h%97 != 0 && !bad && at != 0 {
				continue // every finite pattern in one lane; a sample in the others
			}
			src := make([]byte, 2*n) // zeros elsewhere
			src[2*at], src[2*at+1] = byte(h), byte(h>>8)
			for _, p := range paths {
				if got := p.f(make([]float32, n), src); got == bad {
					t.Fatalf("%s: %#04x at %d: finite %v", p.name, h, at, got)
				}
			}
		}
	}
	if !decodeFP16(nil, nil) {
		t.Error("nothing decoded is finite")
	}
}
