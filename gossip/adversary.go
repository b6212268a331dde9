//go:build testhooks

package gossip

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"sync"
)

// Frame tampering, for test nodes that play a hostile peer (node.Adversary)
// and for nothing else. It exists in the testhooks build only (make
// build-testhooks): a release binary cannot be made to send tampered
// frames (adversary_release.go). An honest service of the testhooks build
// leaves Config.Tamper nil and pays one nil check per encoded frame.
//
// The encoder refuses what a broken or hostile peer would send (NaN, Inf),
// so the attacks that must reach the wire as such are applied to the
// encoded frame: the service hands Config.Tamper a copy of it, then
// recomputes the header's element count and checksum from the payload.
// The receiver thus refuses the frame for what it carries ("non_finite",
// "size_mismatch"), never for a checksum that does not add up.

// testHooks are the Config fields of the testhooks build.
type testHooks struct {
	// Tamper, if set, rewrites every frame we send after it is encoded:
	// it gets a copy (never the snapshot's memory), and the service then
	// sets the header's element count (an int8 tamper sets it itself) and
	// checksum from the payload, so a receiver refuses the frame for what
	// it carries. Only test nodes that
	// play a hostile peer set it; see NaNTamper and ResizeTamper.
	Tamper func(*Frame)
}

// hostile reports whether the service plays a hostile peer: it then serves
// a frame whatever size the requester expects, and reads the honest size.
func (s *Service) hostile() bool { return s.cfg.Tamper != nil }

// rewrite is f as the service sends it: tampered, if Tamper is set.
func (s *Service) rewrite(f *Frame) *Frame {
	if s.cfg.Tamper == nil {
		return f
	}
	return tamper(f, s.cfg.Tamper)
}

// tamper applies fn to a copy of f and reseals the copy. f, whose fp32
// payload may be the snapshot's own memory, is never written.
func tamper(f *Frame, fn func(*Frame)) *Frame {
	c := &Frame{Header: f.Header, payload: bytes.Clone(f.payload)}
	fn(c)
	c.reseal()
	return c
}

// reseal makes the header agree with the payload: whole elements only,
// their count, and their checksum.
func (f *Frame) reseal() {
	if f.Header.DType == INT8 {
		// The tamper kept the layout whole and set Elements.
		f.Header.Checksum = crc32.Checksum(f.payload, castagnoli)
		return
	}
	es := f.Header.DType.Size()
	f.payload = f.payload[:len(f.payload)/es*es]
	f.Header.Elements = uint64(len(f.payload) / es)
	f.Header.Checksum = crc32.Checksum(f.payload, castagnoli)
}

// NaNTamper returns a Config.Tamper that sets a fraction (in (0,1]) of a
// frame's elements to NaN, at least one, at positions drawn from seed. It
// is safe for concurrent use.
func NaNTamper(fraction float64, seed uint64) func(*Frame) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 0x6e616e))
	return func(f *Frame) {
		n := int(f.Header.Elements)
		if n == 0 {
			return
		}
		k := max(1, min(n, int(math.Round(fraction*float64(n)))))
		mu.Lock()
		defer mu.Unlock()
		for range k {
			i := rng.IntN(n)
			switch f.Header.DType {
			case INT8:
				// The element's block scale: the whole block decodes to NaN.
				binary.LittleEndian.PutUint32(f.payload[4*(i/Int8Block):], math.Float32bits(float32(math.NaN())))
			case FP16:
				binary.LittleEndian.PutUint16(f.payload[2*i:], 0x7e00) // quiet NaN
			default:
				binary.LittleEndian.PutUint32(f.payload[4*i:], math.Float32bits(float32(math.NaN())))
			}
		}
	}
}

// ResizeTamper returns a Config.Tamper that appends delta zero elements to
// a frame, or with delta < 0 drops -delta from its end (always leaving
// one): a model of another shape under the same fingerprint.
func ResizeTamper(delta int) func(*Frame) {
	return func(f *Frame) {
		if f.Header.DType == INT8 {
			resizeInt8(f, delta)
			return
		}
		es := f.Header.DType.Size()
		if delta >= 0 {
			f.payload = append(f.payload, make([]byte, delta*es)...)
			return
		}
		keep := max(1, len(f.payload)/es+delta)
		f.payload = f.payload[:keep*es]
	}
}

// resizeInt8 is ResizeTamper for an int8 frame: decoded, resized and
// encoded again, so the scales and values stay a valid layout.
func resizeInt8(f *Frame, delta int) {
	v := make([]float32, f.Header.Elements)
	newInt8Decoder(f.Header.Elements).decode(v, f.payload)
	if delta >= 0 {
		v = append(v, make([]float32, delta)...)
	} else {
		v = v[:max(1, len(v)+delta)]
	}
	f.payload = make([]byte, int8PayloadSize(uint64(len(v))))
	encodeInt8(f.payload, v)
	f.Header.Elements = uint64(len(v))
}
