package reputation

import (
	"math"
	"sort"
	"sync"
	"time"
)

// Book keeps the score of every tracked peer. It is safe for concurrent
// use: one mutex guards everything, and no method calls out while holding
// it, so it may be called from gossipsub's score callback.
//
// Callers pass the time with every call and need not agree on it exactly:
// a time earlier than a peer's last update does not decay its score.
type Book struct {
	p Params

	mu     sync.Mutex
	peers  map[string]*entry
	latest time.Time // the latest now seen, to judge bans when Ban evicts
}

type entry struct {
	score       float64   // as of at
	at          time.Time // when score was last decayed
	last        time.Time // latest verdict, for eviction
	banned      bool
	bannedUntil time.Time // meaningful while banned
	counts      [NumVerdicts]int64
}

// PeerScore is one peer's standing, as shown by the API.
type PeerScore struct {
	Peer        string           `json:"peer"`
	Score       float64          `json:"score"`
	State       State            `json:"-"`
	StateName   string           `json:"state"`
	BannedUntil time.Time        `json:"banned_until,omitzero"`
	Counts      map[string]int64 `json:"verdicts"` // by Verdict.String(), only non-zero
}

// New returns an empty book, or an error wrapping ErrBadParams.
func New(p Params) (*Book, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Book{p: p, peers: make(map[string]*entry)}, nil
}

// Params returns the parameters the book was made with.
func (b *Book) Params() Params { return b.p }

// Record applies verdict v about peer at now: it decays the score to now,
// adds the verdict's weight, caps the result and returns the peer's state
// afterwards. A peer whose score falls below BanBelow is banned until
// now+BanFor; verdicts on a banned peer are counted but never extend the
// ban. An out-of-range v changes nothing.
func (b *Book) Record(peer string, v Verdict, now time.Time) State {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.see(now)
	e := b.peers[peer]
	if v >= NumVerdicts {
		if e == nil {
			return OK
		}
		return b.settle(e, now)
	}
	if e == nil {
		e = b.add(peer, now)
	}
	b.settle(e, now)
	e.counts[v]++
	if now.After(e.last) {
		e.last = now
	}
	e.score = min(max(e.score+b.p.Weights[v], b.p.floor()), b.p.MaxScore)
	if !e.banned && e.score < b.p.BanBelow {
		e.banned, e.bannedUntil = true, now.Add(b.p.BanFor)
	}
	return b.state(e, now)
}

// Score returns peer's score decayed to now; 0 for an unknown peer or one
// whose ban has just expired.
func (b *Book) Score(peer string, now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.see(now)
	e := b.peers[peer]
	if e == nil {
		return 0
	}
	b.settle(e, now)
	return e.score
}

// State returns what to do with peer at now. It is Banned while now is
// before the ban's end; once the ban has expired it is lifted and the peer
// starts over at score 0.
func (b *Book) State(peer string, now time.Time) State {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.see(now)
	e := b.peers[peer]
	if e == nil {
		return OK
	}
	return b.settle(e, now)
}

// Ban bans peer until the given time, replacing any ban it has: it
// restores a ban kept across a restart. A time already past lifts the ban
// at the next call that looks at the peer, which, like the end of any ban,
// resets the score to 0.
func (b *Book) Ban(peer string, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.peers[peer]
	if e == nil {
		e = b.add(peer, b.latest)
	}
	e.banned, e.bannedUntil = true, until
}

// AppScore returns the value for gossipsub's AppSpecificScore: the score,
// or BanBelow*10 while the peer is banned. It takes one lock and does no
// allocation.
func (b *Book) AppScore(peer string, now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.see(now)
	e := b.peers[peer]
	if e == nil {
		return 0
	}
	if b.settle(e, now) == Banned {
		return b.p.floor()
	}
	return e.score
}

// Peers returns every tracked peer at now, sorted by ID.
func (b *Book) Peers(now time.Time) []PeerScore {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.see(now)
	out := make([]PeerScore, 0, len(b.peers))
	for id, e := range b.peers {
		out = append(out, b.view(id, e, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out
}

// Peer returns one peer at now; an unknown peer has score 0, state OK and
// no counts.
func (b *Book) Peer(peer string, now time.Time) PeerScore {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.see(now)
	e := b.peers[peer]
	if e == nil {
		return PeerScore{Peer: peer, State: OK, StateName: OK.String(), Counts: map[string]int64{}}
	}
	return b.view(peer, e, now)
}

// Len returns the number of tracked peers.
func (b *Book) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.peers)
}

func (b *Book) view(id string, e *entry, now time.Time) PeerScore {
	s := b.settle(e, now)
	ps := PeerScore{Peer: id, Score: e.score, State: s, StateName: s.String(), Counts: map[string]int64{}}
	if s == Banned {
		ps.BannedUntil = e.bannedUntil
	}
	for v, n := range e.counts {
		if n != 0 {
			ps.Counts[Verdict(v).String()] = n
		}
	}
	return ps
}

func (b *Book) see(now time.Time) {
	if now.After(b.latest) {
		b.latest = now
	}
}

// settle brings e to now: an expired ban is lifted and the score reset to
// 0, otherwise the score decays. It returns the state at now.
func (b *Book) settle(e *entry, now time.Time) State {
	if e.banned {
		if now.Before(e.bannedUntil) {
			b.decay(e, now)
			return Banned
		}
		e.banned, e.bannedUntil = false, time.Time{}
		e.score = 0
		if now.After(e.at) {
			e.at = now
		}
		return OK
	}
	b.decay(e, now)
	return b.p.stateOf(e.score)
}

func (b *Book) decay(e *entry, now time.Time) {
	if !now.After(e.at) {
		return // a caller behind another: no decay, keep the later time
	}
	halfLives := float64(now.Sub(e.at)) / float64(b.p.HalfLife)
	e.score *= math.Exp2(-halfLives)
	e.at = now
}

// state is settle's answer for an entry already settled at now.
func (b *Book) state(e *entry, now time.Time) State {
	if e.banned && now.Before(e.bannedUntil) {
		return Banned
	}
	return b.p.stateOf(e.score)
}

// add tracks a new peer, first evicting one if the book is full.
func (b *Book) add(peer string, now time.Time) *entry {
	if len(b.peers) >= b.p.MaxPeers {
		b.evict(now)
	}
	e := &entry{at: now}
	b.peers[peer] = e
	return e
}

// evict drops the entry with the oldest last verdict among those not
// banned at now, or, if all are banned, the one whose ban ends first. Ties
// go to the smallest ID so the choice does not depend on map order.
func (b *Book) evict(now time.Time) {
	victim, victimBanned := "", true
	var ve *entry
	for id, e := range b.peers {
		banned := e.banned && now.Before(e.bannedUntil)
		better := false
		switch {
		case ve == nil:
			better = true
		case banned != victimBanned:
			better = !banned
		case !banned && !e.last.Equal(ve.last):
			better = e.last.Before(ve.last)
		case banned && !e.bannedUntil.Equal(ve.bannedUntil):
			better = e.bannedUntil.Before(ve.bannedUntil)
		default:
			better = id < victim
		}
		if better {
			victim, victimBanned, ve = id, banned, e
		}
	}
	if ve != nil {
		delete(b.peers, victim)
	}
}
