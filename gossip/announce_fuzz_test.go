package gossip

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// FuzzAnnounceValidator runs what the announce topic's validator runs on
// each message, short of pubsub and the flood budget: decode, the checks
// against the signer, our fingerprint and our clock, and the verdict. The
// verdict must be the one the rules give, worked out here from the decoded
// fields: undecodable or naming another peer is a Reject (wrong for every
// honest relay); another model or outside the time window is an Ignore
// (depends on our own state); anything else is an Accept.
func FuzzAnnounceValidator(f *testing.F) {
	signer, _ := peer.Decode("12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN")
	other, _ := peer.Decode("12D3KooWRBhwfeP2Y9CDkFRBAZ1pmxUadH36TKuk3KtKm5XXP8mA")
	const maxAge, maxSkew = 30 * time.Second, 5 * time.Second
	now := time.UnixMilli(1700000000000)
	good := Announcement{
		Peer: signer, Fingerprint: testFP, Step: 3, Progress: 96, Loss: 0.7, Accuracy: 0.8, SamplesPerSec: 1000,
		Addrs: []string{"/ip4/127.0.0.1/tcp/4001"}, Mode: "gossip", TimeMs: now.UnixMilli() - 1000,
	}
	for _, edit := range []func(*Announcement){
		func(*Announcement) {},
		func(a *Announcement) { a.Peer = other },
		func(a *Announcement) { a.Fingerprint[0] ^= 1 },
		func(a *Announcement) { a.TimeMs = now.Add(-maxAge).UnixMilli() },
		func(a *Announcement) { a.TimeMs = now.Add(-maxAge).UnixMilli() - 1 },
		func(a *Announcement) { a.TimeMs = now.Add(maxSkew).UnixMilli() },
		func(a *Announcement) { a.TimeMs = now.Add(maxSkew).UnixMilli() + 1 },
		func(a *Announcement) { a.TimeMs = 1<<63 - 1 },
		func(a *Announcement) { a.Addrs, a.Mode = nil, "sync" },
	} {
		a := good
		edit(&a)
		b, err := EncodeAnnouncement(a)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"peer":"` + signer.String() + `","step":-1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAnnouncement(b)
		decoded := err == nil
		if decoded {
			err = checkAnnouncement(a, signer, testFP, now, maxAge, maxSkew)
		}
		got := VerdictOf(err)
		want := Accept
		if decoded {
			// In milliseconds, as sent: both are positive, so neither
			// difference overflows.
			at, nowMs := a.TimeMs, now.UnixMilli()
			switch {
			case a.Peer != signer:
				want = Reject
			case a.Fingerprint != testFP:
				want = Ignore
			case nowMs-at > maxAge.Milliseconds() || at-nowMs > maxSkew.Milliseconds():
				want = Ignore
			}
		} else {
			want = Reject
		}
		if got != want {
			t.Fatalf("verdict %v, want %v (decoded %v): %v", got, want, decoded, err)
		}
		if err != nil && ReasonOf(err) == ReasonNone {
			t.Fatalf("refused without a reason: %v", err)
		}
	})
}
