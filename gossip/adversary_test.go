//go:build testhooks

package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/params"
)

// roundTrip sends f into a buffer and reads it back under l.
func roundTrip(t *testing.T, f *Frame, l Limits) (params.Snapshot, error) {
	t.Helper()
	var b bytes.Buffer
	if err := (FrameWriter{}).Send(&b, f); err != nil {
		t.Fatal(err)
	}
	return FrameReader{Limits: l}.ReadFrame(&b)
}

func TestTamperedFrames(t *testing.T) {
	const n = 1000
	for _, dt := range []DType{FP32, FP16, INT8} {
		t.Run(dt.String(), func(t *testing.T) {
			snap := testSnapshot(n, 3)
			orig := slices.Clone(snap.Params)
			f, err := FrameWriter{DType: dt, ChunkSize: MinChunkSize}.Encode(snap)
			if err != nil {
				t.Fatal(err)
			}
			origPayload := slices.Clone(f.payload)
			origHeader := f.Header
			untouched := func(t *testing.T) {
				t.Helper()
				if !slices.Equal(snap.Params, orig) {
					t.Fatal("tampering wrote to the snapshot")
				}
				if !bytes.Equal(f.payload, origPayload) || f.Header != origHeader {
					t.Fatal("tampering wrote to the encoded frame")
				}
			}

			t.Run("nan", func(t *testing.T) {
				c := tamper(f, NaNTamper(0.05, 1))
				untouched(t)
				if c.Header.Elements != n || c.Header.Checksum == f.Header.Checksum {
					t.Fatalf("header %+v after NaNs, want %d elements and a new checksum", c.Header, n)
				}
				nans := 0
				if dt == INT8 {
					// Each drawn element's block scale: its whole block.
					v := make([]float32, n)
					newInt8Decoder(n).decode(v, c.payload)
					for _, x := range v {
						if math.IsNaN(float64(x)) {
							nans++
						}
					}
					if nans == 0 || (nans%Int8Block != 0 && nans%Int8Block != n%Int8Block) {
						t.Errorf("%d NaNs, want whole blocks", nans)
					}
				} else {
					for i := range n {
						var x float64
						if dt == FP16 {
							var one [1]float32
							decodeFP16(one[:], c.payload[2*i:2*i+2])
							x = float64(one[0])
						} else {
							x = float64(math.Float32frombits(uint32(c.payload[4*i]) | uint32(c.payload[4*i+1])<<8 |
								uint32(c.payload[4*i+2])<<16 | uint32(c.payload[4*i+3])<<24))
						}
						if math.IsNaN(x) {
							nans++
						}
					}
					// 50 draws with replacement out of 1000 positions.
					if nans < 40 || nans > 50 {
						t.Errorf("%d NaNs, want about 50", nans)
					}
				}
				_, err := roundTrip(t, c, Limits{Fingerprint: testFP, Elements: n})
				if ReasonOf(err) != ReasonNonFinite {
					t.Fatalf("receiver says %v (%v), want non_finite", ReasonOf(err), err)
				}
			})
			t.Run("nan at least one", func(t *testing.T) {
				c := tamper(f, NaNTamper(1e-9, 1))
				_, err := roundTrip(t, c, Limits{Fingerprint: testFP, Elements: n})
				if ReasonOf(err) != ReasonNonFinite {
					t.Fatalf("receiver says %v (%v), want non_finite", ReasonOf(err), err)
				}
			})
			for _, tc := range []struct {
				delta, want int
			}{{1, n + 1}, {7, n + 7}, {-1, n - 1}, {-5 * n, 1}} {
				c := tamper(f, ResizeTamper(tc.delta))
				untouched(t)
				if c.Header.Elements != uint64(tc.want) {
					t.Fatalf("delta %d: header says %d elements, want %d", tc.delta, c.Header.Elements, tc.want)
				}
				_, err := roundTrip(t, c, Limits{Fingerprint: testFP, Elements: n})
				if ReasonOf(err) != ReasonSizeMismatch {
					t.Fatalf("delta %d: receiver says %v (%v), want size_mismatch", tc.delta, ReasonOf(err), err)
				}
				// The header is consistent: a receiver that expects any size
				// reads it whole, checksum included.
				got, err := roundTrip(t, c, Limits{Fingerprint: testFP})
				if err != nil {
					t.Fatalf("delta %d: %v", tc.delta, err)
				}
				if len(got.Params) != tc.want {
					t.Fatalf("delta %d: read %d elements, want %d", tc.delta, len(got.Params), tc.want)
				}
				for i := range min(n, tc.want) {
					tol := math.Abs(float64(orig[i]))/1024 + 1e-6
					if dt == INT8 {
						tol = 0.05 // two roundings of 1/254 of a block's largest, about 3
					}
					if d := math.Abs(float64(got.Params[i] - orig[i])); d > tol {
						t.Fatalf("delta %d: element %d is %g, want %g", tc.delta, i, got.Params[i], orig[i])
					}
				}
				for i := n; i < tc.want; i++ {
					if got.Params[i] != 0 {
						t.Fatalf("delta %d: appended element %d is %g, want 0", tc.delta, i, got.Params[i])
					}
				}
			}
		})
	}
}

// rejections records what a service refused, from whom.
type rejections struct {
	mu  sync.Mutex
	got map[peer.ID][]Reason
}

func (r *rejections) hook(p peer.ID, why Reason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[peer.ID][]Reason{}
	}
	r.got[p] = append(r.got[p], why)
}

func (r *rejections) of(p peer.ID) []Reason {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got[p])
}

// refused waits until the honest side has refused exactly want from p:
// a responder answers before it counts the refusal.
func refused(t *testing.T, rj *rejections, p peer.ID, want []Reason) {
	t.Helper()
	eventually(t, "the honest side to refuse "+fmt.Sprint(want), func() bool { return slices.Equal(rj.of(p), want) })
}

// heldFor is how many inbound transfer slots s holds for p.
func heldFor(s *Service, p peer.ID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.activeBy[p]
}

// TestHostileFramesOverLoopback has a tampering service and an honest one
// trade frames over real hosts: the honest side refuses every frame the
// attacker sends, under the reason the reputation of the attacker hears.
func TestHostileFramesOverLoopback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(*Frame)
		dtype  DType
		reason Reason
		// served: the attacker's frame also reaches an honest initiator
		// (pull, or the second half of an exchange): a hostile service
		// answers even a request for another size, so the honest side
		// refuses (and counts) the frame.
		served bool
	}{
		{"nan", NaNTamper(0.01, 1), FP32, ReasonNonFinite, true},
		{"nan fp16", NaNTamper(0.01, 2), FP16, ReasonNonFinite, true},
		{"wrongdim +1", ResizeTamper(1), FP32, ReasonSizeMismatch, true},
		{"wrongdim -1", ResizeTamper(-1), FP32, ReasonSizeMismatch, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			var rj rejections
			hc := testConfig(testN)
			hc.OnReject = rj.hook
			honest := newNode(t, "tcp", hc, 1)
			ac := testConfig(testN)
			ac.SendDType = tc.dtype
			ac.Tamper = tc.tamper
			// Slow enough that the honest side refuses a frame of the wrong
			// size (from its header) while the attacker is still sending it.
			ac.UploadLimiter = slowLimiter{5 * time.Millisecond}
			attacker := newNode(t, "tcp", ac, 2)
			orig := slices.Clone(attacker.snap.Params)
			connect(t, honest.h, attacker.h)
			ctx := t.Context()
			want := []Reason{tc.reason}

			_, err := attacker.svc.Exchange(ctx, honest.h.ID(), attacker.snap)
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("attacker's exchange: %v, want refused", err)
			}
			refused(t, &rj, attacker.h.ID(), want)

			_, err = honest.svc.Pull(ctx, attacker.h.ID())
			if tc.served {
				want = append(want, tc.reason)
				if ReasonOf(err) != tc.reason {
					t.Fatalf("pull from the attacker: %v, want %v", err, tc.reason)
				}
			} else if !errors.Is(err, ErrRefused) {
				t.Fatalf("pull from the attacker: %v, want refused", err)
			}
			refused(t, &rj, attacker.h.ID(), want)
			// The honest side resets the pull once it has refused the frame;
			// the attacker holds its one inbound slot for the honest peer
			// until its handler sees the reset, and answers an exchange that
			// comes sooner "busy", as it should.
			eventually(t, "the attacker to end the refused pull", func() bool { return heldFor(attacker.svc, honest.h.ID()) == 0 })

			_, err = honest.svc.Exchange(ctx, attacker.h.ID(), honest.snap)
			if tc.served {
				want = append(want, tc.reason)
				if ReasonOf(err) != tc.reason {
					t.Fatalf("exchange with the attacker: %v, want %v", err, tc.reason)
				}
			} else if !errors.Is(err, ErrRefused) {
				t.Fatalf("exchange with the attacker: %v, want refused", err)
			}
			refused(t, &rj, attacker.h.ID(), want)
			if n := honest.svc.Stats().Rejected[tc.reason]; n != uint64(len(want)) {
				t.Errorf("honest side counted %d %v, want %d", n, tc.reason, len(want))
			}
			select {
			case s := <-honest.received:
				t.Fatalf("honest side delivered a hostile model of %d elements", len(s.Params))
			default:
			}
			if !slices.Equal(attacker.snap.Params, orig) {
				t.Fatal("tampering wrote to the attacker's snapshot")
			}
		})
	}
}
