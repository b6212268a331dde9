package gossip

import (
	"math"
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
