package gossip

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/params"
)

const syncN = 5000 // 20 KB per vector: two chunks of 16 KiB

func syncTestConfig() SyncConfig {
	c := DefaultSyncConfig()
	c.Fingerprint = testFP
	c.Elements = syncN
	c.MaxElements = 1 << 20
	c.ChunkSize = 4 * MinChunkSize
	c.ChunkTimeout = 500 * time.Millisecond
	c.Timeout = 2 * time.Second
	c.MaxProgressDelta = 64
	c.Logger = slog.New(slog.DiscardHandler)
	return c
}

type syncPeer struct {
	h   host.Host
	svc *SyncService
}

func newSyncPeer(t *testing.T, cfg SyncConfig) *syncPeer {
	t.Helper()
	h := newHost(t, "tcp", testConfig(syncN))
	svc, err := NewSyncService(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	return &syncPeer{h: h, svc: svc}
}

func (p *syncPeer) id() peer.ID { return p.h.ID() }

// meshOf connects every pair.
func meshOf(t *testing.T, ps ...*syncPeer) {
	t.Helper()
	for i, a := range ps {
		for _, b := range ps[i+1:] {
			connect(t, a.h, b.h)
		}
	}
}

func randVec(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func contribution(round int64, progress params.Progress, seed uint64) Contribution {
	return Contribution{Round: round, Progress: progress, Params: randVec(syncN, seed)}
}

func sortedIDs(ps ...*syncPeer) []peer.ID {
	var out []peer.ID
	for _, p := range ps {
		out = append(out, p.id())
	}
	slices.Sort(out)
	return out
}

func refusal(t *testing.T, err error, want SyncCode) *SyncRefusal {
	t.Helper()
	var ref *SyncRefusal
	if !errors.As(err, &ref) || ref.Code != want {
		t.Fatalf("got %v, want a %s refusal", err, want)
	}
	return ref
}

func TestSyncRequestWire(t *testing.T) {
	q := SyncRequest{Kind: SyncContribute, Fingerprint: testFP, Elements: 3, Round: 258, Progress: 258 * 48, Base: 0x1122334455667788}
	b := q.Marshal()
	// The layout of docs/protocol.md, byte for byte.
	want := "4d545351" + "01" + "01" + "0000" + hex.EncodeToString(testFP[:]) +
		"0300000000000000" + "0201000000000000" + "000000000030c840" + "8877665544332211" + "0000000000000000"
	if got := hex.EncodeToString(b[:]); got != want {
		t.Fatalf("request\n got %s\nwant %s", got, want)
	}
	if got, err := ParseSyncRequest(b[:]); err != nil || got != q {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	// The example of docs/protocol.md.
	var fp params.Fingerprint
	for i := range fp {
		fp[i] = byte(i)
	}
	doc := SyncRequest{Kind: SyncContribute, Fingerprint: fp, Elements: 1386, Round: 258, Progress: 258 * 48, Base: 0x1122334455667788}.Marshal()
	if got := hex.EncodeToString(doc[:]); got != "4d5453510101000000"+"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"+
		"6a05000000000000"+"0201000000000000"+"000000000030c840"+"8877665544332211"+"0000000000000000" {
		t.Errorf("docs example request: %s", got)
	}
	docA := SyncAnswer{Round: 258, Progress: 258 * 48, MemberCount: 3, MembersSize: 117, Group: 0x0102030405060708}.Marshal()
	if got := hex.EncodeToString(docA[:]); got != "4d54534101000000"+"0201000000000000"+"000000000030c840"+"0300"+"7500"+"00000000"+"0807060504030201" {
		t.Errorf("docs example answer: %s", got)
	}
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
		want error
	}{
		{"short", func(b []byte) []byte { return b[:SyncRequestSize-1] }, ErrShortRead},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, ErrBadMagic},
		{"version", func(b []byte) []byte { b[4] = 2; return b }, ErrBadVersion},
		{"kind 0", func(b []byte) []byte { b[5] = 0; return b }, ErrProtocol},
		{"kind 4", func(b []byte) []byte { b[5] = 4; return b }, ErrProtocol},
		{"reserved", func(b []byte) []byte { b[7] = 1; return b }, ErrProtocol},
		{"reserved tail", func(b []byte) []byte { b[79] = 1; return b }, ErrProtocol},
		{"NaN progress", func(b []byte) []byte { b[63] = 0x7f; b[62] = 0xf8; return b }, ErrNonFinite},
		{"negative progress", func(b []byte) []byte { b[63] |= 0x80; return b }, ErrProtocol},
		{"join with progress", func(b []byte) []byte { b[5] = byte(SyncJoin); clear(b[48:56]); return b }, ErrProtocol},
		{"round overflow", func(b []byte) []byte { b[55] = 0x80; return b }, ErrProtocol},
		{"contribution to round 0", func(b []byte) []byte { clear(b[48:56]); return b }, ErrProtocol},
		{"join for a round", func(b []byte) []byte { b[5] = byte(SyncJoin); return b }, ErrProtocol},
	} {
		bb := q.Marshal()
		if _, err := ParseSyncRequest(c.edit(bb[:])); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestSyncAnswerWire(t *testing.T) {
	a := SyncAnswer{Code: SyncOK, Round: 7, Progress: 448, MemberCount: 2, MembersSize: 78, Group: 9}
	b := a.Marshal()
	want := "4d545341" + "01" + "00" + "00" + "00" + "0700000000000000" + "0000000000007c40" + "0200" + "4e00" + "00000000" + "0900000000000000"
	if got := hex.EncodeToString(b[:]); got != want {
		t.Fatalf("answer\n got %s\nwant %s", got, want)
	}
	if got, err := ParseSyncAnswer(b[:]); err != nil || got != a {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, c := range []struct {
		name string
		a    SyncAnswer
		want error
	}{
		{"unknown code", SyncAnswer{Code: 8}, ErrProtocol},
		{"rejected without reason", SyncAnswer{Code: SyncRejected}, ErrProtocol},
		{"reason without rejection", SyncAnswer{Code: SyncBusy, Reason: ReasonBusy}, ErrProtocol},
		{"NaN progress", SyncAnswer{Progress: params.Progress(math.NaN())}, ErrNonFinite},
		{"negative progress", SyncAnswer{Progress: -1}, ErrProtocol},
		{"too many members", SyncAnswer{MemberCount: MaxSyncMembers + 1, MembersSize: 3000}, ErrOversize},
		{"members in too few bytes", SyncAnswer{MemberCount: 2, MembersSize: 3}, ErrProtocol},
		{"members in too many bytes", SyncAnswer{MemberCount: 1, MembersSize: 66}, ErrProtocol},
		{"bytes without members", SyncAnswer{MembersSize: 4}, ErrProtocol},
		{"a stale answer with members", SyncAnswer{Code: SyncStale, MemberCount: 1, MembersSize: 39}, ErrProtocol},
		{"two leaders", SyncAnswer{Code: SyncNotLeader, MemberCount: 2, MembersSize: 78}, ErrProtocol},
	} {
		bb := c.a.Marshal()
		if _, err := ParseSyncAnswer(bb[:]); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	bb := a.Marshal()
	bb[31] = 1
	if _, err := ParseSyncAnswer(bb[:]); !errors.Is(err, ErrProtocol) {
		t.Errorf("reserved bytes: %v", err)
	}
	bb = a.Marshal()
	bb[15] = 0x80
	if _, err := ParseSyncAnswer(bb[:]); !errors.Is(err, ErrProtocol) {
		t.Errorf("round overflow: %v", err)
	}
}

func testIDs(t testing.TB, n int) []peer.ID {
	t.Helper()
	ids := make([]peer.ID, n)
	for i := range ids {
		var err error
		if ids[i], err = peer.Decode([]string{
			"12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN",
			"QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N",
			"12D3KooWRBy97UB99e3J6hiPesre1MZeuNQvfan4gBziswrRJsNK",
		}[i]); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestSyncMembers(t *testing.T) {
	ids := testIDs(t, 3)
	b := AppendMembers(nil, ids)
	got, err := ParseMembers(b, len(ids))
	if err != nil || !slices.Equal(got, ids) {
		t.Fatalf("round trip: %v, %v", got, err)
	}
	if got, err := ParseMembers(nil, 0); err != nil || len(got) != 0 {
		t.Fatalf("empty list: %v, %v", got, err)
	}
	swapped := AppendMembers(nil, []peer.ID{ids[1], ids[0]})
	twice := AppendMembers(nil, []peer.ID{ids[0], ids[0]})
	long := append([]byte{65}, bytes.Repeat([]byte{1}, 65)...)
	garbage := []byte{3, 0xff, 0xff, 0xff}
	for _, c := range []struct {
		name  string
		b     []byte
		count int
		want  error
	}{
		{"not ascending", swapped, 2, ErrProtocol},
		{"duplicate", twice, 2, ErrProtocol},
		{"truncated", b[:len(b)-1], 3, ErrProtocol},
		{"missing", b, 4, ErrProtocol},
		{"trailing bytes", b, 2, ErrProtocol},
		{"empty ID", []byte{0}, 1, ErrProtocol},
		{"ID too long", long, 1, ErrProtocol},
		{"not a multihash", garbage, 1, ErrProtocol},
		{"too many", nil, MaxSyncMembers + 1, ErrOversize},
	} {
		if _, err := ParseMembers(c.b, c.count); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestSyncConfigValidate(t *testing.T) {
	if err := syncTestConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := SyncConfig{MaxProgressDelta: math.Inf(1)}
	err := c.Validate()
	for _, field := range []string{"Fingerprint", "MaxElements", "ChunkSize", "ChunkTimeout", "Timeout", "MaxMembers", "MaxJoins", "MaxPending", "MaxProgressDelta"} {
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(field)) {
			t.Errorf("Validate of the zero config does not name %s: %v", field, err)
		}
	}
}

// TestSyncRound runs a round between a leader and two members on real
// hosts: everyone gets the same average, the group's progress adds every
// batch, and the next round opens expecting the contributors.
func TestSyncRound(t *testing.T) {
	checkLeaks(t)
	cfg := syncTestConfig()
	l, a, b := newSyncPeer(t, cfg), newSyncPeer(t, cfg), newSyncPeer(t, cfg)
	meshOf(t, l, a, b)
	group := sortedIDs(l, a, b)
	base := SyncState{Round: 5, Progress: 100, Params: randVec(syncN, 1), Momentum: randVec(syncN, 2), Members: group}
	if err := l.svc.Lead(base); err != nil {
		t.Fatal(err)
	}
	if err := l.svc.Lead(base); err != nil { // leading it already: no change
		t.Fatal(err)
	}
	cs := []Contribution{contribution(6, 116, 10), contribution(6, 116, 20), contribution(6, 116, 30)}
	want := make([]float64, syncN)
	for _, c := range cs {
		for j, v := range c.Params {
			want[j] += float64(v) / 3
		}
	}
	results := make([]SyncState, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	ctx := t.Context()
	wg.Go(func() { results[1], errs[1] = a.svc.Contribute(ctx, l.id(), cs[1]) })
	wg.Go(func() { results[2], errs[2] = b.svc.Contribute(ctx, l.id(), cs[2]) })
	results[0], errs[0] = l.svc.Reduce(ctx, cs[0])
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if r.Round != 6 || r.Progress != 100+3*16 || !slices.Equal(r.Members, group) {
			t.Fatalf("result %d: round %d progress %v members %v", i, r.Round, float64(r.Progress), r.Members)
		}
		if !slices.Equal(r.Params, results[0].Params) || r.Group != results[0].Group || r.Group == 0 {
			t.Fatalf("member %d got another average than the leader", i)
		}
	}
	for j, w := range want {
		if math.Abs(w-float64(results[0].Params[j])) > 1e-6 {
			t.Fatalf("element %d: %g, mean is %g", j, results[0].Params[j], w)
		}
	}
	if s := l.svc.Stats(); s.RoundsLed != 1 || s.ContributionsReceived != 2 {
		t.Errorf("leader stats %+v", s)
	}
	if s := a.svc.Stats(); s.RoundsDone != 1 {
		t.Errorf("member stats %+v", s)
	}
	for r, n := range l.svc.Counters().Snapshot().Rejected {
		if n != 0 {
			t.Errorf("honest round counted as %v", r)
		}
	}

	// The next round is open; its base is the result, which a probe sees.
	g, err := a.svc.Probe(ctx, l.id())
	if err != nil || g.Leader != l.id() || g.Round != 6 || g.Progress != 148 || !slices.Equal(g.Members, group) {
		t.Fatalf("probe: %+v, %v", g, err)
	}
	// A contribution to a closed round, and one to a round not yet open.
	ref := refusal(t, contributeErr(a, l, contribution(6, 164, 40)), SyncStale)
	if ref.Round != 6 {
		t.Errorf("stale refusal names round %d, want 6", ref.Round)
	}
	refusal(t, contributeErr(a, l, contribution(8, 164, 40)), SyncAhead)
	if s := l.svc.Stats(); s.StaleRounds != 2 || l.svc.Counters().Rejected(ReasonStale) != 2 {
		t.Errorf("stale rounds %d, rejected stale %d, want 2 and 2", s.StaleRounds, l.svc.Counters().Rejected(ReasonStale))
	}
	// A contribution from another model of the next round: join again.
	c := contribution(7, 164, 40)
	c.Base = results[0].Group + 1
	refusal(t, contributeErr(a, l, c), SyncStale)
}

// TestSyncNextLeaderOpens: a follower whose completed round names it the
// lowest member leads the next round at once, before its node has applied
// the round: a member that finished first is taken in, not sent back to the
// old leader, and Lead then fills in the model joiners get.
func TestSyncNextLeaderOpens(t *testing.T) {
	checkLeaks(t)
	cfg := syncTestConfig()
	ps := []*syncPeer{newSyncPeer(t, cfg), newSyncPeer(t, cfg), newSyncPeer(t, cfg)}
	meshOf(t, ps...)
	slices.SortFunc(ps, func(x, y *syncPeer) int { return strings.Compare(string(x.id()), string(y.id())) })
	next, l, b := ps[0], ps[1], ps[2] // next has the lowest ID; l leads this round
	group := sortedIDs(ps...)
	base := SyncState{Round: 5, Progress: 100, Params: randVec(syncN, 1), Momentum: randVec(syncN, 2), Members: group}
	if err := l.svc.Lead(base); err != nil {
		t.Fatal(err)
	}
	next.svc.Follow(l.id())
	b.svc.Follow(l.id())
	ctx := t.Context()
	results := make([]SyncState, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	wg.Go(func() { results[1], errs[1] = next.svc.Contribute(ctx, l.id(), contribution(6, 116, 10)) })
	wg.Go(func() { results[2], errs[2] = b.svc.Contribute(ctx, l.id(), contribution(6, 116, 20)) })
	results[0], errs[0] = l.svc.Reduce(ctx, contribution(6, 116, 30))
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	res := results[1]
	g, err := b.svc.Probe(ctx, next.id())
	if err != nil || g.Leader != next.id() || g.Round != 6 || !slices.Equal(g.Members, group) {
		t.Fatalf("probe of the next leader: %+v, %v", g, err)
	}
	// b's contribution to round 7 is collected; the old leader, which
	// follows the new one, is not asked.
	c := contribution(7, 164, 40)
	c.Base = res.Group
	done := make(chan error, 1)
	go func() { _, err := b.svc.Contribute(ctx, next.id(), c); done <- err }()
	eventually(t, "b's contribution to arrive", func() bool { return next.svc.Stats().ContributionsReceived == 1 })
	// Until Lead gives the model, a joiner is told to wait.
	_, err = l.svc.Join(ctx, next.id())
	refusal(t, err, SyncBusy)
	model := SyncState{Round: 6, Progress: res.Progress, Group: res.Group, Params: randVec(syncN, 3), Momentum: randVec(syncN, 4), Members: group}
	if err := next.svc.Lead(model); err != nil {
		t.Fatal(err)
	}
	j, err := l.svc.Join(ctx, next.id())
	if err != nil || j.Round != 6 || !slices.Equal(j.Params, model.Params) {
		t.Fatalf("join after Lead: round %d, %v", j.Round, err)
	}
	// The node picks another leader: the members are sent there.
	next.svc.Follow(l.id())
	if ref := refusal(t, <-done, SyncNotLeader); ref.Leader != l.id() {
		t.Fatalf("member sent to %s, want %s", ref.Leader, l.id())
	}
	// A follower that is not the lowest member stays a follower.
	if _, err := l.svc.Probe(ctx, b.id()); err == nil {
		t.Fatal("b leads a round it is not the lowest member of")
	}
}

func contributeErr(from, to *syncPeer, c Contribution) error {
	_, err := from.svc.Contribute(context.Background(), to.id(), c)
	return err
}

// TestSyncDeadline: members that do not contribute by the round's deadline
// are dropped, a second contribution from one peer is refused as a
// duplicate, and a joiner gets the base model and is expected next.
func TestSyncDeadline(t *testing.T) {
	checkLeaks(t)
	cfg := syncTestConfig()
	cfg.Timeout = 400 * time.Millisecond
	l, a, b, c := newSyncPeer(t, cfg), newSyncPeer(t, cfg), newSyncPeer(t, cfg), newSyncPeer(t, cfg)
	meshOf(t, l, a, b, c)
	base := SyncState{Round: 0, Progress: 0, Params: randVec(syncN, 1), Momentum: make([]float32, syncN), Members: sortedIDs(l, a, b)}
	if err := l.svc.Lead(base); err != nil {
		t.Fatal(err)
	}
	// c joins: it gets the base and the group it will be part of.
	j, err := c.svc.Join(t.Context(), l.id())
	if err != nil {
		t.Fatal(err)
	}
	if j.Round != 0 || !slices.Equal(j.Params, base.Params) || !slices.Equal(j.Members, base.Members) {
		t.Fatalf("join got round %d, %d members", j.Round, len(j.Members))
	}
	// a contributes and waits; its second stream is a duplicate.
	var wg sync.WaitGroup
	var aRes SyncState
	var aErr error
	wg.Go(func() { aRes, aErr = a.svc.Contribute(t.Context(), l.id(), contribution(1, 16, 3)) })
	eventually(t, "a's contribution to arrive", func() bool { return l.svc.Stats().ContributionsReceived == 1 })
	refusal(t, contributeErr(a, l, contribution(1, 16, 4)), SyncDuplicate)
	if l.svc.Stats().Duplicates != 1 || l.svc.Counters().Rejected(ReasonProtocol) != 1 {
		t.Errorf("duplicate not counted: %+v", l.svc.Stats())
	}
	// b and c never contribute: the round closes on its deadline.
	res, err := l.svc.Reduce(t.Context(), contribution(1, 16, 5))
	wg.Wait()
	if err != nil || aErr != nil {
		t.Fatal(err, aErr)
	}
	if want := sortedIDs(l, a); !slices.Equal(res.Members, want) || !slices.Equal(aRes.Members, want) {
		t.Fatalf("members %v, want %v", res.Members, want)
	}
	if res.Progress != 32 {
		t.Errorf("progress %v, want 32 (two batches)", float64(res.Progress))
	}
	if d := l.svc.Stats().MembersDropped; d != 2 {
		t.Errorf("dropped %d members, want b and c", d)
	}
	// b, late, is told to join again.
	refusal(t, contributeErr(b, l, contribution(1, 16, 6)), SyncStale)
}

// TestSyncRoles: an unsynced service and a follower refuse to collect, the
// follower naming its leader; a leader that steps down tells its waiting
// members where to go.
func TestSyncRoles(t *testing.T) {
	checkLeaks(t)
	cfg := syncTestConfig()
	l, a, b := newSyncPeer(t, cfg), newSyncPeer(t, cfg), newSyncPeer(t, cfg)
	meshOf(t, l, a, b)
	refusal(t, contributeErr(a, l, contribution(1, 16, 1)), SyncUnsynced)
	_, err := a.svc.Join(t.Context(), l.id())
	refusal(t, err, SyncUnsynced)
	b.svc.Follow(l.id())
	ref := refusal(t, contributeErr(a, b, contribution(1, 16, 1)), SyncNotLeader)
	if ref.Leader != l.id() {
		t.Fatalf("follower names %s as leader, want %s", ref.Leader, l.id())
	}
	_, err = a.svc.Probe(t.Context(), b.id())
	if ref := refusal(t, err, SyncNotLeader); ref.Leader != l.id() {
		t.Fatalf("probe of a follower names %s", ref.Leader)
	}
	if _, err := a.svc.Reduce(t.Context(), contribution(1, 16, 1)); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("Reduce on a service that does not lead: %v", err)
	}
	if err := l.svc.Lead(SyncState{Params: randVec(syncN, 1), Momentum: randVec(syncN, 2), Members: []peer.ID{a.id()}}); err == nil {
		t.Fatal("led a group without us in it")
	}

	// l leads, a contributes and waits; l hands over to b.
	base := SyncState{Params: randVec(syncN, 1), Momentum: randVec(syncN, 2), Members: sortedIDs(l, a)}
	if err := l.svc.Lead(base); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- contributeErr(a, l, contribution(1, 16, 7)) }()
	eventually(t, "a's contribution to arrive", func() bool { return l.svc.Stats().ContributionsReceived == 1 })
	l.svc.Follow(b.id())
	if ref := refusal(t, <-done, SyncNotLeader); ref.Leader != b.id() {
		t.Fatalf("member sent to %s, want %s", ref.Leader, b.id())
	}
	// A leader that closes mid-round tells its members so at once.
	if err := l.svc.Lead(base); err != nil {
		t.Fatal(err)
	}
	go func() { done <- contributeErr(a, l, contribution(1, 16, 8)) }()
	eventually(t, "a's contribution to arrive", func() bool { return l.svc.Stats().ContributionsReceived == 2 })
	_ = l.svc.Close()
	refusal(t, <-done, SyncNotLeader)
	if err := l.svc.Lead(base); !errors.Is(err, ErrClosed) {
		t.Fatalf("Lead after Close: %v", err)
	}
}

// TestSyncCloseAfterRound: a leader that closes, host and all, right after a
// round still delivers the round's average to its members, also while its
// upload limiter makes it write slowly.
func TestSyncCloseAfterRound(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  Limiter
	}{{"unlimited", nil}, {"slow upload", slowLimiter{20 * time.Millisecond}}} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			cfg := syncTestConfig()
			lc := cfg
			lc.UploadLimiter = tc.lim
			l, a := newSyncPeer(t, lc), newSyncPeer(t, cfg)
			meshOf(t, l, a)
			base := SyncState{Round: 9, Progress: 10, Params: randVec(syncN, 1), Momentum: randVec(syncN, 2), Members: sortedIDs(l, a)}
			if err := l.svc.Lead(base); err != nil {
				t.Fatal(err)
			}
			var aErr error
			var wg sync.WaitGroup
			wg.Go(func() { _, aErr = a.svc.Contribute(t.Context(), l.id(), contribution(10, 26, 3)) })
			if _, err := l.svc.Reduce(t.Context(), contribution(10, 26, 4)); err != nil {
				t.Fatal(err)
			}
			// A stopping node closes its host right after the service.
			_ = l.svc.Close()
			_ = l.h.Close()
			wg.Wait()
			if aErr != nil {
				t.Fatalf("member lost the last round's average: %v", aErr)
			}
		})
	}
}

// TestSyncUploadLimiter: every byte a SyncService sends, as leader (go-ahead,
// a join's model, a probe's answer, a round's average) and as member (its
// requests and contribution), goes through its upload limiter; a limiter
// shared with the exchange's Service paces both protocols' bytes.
func TestSyncUploadLimiter(t *testing.T) {
	checkLeaks(t)
	lim, mlim := &countingLimiter{}, &countingLimiter{}
	shared := new(Counters) // the leader node's: both protocols count into it
	lc, mc := syncTestConfig(), syncTestConfig()
	lc.UploadLimiter, lc.Counters = lim, shared
	mc.UploadLimiter = mlim
	l, m := newSyncPeer(t, lc), newSyncPeer(t, mc)
	meshOf(t, l, m)
	ec := testConfig(syncN)
	ec.UploadLimiter, ec.Counters = lim, shared
	snap := testSnapshot(syncN, 1)
	lex, err := NewService(l.h, ec, func() (params.Snapshot, bool) { return snap, true })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lex.Close() })
	mex, err := NewService(m.h, testConfig(syncN), func() (params.Snapshot, bool) { return snap, true })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mex.Close() })

	ctx := t.Context()
	base := SyncState{Params: randVec(syncN, 1), Momentum: randVec(syncN, 2), Members: []peer.ID{l.id()}}
	if err := l.svc.Lead(base); err != nil {
		t.Fatal(err)
	}
	if _, err := m.svc.Join(ctx, l.id()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.svc.Probe(ctx, l.id()); err != nil {
		t.Fatal(err)
	}
	var mErr error
	var wg sync.WaitGroup
	wg.Go(func() { _, mErr = m.svc.Contribute(ctx, l.id(), contribution(1, 16, 3)) })
	if _, err := l.svc.Reduce(ctx, contribution(1, 16, 4)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if mErr != nil {
		t.Fatal(mErr)
	}
	if _, err := mex.Pull(ctx, l.id()); err != nil {
		t.Fatal(err)
	}
	// Close waits for the handlers, so every byte is counted.
	for _, c := range []io.Closer{l.svc, m.svc, lex, mex} {
		_ = c.Close()
	}
	frame := uint64(FrameHeaderSize + 4*syncN)
	// The leader sent the join's two frames, the exchange one and half
	// the vector twice in the all-reduce; the member its requests and half
	// the vector twice.
	if sent := shared.Snapshot().BytesSent; lim.total() != sent || sent < 3*frame+4*syncN {
		t.Errorf("leader: limiter saw %d bytes, %d sent", lim.total(), sent)
	}
	if sent := m.svc.Counters().Snapshot().BytesSent; mlim.total() != sent || sent < 4*syncN {
		t.Errorf("member: limiter saw %d bytes, %d sent", mlim.total(), sent)
	}
	if lim.maxN > limiterPiece || mlim.maxN > limiterPiece {
		t.Errorf("limiter asked for %d and %d bytes at once", lim.maxN, mlim.maxN)
	}
}

// rawSync opens a sync stream to p's service by hand, as a hostile peer
// would.
func rawSync(t *testing.T, from host.Host, to peer.ID) network.Stream {
	t.Helper()
	st, err := from.NewStream(t.Context(), to, SyncProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Reset() })
	return st
}

func readAnswer(t *testing.T, st network.Stream) SyncAnswer {
	t.Helper()
	_ = st.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [SyncAnswerSize]byte
	if _, err := io.ReadFull(st, b[:]); err != nil {
		t.Fatalf("read answer: %v", err)
	}
	a, err := ParseSyncAnswer(b[:])
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestSyncHostile feeds a leader inputs no honest member sends; each is
// refused, counted under its reason, and the round goes on.
func TestSyncHostile(t *testing.T) {
	checkLeaks(t)
	cfg := syncTestConfig()
	l := newSyncPeer(t, cfg)
	evil := newAttackerHost(t, "tcp")
	connect(t, evil, l.h)
	base := SyncState{Round: 3, Progress: 48, Params: randVec(syncN, 1), Momentum: randVec(syncN, 2), Members: []peer.ID{l.id()}}
	if err := l.svc.Lead(base); err != nil {
		t.Fatal(err)
	}
	rejected := func(r Reason) uint64 { return l.svc.Counters().Rejected(r) }

	st := rawSync(t, evil, l.id())
	_, _ = st.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + string(make([]byte, SyncRequestSize))))
	eventually(t, "garbage to be counted", func() bool { return rejected(ReasonBadMagic) == 1 })

	other := testFP
	other[0] ^= 1
	for _, c := range []struct {
		q      SyncRequest
		reason Reason
	}{
		{SyncRequest{Kind: SyncJoin, Fingerprint: other, Elements: syncN}, ReasonFingerprint},
		{SyncRequest{Kind: SyncJoin, Fingerprint: testFP, Elements: 1 << 40}, ReasonOversize},
		{SyncRequest{Kind: SyncJoin, Fingerprint: testFP, Elements: 7}, ReasonSizeMismatch},
	} {
		st := rawSync(t, evil, l.id())
		qb := c.q.Marshal()
		_, _ = st.Write(qb[:])
		_ = st.CloseWrite()
		if a := readAnswer(t, st); a.Code != SyncRejected || a.Reason != c.reason {
			t.Errorf("%+v answered %s/%s, want rejected/%s", c.q, a.Code, a.Reason, c.reason)
		}
	}

	// Contributions whose progress lies: a batch beyond the limit, less
	// than the group's.
	send := func(round int64, p params.Progress) SyncAnswer {
		st := rawSync(t, evil, l.id())
		qb := SyncRequest{Kind: SyncContribute, Fingerprint: testFP, Elements: syncN, Round: round, Progress: p}.Marshal()
		_, _ = st.Write(qb[:])
		_ = st.CloseWrite()
		a := readAnswer(t, st)
		_, _ = io.Copy(io.Discard, st) // the end of stream: the leader is done with us
		return a
	}
	before := rejected(ReasonProtocol)
	for _, a := range []SyncAnswer{send(4, 48+65), send(4, 40)} {
		if a.Code != SyncRejected || a.Reason != ReasonProtocol {
			t.Errorf("lying contribution answered %s/%s", a.Code, a.Reason)
		}
	}
	if got := rejected(ReasonProtocol) - before; got != 2 {
		t.Errorf("counted %d protocol violations, want 2", got)
	}
	// A NaN progress does not parse: counted, and the stream is cut.
	st = rawSync(t, evil, l.id())
	qb := SyncRequest{Kind: SyncContribute, Fingerprint: testFP, Elements: syncN, Round: 4}.Marshal()
	qb[62], qb[63] = 0xf8, 0x7f
	_, _ = st.Write(qb[:])
	eventually(t, "a NaN progress to be counted", func() bool { return rejected(ReasonNonFinite) == 1 })
	// None of it entered the round: ours alone completes it.
	res, err := l.svc.Reduce(t.Context(), contribution(4, 64, 9))
	if err != nil || !slices.Equal(res.Members, []peer.ID{l.id()}) {
		t.Fatalf("round after hostile inputs: %v members, %v", res.Members, err)
	}
}

func FuzzSyncDecode(f *testing.F) {
	q := SyncRequest{Kind: SyncContribute, Fingerprint: testFP, Elements: 3, Round: 2}.Marshal()
	a := SyncAnswer{Code: SyncNotLeader, MemberCount: 1, MembersSize: 39}.Marshal()
	f.Add(q[:])
	f.Add(a[:])
	f.Add(AppendMembers(nil, testIDs(f, 3)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := ParseSyncRequest(b); err == nil {
			if again := q.Marshal(); !bytes.Equal(again[:], b[:SyncRequestSize]) {
				t.Fatalf("request %x re-encodes as %x", b[:SyncRequestSize], again)
			}
		} else if ReasonOf(err) == ReasonNone {
			t.Fatalf("request error without a reason: %v", err)
		}
		if a, err := ParseSyncAnswer(b); err == nil {
			if again := a.Marshal(); !bytes.Equal(again[:], b[:SyncAnswerSize]) {
				t.Fatalf("answer %x re-encodes as %x", b[:SyncAnswerSize], again)
			}
		} else if ReasonOf(err) == ReasonNone {
			t.Fatalf("answer error without a reason: %v", err)
		}
		if len(b) > 0 {
			ms, err := ParseMembers(b[1:], int(b[0]))
			if err == nil && !bytes.Equal(AppendMembers(nil, ms), b[1:]) {
				t.Fatalf("member list %x re-encodes differently", b[1:])
			} else if err != nil && ReasonOf(err) == ReasonNone {
				t.Fatalf("members error without a reason: %v", err)
			}
		}
	})
}

// BenchmarkSyncRound is one round of a leader and three members over
// loopback TCP with the default MLP's 235,146 parameters: the leader's
// member list, then the all-reduce of the parameters.
func BenchmarkSyncRound(b *testing.B) {
	const n, members = 235146, 3
	cfg := syncTestConfig()
	cfg.Elements, cfg.ChunkSize = n, DefaultChunkSize
	cfg.Timeout = time.Minute
	peers := benchSyncPeers(b, members+1, n, cfg)
	l := peers[0]
	base := SyncState{Params: randVec(n, 1), Momentum: randVec(n, 2), Members: sortedIDs(peers...)}
	if err := l.svc.Lead(base); err != nil {
		b.Fatal(err)
	}
	own := make([]Contribution, len(peers))
	for i := range own {
		own[i] = Contribution{Params: randVec(n, uint64(10+i))}
	}
	ctx := context.Background()
	b.SetBytes(int64(4 * n)) // the vector averaged
	var group uint64
	b.ResetTimer()
	for r := int64(1); r <= int64(b.N); r++ {
		var wg sync.WaitGroup
		errs := make([]error, len(peers))
		for i, p := range peers[1:] {
			c := own[i+1]
			c.Round, c.Progress, c.Base = r, params.Progress(float64(16*(members+1)*(r-1))+16), group
			wg.Go(func() { _, errs[i+1] = p.svc.Contribute(ctx, l.id(), c) })
		}
		c := own[0]
		c.Round, c.Progress, c.Base = r, params.Progress(float64(16*(members+1)*(r-1))+16), group
		res, err := l.svc.Reduce(ctx, c)
		errs[0] = err
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		group = res.Group
		res.Momentum = base.Momentum
		if err := l.svc.Lead(res); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSyncEarlyReduction: members that name the members they expect start
// the round's all-reduce before the leader's answer. When the answer names
// the same members the early reduction is the round's; when it names
// others (a member missed the deadline, a joiner came in), the early one
// is abandoned and the round reduced again among the answer's members. In
// every case all members end with the same mean, and nobody counts an
// honest peer's messages against it.
func TestSyncEarlyReduction(t *testing.T) {
	checkLeaks(t)
	cfg := syncTestConfig()
	cfg.Timeout = 400 * time.Millisecond
	ps := []*syncPeer{newSyncPeer(t, cfg), newSyncPeer(t, cfg), newSyncPeer(t, cfg), newSyncPeer(t, cfg)}
	meshOf(t, ps...)
	slices.SortFunc(ps, func(x, y *syncPeer) int { return strings.Compare(string(x.id()), string(y.id())) })
	l, last := ps[0], ps[3]
	all := sortedIDs(ps...)
	state := SyncState{Round: 0, Params: randVec(syncN, 1), Momentum: make([]float32, syncN), Members: all}
	if err := l.svc.Lead(state); err != nil {
		t.Fatal(err)
	}
	// round runs one round among ps with each one's guess at its members;
	// it returns the results of those that were answered.
	round := func(r int64, ps []*syncPeer, guess func(*syncPeer) []peer.ID) ([]SyncState, []float64) {
		t.Helper()
		results := make([]SyncState, len(ps))
		errs := make([]error, len(ps))
		want := make([]float64, syncN)
		var wg sync.WaitGroup
		for i, p := range ps {
			c := contribution(r, state.Progress+16, uint64(10*r)+uint64(i))
			c.Base, c.Members = state.Group, guess(p)
			for j, v := range c.Params {
				want[j] += float64(v) / float64(len(ps))
			}
			wg.Go(func() {
				if p == l {
					results[i], errs[i] = p.svc.Reduce(t.Context(), c)
				} else {
					results[i], errs[i] = p.svc.Contribute(t.Context(), l.id(), c)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		for i, res := range results {
			if !slices.Equal(res.Params, results[0].Params) || res.Group != results[0].Group {
				t.Fatalf("round %d: member %d holds another average", r, i)
			}
		}
		for j, w := range want {
			if math.Abs(w-float64(results[0].Params[j])) > 1e-5 {
				t.Fatalf("round %d, element %d: %g, the mean is %g", r, j, results[0].Params[j], w)
			}
		}
		state = results[0]
		state.Momentum = make([]float32, syncN)
		if err := l.svc.Lead(state); err != nil {
			t.Fatal(err)
		}
		return results, want
	}
	early := func(p *syncPeer) (uint64, uint64) {
		s := p.svc.Stats()
		return s.EarlyReductions, s.EarlyMisses
	}
	expectAll := func(*syncPeer) []peer.ID { return all }

	// Everyone guesses right: each round's only all-reduce is the early one.
	round(1, ps, expectAll)
	for i, p := range ps {
		if e, m := early(p); e != 1 || m != 0 {
			t.Fatalf("member %d: %d early reductions, %d misses; want 1 and 0", i, e, m)
		}
		if s := p.svc.AllReduceStats(); s.Reductions != 1 || s.Abandoned != 0 {
			t.Fatalf("member %d: all-reduce stats %+v", i, s)
		}
	}

	// The last member misses the deadline: the others guessed it in,
	// abandon that reduction, and reduce among themselves.
	lastBase := state
	res, _ := round(2, ps[:3], expectAll)
	if want := sortedIDs(ps[:3]...); !slices.Equal(res[0].Members, want) {
		t.Fatalf("round 2 members %v, want %v", res[0].Members, want)
	}
	for i, p := range ps[:3] {
		if e, m := early(p); e != 1 || m != 1 {
			t.Fatalf("member %d after a dropped member: %d early, %d misses; want 1 and 1", i, e, m)
		}
	}
	// Late, it is refused, and gives up its own early reduction.
	c := contribution(2, lastBase.Progress+16, 99)
	c.Base, c.Members = lastBase.Group, all
	sent := slices.Clone(c.Params)
	refusal(t, contributeErr(last, l, c), SyncStale)
	if !slices.Equal(c.Params, sent) {
		t.Fatal("a refused contribution's vector was changed")
	}

	// It joins again; the others still expect the three of them, the
	// leader's answer adds it: they reduce again, with it.
	if _, err := last.svc.Join(t.Context(), l.id()); err != nil {
		t.Fatal(err)
	}
	three := state.Members
	round(3, ps, func(p *syncPeer) []peer.ID {
		if p == last {
			return nil // a joiner is not among its group's members yet
		}
		return three
	})
	for i, p := range ps[:3] {
		if e, m := early(p); e != 1 || m != 2 {
			t.Fatalf("member %d after a joiner: %d early, %d misses; want 1 and 2", i, e, m)
		}
	}
	// And the round after that is early again for all four.
	round(4, ps, expectAll)
	for i, p := range ps {
		if e, _ := early(p); e != 2 {
			t.Fatalf("member %d: %d early reductions after a steady round, want 2 (rounds 1 and 4)", i, e)
		}
	}
	// Nothing was counted against a peer but the late contribution (at the
	// leader, as stale): no guessed message an honest peer sent.
	for i, p := range ps {
		for r, n := range p.svc.Counters().Snapshot().Rejected {
			if p == l && r == ReasonStale && n == 1 {
				continue
			}
			if n != 0 {
				t.Fatalf("member %d counted an honest peer as %v", i, r)
			}
		}
	}
}

// BenchmarkSyncRoundLastMember times a round of 4 hosts on loopback (the
// default MLP's 235,146 values, sent as fp16, as the node's rounds are)
// from the moment its last member contributes, 5 ms after the others, to
// the end of the round: the part of a round that a step slower than the
// others' does not hide. "early": every member names the members it
// expects, so the all-reduce runs while the round is collected; "answer":
// none does, so each starts it once the leader's answer is in. The last
// member is the leader, or one that follows it.
func BenchmarkSyncRoundLastMember(b *testing.B) {
	const n, k, late = 235146, 4, 5 * time.Millisecond
	cfg := syncTestConfig()
	cfg.Elements, cfg.ChunkSize, cfg.Timeout, cfg.ReduceDType = n, DefaultChunkSize, time.Minute, FP16
	peers := benchSyncPeers(b, k, n, cfg)
	l, members := peers[0], sortedIDs(peers...)
	st := SyncState{Params: randVec(n, 1), Momentum: randVec(n, 2), Members: members}
	if err := l.svc.Lead(st); err != nil {
		b.Fatal(err)
	}
	vecs := make([][]float32, k)
	for i := range vecs {
		vecs[i] = randVec(n, uint64(10+i))
	}
	for _, last := range []struct {
		name string
		i    int
	}{{"leader-last", 0}, {"member-last", k - 1}} {
		for _, early := range []bool{false, true} {
			name := last.name + "/answer"
			if early {
				name = last.name + "/early"
			}
			b.Run(name, func(b *testing.B) {
				var after []time.Duration
				for b.Loop() {
					var wg sync.WaitGroup
					errs := make([]error, k)
					var lastIn time.Time
					var res SyncState
					for i, p := range peers {
						c := Contribution{Round: st.Round + 1, Progress: st.Progress + 16, Base: st.Group, Params: slices.Clone(vecs[i])}
						if early {
							c.Members = members
						}
						wg.Go(func() {
							if i == last.i {
								time.Sleep(late)
								lastIn = time.Now()
							}
							var r SyncState
							if p == l {
								r, errs[i] = p.svc.Reduce(context.Background(), c)
								res = r
							} else {
								_, errs[i] = p.svc.Contribute(context.Background(), l.id(), c)
							}
						})
					}
					wg.Wait()
					after = append(after, time.Since(lastIn))
					if err := errors.Join(errs...); err != nil {
						b.Fatal(err)
					}
					st = res
					st.Momentum = vecs[0]
					if err := l.svc.Lead(st); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(median(after).Microseconds())/1e3, "after-last-ms")
			})
		}
	}
}

// benchSyncPeers starts k connected sync services for vectors of n
// values, sorted by peer ID (the first leads).
func benchSyncPeers(b *testing.B, k, n int, cfg SyncConfig) []*syncPeer {
	peers := make([]*syncPeer, k)
	for i := range peers {
		h := newHost(b, "tcp", testConfig(n))
		svc, err := NewSyncService(h, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = svc.Close() })
		peers[i] = &syncPeer{h: h, svc: svc}
	}
	for i, a := range peers {
		for _, c := range peers[i+1:] {
			connect(b, a.h, c.h)
		}
	}
	slices.SortFunc(peers, func(x, y *syncPeer) int { return strings.Compare(string(x.id()), string(y.id())) })
	return peers
}
