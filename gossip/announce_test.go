package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

var (
	peerA, _ = peer.Decode("12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN")
	peerB, _ = peer.Decode("12D3KooWRBhwfeP2Y4TCx1SM6s9rUoHhR5STiGwxBhgFRcw3UERE")
	t0       = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
)

func goodAnnouncement() Announcement {
	return Announcement{
		Peer: peerA, Fingerprint: testFP, Step: 120, Progress: 3840, Loss: 0.42, Accuracy: 0.91,
		SamplesPerSec: 2500, Addrs: []string{"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1"},
		Mode: "gossip", TimeMs: t0.UnixMilli(), AgeS: 0.025,
	}
}

func TestAnnouncementRoundTrip(t *testing.T) {
	a := goodAnnouncement()
	b, err := EncodeAnnouncement(a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeAnnouncement(b)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(a) {
		t.Fatalf("round trip:\n%+v\n%+v", got, a)
	}
	// The schema in docs/protocol.md names these keys.
	for _, key := range []string{`"peer"`, `"fingerprint"`, `"step"`, `"progress"`, `"loss"`, `"accuracy"`, `"samples_per_s"`, `"addrs"`, `"mode"`, `"time_ms"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("encoding lacks %s: %s", key, b)
		}
	}
	// Unknown fields are ignored so a newer peer can add one.
	extra := strings.Replace(string(b), "{", `{"future_field":[1,2,3],`, 1)
	if _, err := DecodeAnnouncement([]byte(extra)); err != nil {
		t.Errorf("unknown field refused: %v", err)
	}
}

func TestAnnouncementHostile(t *testing.T) {
	enc := func(f func(*Announcement)) []byte {
		a := goodAnnouncement()
		f(&a)
		b, err := jsonMarshalUnchecked(a)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good, _ := EncodeAnnouncement(goodAnnouncement())
	manyAddrs := make([]string, 17)
	for i := range manyAddrs {
		manyAddrs[i] = "/ip4/127.0.0.1/tcp/1"
	}
	tests := []struct {
		name string
		b    []byte
		want Reason
	}{
		{"oversize", []byte(`{"mode":"` + strings.Repeat("x", MaxAnnounceSize) + `"}`), ReasonOversize},
		{"not json", []byte("hello"), ReasonMalformed},
		{"json null", []byte("null"), ReasonMalformed},
		{"nan literal", []byte(strings.Replace(string(good), `"loss":0.42`, `"loss":NaN`, 1)), ReasonMalformed},
		{"overflowing number", []byte(strings.Replace(string(good), `"loss":0.42`, `"loss":1e999`, 1)), ReasonMalformed},
		{"trailing data", append(append([]byte{}, good...), []byte(`{}`)...), ReasonMalformed},
		{"wrong type", []byte(strings.Replace(string(good), `"step":120`, `"step":"120"`, 1)), ReasonMalformed},
		{"bad peer id", []byte(strings.Replace(string(good), peerA.String(), "notapeer", 1)), ReasonMalformed},
		{"no fingerprint", enc(func(a *Announcement) { a.Fingerprint = [32]byte{} }), ReasonMalformed},
		{"negative step", enc(func(a *Announcement) { a.Step = -1 }), ReasonMalformed},
		{"negative progress", enc(func(a *Announcement) { a.Progress = -5 }), ReasonMalformed},
		{"accuracy above 1", enc(func(a *Announcement) { a.Accuracy = 1.5 }), ReasonMalformed},
		{"negative loss", enc(func(a *Announcement) { a.Loss = -1 }), ReasonMalformed},
		{"negative rate", enc(func(a *Announcement) { a.SamplesPerSec = -1 }), ReasonMalformed},
		{"negative age", enc(func(a *Announcement) { a.AgeS = -1 }), ReasonMalformed},
		{"negative interval", enc(func(a *Announcement) { a.IntervalMs = -1 }), ReasonMalformed},
		{"interval over an hour", enc(func(a *Announcement) { a.IntervalMs = 3600*1000 + 1 }), ReasonMalformed},
		{"bad address", enc(func(a *Announcement) { a.Addrs = []string{"/ip4/999.0.0.1/tcp/1"} }), ReasonMalformed},
		{"too many addresses", enc(func(a *Announcement) { a.Addrs = manyAddrs }), ReasonMalformed},
		{"empty mode", enc(func(a *Announcement) { a.Mode = "" }), ReasonMalformed},
		{"shouting mode", enc(func(a *Announcement) { a.Mode = "GOSSIP" }), ReasonMalformed},
		{"no time", enc(func(a *Announcement) { a.TimeMs = 0 }), ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeAnnouncement(tc.b)
			if got := ReasonOf(err); got != tc.want {
				t.Errorf("reason %v (%v), want %v", got, err, tc.want)
			}
			if VerdictOf(err) != Reject {
				t.Errorf("verdict %v, want reject", VerdictOf(err))
			}
		})
	}
}

// jsonMarshalUnchecked encodes without Validate, as a hostile peer would.
func jsonMarshalUnchecked(a Announcement) ([]byte, error) { return json.Marshal(a) }

func TestEncodeAnnouncementRefusesInvalid(t *testing.T) {
	a := goodAnnouncement()
	a.Loss = math.NaN()
	if _, err := EncodeAnnouncement(a); !errors.Is(err, ErrMalformed) {
		t.Errorf("NaN loss: %v", err)
	}
	a = goodAnnouncement()
	a.Addrs = nil
	for range maxAnnounceAddrs {
		a.Addrs = append(a.Addrs, "/dns4/"+strings.Repeat("a", 240)+"/tcp/1")
	}
	if _, err := EncodeAnnouncement(a); !errors.Is(err, ErrOversize) {
		t.Errorf("oversized announcement: %v", err)
	}
}

func TestCheckAnnouncement(t *testing.T) {
	other := testFP
	other[0]++
	const maxAge, skew = 15 * time.Second, 30 * time.Second
	tests := []struct {
		name    string
		mod     func(*Announcement)
		signer  peer.ID
		now     time.Time
		want    Reason
		verdict Verdict
	}{
		{"fresh", func(*Announcement) {}, peerA, t0.Add(time.Second), ReasonNone, Accept},
		{"signed by another peer", func(*Announcement) {}, peerB, t0, ReasonInconsistent, Reject},
		{"other model", func(a *Announcement) { a.Fingerprint = other }, peerA, t0, ReasonFingerprint, Ignore},
		{"stale", func(*Announcement) {}, peerA, t0.Add(maxAge + time.Millisecond), ReasonStale, Ignore},
		{"from the future", func(*Announcement) {}, peerA, t0.Add(-skew - time.Second), ReasonStale, Ignore},
		{"slight skew is fine", func(*Announcement) {}, peerA, t0.Add(-skew + time.Second), ReasonNone, Accept},
	}
	for _, tc := range tests {
		a := goodAnnouncement()
		tc.mod(&a)
		err := checkAnnouncement(a, tc.signer, testFP, tc.now, maxAge, skew)
		if ReasonOf(err) != tc.want || VerdictOf(err) != tc.verdict {
			t.Errorf("%s: %v (reason %v, verdict %v), want %v/%v", tc.name, err, ReasonOf(err), VerdictOf(err), tc.want, tc.verdict)
		}
	}
}

func TestPeerTableFloodAndFreshness(t *testing.T) {
	const interval = time.Second
	tab := newPeerTable(3*interval, 3*interval, interval, 3, 2)
	for i := range 3 {
		if err := tab.admit(peerA, t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatalf("announcement %d refused: %v", i, err)
		}
	}
	for i := range 5 {
		if err := tab.admit(peerA, t0.Add(500*time.Millisecond)); ReasonOf(err) != ReasonFlood || VerdictOf(err) != Ignore {
			t.Fatalf("flood announcement %d: %v", i, err)
		}
	}
	// Another peer has its own budget; a new window restores A's.
	if err := tab.admit(peerB, t0.Add(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := tab.admit(peerA, t0.Add(interval)); err != nil {
		t.Fatalf("new window: %v", err)
	}
	// The table is full at two peers: a third identity is refused.
	var peerC peer.ID = "not-a-real-peer-but-distinct"
	if err := tab.admit(peerC, t0.Add(interval)); ReasonOf(err) != ReasonFlood {
		t.Fatalf("third peer in a table of two: %v", err)
	}

	a := goodAnnouncement()
	b := goodAnnouncement()
	b.Peer = peerB
	tab.observe(a, t0)
	tab.observe(b, t0.Add(2*time.Second))
	older := a
	older.Step, older.TimeMs = 1, a.TimeMs-1000
	tab.observe(older, t0.Add(time.Second)) // reordered: must not replace
	fresh := tab.freshPeers(t0.Add(2*time.Second), false)
	if len(fresh) != 2 || fresh[0].Step != 120 {
		t.Fatalf("fresh at +2s: %+v", fresh)
	}
	shared := tab.freshPeers(t0.Add(2*time.Second), true)
	if len(shared) != 2 || shared[0].Peer != fresh[0].Peer || shared[1].Peer != fresh[1].Peer ||
		!slices.Equal(shared[0].Addrs, fresh[0].Addrs) || !slices.Equal(shared[1].Addrs, fresh[1].Addrs) {
		t.Fatalf("the shared view differs from the copy: %+v against %+v", shared, fresh)
	}
	fresh[0].Addrs[0] = "mutated"
	if tab.freshPeers(t0.Add(2*time.Second), false)[0].Addrs[0] == "mutated" {
		t.Fatal("Fresh returned the table's own slice")
	}
	// A was last seen at t0: not fresh after 3s; B still is.
	fresh = tab.freshPeers(t0.Add(3*time.Second+time.Millisecond), false)
	if len(fresh) != 1 || fresh[0].Peer != peerB {
		t.Fatalf("fresh at +3s: %+v", fresh)
	}
	tab.prune(t0.Add(10 * time.Second))
	if len(tab.peers) != 0 || len(tab.rate) != 0 {
		t.Fatalf("prune left %d peers, %d rate windows", len(tab.peers), len(tab.rate))
	}
}

func TestAnnounceConfigValidate(t *testing.T) {
	if err := DefaultAnnounceConfig().Validate(); err == nil {
		t.Fatal("default config without network and fingerprint accepted")
	}
	c := DefaultAnnounceConfig()
	c.Network, c.Fingerprint = "main", testFP
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Network = "a/b"
	c.Interval = 0
	c.MaxPerInterval = 0
	c.TopicRate = math.NaN()
	c.MaxInterval = 2 * time.Hour
	err := c.Validate()
	for _, field := range []string{"Network", "Interval", "MaxPerInterval", "TopicRate", "MaxInterval"} {
		if !strings.Contains(fmt.Sprint(err), field) {
			t.Errorf("Validate did not report %s: %v", field, err)
		}
	}
	if !errors.Is(err, ErrBadConfig) {
		t.Errorf("not ErrBadConfig: %v", err)
	}
	c = DefaultAnnounceConfig()
	if c.FreshWindow != 3*c.Interval || c.MaxAge != c.FreshWindow {
		t.Errorf("default windows %v, %v for interval %v", c.FreshWindow, c.MaxAge, c.Interval)
	}
	c.Interval, c.FreshWindow, c.MaxAge = 2*time.Second, 0, 0
	if d := c.withDerived(); d.FreshWindow != 6*time.Second || d.MaxAge != 6*time.Second {
		t.Errorf("derived fresh window %v, max age %v", d.FreshWindow, d.MaxAge)
	}
	if got := AnnounceTopic("main"); got != "/meshtrain/main/announce/1" {
		t.Errorf("topic %q", got)
	}
}

// The interval stretches with the swarm so the topic carries TopicRate
// announcements a second: at 10/s and a 1 s floor, nothing changes up to
// 9 peers, 99 peers wait 10 s, and the cap holds for a huge swarm.
func TestAnnounceIntervalGrowsWithSwarm(t *testing.T) {
	c := DefaultAnnounceConfig()
	c.Interval, c.MaxInterval = time.Second, 5*time.Minute
	if got := announceInterval(c, 500); got != time.Second {
		t.Fatalf("TopicRate 0: %v, want the fixed interval", got)
	}
	c.TopicRate = 10
	for _, tc := range []struct {
		peers int
		want  time.Duration
	}{{0, time.Second}, {9, time.Second}, {10, 1100 * time.Millisecond}, {99, 10 * time.Second}, {999, 100 * time.Second}, {1 << 20, 5 * time.Minute}} {
		got := announceInterval(c, tc.peers)
		if got != tc.want {
			t.Errorf("%d peers: %v, want %v", tc.peers, got, tc.want)
		}
		// What the swarm's topic carries: (peers+1) nodes, each once per
		// interval, stays at TopicRate until the cap.
		if rate := float64(tc.peers+1) / got.Seconds(); tc.peers >= 9 && tc.want < c.MaxInterval && math.Abs(rate-c.TopicRate) > 1e-9 {
			t.Errorf("%d peers: topic rate %v, want %v", tc.peers, rate, c.TopicRate)
		}
	}
}

// A peer that says it announces every 20 s stays fresh for 60 s, not the
// table's 3 s; one that says nothing gets the table's window; a claim past
// the cap gets the cap; prune keeps each peer for its own window.
func TestPeerTableAnnouncedInterval(t *testing.T) {
	const interval = time.Second
	tab := newPeerTable(3*interval, 90*time.Second, interval, 3, 10)
	slow := goodAnnouncement()
	slow.IntervalMs = 20000
	quiet := goodAnnouncement()
	quiet.Peer = peerB
	var peerC peer.ID = "not-a-real-peer-but-distinct"
	greedy := goodAnnouncement()
	greedy.Peer, greedy.IntervalMs = peerC, 3600*1000
	for _, a := range []Announcement{slow, quiet, greedy} {
		tab.observe(a, t0)
	}
	at := func(d time.Duration) []peer.ID {
		var ids []peer.ID
		for _, pi := range tab.freshPeers(t0.Add(d), false) {
			ids = append(ids, pi.Peer)
		}
		return ids
	}
	if got := at(3 * time.Second); len(got) != 3 {
		t.Fatalf("at 3 s: %v, want all three", got)
	}
	if got := at(4 * time.Second); len(got) != 2 || slices.Contains(got, peerB) {
		t.Fatalf("at 4 s: %v, want the two that announced an interval", got)
	}
	if got := at(60 * time.Second); len(got) != 2 {
		t.Fatalf("at 60 s: %v, want the two", got)
	}
	if got := at(61 * time.Second); len(got) != 1 || got[0] != peerC {
		t.Fatalf("at 61 s: %v, want only the capped one", got)
	}
	if n := tab.count(t0.Add(90 * time.Second)); n != 1 {
		t.Fatalf("count at the cap: %d, want 1", n)
	}
	if n := tab.count(t0.Add(90*time.Second + time.Millisecond)); n != 0 {
		t.Fatalf("count past the cap: %d, want 0", n)
	}
	tab.prune(t0.Add(61 * time.Second))
	if len(tab.peers) != 1 {
		t.Fatalf("prune at 61 s left %d peers, want 1", len(tab.peers))
	}
}
