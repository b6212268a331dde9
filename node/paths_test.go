package node

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/merge"
)

// fakePaths is a pathFinder with set paths. Reach records the dials and
// refuses a second one for a peer until the test finishes the first, as
// the host does.
type fakePaths struct {
	paths    map[peer.ID]PeerPath
	inFlight map[peer.ID]bool
	dialed   []peer.ID
	addrs    map[peer.ID][]ma.Multiaddr
}

func newFakePaths() *fakePaths {
	return &fakePaths{paths: map[peer.ID]PeerPath{}, inFlight: map[peer.ID]bool{}, addrs: map[peer.ID][]ma.Multiaddr{}}
}

func (f *fakePaths) PathTo(p peer.ID) PeerPath {
	if pp, ok := f.paths[p]; ok {
		return pp
	}
	return PeerPath{Path: PathNone}
}

func (f *fakePaths) PathKind(p peer.ID) Path { return f.PathTo(p).Path }

func (f *fakePaths) RetryRelayed(peer.ID, time.Time) bool { return false }

func (f *fakePaths) Reach(p peer.ID, addrs []ma.Multiaddr, _ func(peer.ID, error)) bool {
	if f.inFlight[p] {
		return false
	}
	f.inFlight[p] = true
	f.dialed = append(f.dialed, p)
	f.addrs[p] = addrs
	return true
}

func testPeer(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func info(p peer.ID, progress float64, addrs ...string) gossip.PeerInfo {
	return gossip.PeerInfo{Announcement: gossip.Announcement{Peer: p, Progress: progress, Addrs: addrs}}
}

func candidatePeers(cs []merge.Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Peer
	}
	return out
}

// The averager offers ChoosePartner only the peers it reaches directly:
// a relayed peer is skipped (no model fits through a relay), a peer not
// connected is dialed in the background (once at a time) and skipped this
// round, and a peer whose dial failed waits out its backoff before it is
// dialed again.
func TestCandidatesByPath(t *testing.T) {
	direct, punched, relayed, none := testPeer(t), testPeer(t), testPeer(t), testPeer(t)
	f := newFakePaths()
	f.paths[direct] = PeerPath{Path: PathDirect}
	f.paths[punched] = PeerPath{Path: PathDirect, HolePunched: true}
	f.paths[relayed] = PeerPath{Path: PathRelayed}
	r := newReachState(f)
	peers := []gossip.PeerInfo{
		info(direct, 10), info(punched, 20), info(relayed, 30),
		info(none, 40, "/ip4/198.51.100.1/tcp/4001", "not an address"),
	}
	t0 := time.Unix(1000, 0)
	got := r.candidates(peers, t0)
	if want := []string{direct.String(), punched.String()}; !slices.Equal(candidatePeers(got), want) {
		t.Fatalf("candidates %v, want the direct peers %v", candidatePeers(got), want)
	}
	if got[1].Progress != 20 {
		t.Errorf("a candidate's progress is %v, want the announced 20", got[1].Progress)
	}
	if !slices.Equal(f.dialed, []peer.ID{none}) || len(f.addrs[none]) != 1 {
		t.Errorf("dialed %v with addrs %v; want the unconnected peer once, with its one valid announced address", f.dialed, f.addrs[none])
	}
	if n := r.relayedSkips.Load(); n != 1 {
		t.Errorf("relayed skips %d, want 1", n)
	}
	// Another round while the dial is under way: no second dial.
	r.candidates(peers, t0.Add(time.Millisecond))
	if len(f.dialed) != 1 || r.dials.Load() != 1 {
		t.Errorf("a second round dialed again while a dial was under way: %v (%d counted)", f.dialed, r.dials.Load())
	}
	// The dial ends with a relayed connection only: the peer backs off.
	f.inFlight[none] = false
	r.report(none, ErrRelayedOnly)
	res := <-r.results
	if wait := r.reached(res, t0); wait != reachBackoffBase {
		t.Errorf("a failed dial's backoff is %v, want %v", wait, reachBackoffBase)
	}
	if r.candidates(peers, t0.Add(reachBackoffBase/2)); len(f.dialed) != 1 {
		t.Errorf("dialed again within the backoff: %v", f.dialed)
	}
	if r.backingOff.Load() != 1 {
		t.Errorf("backing off %d, want 1", r.backingOff.Load())
	}
	if r.candidates(peers, t0.Add(reachBackoffBase)); len(f.dialed) != 2 {
		t.Errorf("not dialed again once the backoff ended: %v", f.dialed)
	}
	// Failed again; within the backoff, the peer announces a new address
	// (a relayed one): it is dialed again at once, with it.
	f.inFlight[none] = false
	r.reached(reachResult{p: none, err: ErrRelayedOnly}, t0.Add(reachBackoffBase))
	r.candidates(peers, t0.Add(reachBackoffBase+time.Millisecond))
	if len(f.dialed) != 2 {
		t.Errorf("dialed again within the backoff with the same addresses: %v", f.dialed)
	}
	circuit := "/ip4/198.51.100.7/tcp/4001/p2p/" + direct.String() + "/p2p-circuit"
	peers[3] = info(none, 40, "/ip4/198.51.100.1/tcp/4001", circuit)
	r.candidates(peers, t0.Add(reachBackoffBase+2*time.Millisecond))
	if len(f.dialed) != 3 || len(f.addrs[none]) != 2 {
		t.Errorf("new announced addresses within the backoff: dials %v with %v, want a third with both", f.dialed, f.addrs[none])
	}
	if r.dialsFailed.Load() != 2 {
		t.Errorf("failed dials %d, want 2", r.dialsFailed.Load())
	}
}

// A failed exchange makes its partner back off, doubling with each
// failure in a row; a success resets it. The failure share covers the
// latest failWindow exchanges, and successes are counted by path.
func TestExchangeOutcomes(t *testing.T) {
	a, b := testPeer(t), testPeer(t)
	f := newFakePaths()
	f.paths[a] = PeerPath{Path: PathDirect}
	f.paths[b] = PeerPath{Path: PathDirect, HolePunched: true}
	r := newReachState(f)
	peers := []gossip.PeerInfo{info(a, 0), info(b, 0)}
	t0 := time.Unix(1000, 0)

	if p := r.begin(a); p != exchangeDirect {
		t.Errorf("path of an exchange over a dialed connection: %q", p)
	}
	fail(r, a, errors.New("stream reset"), t0)
	fail(r, a, errors.New("stream reset"), t0.Add(reachBackoffBase))
	if got := candidatePeers(r.candidates(peers, t0.Add(reachBackoffBase+time.Second))); !slices.Equal(got, []string{b.String()}) {
		t.Errorf("after two failures in a row, 1 s after the second: candidates %v, want only %s (a waits 2 s)", got, b)
	}
	if got := r.candidates(peers, t0.Add(3*reachBackoffBase)); len(got) != 2 {
		t.Errorf("once the backoff ended: %d candidates, want 2", len(got))
	}
	ok(r, a, exchangeDirect, t0.Add(3*time.Second))
	if r.backoff.Failures(a.String()) != 0 {
		t.Errorf("a success left %d failures", r.backoff.Failures(a.String()))
	}
	if p := r.begin(b); p != exchangeHolePunched {
		t.Errorf("path of an exchange over a hole-punched connection: %q", p)
	}
	r.end(b, exchangeHolePunched, t0)
	if got := r.failedShare(); got != 0.5 {
		t.Errorf("failed share of 2 failures in 4 exchanges: %v", got)
	}
	if r.started.Load() != 5 {
		t.Errorf("started %d, want the 5 begun", r.started.Load())
	}
	if m := r.exchangesByPath(a); m[exchangeDirect] != 1 || len(m) != 1 {
		t.Errorf("a's exchanges by path %v, want direct 1", m)
	}
	if m := r.exchangesByPath(b); m[exchangeHolePunched] != 1 || len(m) != 1 {
		t.Errorf("b's exchanges by path %v, want hole_punched 1", m)
	}
	// The window forgets the oldest outcomes.
	for range failWindow {
		ok(r, a, exchangeDirect, t0)
	}
	if got := r.failedShare(); got != 0 {
		t.Errorf("failed share after %d successes: %v", failWindow, got)
	}
	fail(r, a, errors.New("timeout"), t0)
	if got := r.failedShare(); got != 1.0/failWindow {
		t.Errorf("failed share after one failure in the window: %v", got)
	}
	// A peer that answers busy, or has no model yet, is reachable: its
	// failure counts, but it does not back off.
	r.backoff.Succeed(a.String())
	fail(r, a, fmt.Errorf("gossip: exchange with %s: %w", a, gossip.ErrPeerBusy), t0)
	fail(r, a, gossip.ErrUnavailable, t0)
	if !r.backoff.Ready(a.String(), t0) || r.failedShare() != 3.0/failWindow {
		t.Errorf("after busy and unavailable answers: ready %v (want true), failed share %v (want 3/%d)",
			r.backoff.Ready(a.String(), t0), r.failedShare(), failWindow)
	}
}

// fail runs an exchange with p that fails with err, as the averager does.
func fail(r *reachState, p peer.ID, err error, now time.Time) {
	path := r.begin(p)
	r.failure = err
	r.end(p, path, now)
}

// ok runs an exchange with p on path that succeeds.
func ok(r *reachState, p peer.ID, path string, now time.Time) {
	r.begin(p)
	r.end(p, path, now)
}

func TestReportDropsWhenFull(t *testing.T) {
	r := newReachState(newFakePaths())
	p := testPeer(t)
	for range cap(r.results) + 3 {
		r.report(p, errors.New("x"))
	}
	if len(r.results) != cap(r.results) {
		t.Errorf("%d results queued, want the %d that fit", len(r.results), cap(r.results))
	}
}
