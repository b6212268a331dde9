package gossip

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/meshtrain/meshtrain/params"
)

// benchN is a 100 MB fp32 vector.
const benchN = 25_000_000

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func reportGBps(b *testing.B, bytesPerOp int64) {
	b.SetBytes(bytesPerOp)
	b.ReportMetric(float64(bytesPerOp)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkCodec: encode and decode of a 100 MB fp32 (fp16, int8) snapshot
// in memory, checksum and finiteness checks included.
func BenchmarkCodec(b *testing.B) {
	s := testSnapshot(benchN, 1)
	for _, dt := range []DType{FP32, FP16, INT8} {
		w := FrameWriter{DType: dt}
		var buf bytes.Buffer
		if err := w.WriteFrame(&buf, s); err != nil {
			b.Fatal(err)
		}
		frame := buf.Bytes()
		b.Run("encode/"+dt.String(), func(b *testing.B) {
			for b.Loop() {
				if err := w.WriteFrame(io.Discard, s); err != nil {
					b.Fatal(err)
				}
			}
			reportGBps(b, int64(len(frame)))
		})
		b.Run("decode/"+dt.String(), func(b *testing.B) {
			r := FrameReader{Limits: Limits{Fingerprint: testFP, Elements: benchN}}
			for b.Loop() {
				if _, err := r.ReadFrame(bytes.NewReader(frame)); err != nil {
					b.Fatal(err)
				}
			}
			reportGBps(b, int64(len(frame)))
		})
		// The same into a recycled vector: the decoder's own cost, without
		// faulting in 100 MB of fresh memory per frame.
		b.Run("decode-reuse/"+dt.String(), func(b *testing.B) {
			v := make([]float32, benchN)
			r := FrameReader{
				Limits: Limits{Fingerprint: testFP, Elements: benchN},
				Alloc:  func(int) []float32 { return v },
			}
			for b.Loop() {
				if _, err := r.ReadFrame(bytes.NewReader(frame)); err != nil {
					b.Fatal(err)
				}
			}
			reportGBps(b, int64(len(frame)))
		})
	}
}

const bareProtocol protocol.ID = "/meshtrain/bench/bare/1"

// BenchmarkTransfer moves a 100 MB fp32 vector between two hosts on
// loopback: "bare" is a plain libp2p stream copy of the same bytes into a
// preallocated buffer (the ceiling); "pull" is one frame through the
// service in the worst case: the responder encodes a snapshot it has not
// sent before (finiteness check and checksum) and the receiver faults in a
// fresh vector, checksums and checks it; "reuse" (in "paired") is the
// steady state of a node that serves one frozen snapshot to several peers
// and recycles received vectors: the responder sends the frame it encoded
// before and the receiver fills a recycled vector (and still checksums
// and checks it); "exchange" sends one frame each way (bytes counted both
// ways).
func BenchmarkTransfer(b *testing.B) {
	for _, transport := range []string{"tcp", "quic"} {
		b.Run(transport, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Fingerprint, cfg.Elements = testFP, benchN
			cfg.Logger = slog.New(slog.DiscardHandler)
			snapA, snapB := testSnapshot(benchN, 1), testSnapshot(benchN, 2)
			ha, hb := newHost(b, transport, cfg), newHost(b, transport, cfg)
			sa, err := NewService(ha, cfg, func() (params.Snapshot, bool) { return snapA, true })
			if err != nil {
				b.Fatal(err)
			}
			defer sa.Close()
			// While fresh is set, b serves a new snapshot (same vector, next
			// step) at every request, as if its trainer had just frozen
			// one: the worst case, where nothing encoded before is reused.
			var fresh atomic.Bool
			var step atomic.Int64
			sb, err := NewService(hb, cfg, func() (params.Snapshot, bool) {
				s := snapB
				if fresh.Load() {
					s.Step = step.Add(1)
				}
				return s, true
			})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Close()
			// A third host pulls into one recycled vector, as a node that
			// returns vectors after merging would.
			var spare []float32
			rcfg := cfg
			rcfg.Alloc = func(n int) []float32 {
				if len(spare) == n {
					v := spare
					spare = nil
					return v
				}
				return make([]float32, n)
			}
			hc := newHost(b, transport, cfg)
			sc, err := NewService(hc, rcfg, func() (params.Snapshot, bool) { return snapA, true })
			if err != nil {
				b.Fatal(err)
			}
			defer sc.Close()
			// ... from a fourth host that keeps serving one frozen snapshot,
			// so its frame is encoded once.
			hd := newHost(b, transport, cfg)
			sd, err := NewService(hd, cfg, func() (params.Snapshot, bool) { return snapB, true })
			if err != nil {
				b.Fatal(err)
			}
			defer sd.Close()
			connect(b, ha, hb)
			connect(b, hc, hd)

			payload := float32Bytes(snapB.Params)
			hb.SetStreamHandler(bareProtocol, func(s network.Stream) {
				defer s.Close()
				if _, err := s.Write(payload); err != nil {
					_ = s.Reset()
					return
				}
				_ = s.CloseWrite()
				_, _ = io.Copy(io.Discard, s)
			})
			defer hb.RemoveStreamHandler(bareProtocol)
			dst := make([]byte, len(payload))
			bare := func(b *testing.B) {
				s, err := ha.NewStream(b.Context(), hb.ID(), bareProtocol)
				if err != nil {
					b.Fatal(err)
				}
				_ = s.CloseWrite()
				if _, err := io.ReadFull(s, dst); err != nil {
					b.Fatal(err)
				}
				if n, _ := s.Read(dst[:1]); n != 0 {
					b.Fatal("trailing bytes")
				}
				_ = s.Close()
			}
			pull := func(b *testing.B) {
				fresh.Store(true)
				defer fresh.Store(false)
				if _, err := sa.Pull(b.Context(), hb.ID()); err != nil {
					b.Fatal(err)
				}
			}
			pullReuse := func(b *testing.B) {
				s, err := sc.Pull(b.Context(), hd.ID())
				if err != nil {
					b.Fatal(err)
				}
				spare = s.Params
			}

			b.Run("bare", func(b *testing.B) {
				for b.Loop() {
					bare(b)
				}
				reportGBps(b, int64(len(payload)))
			})
			b.Run("pull", func(b *testing.B) {
				for b.Loop() {
					pull(b)
				}
				reportGBps(b, int64(len(payload)))
			})
			// paired alternates bare, pull and pull into a recycled vector
			// so all see the same load on a shared machine, and reports the
			// median of each and the ratios to bare, in wall time and in CPU
			// time (both ends of the transfer run in this process).
			b.Run("paired", func(b *testing.B) {
				names := []string{"bare", "pull", "reuse"}
				var wall, cpu [3][]time.Duration
				for b.Loop() {
					for i, f := range []func(*testing.B){bare, pull, pullReuse} {
						w0, c0 := time.Now(), processCPU()
						f(b)
						wall[i] = append(wall[i], time.Since(w0))
						cpu[i] = append(cpu[i], processCPU()-c0)
					}
				}
				size := float64(len(payload))
				for i, name := range names {
					w, c := median(wall[i]), median(cpu[i])
					b.ReportMetric(size/w.Seconds()/1e9, name+"-GB/s")
					b.ReportMetric(float64(c.Milliseconds()), name+"-cpu-ms")
					if i > 0 {
						b.ReportMetric(median(wall[0]).Seconds()/w.Seconds(), name+"/bare-wall")
						if c > 0 {
							b.ReportMetric(median(cpu[0]).Seconds()/c.Seconds(), name+"/bare-cpu")
						}
					}
				}
			})
			b.Run("exchange", func(b *testing.B) {
				for b.Loop() {
					if _, err := sa.Exchange(b.Context(), hb.ID(), snapA); err != nil {
						b.Fatal(err)
					}
				}
				reportGBps(b, 2*int64(len(payload)))
			})
		})
	}
}

// modelN is the built-in MNIST model's size (mlp:256,128: 235,146
// parameters), the size every exchange of the reference swarm moves.
const modelN = 235_146

// BenchmarkExchangeModel times one exchange of the reference model as a
// node makes it: fp16 on the wire, a fresh snapshot served at every
// request (a node's trainer moves between two exchanges), both directions.
// Its time per op is what the averager waits for before it can merge, the
// latency that bounds how often a node can merge.
func BenchmarkExchangeModel(b *testing.B) {
	for _, transport := range []string{"tcp", "quic"} {
		b.Run(transport, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Fingerprint, cfg.Elements, cfg.SendDType = testFP, modelN, FP16
			cfg.Logger = slog.New(slog.DiscardHandler)
			snapA, snapB := testSnapshot(modelN, 1), testSnapshot(modelN, 2)
			var step atomic.Int64
			serve := func(s params.Snapshot) SnapshotFunc {
				return func() (params.Snapshot, bool) {
					s.Step = step.Add(1)
					return s, true
				}
			}
			ha, hb := newHost(b, transport, cfg), newHost(b, transport, cfg)
			sa, err := NewService(ha, cfg, serve(snapA))
			if err != nil {
				b.Fatal(err)
			}
			defer sa.Close()
			sb, err := NewService(hb, cfg, serve(snapB))
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Close()
			connect(b, ha, hb)
			for b.Loop() {
				s := snapA
				s.Step = step.Add(1)
				if _, err := sa.Exchange(b.Context(), hb.ID(), s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
