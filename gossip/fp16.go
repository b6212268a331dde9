package gossip

import (
	"math"
	"sync"
)

// IEEE 754 binary16 conversion. Frames may carry parameters as fp16 to halve
// the bytes on the wire; the receiver widens them back to float32 exactly.

// MaxFP16 is the largest finite fp16 value. Finite float32 values that round
// beyond it become ±Inf, which a receiver rejects, so the encoder falls back
// to fp32 when it meets one.
const MaxFP16 = 65504

// FP16Bits converts f to binary16 with round-to-nearest-even, producing
// subnormals below 2^-14, ±0 below half the smallest subnormal, ±Inf on
// overflow and a quiet NaN for any NaN.
func FP16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	x := b & 0x7fffffff
	switch {
	case x >= 0x38800000 && x < 0x477ff000:
		// The common case, a value that rounds to a normal fp16: rebias
		// the exponent (127 -> 15) and round the 13 dropped mantissa bits
		// to nearest even in one addition; a carry out of the mantissa
		// correctly bumps the exponent.
		return sign | uint16((x-0x38000000+0x0fff+(x>>13)&1)>>13)
	case x > 0x7f800000:
		return sign | 0x7e00
	case x >= 0x477ff000:
		// From 65520 (the midpoint above MaxFP16, which ties to the even
		// neighbour 65536) upwards, and Inf itself.
		return sign | 0x7c00
	}
	// Subnormal in fp16 (float32 subnormals land here too and round to
	// zero). With e the fp16 exponent (<= 0), the value in units of 2^-24
	// is m >> (14-e).
	e := int32(x>>23) - 127 + 15
	if e < -10 {
		return sign
	}
	m := x&0x7fffff | 0x800000
	return sign | uint16(roundShift(m, uint32(14-e)))
}

// roundShift returns v >> s rounded to nearest, ties to even.
func roundShift(v, s uint32) uint32 {
	q := v >> s
	r := v & (1<<s - 1)
	half := uint32(1) << (s - 1)
	if r > half || (r == half && q&1 == 1) {
		q++
	}
	return q
}

// FP16Value widens binary16 bits to float32; every fp16 value is exact in
// float32.
func FP16Value(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	e := int32(h>>10) & 0x1f
	m := uint32(h & 0x3ff)
	switch e {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | m<<13)
	case 0:
		if m == 0 {
			return math.Float32frombits(sign)
		}
		// Normalise the subnormal: shift until the implicit bit appears.
		e = 1
		for m&0x400 == 0 {
			m <<= 1
			e--
		}
		m &= 0x3ff
	}
	return math.Float32frombits(sign | uint32(e+112)<<23 | m<<13)
}

// encodeFP16 writes src as little-endian binary16 into dst (2 bytes per
// element) and reports whether any finite value overflowed to Inf. On
// amd64 with F16C it converts eight values per instruction (the same
// round-to-nearest-even, bit for bit); elsewhere it is encodeFP16Go.
func encodeFP16(dst []byte, src []float32) (overflow bool) {
	if len(src) == 0 {
		return false
	}
	_ = dst[2*len(src)-1]
	if n := len(src) &^ 7; n > 0 && useF16C {
		if encodeF16C(dst, src[:n]) {
			// Some value came out as ±Inf: from Inf or from overflow; the
			// portable loop tells which.
			if encodeFP16Go(dst[:2*n], src[:n]) {
				overflow = true
			}
		}
		return encodeFP16Go(dst[2*n:], src[n:]) || overflow
	}
	return encodeFP16Go(dst, src)
}

// encodeFP16Go is encodeFP16 one element at a time, in portable Go.
func encodeFP16Go(dst []byte, src []float32) (overflow bool) {
	if len(src) == 0 {
		return false
	}
	_ = dst[2*len(src)-1]
	for i, f := range src {
		h := FP16Bits(f)
		dst[2*i] = byte(h)
		dst[2*i+1] = byte(h >> 8)
		if h&0x7fff == 0x7c00 && f-f == 0 {
			overflow = true
		}
	}
	return overflow
}

// fp16Table maps every binary16 bit pattern to its float32 value: 256 KiB
// that turn decoding into one load per element.
var fp16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = FP16Value(uint16(h))
	}
	return &t
})

// decodeFP16 widens little-endian binary16 src into dst (with F16C on
// amd64, eight values per instruction; every finite value is exact either
// way, and a NaN stays a NaN) and reports whether every value is finite,
// so that a receiver need not scan dst again.
func decodeFP16(dst []float32, src []byte) (finite bool) {
	if len(dst) == 0 {
		return true
	}
	_ = src[2*len(dst)-1]
	finite = true
	if n := len(dst) &^ 7; n > 0 && useF16C {
		finite = decodeF16C(dst[:n], src[:2*n])
		dst, src = dst[n:], src[2*n:]
	}
	return decodeFP16Go(dst, src) && finite
}

// decodeFP16Go is decodeFP16 by table lookup, in portable Go.
func decodeFP16Go(dst []float32, src []byte) (finite bool) {
	if len(dst) == 0 {
		return true
	}
	_ = src[2*len(dst)-1]
	t := fp16Table()
	inf := false // some exponent is all ones: ±Inf or NaN
	for i := range dst {
		h := uint16(src[2*i]) | uint16(src[2*i+1])<<8
		dst[i] = t[h]
		inf = inf || h&0x7c00 == 0x7c00
	}
	return !inf
}

// roundFP16 rounds every value of v to the nearest fp16 value in place, as
// a receiver of v in fp16 reads it, and reports true; if some value would
// overflow fp16 it leaves v alone and reports false.
func roundFP16(v []float32) bool {
	buf := make([]byte, 2*len(v))
	if encodeFP16(buf, v) {
		return false
	}
	decodeFP16(v, buf)
	return true
}
