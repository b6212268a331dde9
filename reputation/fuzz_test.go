package reputation

import (
	"math"
	"testing"
	"time"
)

// FuzzBook drives a small book with random verdicts, bans, reads and times
// (mostly forward, sometimes back, as concurrent callers do) and checks the
// invariants after every step.
func FuzzBook(f *testing.F) {
	f.Add([]byte{0x00, 0, 0x28, 0, 0x28, 0, 0x28, 0, 0x28, 0, 0x28, 0, 0x28, 0, 0x28, 0, 0x28, 0, 0x28, 0xff})
	f.Add([]byte{0x21, 3, 0x22, 200, 0x07, 9, 0x83, 40, 0x10, 0, 0x41, 1, 0xf8, 255, 0x24, 100})
	f.Add([]byte{0x05, 1, 0x06, 1, 0x07, 1, 0x08, 1, 0x09, 1, 0x0a, 1, 0x0b, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := DefaultParams()
		p.MaxPeers = 3
		b, err := New(p)
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		for i := 0; i+1 < len(data); i += 2 {
			op, arg := data[i], data[i+1]
			peer := string(rune('a' + op%5))
			// arg^3 ms spans nothing to about 4.6 hours.
			gap := time.Duration(arg) * time.Duration(arg) * time.Duration(arg) * time.Millisecond
			if op&0x80 != 0 {
				now = now.Add(-gap / 8)
			} else {
				now = now.Add(gap)
			}
			switch kind := op >> 3 & 0x0f; {
			case kind < 11: // verdicts, two of them out of range
				b.Record(peer, Verdict(kind), now)
			case kind == 11:
				b.Ban(peer, now.Add(time.Duration(arg)*time.Minute-time.Hour))
			default:
				b.Score(peer, now)
			}
			check(t, b, peer, now)
		}
		ps := b.Peers(now)
		if len(ps) > p.MaxPeers {
			t.Fatalf("%d peers tracked, MaxPeers %d", len(ps), p.MaxPeers)
		}
		for i := range ps {
			if i > 0 && ps[i].Peer <= ps[i-1].Peer {
				t.Fatalf("Peers not sorted: %q after %q", ps[i].Peer, ps[i-1].Peer)
			}
			check(t, b, ps[i].Peer, now)
		}
	})
}

func check(t *testing.T, b *Book, peer string, now time.Time) {
	t.Helper()
	p := b.Params()
	ps := b.Peer(peer, now)
	s := ps.Score
	if math.IsNaN(s) || math.IsInf(s, 0) || s > p.MaxScore || s < p.BanBelow*10 {
		t.Fatalf("%s: score %v out of [%v, %v]", peer, s, p.BanBelow*10, p.MaxScore)
	}
	if ps.StateName != ps.State.String() {
		t.Fatalf("%s: state %v named %q", peer, ps.State, ps.StateName)
	}
	app := b.AppScore(peer, now)
	if ps.State == Banned {
		if !now.Before(ps.BannedUntil) {
			t.Fatalf("%s: banned until %v at %v", peer, ps.BannedUntil, now)
		}
		if app != p.BanBelow*10 {
			t.Fatalf("%s: AppScore %v of a banned peer", peer, app)
		}
		return
	}
	want := OK
	switch {
	case s < p.BanBelow:
		t.Fatalf("%s: score %v below BanBelow but %v", peer, s, ps.State)
	case s < p.DisconnectBelow:
		want = Disconnected
	case s < p.IgnoreBelow:
		want = Ignored
	}
	if ps.State != want || !ps.BannedUntil.IsZero() {
		t.Fatalf("%s: score %v, state %v, banned until %v; want %v", peer, s, ps.State, ps.BannedUntil, want)
	}
	if app != s {
		t.Fatalf("%s: AppScore %v, score %v", peer, app, s)
	}
	if got := b.State(peer, now); got != ps.State {
		t.Fatalf("%s: State %v, Peer says %v", peer, got, ps.State)
	}
	for name, n := range ps.Counts {
		if n <= 0 {
			t.Fatalf("%s: count %s = %d", peer, name, n)
		}
	}
}
