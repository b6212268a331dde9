package gossip

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestFrameRoundTripINT8: every element comes back within half its
// block's scale (1/254 of the block's largest magnitude), the block's
// largest exactly up to rounding of the scale, zeros as zeros; the frame
// has a scale per 256 elements and a byte per element; every chunk size
// the header allows reads it, including chunks that end inside the
// scales.
func TestFrameRoundTripINT8(t *testing.T) {
	// 300,000 elements carry 4,688 bytes of scales: more than the
	// smallest chunk.
	for _, n := range []int{1, 255, 256, 257, 3001, 70_000, 300_000} {
		s := testSnapshot(n, uint64(n))
		s.Params[0] = 0
		if n > 300 {
			// A block of zeros, one with a single large value, and one of
			// values so small that 127 over the largest overflows float32
			// (a zero among them).
			clear(s.Params[256:512])
			s.Params[600] = 1e30
			for i := 768; i < 1024 && i < n; i++ {
				s.Params[i] *= 1e-38
			}
			s.Params[800] = 0
		}
		for _, chunk := range []int{MinChunkSize, 4100, DefaultChunkSize} {
			b := encode(t, FrameWriter{DType: INT8, ChunkSize: chunk}, s)
			blocks := (n + 255) / 256
			if want := FrameHeaderSize + 4*blocks + n; len(b) != want {
				t.Fatalf("n=%d: frame of %d bytes, want %d", n, len(b), want)
			}
			h, err := ParseFrameHeader(b)
			if err != nil || h.DType != INT8 || h.PayloadSize() != uint64(4*blocks+n) {
				t.Fatalf("n=%d: header %+v, %v", n, h, err)
			}
			got, err := FrameReader{Limits: Limits{Fingerprint: testFP, Elements: n}}.ReadFrame(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("n=%d chunk=%d: %v", n, chunk, err)
			}
			for blk := range blocks {
				lo, hi := blk*256, min(blk*256+256, n)
				var m float64
				for _, v := range s.Params[lo:hi] {
					m = max(m, math.Abs(float64(v)))
				}
				for i := lo; i < hi; i++ {
					want := float64(s.Params[i])
					// Subnormal scales round coarser: allow their step.
					if d := math.Abs(float64(got.Params[i]) - want); d > m/254*(1+1e-6)+1e-44 {
						t.Fatalf("n=%d chunk=%d element %d: %g, want %g within %g", n, chunk, i, got.Params[i], want, m/254)
					}
					if want == 0 && got.Params[i] != 0 {
						t.Fatalf("n=%d element %d: %g, want 0", n, i, got.Params[i])
					}
				}
			}
		}
	}
}

// TestINT8ErrorIsUnbiased: rounding to nearest leaves no drift in the
// mean of many values, which is what a merge averages.
func TestINT8ErrorIsUnbiased(t *testing.T) {
	s := testSnapshot(100_000, 3)
	b := encode(t, FrameWriter{DType: INT8}, s)
	got, err := FrameReader{}.ReadFrame(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var sum, sumAbs float64
	for i, v := range s.Params {
		e := float64(got.Params[i] - v)
		sum += e
		sumAbs += math.Abs(e)
	}
	if mean, meanAbs := sum/1e5, sumAbs/1e5; math.Abs(mean) > meanAbs/20 {
		t.Fatalf("mean error %g against a mean magnitude %g: biased", mean, meanAbs)
	}
}

func TestFrameINT8FallsBackOnHugeValues(t *testing.T) {
	s := testSnapshot(10, 1)
	s.Params[3] = 3e38
	b := encode(t, FrameWriter{DType: INT8}, s)
	h, err := ParseFrameHeader(b)
	if err != nil || h.DType != FP32 {
		t.Fatalf("header %+v, %v: want fp32 fallback", h, err)
	}
	got, err := FrameReader{}.ReadFrame(bytes.NewReader(b))
	if err != nil || got.Params[3] != 3e38 {
		t.Fatalf("got %v, %v", got.Params, err)
	}
}

// TestReadFrameINT8Hostile: scales a careful hostile peer may send (NaN,
// Inf, or so large the values overflow) are refused as non-finite after
// the checksum; a truncated payload is a short read.
func TestReadFrameINT8Hostile(t *testing.T) {
	const n = 600
	good := encode(t, FrameWriter{DType: INT8}, testSnapshot(n, 9))
	h, err := ParseFrameHeader(good)
	if err != nil {
		t.Fatal(err)
	}
	payload := good[FrameHeaderSize:]
	for name, scale := range map[string]float32{
		"nan scale": float32(math.NaN()), "inf scale": float32(math.Inf(1)), "huge scale": 1e37,
	} {
		p := bytes.Clone(payload)
		binary.LittleEndian.PutUint32(p[4:], math.Float32bits(scale)) // the second block's
		p[12+300] = 127                                               // a value in it, for "huge"
		_, err := FrameReader{}.ReadFrame(bytes.NewReader(craftFrame(h, p)))
		if !errors.Is(err, ErrNonFinite) {
			t.Errorf("%s: %v, want non-finite", name, err)
		}
	}
	if _, err := (FrameReader{}).ReadFrame(bytes.NewReader(good[:len(good)-1])); !errors.Is(err, ErrShortRead) {
		t.Errorf("truncated: %v, want short read", err)
	}
	bad := bytes.Clone(good)
	bad[FrameHeaderSize+20]++
	if _, err := (FrameReader{}).ReadFrame(bytes.NewReader(bad)); !errors.Is(err, ErrChecksum) {
		t.Errorf("flipped byte: %v, want checksum", err)
	}
}

func TestParseDType(t *testing.T) {
	for _, d := range []DType{FP32, FP16, INT8} {
		if got, err := ParseDType(d.String()); err != nil || got != d {
			t.Errorf("ParseDType(%q) = %v, %v", d.String(), got, err)
		}
	}
	if _, err := ParseDType("int4"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("int4: %v, want a config error", err)
	}
}

// TestReducedDType: the all-reduce sends what the node sends, but fp16 for
// int8, which it does not carry.
func TestReducedDType(t *testing.T) {
	for d, want := range map[DType]DType{FP32: FP32, FP16: FP16, INT8: FP16} {
		if got := d.Reduced(); got != want {
			t.Errorf("%v.Reduced() = %v, want %v", d, got, want)
		}
	}
}

// TestEncodeInt8MatchesTheFirstEncoder: the branch-free encoder writes the
// bytes of the first one (kept below as the reference: a scale from the
// largest |v| in float64, then each value rounded with explicit clamps), so
// frames did not change: normal values, values across float32's exponents,
// exact halves of both signs, clamped extremes, zeros of both signs,
// blocks too small for 127/m in float32, the overflow bound and a short
// last block.
func TestEncodeInt8MatchesTheFirstEncoder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var cases [][]float32
	for _, n := range []int{1, 255, 256, 257, 1000, 235_146} {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		cases = append(cases, v)
		w := make([]float32, n)
		for i := range w {
			w[i] = float32(math.Ldexp(r.Float64()-0.5, r.IntN(240)-140))
		}
		cases = append(cases, w)
	}
	// Two blocks whose largest magnitude is 127 (scale 1): every other
	// value, -125.5 to 126.5, is an exact half.
	halves := make([]float32, 512)
	for i := range halves {
		halves[i] = float32(i%253-126) + 0.5
	}
	halves[0], halves[256] = 127, -127
	cases = append(cases, halves)
	tiny := make([]float32, 300)
	for i := range tiny {
		tiny[i] = float32(r.NormFloat64()) * 1e-38
	}
	tiny[3], tiny[4] = float32(math.Copysign(0, -1)), 0
	cases = append(cases, tiny, make([]float32, 700), []float32{float32(math.Copysign(0, -1)), 0, 1e-45, -1e-45})
	cases = append(cases, []float32{1e38, -1e38, 1, -3e37}, []float32{-1.0000001e38, 1}, []float32{1, float32(math.Inf(-1))})
	for ci, src := range cases {
		n := uint64(len(src))
		got := make([]byte, int8PayloadSize(n))
		want := make([]byte, int8PayloadSize(n))
		gotOver, wantOver := encodeInt8(got, src), firstEncodeInt8(want, src)
		if gotOver != wantOver {
			t.Fatalf("case %d (%d values): overflow %v, want %v", ci, n, gotOver, wantOver)
		}
		if !gotOver && !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("case %d (%d values): byte %d is %d, want %d", ci, n, i, got[i], want[i])
				}
			}
		}
	}
}

// firstEncodeInt8 is the first int8 encoder, the reference for the bytes.
func firstEncodeInt8(dst []byte, src []float32) (overflow bool) {
	nb := int(int8Blocks(uint64(len(src))))
	scales, vals := dst[:4*nb], dst[4*nb:]
	for b := range nb {
		lo, hi := b*Int8Block, min((b+1)*Int8Block, len(src))
		var m float32
		for _, v := range src[lo:hi] {
			m = max(m, float32(math.Abs(float64(v))))
		}
		if m > maxInt8Magnitude {
			return true
		}
		scale := m / 127
		binary.LittleEndian.PutUint32(scales[4*b:], math.Float32bits(scale))
		if m == 0 {
			clear(vals[lo:hi])
			continue
		}
		inv := 127 / float64(m)
		for i, v := range src[lo:hi] {
			x := float64(v) * inv
			var q int8
			switch {
			case x >= 127:
				q = 127
			case x <= -127:
				q = -127
			case x >= 0:
				q = int8(x + 0.5)
			case x < 0:
				q = int8(x - 0.5)
			}
			vals[lo+i] = byte(q)
		}
	}
	return false
}

// BenchmarkEncodeInt8: the int8 payload of a default-size model (235,146
// values), which every exchange on int8 encodes, by the encoder and by the
// first one.
func BenchmarkEncodeInt8(b *testing.B) {
	src := testSnapshot(235_146, 1).Params
	dst := make([]byte, int8PayloadSize(uint64(len(src))))
	for _, e := range []struct {
		name string
		enc  func([]byte, []float32) bool
	}{{"encoder", encodeInt8}, {"first", firstEncodeInt8}} {
		b.Run(e.name, func(b *testing.B) {
			for b.Loop() {
				e.enc(dst, src)
			}
			b.SetBytes(int64(4 * len(src)))
		})
	}
}
