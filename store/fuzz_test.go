package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"testing"
	"time"
)

func manifestSeeds() [][]byte {
	m := &manifest{id: 7, step: 100, progress: 3200, fingerprint: fpA, created: time.Unix(1, 2).UTC(),
		final: true, chunkSize: DefaultChunkSize, paramsLen: 1 << 20, optLen: 5, sum: [32]byte{9},
		meta: map[string]string{"dataset": "mnist", "model": "mlp", "seed": "1"}}
	bare := &manifest{id: 1, chunkSize: MinChunkSize, paramsLen: 1}
	return [][]byte{m.encode(), bare.encode(), {}, {kindManifest, recordVersion}}
}

// FuzzManifest feeds arbitrary bytes to the manifest decoder: it must never
// panic, must report anything it rejects as ErrCorrupt, and anything it
// accepts must encode back to exactly the same bytes (one encoding per
// manifest, so a flipped bit cannot decode to a different valid one
// without also passing the CRC).
func FuzzManifest(f *testing.F) {
	for _, s := range manifestSeeds() {
		f.Add(s)
		if len(s) > crcSize {
			f.Add(s[:len(s)-crcSize]) // the body, which seal turns back into s
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Random bytes rarely pass the CRC; sealing them too lets the
		// fuzzer reach the field decoding behind it.
		for _, in := range [][]byte{b, seal(b)} {
			m, err := decodeManifest(in)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v does not wrap ErrCorrupt", err)
				}
				continue
			}
			if !m.progress.Valid() || m.chunkSize < MinChunkSize || m.chunkSize > MaxChunkSize {
				t.Fatalf("accepted an invalid manifest %+v", m)
			}
			if again := m.encode(); !bytes.Equal(again, in) {
				t.Fatalf("re-encoding differs:\n in %x\nout %x", in, again)
			}
		}
	})
}

// FuzzRecords does the same for the peer, history and identity records.
func FuzzRecords(f *testing.F) {
	f.Add(encodePeer(Peer{ID: "12D3KooWA", Addrs: []string{"/ip4/127.0.0.1/tcp/1"}, LastSeen: time.Unix(3, 0).UTC(),
		Score: -1.5, BannedUntil: time.Unix(9, 9).UTC(), Notes: "n"}))
	f.Add(encodePeer(Peer{ID: "x"}))
	f.Add(encodePoint(Point{Time: time.Unix(5, 0).UTC(), Step: 3, Progress: 96, Loss: math.NaN(), Accuracy: 0.9, SamplesPerSec: 1e4}))
	f.Add(encodeIdentity([]byte("key")))
	f.Add([]byte{kindPeer, recordVersion, 0, 0, 0, 1, 'p'}) // a body for seal
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, b := range [][]byte{raw, seal(raw)} {
			checkRecords(t, b)
		}
	})
}

// checkRecords decodes b as each small record kind.
func checkRecords(t *testing.T, b []byte) {
	if p, err := decodePeer(b); err == nil {
		if again := encodePeer(p); !bytes.Equal(again, b) {
			t.Fatalf("peer re-encoding differs:\n in %x\nout %x", b, again)
		}
	} else if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("peer error %v does not wrap ErrCorrupt", err)
	}
	if p, err := decodePoint(b); err == nil {
		if again := encodePoint(p); !bytes.Equal(again, b) {
			t.Fatalf("point re-encoding differs:\n in %x\nout %x", b, again)
		}
	} else if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("point error %v does not wrap ErrCorrupt", err)
	}
	if k, err := decodeIdentity(b); err == nil {
		if again := encodeIdentity(k); !bytes.Equal(again, b) {
			t.Fatalf("identity re-encoding differs:\n in %x\nout %x", b, again)
		}
	} else if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("identity error %v does not wrap ErrCorrupt", err)
	}
}

// seal appends the CRC a record ends with.
func seal(b []byte) []byte {
	return binary.BigEndian.AppendUint32(bytes.Clone(b), crc32.Checksum(b, castagnoli))
}

// TestManifestBitFlips flips every bit of an encoded manifest in turn:
// each flip must be caught.
func TestManifestBitFlips(t *testing.T) {
	b := manifestSeeds()[0]
	for i := range len(b) * 8 {
		c := bytes.Clone(b)
		c[i/8] ^= 1 << (i % 8)
		if _, err := decodeManifest(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit %d flipped: got %v, want ErrCorrupt", i, err)
		}
	}
}
