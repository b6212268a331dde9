package gossip

import (
	"encoding/binary"
	"math"
)

// Blockwise int8 quantization of a frame's payload (dtype int8). The
// elements are cut into blocks of Int8Block; each block is sent as one
// float32 scale, its largest magnitude over 127, and one signed byte per
// element, the element over the scale rounded to nearest. The receiver
// multiplies back. An element is off by at most half its block's scale:
// 1/254 of the block's largest magnitude. The payload is every block's
// scale first, then every element's byte, so a receiver reading chunk by
// chunk holds the scales before the first value arrives.
//
// A quarter of fp32's bytes and half of fp16's: on a link where moving the
// model is the slow part of an exchange (a WAN), exchanges finish sooner
// and the swarm mixes more often. This is how hivemind and INTELLECT-1
// compress what their peers average (8-bit blockwise), and what QSGD-style
// quantized gossip analyses bound: the error is unbiased in sign, bounded
// per block, and each node keeps its own model exact.

// Int8Block is the number of elements that share one scale.
const Int8Block = 256

// maxInt8Magnitude is the largest magnitude a block may hold for its
// decoded values to stay finite (127 times the scale may round up past
// the largest float32 near the top of its range). A snapshot with a larger
// value is sent as fp32.
const maxInt8Magnitude = 1e38

// int8Blocks is the number of scales an n-element payload carries.
func int8Blocks(n uint64) uint64 { return (n + Int8Block - 1) / Int8Block }

// int8PayloadSize is the size of an n-element int8 payload: a float32
// scale per block, then a byte per element.
func int8PayloadSize(n uint64) uint64 { return 4*int8Blocks(n) + n }

// encodeInt8 writes src's int8 payload into dst, of int8PayloadSize
// bytes. It reports overflow, writing nothing meaningful, if a block holds
// a magnitude above maxInt8Magnitude. NaN or Inf in src make their block's
// scale non-finite: the caller checks finiteness first.
//
// Every exchange a node takes part in encodes its model, so this loop is
// written without branches: the largest magnitude is found on the
// float32s' bits (with the sign cleared, a finite float32's bits order as
// its magnitude), and a value rounds to nearest, halves away from zero, by
// adding half with its sign and truncating (|x| <= 127 within float64's
// rounding, so no clamp is needed).
func encodeInt8(dst []byte, src []float32) (overflow bool) {
	nb := int(int8Blocks(uint64(len(src))))
	scales, vals := dst[:4*nb], dst[4*nb:]
	for b := range nb {
		lo, hi := b*Int8Block, min((b+1)*Int8Block, len(src))
		blk, out := src[lo:hi], vals[lo:hi]
		var mb uint32
		for _, v := range blk {
			mb = max(mb, math.Float32bits(v)&0x7fffffff)
		}
		m := math.Float32frombits(mb)
		if m > maxInt8Magnitude {
			return true
		}
		scale := m / 127
		binary.LittleEndian.PutUint32(scales[4*b:], math.Float32bits(scale))
		if m == 0 {
			clear(out)
			continue
		}
		// In float64: 127/m overflows float32 for blocks of values below
		// about 3.7e-37.
		inv := 127 / float64(m)
		out = out[:len(blk)] // the same length: lets the compiler drop the bounds check
		for i, v := range blk {
			x := float64(v) * inv
			out[i] = byte(int32(x + math.Copysign(0.5, x)))
		}
	}
	return false
}

// int8Decoder decodes an int8 payload that arrives in pieces, in order:
// first the scales, then the values. It accepts any bytes: a hostile
// sender's non-finite or huge scale decodes to non-finite values, which
// the reader's finiteness check refuses.
type int8Decoder struct {
	scales []float32
	// pos is the number of payload bytes decoded so far.
	pos int
}

func newInt8Decoder(n uint64) *int8Decoder {
	return &int8Decoder{scales: make([]float32, int8Blocks(n))}
}

// decode takes the next piece p of the payload (pieces split at multiples
// of 4, so no scale is split) and writes the values it holds into out,
// the whole vector. It returns the values written, for the caller's
// finiteness check (nil while p holds scales only).
func (d *int8Decoder) decode(out []float32, p []byte) []float32 {
	sb := 4 * len(d.scales)
	for d.pos < sb && len(p) > 0 {
		k := min(len(p), sb-d.pos)
		for i := 0; i+4 <= k; i += 4 {
			d.scales[(d.pos+i)/4] = math.Float32frombits(binary.LittleEndian.Uint32(p[i:]))
		}
		d.pos += k
		p = p[k:]
	}
	if len(p) == 0 {
		return nil
	}
	lo := d.pos - sb
	dst := out[lo : lo+len(p)]
	for i, q := range p {
		dst[i] = float32(int8(q)) * d.scales[(lo+i)/Int8Block]
	}
	d.pos += len(p)
	return dst
}
