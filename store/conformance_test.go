package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

// opener makes a fresh store for one subtest and closes it at cleanup.
type opener func(t *testing.T, opts Options) *kvStore

func openMemory(t *testing.T, opts Options) *kvStore {
	t.Helper()
	s, err := newMemory(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openBadger(t *testing.T, opts Options) *kvStore {
	t.Helper()
	return openBadgerDir(t, t.TempDir(), opts)
}

func openBadgerDir(t *testing.T, dir string, opts Options) *kvStore {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*kvStore)
}

func TestConformanceMemory(t *testing.T) { runConformance(t, openMemory) }
func TestConformanceBadger(t *testing.T) { runConformance(t, openBadger) }

var (
	fpA = params.Fingerprint{1}
	fpB = params.Fingerprint{2}
	fpC = params.Fingerprint{3}
)

// randVec fills n floats from seed, including values whose bit patterns a
// float conversion would change (NaN payloads, -0, denormals), so a round
// trip is checked bit for bit.
func randVec(seed uint64, n int) []float32 {
	v := make([]float32, n)
	if n > 0 {
		rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(floatBytes(v))
	}
	return v
}

func sameBits(a, b []float32) bool {
	return len(a) == len(b) && bytes.Equal(floatBytes(a), floatBytes(b))
}

func ckpt(fp params.Fingerprint, step int64, n, nOpt int) *Checkpoint {
	return &Checkpoint{
		Fingerprint: fp,
		Step:        step,
		Progress:    params.Progress(step * 32),
		Params:      randVec(uint64(step)*7+1, n),
		OptState:    randVec(uint64(step)*7+2, nOpt),
		Meta:        map[string]string{"model": "mlp:784,128,10", "seed": fmt.Sprint(step)},
	}
}

func mustSave(t *testing.T, s Store, c *Checkpoint) Info {
	t.Helper()
	info, err := s.Save(t.Context(), c)
	if err != nil {
		t.Fatalf("save step %d: %v", c.Step, err)
	}
	return info
}

func ids(infos []Info) []uint64 {
	var out []uint64
	for _, in := range infos {
		out = append(out, in.ID)
	}
	return out
}

func mustList(t *testing.T, s Store) []Info {
	t.Helper()
	infos, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	return infos
}

func checkSame(t *testing.T, got, want *Checkpoint) {
	t.Helper()
	if got.Fingerprint != want.Fingerprint || got.Step != want.Step || got.Progress != want.Progress ||
		got.Final != want.Final || !got.Created.Equal(want.Created) {
		t.Errorf("header: got %v/%d/%v/%v/%v, want %v/%d/%v/%v/%v",
			got.Fingerprint.Short(), got.Step, got.Progress, got.Final, got.Created,
			want.Fingerprint.Short(), want.Step, want.Progress, want.Final, want.Created)
	}
	if !sameBits(got.Params, want.Params) {
		t.Errorf("params differ (len %d vs %d)", len(got.Params), len(want.Params))
	}
	if !sameBits(got.OptState, want.OptState) {
		t.Errorf("optimizer state differs (len %d vs %d)", len(got.OptState), len(want.OptState))
	}
	if len(got.Meta) != len(want.Meta) || (len(want.Meta) > 0 && !reflect.DeepEqual(got.Meta, want.Meta)) {
		t.Errorf("meta: got %v, want %v", got.Meta, want.Meta)
	}
}

func runConformance(t *testing.T, open opener) {
	small := Options{ChunkSize: MinChunkSize, Keep: 3, HistoryLimit: 5}

	t.Run("SaveListLoad", func(t *testing.T) {
		s := open(t, small)
		c1 := ckpt(fpA, 10, 3000, 3000)
		c1.Created = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
		c2 := ckpt(fpA, 20, 3000, 0)
		c2.Final = true
		c2.Meta = nil
		i1 := mustSave(t, s, c1)
		before := time.Now()
		i2 := mustSave(t, s, c2)
		if i2.ID <= i1.ID {
			t.Fatalf("IDs %d then %d: must increase", i1.ID, i2.ID)
		}
		if !i1.Created.Equal(c1.Created) {
			t.Errorf("created %v, want the caller's %v", i1.Created, c1.Created)
		}
		if i2.Created.Before(before.Add(-time.Second)) || i2.Created.After(time.Now().Add(time.Second)) {
			t.Errorf("created %v: a zero Created must become the save time", i2.Created)
		}
		infos := mustList(t, s)
		if !reflect.DeepEqual(infos, []Info{i2, i1}) {
			t.Fatalf("list:\n got %+v\nwant %+v", infos, []Info{i2, i1})
		}
		want1 := Info{ID: i1.ID, Step: 10, Progress: 320, Fingerprint: fpA, Created: c1.Created,
			Size: 6000 * 4, ParamsLen: 3000, OptLen: 3000}
		if i1 != want1 {
			t.Errorf("info:\n got %+v\nwant %+v", i1, want1)
		}
		if !i2.Final || i2.OptLen != 0 || i2.Size != 3000*4 {
			t.Errorf("info %+v: want final, no optimizer state, 12000 bytes", i2)
		}
		for _, tc := range []struct {
			id   uint64
			want *Checkpoint
		}{{i1.ID, c1}, {i2.ID, c2}} {
			got, err := s.Load(t.Context(), tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tc.id {
				t.Errorf("loaded ID %d, want %d", got.ID, tc.id)
			}
			want := *tc.want
			want.Created = map[uint64]time.Time{i1.ID: i1.Created, i2.ID: i2.Created}[tc.id]
			checkSame(t, got, &want)
		}
	})

	t.Run("ChunkBoundaries", func(t *testing.T) {
		s := open(t, small)
		per := MinChunkSize / 4
		for i, n := range []int{1, per - 1, per, per + 1, 3*per + 7} {
			for _, nOpt := range []int{0, 1, per, 2*per + 1} {
				c := ckpt(fpA, int64(i*10+nOpt%10), n, nOpt)
				c.Created = time.Unix(1700000000, 0).UTC()
				info := mustSave(t, s, c)
				got, err := s.Load(t.Context(), info.ID)
				if err != nil {
					t.Fatalf("n=%d nOpt=%d: %v", n, nOpt, err)
				}
				checkSame(t, got, c)
			}
		}
	})

	t.Run("LoadUnknown", func(t *testing.T) {
		s := open(t, small)
		if _, err := s.Load(t.Context(), 42); !errors.Is(err, ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
		if _, _, err := s.LoadLatest(t.Context(), fpA); !errors.Is(err, ErrNotFound) {
			t.Fatalf("empty store: got %v, want ErrNotFound", err)
		}
	})

	t.Run("KeepK", func(t *testing.T) {
		s := open(t, Options{ChunkSize: MinChunkSize, Keep: 2})
		var all []uint64
		for step := range int64(5) {
			all = append(all, mustSave(t, s, ckpt(fpA, step, 2000, 10)).ID)
		}
		if got := ids(mustList(t, s)); !slices.Equal(got, []uint64{all[4], all[3]}) {
			t.Fatalf("kept %v, want the newest two of %v", got, all)
		}
		if _, err := s.Load(t.Context(), all[0]); !errors.Is(err, ErrNotFound) {
			t.Errorf("pruned checkpoint: got %v, want ErrNotFound", err)
		}
		if n := countKeys(t, s, chunkPrefix(all[0])); n != 0 {
			t.Errorf("pruned checkpoint left %d chunks", n)
		}
	})

	t.Run("LoadLatestFingerprint", func(t *testing.T) {
		s := open(t, Options{ChunkSize: MinChunkSize, Keep: 5})
		a1 := ckpt(fpA, 1, 100, 0)
		ia1 := mustSave(t, s, a1)
		ia2 := mustSave(t, s, ckpt(fpA, 2, 100, 0))
		ib := mustSave(t, s, ckpt(fpB, 3, 100, 0))
		got, skipped, err := s.LoadLatest(t.Context(), fpA)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != ia2.ID {
			t.Errorf("got checkpoint %d, want %d", got.ID, ia2.ID)
		}
		if len(skipped) != 1 || skipped[0].ID != ib.ID || !errors.Is(skipped[0].Err, ErrFingerprint) {
			t.Errorf("skipped %v: want checkpoint %d for its fingerprint", skipped, ib.ID)
		}
		got, skipped, err = s.LoadLatest(t.Context(), fpB)
		if err != nil || got.ID != ib.ID || len(skipped) != 0 {
			t.Errorf("fpB: got %v, %v, %v", got, skipped, err)
		}
		_, skipped, err = s.LoadLatest(t.Context(), fpC)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("fpC: got %v, want ErrNotFound", err)
		}
		if got := []uint64{skipped[0].ID, skipped[1].ID, skipped[2].ID}; len(skipped) != 3 ||
			!slices.Equal(got, []uint64{ib.ID, ia2.ID, ia1.ID}) {
			t.Errorf("fpC skipped %v: want all three, newest first", skipped)
		}
	})

	t.Run("InvalidCheckpoint", func(t *testing.T) {
		s := open(t, small)
		for name, mod := range map[string]func(c *Checkpoint){
			"no params":    func(c *Checkpoint) { c.Params = nil },
			"NaN progress": func(c *Checkpoint) { c.Progress = params.Progress(math.NaN()) },
			"neg progress": func(c *Checkpoint) { c.Progress = -1 },
			"neg step":     func(c *Checkpoint) { c.Step = -1 },
			"empty key":    func(c *Checkpoint) { c.Meta = map[string]string{"": "x"} },
			"huge meta":    func(c *Checkpoint) { c.Meta = map[string]string{"k": string(make([]byte, MaxMetaBytes))} },
		} {
			c := ckpt(fpA, 1, 10, 0)
			mod(c)
			if _, err := s.Save(t.Context(), c); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: got %v, want ErrInvalid", name, err)
			}
		}
		if _, err := s.Save(t.Context(), nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("nil: got %v, want ErrInvalid", err)
		}
		if n := len(mustList(t, s)); n != 0 {
			t.Errorf("%d checkpoints after only invalid saves", n)
		}
	})

	t.Run("CancelledSave", func(t *testing.T) {
		s := open(t, small)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := s.Save(ctx, ckpt(fpA, 1, 5000, 0)); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		if n := len(mustList(t, s)); n != 0 {
			t.Errorf("%d checkpoints after a cancelled save", n)
		}
		if n := countKeys(t, s, prefixChunk); n != 0 {
			t.Errorf("cancelled save left %d chunks", n)
		}
	})

	t.Run("Identity", func(t *testing.T) {
		s := open(t, small)
		if _, err := s.Identity(); !errors.Is(err, ErrNotFound) {
			t.Fatalf("fresh store: got %v, want ErrNotFound", err)
		}
		for _, key := range [][]byte{[]byte("first key"), bytes.Repeat([]byte{0, 0xff}, 40)} {
			if err := s.SetIdentity(key); err != nil {
				t.Fatal(err)
			}
			got, err := s.Identity()
			if err != nil || !bytes.Equal(got, key) {
				t.Fatalf("got %x, %v; want %x", got, err, key)
			}
		}
		if err := s.SetIdentity(nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("empty key: got %v, want ErrInvalid", err)
		}
	})

	t.Run("Peers", func(t *testing.T) {
		s := open(t, small)
		at := time.Date(2026, 5, 6, 7, 8, 9, 10, time.UTC)
		ps := []Peer{
			{ID: "12D3KooWB", Addrs: []string{"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1"},
				LastSeen: at, Score: -3.5, BannedUntil: at.Add(time.Hour), Notes: "sent NaN"},
			{ID: "12D3KooWA", LastSeen: at, Score: 1},
			{ID: "12D3KooWC"},
		}
		for _, p := range ps {
			if err := s.PutPeer(p); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Peer("12D3KooWB")
		if err != nil || !reflect.DeepEqual(got, ps[0]) {
			t.Fatalf("got %+v, %v; want %+v", got, err, ps[0])
		}
		all, err := s.Peers()
		if err != nil {
			t.Fatal(err)
		}
		if want := []Peer{ps[1], ps[0], ps[2]}; !reflect.DeepEqual(all, want) {
			t.Fatalf("peers:\n got %+v\nwant %+v (ordered by ID)", all, want)
		}
		ps[1].Score = 9
		if err := s.PutPeer(ps[1]); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Peer(ps[1].ID); got.Score != 9 {
			t.Errorf("after update score %v, want 9", got.Score)
		}
		if err := s.DeletePeer(ps[0].ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Peer(ps[0].ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("deleted peer: got %v, want ErrNotFound", err)
		}
		if err := s.DeletePeer(ps[0].ID); err != nil {
			t.Errorf("deleting an absent peer: %v", err)
		}
		if all, _ := s.Peers(); len(all) != 2 {
			t.Errorf("%d peers left, want 2", len(all))
		}
		for _, bad := range []string{"", string([]byte{0xff}), string(make([]byte, maxPeerIDLen+1))} {
			if err := s.PutPeer(Peer{ID: bad}); !errors.Is(err, ErrInvalid) {
				t.Errorf("peer ID %q: got %v, want ErrInvalid", bad, err)
			}
		}
	})

	t.Run("History", func(t *testing.T) {
		s := open(t, small) // HistoryLimit 5
		pt := func(i int) Point {
			return Point{Time: time.Unix(int64(1000+i), 0).UTC(), Step: int64(i), Progress: params.Progress(i * 32),
				Loss: 1 / float64(i+1), Accuracy: float64(i) / 100, SamplesPerSec: 500}
		}
		steps := func(ps []Point) []int64 {
			var out []int64
			for _, p := range ps {
				out = append(out, p.Step)
			}
			return out
		}
		if h, err := s.History(0); err != nil || len(h) != 0 {
			t.Fatalf("empty history: %v, %v", h, err)
		}
		for i := range 3 {
			if err := s.AppendHistory(pt(i)); err != nil {
				t.Fatal(err)
			}
		}
		h, err := s.History(0)
		if err != nil || !reflect.DeepEqual(h, []Point{pt(0), pt(1), pt(2)}) {
			t.Fatalf("got %+v, %v", h, err)
		}
		if err := s.AppendHistory(pt(3), pt(4), pt(5), pt(6)); err != nil {
			t.Fatal(err)
		}
		if h, _ := s.History(0); !slices.Equal(steps(h), []int64{2, 3, 4, 5, 6}) {
			t.Errorf("after overflow got steps %v, want the last 5", steps(h))
		}
		if h, _ := s.History(2); !slices.Equal(steps(h), []int64{5, 6}) {
			t.Errorf("History(2) got steps %v, want [5 6]", steps(h))
		}
		var many []Point
		for i := 10; i < 22; i++ {
			many = append(many, pt(i))
		}
		if err := s.AppendHistory(many...); err != nil {
			t.Fatal(err)
		}
		if h, _ := s.History(100); !slices.Equal(steps(h), []int64{17, 18, 19, 20, 21}) {
			t.Errorf("after a bulk append got steps %v, want 17..21", steps(h))
		}
		if n := countKeys(t, s, prefixPoint); n != 5 {
			t.Errorf("%d history keys stored, want 5", n)
		}
	})

	t.Run("Close", func(t *testing.T) {
		s := open(t, small)
		mustSave(t, s, ckpt(fpA, 1, 10, 0))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		checks := map[string]error{}
		_, checks["Save"] = s.Save(t.Context(), ckpt(fpA, 2, 10, 0))
		_, checks["List"] = s.List()
		_, checks["Load"] = s.Load(t.Context(), 1)
		_, _, checks["LoadLatest"] = s.LoadLatest(t.Context(), fpA)
		_, checks["Identity"] = s.Identity()
		checks["SetIdentity"] = s.SetIdentity([]byte("k"))
		checks["PutPeer"] = s.PutPeer(Peer{ID: "p"})
		_, checks["Peer"] = s.Peer("p")
		_, checks["Peers"] = s.Peers()
		checks["DeletePeer"] = s.DeletePeer("p")
		checks["AppendHistory"] = s.AppendHistory(Point{})
		_, checks["History"] = s.History(1)
		for name, err := range checks {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: got %v, want ErrClosed", name, err)
			}
		}
	})

	t.Run("LoadWhilePruning", func(t *testing.T) {
		s := open(t, Options{ChunkSize: MinChunkSize, Keep: 1})
		mustSave(t, s, ckpt(fpA, 1, 20*MinChunkSize/4, 0))
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			defer close(done)
			for step := range int64(12) {
				if _, err := s.Save(t.Context(), ckpt(fpA, 2+step, 20*MinChunkSize/4, 0)); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Go(func() {
			// Whatever is listed may be pruned before or while it is read:
			// that must look like ErrNotFound, never like corruption.
			for {
				select {
				case <-done:
					return
				default:
				}
				infos, err := s.List()
				if err != nil {
					t.Error(err)
					return
				}
				for _, in := range infos {
					if _, err := s.Load(t.Context(), in.ID); err != nil && !errors.Is(err, ErrNotFound) {
						t.Errorf("load of checkpoint %d while pruning: %v", in.ID, err)
						return
					}
				}
			}
		})
		wg.Wait()
	})

	t.Run("Concurrent", func(t *testing.T) {
		s := open(t, Options{ChunkSize: MinChunkSize, Keep: 2, HistoryLimit: 50})
		first := mustSave(t, s, ckpt(fpA, 1, 4000, 100))
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		wg.Go(func() {
			for i := range int64(6) {
				if _, err := s.Save(t.Context(), ckpt(fpA, 2+i, 4000, 100)); err != nil {
					errs <- err
				}
			}
		})
		wg.Go(func() {
			for range 20 {
				// The newest may be pruned between List and Load; anything
				// but that is a failure.
				c, _, err := s.LoadLatest(t.Context(), fpA)
				if err != nil {
					errs <- err
				} else if c.Step < 1 {
					errs <- fmt.Errorf("loaded step %d", c.Step)
				}
				if _, err := s.Load(t.Context(), first.ID); err != nil && !errors.Is(err, ErrNotFound) {
					errs <- err
				}
			}
		})
		wg.Go(func() {
			for i := range 30 {
				if err := s.AppendHistory(Point{Step: int64(i)}); err != nil {
					errs <- err
				}
				if err := s.PutPeer(Peer{ID: fmt.Sprint("p", i%5)}); err != nil {
					errs <- err
				}
				if _, err := s.Peers(); err != nil {
					errs <- err
				}
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got := len(mustList(t, s)); got != 2 {
			t.Errorf("%d checkpoints after concurrent saves, want Keep=2", got)
		}
	})
}

// countKeys counts keys with prefix through the store's own kv.
func countKeys(t *testing.T, s *kvStore, prefix []byte) int {
	t.Helper()
	n := 0
	err := s.kv.view(func(r kvReader) error {
		return r.scan(prefix, false, false, func(_, _ []byte) (bool, error) {
			n++
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPortableFloatPath checks the byte-order-independent encoding used on
// big-endian machines against the zero-copy one: each must read what the
// other wrote.
func TestPortableFloatPath(t *testing.T) {
	native := littleEndian
	defer func() { littleEndian = native }()
	s := openMemory(t, Options{ChunkSize: MinChunkSize})
	for _, tc := range []struct{ write, read bool }{{false, native}, {native, false}} {
		littleEndian = tc.write
		c := ckpt(fpA, 1, 3000, 1500)
		info := mustSave(t, s, c)
		littleEndian = tc.read
		got, err := s.Load(t.Context(), info.ID)
		if err != nil {
			t.Fatal(err)
		}
		c.Created = info.Created
		checkSame(t, got, c)
	}
}
