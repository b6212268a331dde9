package gossip

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/params"
)

// FuzzDecodeFrame: no input panics the decoder or makes it allocate
// beyond its limits, and whatever it accepts re-encodes to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(encode(f, FrameWriter{}, testSnapshot(3, 1)))
	f.Add(encode(f, FrameWriter{DType: FP16}, testSnapshot(5, 2)))
	f.Add(encode(f, FrameWriter{DType: INT8}, testSnapshot(300, 3)))
	f.Add(craftFrame(FrameHeader{DType: FP32, Fingerprint: testFP, Elements: 1 << 40, ChunkSize: MinChunkSize}, nil))
	f.Add([]byte("MTPF"))
	f.Add([]byte{})
	const maxN = 1 << 16
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := FrameReader{Limits: Limits{MaxElements: maxN}}.ReadFrame(bytes.NewReader(b))
		if err != nil {
			if s.Params != nil {
				t.Fatal("refused frame returned parameters")
			}
			if ReasonOf(err) == ReasonNone {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		if len(s.Params) == 0 || len(s.Params) > maxN {
			t.Fatalf("accepted %d elements", len(s.Params))
		}
		if !s.Progress.Valid() || s.Step < 0 || !params.AllFinite(s.Params) {
			t.Fatalf("accepted an invalid snapshot: step %d progress %v", s.Step, s.Progress)
		}
		h, _ := ParseFrameHeader(b)
		again := encode(t, FrameWriter{DType: h.DType, ChunkSize: int(h.ChunkSize)}, s)
		if h.DType != INT8 {
			if !bytes.Equal(again, b[:len(again)]) {
				t.Fatalf("accepted frame does not re-encode to itself")
			}
			return
		}
		// An int8 frame's scales are the sender's to pick; what we
		// accepted encodes again to within the quantization step.
		s2, err := FrameReader{}.ReadFrame(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("re-encoded int8 frame refused: %v", err)
		}
		for lo := 0; lo < len(s.Params); lo += Int8Block {
			hi := min(lo+Int8Block, len(s.Params))
			var m float64
			for _, v := range s.Params[lo:hi] {
				m = max(m, math.Abs(float64(v)))
			}
			for i := lo; i < hi; i++ {
				if d := math.Abs(float64(s2.Params[i] - s.Params[i])); d > m/254*(1+1e-6) {
					t.Fatalf("element %d: %g re-encoded as %g", i, s.Params[i], s2.Params[i])
				}
			}
		}
	})
}

// FuzzDecodeAnnouncement: no input panics the decoder; whatever it accepts
// is valid, within size, and survives a round trip.
func FuzzDecodeAnnouncement(f *testing.F) {
	id, _ := peer.Decode("12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN")
	good, _ := EncodeAnnouncement(Announcement{
		Peer: id, Fingerprint: testFP, Step: 3, Progress: 96, Loss: 0.7, Accuracy: 0.8,
		SamplesPerSec: 1000, Addrs: []string{"/ip4/127.0.0.1/tcp/4001"}, Mode: "gossip", TimeMs: 1700000000000,
	})
	f.Add(good)
	f.Add([]byte(`{"peer":"x"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"loss":NaN}`))
	f.Add(bytes.Repeat([]byte("a"), MaxAnnounceSize+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAnnouncement(b)
		if err != nil {
			if v := VerdictOf(err); v != Reject {
				t.Fatalf("undecodable input gets verdict %v: %v", v, err)
			}
			return
		}
		if len(b) > MaxAnnounceSize {
			t.Fatalf("accepted %d bytes", len(b))
		}
		for _, x := range []float64{a.Progress, a.Loss, a.Accuracy, a.SamplesPerSec} {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("accepted non-finite field in %+v", a)
			}
		}
		enc, err := EncodeAnnouncement(a)
		if err != nil {
			t.Fatalf("accepted announcement does not re-encode: %v", err)
		}
		back, err := DecodeAnnouncement(enc)
		if err != nil {
			t.Fatalf("re-encoded announcement refused: %v", err)
		}
		x, _ := json.Marshal(a)
		y, _ := json.Marshal(back)
		if !bytes.Equal(x, y) {
			t.Fatalf("round trip changed the announcement:\n%s\n%s", x, y)
		}
	})
}
