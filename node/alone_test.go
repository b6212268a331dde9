package node

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestDiagnoseReasonNames(t *testing.T) {
	// The names are part of the status API.
	for reason, want := range map[AloneReason]string{
		AloneBootstrapUnreachable: "bootstrap_unreachable",
		AloneNoPeers:              "no_peers",
		AloneFingerprintMismatch:  "fingerprint_mismatch",
		AloneAllBanned:            "all_peers_banned",
		AloneOtherMode:            "other_mode",
		AloneRelayedOnly:          "relayed_only",
		AloneNoAnnouncements:      "no_announcements",
	} {
		if string(reason) != want {
			t.Errorf("reason %q, want %q", reason, want)
		}
	}
}

func TestDiagnose(t *testing.T) {
	pa, pb := peer.ID("boot-a"), peer.ID("boot-b")
	errA := errors.New("dial tcp 10.0.0.7:4001: connect: connection refused")
	errB := errors.New("failed to negotiate security protocol: context deadline exceeded")
	bootErrs := map[peer.ID]error{pa: errA, pb: errB}
	cases := []struct {
		name    string
		in      aloneInputs
		want    AloneReason
		has     []string
		hasNot  []string
		ordered []string // substrings that must appear in this order
	}{
		{
			name: "bootstrap unreachable",
			in:   aloneInputs{profile: ProfilePublic, mode: ModeGossip, bootstrap: 2, bootErrs: bootErrs},
			want: AloneBootstrapUnreachable,
			has: []string{"bootstrap peer unreachable", pa.String() + ": " + errA.Error(),
				pb.String() + ": " + errB.Error(), "--bootstrap"},
		},
		{
			name: "bootstrap unreachable, one of two failed",
			in: aloneInputs{profile: ProfileLAN, mode: ModeGossip, bootstrap: 2,
				bootErrs: map[peer.ID]error{pb: errB}},
			want:   AloneBootstrapUnreachable,
			has:    []string{pb.String() + ": " + errB.Error(), "--bootstrap"},
			hasNot: []string{pa.String(), errA.Error()},
		},
		{
			// Connected is what counts: the other fields cannot be true
			// without a peer, and do not win over it.
			name: "bootstrap unreachable wins over everything",
			in: aloneInputs{profile: ProfileLocal, mode: ModeGossip, bootstrap: 1, bootErrs: bootErrs,
				otherFP: 3, ourFP: "fp1234", sameFP: 2, inMode: 2, excluded: 2, modes: map[string]int{"sync": 1}},
			want:   AloneBootstrapUnreachable,
			has:    []string{errA.Error(), errB.Error(), "--bootstrap"},
			hasNot: []string{"fp1234", "banned", "sync"},
		},
		{
			name:   "no peers, local, no bootstrap",
			in:     aloneInputs{profile: ProfileLocal, mode: ModeGossip},
			want:   AloneNoPeers,
			has:    []string{"no peers", "no --bootstrap given", "profile local", "only through --bootstrap"},
			hasNot: []string{"mDNS", "on the DHT"},
		},
		{
			name:   "no peers, lan, no bootstrap",
			in:     aloneInputs{profile: ProfileLAN, mode: ModeGossip},
			want:   AloneNoPeers,
			has:    []string{"no peers", "no --bootstrap given", "mDNS", "LAN", "DHT"},
			hasNot: []string{"profile local"},
		},
		{
			name:   "no peers, public, no bootstrap",
			in:     aloneInputs{profile: ProfilePublic, mode: ModeGossip},
			want:   AloneNoPeers,
			has:    []string{"no peers", "no --bootstrap given", "on the DHT"},
			hasNot: []string{"mDNS", "profile local"},
		},
		{
			name:   "no peers, local, bootstrap pending",
			in:     aloneInputs{profile: ProfileLocal, mode: ModeGossip, bootstrap: 1},
			want:   AloneNoPeers,
			has:    []string{"no peers connected yet", "profile local", "--bootstrap"},
			hasNot: []string{"no --bootstrap given", "unreachable"},
		},
		{
			name:   "no peers, lan, bootstrap pending",
			in:     aloneInputs{profile: ProfileLAN, mode: ModeGossip, bootstrap: 2, bootErrs: map[peer.ID]error{}},
			want:   AloneNoPeers,
			has:    []string{"no peers connected yet", "mDNS", "DHT"},
			hasNot: []string{"no --bootstrap given", "unreachable"},
		},
		{
			name:   "no peers, public, bootstrap pending",
			in:     aloneInputs{profile: ProfilePublic, mode: ModeGossip, bootstrap: 3},
			want:   AloneNoPeers,
			has:    []string{"no peers connected yet", "on the DHT"},
			hasNot: []string{"no --bootstrap given", "mDNS", "unreachable"},
		},
		{
			// Dial errors without a configured bootstrap are not a
			// bootstrap problem.
			name:   "no peers, errors but no bootstrap",
			in:     aloneInputs{profile: ProfilePublic, mode: ModeGossip, bootErrs: bootErrs},
			want:   AloneNoPeers,
			has:    []string{"no --bootstrap given"},
			hasNot: []string{errA.Error()},
		},
		{
			name:   "no peers wins over announcements",
			in:     aloneInputs{profile: ProfilePublic, mode: ModeGossip, otherFP: 2, sameFP: 1, modes: map[string]int{"sync": 1}},
			want:   AloneNoPeers,
			hasNot: []string{"fingerprint", "sync"},
		},
		{
			name: "fingerprint mismatch",
			in:   aloneInputs{profile: ProfileLAN, mode: ModeGossip, connected: 3, otherFP: 3, ourFP: "9f86d081"},
			want: AloneFingerprintMismatch,
			has: []string{"3 peer(s)", "9f86d081", "another model or run",
				"--network", "--dataset", "--model", "--epochs", "--schedule"},
		},
		{
			// Connected: the bootstrap errors no longer matter.
			name: "fingerprint mismatch despite bootstrap errors",
			in: aloneInputs{profile: ProfilePublic, mode: ModeGossip, bootstrap: 2, bootErrs: bootErrs,
				connected: 1, otherFP: 1, ourFP: "abcd"},
			want:   AloneFingerprintMismatch,
			has:    []string{"1 peer(s)", "abcd"},
			hasNot: []string{errA.Error(), errB.Error()},
		},
		{
			name: "all banned",
			in: aloneInputs{profile: ProfilePublic, mode: ModeGossip, connected: 4, ourFP: "abcd",
				sameFP: 2, inMode: 2, excluded: 2},
			want: AloneAllBanned,
			has:  []string{"all 2 peer(s)", "banned or ignored", "meshtrain peers"},
		},
		{
			// A peer on our run: other runs do not explain the solitude.
			name: "all banned wins over other runs",
			in: aloneInputs{profile: ProfilePublic, mode: ModeGossip, connected: 9, otherFP: 5, ourFP: "abcd",
				sameFP: 3, inMode: 1, excluded: 1, modes: map[string]int{"sync": 2}},
			want:   AloneAllBanned,
			has:    []string{"all 1 peer(s)"},
			hasNot: []string{"abcd", "sync"},
		},
		{
			name: "relayed only",
			in: aloneInputs{profile: ProfilePublic, mode: ModeGossip, connected: 2, ourFP: "abcd",
				sameFP: 2, inMode: 2, relayed: 2},
			want: AloneRelayedOnly,
			has:  []string{"the 2 peer(s)", "only through a relay", "hole punch", "not sent over relays"},
		},
		{
			// One banned, one relayed: still no partner, and the relay is
			// what a user can do something about.
			name: "relayed only, the rest banned",
			in: aloneInputs{profile: ProfilePublic, mode: ModeGossip, connected: 2, ourFP: "abcd",
				sameFP: 2, inMode: 2, excluded: 1, relayed: 1},
			want: AloneRelayedOnly,
			has:  []string{"the 1 peer(s)"},
		},
		{
			name: "other mode",
			in: aloneInputs{profile: ProfileLAN, mode: ModeGossip, connected: 3, ourFP: "abcd",
				sameFP: 3, modes: map[string]int{string(ModeSync): 2, string(ModeLocal): 1}},
			want:    AloneOtherMode,
			has:     []string{"another mode", "1 in local", "2 in sync", "ours is gossip"},
			ordered: []string{"1 in local", "2 in sync"},
		},
		{
			name: "other mode, ours sync",
			in: aloneInputs{profile: ProfilePublic, mode: ModeSync, connected: 1, otherFP: 4, ourFP: "abcd",
				sameFP: 1, modes: map[string]int{string(ModeGossip): 1}},
			want:   AloneOtherMode,
			has:    []string{"1 in gossip", "ours is sync"},
			hasNot: []string{"abcd", "4 peer(s)"},
		},
		{
			name:   "no announcements",
			in:     aloneInputs{profile: ProfilePublic, mode: ModeGossip, connected: 4, ourFP: "abcd"},
			want:   AloneNoAnnouncements,
			has:    []string{"4 peer(s) connected", "none has announced"},
			hasNot: []string{"abcd"},
		},
		{
			name: "no announcements despite bootstrap errors",
			in: aloneInputs{profile: ProfileLocal, mode: ModeGossip, bootstrap: 1, bootErrs: bootErrs,
				connected: 1},
			want:   AloneNoAnnouncements,
			has:    []string{"1 peer(s) connected"},
			hasNot: []string{errA.Error()},
		},
	}
	seen := map[AloneReason]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := diagnose(tc.in)
			if reason != tc.want {
				t.Fatalf("reason = %q, want %q (message %q)", reason, tc.want, msg)
			}
			if !strings.HasPrefix(msg, "training alone: ") {
				t.Errorf("message %q does not start with %q", msg, "training alone: ")
			}
			for _, s := range tc.has {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q lacks %q", msg, s)
				}
			}
			for _, s := range tc.hasNot {
				if strings.Contains(msg, s) {
					t.Errorf("message %q has %q", msg, s)
				}
			}
			last := -1
			for _, s := range tc.ordered {
				i := strings.Index(msg, s)
				if i <= last {
					t.Errorf("message %q: %q out of order %q", msg, s, tc.ordered)
				}
				last = i
			}
			// Maps are listed in a stable order: the same inputs, the same
			// message.
			for i := 0; i < 20; i++ {
				if r, m := diagnose(tc.in); r != reason || m != msg {
					t.Fatalf("diagnose not stable: %q %q, then %q %q", reason, msg, r, m)
				}
			}
		})
		seen[tc.want] = true
	}
	for _, r := range []AloneReason{AloneBootstrapUnreachable, AloneNoPeers, AloneFingerprintMismatch,
		AloneAllBanned, AloneOtherMode, AloneNoAnnouncements} {
		if !seen[r] {
			t.Errorf("no case for reason %q", r)
		}
	}
}

func TestDiagnoseBootstrapErrorsSorted(t *testing.T) {
	errs := map[peer.ID]error{}
	var want []string
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		p := peer.ID(id)
		errs[p] = errors.New("refused " + id)
		want = append(want, p.String()+": refused "+id)
	}
	slices.Sort(want)
	_, msg := diagnose(aloneInputs{bootstrap: len(errs), bootErrs: errs})
	wantMsg := "training alone: bootstrap peer unreachable (" + strings.Join(want, "; ") +
		"); check the --bootstrap address and that the peer is running"
	if msg != wantMsg {
		t.Fatalf("message\n%q\nwant\n%q", msg, wantMsg)
	}
}

func sortedIDs(ps []peer.ID) []peer.ID {
	out := slices.Clone(ps)
	slices.Sort(out)
	return out
}

func TestOtherRuns(t *testing.T) {
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	s := func(x float64) time.Time { return base.Add(time.Duration(x * float64(time.Second))) }
	type step struct {
		note peer.ID   // note this peer at at, or (if empty) call recent at at
		at   time.Time // when
		want []peer.ID // recent's answer, sorted
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"empty", []step{{at: base, want: nil}}},
		{"one", []step{{note: "a", at: base}, {at: base, want: []peer.ID{"a"}}}},
		{"within TTL", []step{
			{note: "a", at: base}, {note: "b", at: s(10)},
			{at: s(20), want: []peer.ID{"a", "b"}},
			{at: base.Add(otherRunsTTL), want: []peer.ID{"a", "b"}}, // exactly the TTL: kept
		}},
		{"expiry", []step{
			{note: "a", at: base}, {note: "b", at: s(10)},
			{at: base.Add(otherRunsTTL + time.Nanosecond), want: []peer.ID{"b"}},
			{at: s(10).Add(otherRunsTTL + time.Nanosecond), want: nil},
		}},
		{"forgotten for good", []step{
			{note: "a", at: base},
			{at: s(100), want: nil},
			// Asked about an earlier moment, a does not come back.
			{at: base, want: nil},
		}},
		{"noting again refreshes", []step{
			{note: "a", at: base}, {note: "b", at: base},
			{note: "a", at: s(25)},
			{at: s(40), want: []peer.ID{"a"}},
			{at: s(25).Add(otherRunsTTL), want: []peer.ID{"a"}},
			{at: s(25).Add(otherRunsTTL + time.Second), want: nil},
		}},
		{"noted again after expiry", []step{
			{note: "a", at: base},
			{at: s(60), want: nil},
			{note: "a", at: s(61)},
			{at: s(62), want: []peer.ID{"a"}},
		}},
		{"recent does not refresh", []step{
			{note: "a", at: base},
			{at: s(20), want: []peer.ID{"a"}},
			{at: s(29), want: []peer.ID{"a"}},
			{at: s(31), want: nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o otherRuns // the zero value is ready
			for i, st := range tc.steps {
				if st.note != "" {
					o.note(st.note, st.at)
					continue
				}
				if got := sortedIDs(o.recent(st.at)); !slices.Equal(got, st.want) {
					t.Fatalf("step %d: recent(%v) = %q, want %q", i, st.at.Sub(base), got, st.want)
				}
				if n := len(o.peers); n != len(st.want) {
					t.Fatalf("step %d: %d peers kept after recent, want %d", i, n, len(st.want))
				}
			}
		})
	}
}

func TestOtherRunsBound(t *testing.T) {
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	id := func(i int) peer.ID { return peer.ID(fmt.Sprintf("run-%03d", i)) }
	var o otherRuns
	var all []peer.ID
	for i := 0; i < otherRunsMax; i++ {
		o.note(id(i), base.Add(time.Duration(i)*time.Millisecond))
		all = append(all, id(i))
	}
	slices.Sort(all)

	// Full: a new peer is not taken, one on file is refreshed.
	o.note("extra", base.Add(time.Second))
	o.note(id(0), base.Add(10*time.Second))
	got := sortedIDs(o.recent(base.Add(time.Second)))
	if !slices.Equal(got, all) {
		t.Fatalf("recent when full: %d peers (extra there: %v), want the %d first",
			len(got), slices.Contains(got, "extra"), otherRunsMax)
	}
	if len(o.peers) > otherRunsMax {
		t.Fatalf("%d peers kept, want at most %d", len(o.peers), otherRunsMax)
	}

	// After the TTL only the refreshed one is left, and there is room again.
	later := base.Add(otherRunsTTL + 5*time.Second)
	if got := o.recent(later); !slices.Equal(got, []peer.ID{id(0)}) {
		t.Fatalf("recent after the TTL = %q, want [%q]", got, id(0))
	}
	o.note("extra", later)
	if got := sortedIDs(o.recent(later)); !slices.Equal(got, sortedIDs([]peer.ID{id(0), "extra"})) {
		t.Fatalf("recent = %q, want %q and extra", got, id(0))
	}
}
