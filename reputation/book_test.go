package reputation

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newBook(t testing.TB, edit func(*Params)) *Book {
	t.Helper()
	p := DefaultParams()
	if edit != nil {
		edit(&p)
	}
	b, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func record(b *Book, peer string, v Verdict, n int, now time.Time) State {
	s := b.State(peer, now)
	for range n {
		s = b.Record(peer, v, now)
	}
	return s
}

func TestDecay(t *testing.T) {
	b := newBook(t, nil)
	h := b.Params().HalfLife
	record(b, "p", Accepted, 10, t0)
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{{0, 10}, {h, 5}, {2 * h, 2.5}, {h / 2, 2.5}, {3 * h, 1.25}} {
		// A time earlier than the last one seen does not undo decay.
		if got := b.Score("p", t0.Add(c.at)); !near(got, c.want) {
			t.Errorf("Score at +%v = %v, want %v", c.at, got, c.want)
		}
	}
	record(b, "q", Outlier, 2, t0)
	if got := b.Score("q", t0.Add(h)); !near(got, -5) {
		t.Errorf("negative score after a half life = %v, want -5", got)
	}
	if got := b.Score("unknown", t0); got != 0 {
		t.Errorf("unknown peer score = %v", got)
	}
}

func TestCap(t *testing.T) {
	b := newBook(t, nil)
	h := b.Params().HalfLife
	record(b, "p", Accepted, 100, t0)
	if got := b.Score("p", t0); got != 20 {
		t.Fatalf("score after 100 accepted = %v, want MaxScore 20", got)
	}
	b.Record("p", Accepted, t0.Add(h))
	if got := b.Score("p", t0.Add(h)); !near(got, 11) {
		t.Errorf("score = %v, want 20/2+1", got)
	}
	// Extreme weights stay finite: the cap holds above, the floor below.
	x := newBook(t, func(p *Params) {
		p.Weights[Accepted] = math.MaxFloat64
		p.Weights[NonFinite] = -math.MaxFloat64
		p.MaxScore = math.MaxFloat64
		p.BanBelow = -1e308
	})
	for _, v := range []Verdict{Accepted, Accepted, NonFinite, NonFinite, NonFinite} {
		x.Record("p", v, t0)
		if s := x.Score("p", t0); math.IsInf(s, 0) || math.IsNaN(s) {
			t.Fatalf("score %v after %v", s, v)
		}
	}
	if got := x.AppScore("p", t0); got != -math.MaxFloat64 {
		t.Errorf("AppScore of a banned peer = %v, want -MaxFloat64", got)
	}
}

// TestThresholds checks the counts the package documentation states.
func TestThresholds(t *testing.T) {
	tests := []struct {
		v            Verdict
		fresh, clean [3]int // verdicts to ignored, disconnected, banned
	}{
		{NonFinite, [3]int{1, 2, 3}, [3]int{2, 3, 4}},
		{ProtocolViolation, [3]int{2, 3, 5}, [3]int{4, 5, 7}},
		{Outlier, [3]int{3, 5, 9}, [3]int{7, 9, 13}},
		{LossJump, [3]int{3, 5, 9}, [3]int{7, 9, 13}},
		{FingerprintMismatch, [3]int{3, 5, 9}, [3]int{7, 9, 13}},
		{Rejected, [3]int{7, 14, 27}, [3]int{21, 27, 41}},
		{Timeout, [3]int{21, 41, 81}, [3]int{61, 81, 121}},
	}
	for _, tt := range tests {
		for _, clean := range []bool{false, true} {
			b := newBook(t, nil)
			want := tt.fresh
			if clean {
				record(b, "p", Accepted, 20, t0)
				want = tt.clean
			}
			var got [3]int
			prev := OK
			for n := 1; n <= 200 && got[2] == 0; n++ {
				s := b.Record("p", tt.v, t0)
				if s < prev {
					t.Errorf("%v clean=%v: state went from %v to %v", tt.v, clean, prev, s)
				}
				for i, st := range []State{Ignored, Disconnected, Banned} {
					if s >= st && got[i] == 0 {
						got[i] = n
					}
				}
				prev = s
			}
			if got != want {
				t.Errorf("%v clean=%v: ignored/disconnected/banned after %v, want %v", tt.v, clean, got, want)
			}
		}
	}
}

func TestBanLifecycle(t *testing.T) {
	b := newBook(t, nil)
	if s := record(b, "p", Outlier, 9, t0); s != Banned {
		t.Fatalf("after 9 outliers: %v", s)
	}
	end := t0.Add(time.Hour)
	if got := b.Peer("p", t0); got.BannedUntil != end || got.State != Banned || got.StateName != "banned" {
		t.Fatalf("Peer = %+v, want banned until %v", got, end)
	}
	if got := b.AppScore("p", t0); got != -400 {
		t.Errorf("AppScore of a banned peer = %v, want BanBelow*10", got)
	}
	// Verdicts during the ban are counted and never extend it.
	mid := t0.Add(30 * time.Minute)
	if s := record(b, "p", NonFinite, 5, mid); s != Banned {
		t.Fatalf("during ban: %v", s)
	}
	if got := b.Peer("p", mid); got.BannedUntil != end || got.Counts["non_finite"] != 5 || got.Counts["outlier"] != 9 {
		t.Errorf("Peer during ban = %+v", got)
	}
	if s := b.State("p", end.Add(-time.Nanosecond)); s != Banned {
		t.Errorf("State just before the end = %v", s)
	}
	// The ban ends at BanFor; the peer starts over at 0, its history kept.
	if got := b.Score("p", end); got != 0 {
		t.Errorf("Score at the end of the ban = %v, want 0", got)
	}
	got := b.Peer("p", end)
	if got.State != OK || !got.BannedUntil.IsZero() || got.Counts["outlier"] != 9 {
		t.Errorf("Peer after the ban = %+v", got)
	}
	if s := b.Record("p", Outlier, end); s != OK || b.Score("p", end) != -5 {
		t.Errorf("first outlier after the ban: %v, score %v", s, b.Score("p", end))
	}

	// Record lifts an expired ban too.
	record(b, "q", NonFinite, 3, t0)
	if s := b.Record("q", Accepted, end); s != OK || b.Score("q", end) != 1 {
		t.Errorf("accepted after ban: %v, score %v", s, b.Score("q", end))
	}
}

func TestRestoredBan(t *testing.T) {
	b := newBook(t, nil)
	until := t0.Add(10 * time.Minute)
	b.Ban("p", until)
	for _, c := range []struct {
		at   time.Time
		want State
	}{{t0, Banned}, {until.Add(-1), Banned}, {until, OK}} {
		if got := b.State("p", c.at); got != c.want {
			t.Errorf("State at %v = %v, want %v", c.at, got, c.want)
		}
	}
	// A restored ban replaces the current one and is not extended by
	// verdicts; a ban already over is lifted at the next look.
	record(b, "q", Outlier, 9, t0)
	b.Ban("q", until)
	if got := b.Peer("q", t0).BannedUntil; got != until {
		t.Errorf("BannedUntil = %v, want %v", got, until)
	}
	b.Ban("r", t0.Add(-time.Second))
	record(b, "r", Timeout, 1, t0)
	if got := b.Peer("r", t0); got.State != OK || got.Score != -0.5 {
		t.Errorf("after an expired restored ban: %+v", got)
	}
	b.Ban("q", time.Time{})
	if got := b.Peer("q", t0); got.State != OK || got.Score != 0 {
		t.Errorf("after a zero restored ban: %+v", got)
	}
}

func TestRecordIgnoresUnknownVerdict(t *testing.T) {
	b := newBook(t, nil)
	if s := b.Record("p", NumVerdicts, t0); s != OK || b.Len() != 0 {
		t.Errorf("unknown verdict: %v, %d peers", s, b.Len())
	}
	record(b, "p", Outlier, 3, t0)
	if s := b.Record("p", 200, t0); s != Ignored || b.Score("p", t0) != -15 {
		t.Errorf("unknown verdict on a known peer: %v, score %v", s, b.Score("p", t0))
	}
}

func TestEvictionKeepsBans(t *testing.T) {
	b := newBook(t, func(p *Params) { p.MaxPeers = 3 })
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	record(b, "a", NonFinite, 3, at(0)) // banned, oldest last verdict
	b.Record("b", Accepted, at(1))
	b.Record("c", Accepted, at(2))
	b.Record("b", Accepted, at(3)) // b is now more recent than c
	b.Record("d", Accepted, at(4))
	if got := ids(b.Peers(at(4))); got != "a,b,d" {
		t.Errorf("after d: %s, want a,b,d (c evicted)", got)
	}
	b.Record("e", Accepted, at(5))
	if got := ids(b.Peers(at(5))); got != "a,d,e" {
		t.Errorf("after e: %s, want a,d,e", got)
	}
	// Once its ban is over, a is no longer protected.
	late := t0.Add(2 * time.Hour)
	b.Record("f", Accepted, late)
	if got := ids(b.Peers(late)); got != "d,e,f" {
		t.Errorf("after the ban: %s, want d,e,f", got)
	}

	// Every entry banned: the ban that ends first goes.
	b = newBook(t, func(p *Params) { p.MaxPeers = 2 })
	b.Ban("x", t0.Add(2*time.Hour))
	b.Ban("y", t0.Add(time.Hour))
	b.Record("z", Accepted, t0)
	if got := ids(b.Peers(t0)); got != "x,z" {
		t.Errorf("all banned: %s, want x,z", got)
	}
	if b.Len() != 2 {
		t.Errorf("Len = %d", b.Len())
	}
}

func ids(ps []PeerScore) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Peer)
	}
	return strings.Join(s, ",")
}

func TestPeerJSON(t *testing.T) {
	b := newBook(t, nil)
	record(b, "b", Accepted, 2, t0)
	b.Record("b", Clipped, t0)
	record(b, "a", NonFinite, 3, t0)
	out, err := json.Marshal(b.Peers(t0))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"peer":"a","score":-60,"state":"banned","banned_until":"2025-01-01T01:00:00Z","verdicts":{"non_finite":3}},` +
		`{"peer":"b","score":2,"state":"ok","verdicts":{"accepted":2,"clipped":1}}]`
	if string(out) != want {
		t.Errorf("JSON\n got %s\nwant %s", out, want)
	}
	out, _ = json.Marshal(b.Peer("nobody", t0))
	if want := `{"peer":"nobody","score":0,"state":"ok","verdicts":{}}`; string(out) != want {
		t.Errorf("unknown peer JSON %s, want %s", out, want)
	}
}

// TestConcurrent is for the race detector: writers and readers at once,
// with times that are not in order across goroutines.
func TestConcurrent(t *testing.T) {
	b := newBook(t, nil)
	const writers, each = 4, 500
	peers := []string{"a", "b", "c", "d", "e"}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				now := t0.Add(time.Duration(i*writers+w) * time.Second)
				b.Record(peers[(i+w)%len(peers)], Verdict((i*7+w)%int(NumVerdicts)), now)
			}
		})
	}
	for r := range 2 {
		wg.Go(func() {
			for i := range each {
				now := t0.Add(time.Duration(i*3+r) * time.Second)
				p := peers[i%len(peers)]
				b.Score(p, now)
				b.State(p, now)
				b.AppScore(p, now)
				b.Peer(p, now)
				if i%50 == 0 {
					b.Peers(now)
				}
			}
		})
	}
	wg.Wait()
	var total int64
	for _, p := range b.Peers(t0.Add(24 * time.Hour)) {
		for _, n := range p.Counts {
			total += n
		}
	}
	if total != writers*each {
		t.Errorf("counted %d verdicts, want %d", total, writers*each)
	}
}
