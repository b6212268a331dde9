//go:build testhooks

package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/meshtrain/meshtrain/gossip"
	"github.com/meshtrain/meshtrain/params"
)

// Hostile-peer modes, for test swarms only: a node that attacks its peers
// so that their defences (validation, robust merging, reputation) can be
// measured against it. The attacker trains like any node, so it stays a
// plausible partner and announces honest-looking progress; what it sends
// is attacked. It never touches its own trainer's model.
//
// All of it exists in the testhooks build only (make build-testhooks): a
// release binary has no adversary settings at all (adversary_release.go).
// Even there, a node turns hostile only when the kind is set AND the
// environment holds UnlockAdversaryEnv=UnlockAdversaryValue: a settings
// file, a variable meant for another flag or a stray --adversary cannot do
// it alone.

// Adversary kinds.
const (
	// AdversaryNoise sends params + N(0, (strength*rms(params))^2) per
	// coordinate. Default strength 1.
	AdversaryNoise = "noise"
	// AdversarySignFlip sends -strength * params. Default 1.
	AdversarySignFlip = "signflip"
	// AdversaryScale sends strength * params. Default 10.
	AdversaryScale = "scale"
	// AdversaryNaN sends frames with a fraction strength of the values
	// NaN (at least one). Default 0.01.
	AdversaryNaN = "nan"
	// AdversaryReplay sends, forever, the model it had strength seconds
	// after it first sent one (which, with the averager, is when training
	// starts), claiming its current step and progress so the staleness
	// weight does not discount it. Default 5.
	AdversaryReplay = "replay"
	// AdversaryWrongDim sends frames with strength more elements (fewer if
	// negative; an integer), under the same fingerprint. Default 1.
	AdversaryWrongDim = "wrongdim"
	// AdversaryFlood publishes strength announcements per second and opens
	// exchanges with every peer as fast as it can (floodWorkers at once),
	// on top of behaving honestly. Default 200.
	AdversaryFlood = "flood"
	// AdversaryBoast claims strength times its progress, in its
	// announcements and in the models it sends (which are honest), so
	// that its peers pull its model whole (a catch-up) and credit the
	// claim. Default 1000.
	AdversaryBoast = "boast"
)

// AdversaryKinds lists the kinds.
var AdversaryKinds = []string{AdversaryNoise, AdversarySignFlip, AdversaryScale, AdversaryNaN, AdversaryReplay,
	AdversaryWrongDim, AdversaryFlood, AdversaryBoast}

// defaultStrength is each kind's strength when none is given.
var defaultStrength = map[string]float64{
	AdversaryNoise: 1, AdversarySignFlip: 1, AdversaryScale: 10, AdversaryNaN: 0.01,
	AdversaryReplay: 5, AdversaryWrongDim: 1, AdversaryFlood: 200, AdversaryBoast: 1000,
}

// The unlock gate: this exact variable and value must be in the
// environment of a node that attacks.
const (
	UnlockAdversaryEnv   = "MESHTRAIN_UNLOCK_ADVERSARY"
	UnlockAdversaryValue = "I-understand-this-attacks-my-peers"
)

// ErrAdversaryLocked: an adversary was asked for without the unlock
// variable. Validate's error wraps it (and ErrBadConfig).
var ErrAdversaryLocked = errors.New("node: adversary mode is locked")

// floodWorkers is how many exchanges a flooding node keeps open at once.
const floodWorkers = 8

// maxStrength bounds every strength, so a typo cannot ask for an
// unbounded allocation or rate.
const maxStrength = 1e6

// Adversary makes a test node attack its peers. The zero value (empty
// Kind) is an honest node.
type Adversary struct {
	// Kind is one of AdversaryKinds, or "" for an honest node.
	Kind string
	// Strength is the kind's parameter (see each kind); DefaultAdversary
	// gives its default.
	Strength float64
}

// DefaultAdversary is kind at its default strength.
func DefaultAdversary(kind string) (Adversary, error) {
	s, ok := defaultStrength[kind]
	if !ok {
		return Adversary{}, fmt.Errorf("%w: adversary %q: want one of %v", ErrBadConfig, kind, AdversaryKinds)
	}
	return Adversary{Kind: kind, Strength: s}, nil
}

// ParseAdversary reads --adversary and --adversary-strength. An empty
// kind is an honest node (and then strength must be empty too); an empty
// strength is the kind's default. It checks the kind and strength but not
// the unlock gate, which Validate checks.
func ParseAdversary(kind, strength string) (Adversary, error) {
	if kind == "" {
		if strength != "" {
			return Adversary{}, fmt.Errorf("%w: --adversary-strength %s without --adversary", ErrBadConfig, strength)
		}
		return Adversary{}, nil
	}
	a, err := DefaultAdversary(kind)
	if err != nil {
		return Adversary{}, err
	}
	if strength != "" {
		if a.Strength, err = strconv.ParseFloat(strength, 64); err != nil {
			return Adversary{}, fmt.Errorf("%w: --adversary-strength %q is not a number", ErrBadConfig, strength)
		}
	}
	return a, a.check()
}

// Validate checks the kind and strength and, for any kind, that the
// environment unlocks adversaries (see UnlockAdversaryEnv).
func (a Adversary) Validate() error {
	if a.Kind == "" {
		return nil
	}
	if err := a.check(); err != nil {
		return err
	}
	return CheckAdversaryUnlocked(os.Getenv)
}

// check validates the kind and strength.
func (a Adversary) check() error {
	if _, ok := defaultStrength[a.Kind]; !ok {
		return fmt.Errorf("%w: adversary %q: want one of %v", ErrBadConfig, a.Kind, AdversaryKinds)
	}
	s := a.Strength
	bad := func(want string) error {
		return fmt.Errorf("%w: adversary %s: strength %v must be %s", ErrBadConfig, a.Kind, s, want)
	}
	if math.IsNaN(s) || math.Abs(s) > maxStrength {
		return bad(fmt.Sprintf("a number within ±%g", float64(maxStrength)))
	}
	switch a.Kind {
	case AdversaryNoise, AdversarySignFlip, AdversaryFlood:
		if s <= 0 {
			return bad("> 0")
		}
	case AdversaryBoast:
		if s <= 1 {
			return bad("> 1")
		}
	case AdversaryScale:
		if s == 1 {
			return bad("other than 1 (which sends the honest model)")
		}
	case AdversaryNaN:
		if !(s > 0 && s <= 1) {
			return bad("a fraction in (0,1]")
		}
	case AdversaryReplay:
		if s < 0 {
			return bad("a number of seconds >= 0")
		}
	case AdversaryWrongDim:
		if s == 0 || s != math.Trunc(s) || math.Abs(s) > 1<<20 {
			return bad("a whole number of elements, not 0, within ±1048576")
		}
	}
	return nil
}

// CheckAdversaryUnlocked reports ErrAdversaryLocked (wrapped with
// ErrBadConfig) unless getenv(UnlockAdversaryEnv) is exactly
// UnlockAdversaryValue.
func CheckAdversaryUnlocked(getenv func(string) string) error {
	if getenv(UnlockAdversaryEnv) == UnlockAdversaryValue {
		return nil
	}
	return lockedError{}
}

// lockedError is the refusal of a locked adversary: one clear line that
// wraps both ErrBadConfig and ErrAdversaryLocked.
type lockedError struct{}

func (lockedError) Error() string {
	return fmt.Sprintf("%v: adversary mode is locked: an adversary node attacks its peers and is for test swarms only; to run one, set %s=%s in its environment",
		ErrBadConfig, UnlockAdversaryEnv, UnlockAdversaryValue)
}

func (lockedError) Unwrap() []error { return []error{ErrBadConfig, ErrAdversaryLocked} }

// testHooks are the Config fields of the testhooks build.
type testHooks struct {
	// Adversary makes this a hostile test node (gossip mode only, and only
	// with the unlock variable in the environment). The zero value is an
	// honest node.
	Adversary Adversary
}

// validateHooks checks the adversary settings, for Config.Validate.
func (c Config) validateHooks() []error {
	if c.Adversary.Kind == "" {
		return nil
	}
	var errs []error
	if err := c.Adversary.Validate(); err != nil {
		errs = append(errs, err) // wraps ErrBadConfig itself
	}
	if c.Offline || c.Mode != ModeGossip {
		errs = append(errs, fmt.Errorf("%w: adversary %s: only a node in gossip mode can attack its peers",
			ErrBadConfig, c.Adversary.Kind))
	}
	return errs
}

// nodeHooks is the Node's state of the testhooks build.
type nodeHooks struct {
	adv *attacker // nil unless cfg.Adversary makes this a hostile test node
}

// attacker is a hostile node's state. Every method is safe for concurrent
// use: the gossip service serves snapshots from several goroutines while
// the averager starts its own exchanges.
type attacker struct {
	adv Adversary
	now func() time.Time

	mu     sync.Mutex
	start  time.Time // of the first attack; replay counts from it
	rng    *rand.Rand
	replay []float32 // the model replayed, once captured

	// flood state: its goroutines and the snapshot they all send.
	wg       sync.WaitGroup
	floodMu  sync.Mutex
	floodAt  time.Time
	floodSnp params.Snapshot
}

func newAttacker(a Adversary, seed uint64, now func() time.Time) *attacker {
	return &attacker{adv: a, now: now, rng: rand.New(rand.NewPCG(seed, 0x616476))}
}

// outgoing is what the node sends in place of s: s itself on an honest
// node, an attacked copy on a hostile one. s is never written.
func (n *Node) outgoing(s params.Snapshot) params.Snapshot {
	if n.hooks.adv == nil {
		return s
	}
	return n.hooks.adv.attack(s)
}

// attack returns the snapshot to send instead of s, in new memory for the
// kinds that change the values; the rest (nan and wrongdim act on the
// encoded frame, flood on the traffic) send s as it is.
func (a *attacker) attack(s params.Snapshot) params.Snapshot {
	out := s
	switch a.adv.Kind {
	case AdversaryNoise:
		out.Params = make([]float32, len(s.Params))
		a.mu.Lock()
		addNoise(out.Params, s.Params, a.adv.Strength, a.rng)
		a.mu.Unlock()
	case AdversarySignFlip:
		out.Params = make([]float32, len(s.Params))
		scaled(out.Params, s.Params, -a.adv.Strength)
	case AdversaryScale:
		out.Params = make([]float32, len(s.Params))
		scaled(out.Params, s.Params, a.adv.Strength)
	case AdversaryReplay:
		a.mu.Lock()
		now := a.now()
		if a.start.IsZero() {
			a.start = now
		}
		out.Params = replayed(&a.replay, s.Params, now.Sub(a.start) >= time.Duration(a.adv.Strength*float64(time.Second)))
		a.mu.Unlock()
	case AdversaryBoast:
		out.Progress = params.Progress(a.adv.Strength * float64(s.Progress))
	}
	return out
}

// announced is the announcement the node publishes in place of an: an
// itself on an honest node; a boaster claims its boast there too.
func (n *Node) announced(an gossip.Announcement) gossip.Announcement {
	if a := n.hooks.adv; a != nil && a.adv.Kind == AdversaryBoast {
		an.Progress *= a.adv.Strength
	}
	return an
}

// tamper is the kind's hook on encoded frames, or nil.
func (a *attacker) tamper(seed uint64) func(*gossip.Frame) {
	switch a.adv.Kind {
	case AdversaryNaN:
		return gossip.NaNTamper(a.adv.Strength, seed)
	case AdversaryWrongDim:
		return gossip.ResizeTamper(int(a.adv.Strength))
	}
	return nil
}

// addNoise sets dst = src + N(0, (k*rms(src))^2) per coordinate.
func addNoise(dst, src []float32, k float64, rng *rand.Rand) {
	var ss float64
	for _, x := range src {
		ss += float64(x) * float64(x)
	}
	sd := 0.0
	if len(src) > 0 {
		sd = k * math.Sqrt(ss/float64(len(src)))
	}
	for i, x := range src {
		dst[i] = x + float32(sd*rng.NormFloat64())
	}
}

// scaled sets dst = k * src.
func scaled(dst, src []float32, k float64) {
	f := float32(k)
	for i, x := range src {
		dst[i] = f * x
	}
}

// replayed returns the model to replay: src until capture is due, then a
// copy of src taken at the first call when it was due, forever after.
func replayed(captured *[]float32, src []float32, due bool) []float32 {
	if *captured == nil {
		if !due {
			return src
		}
		*captured = append([]float32(nil), src...)
	}
	return *captured
}

// armHooks makes the node hostile if its config says so: it shouts about
// it, and sets the frame hook on the exchange config ex.
func (n *Node) armHooks(ex *gossip.Config) {
	a := n.cfg.Adversary
	if a.Kind == "" {
		return
	}
	seed := n.cfg.Train.Seed ^ 0x686f7374696c65
	n.hooks.adv = newAttacker(a, seed, time.Now)
	ex.Tamper = n.hooks.adv.tamper(seed)
	n.log.Warn("ADVERSARY MODE: THIS NODE ATTACKS ITS PEERS (test swarms only)", "adversary", a.Kind, "strength", a.Strength)
}

// unleash starts the flood's goroutines, if the node floods, once the
// protocols are up. They stop with ctx, which closing the mesh cancels
// (stop is the mesh's pubsub stop, which then also waits for them).
func (n *Node) unleash(ctx context.Context, stop context.CancelFunc) context.CancelFunc {
	if n.hooks.adv == nil || n.hooks.adv.adv.Kind != AdversaryFlood {
		return stop
	}
	a := n.hooks.adv
	fctx, cancel := context.WithCancel(ctx)
	a.wg.Add(1 + floodWorkers)
	go func() { defer a.wg.Done(); a.floodAnnounce(fctx, n) }()
	for w := range floodWorkers {
		go func() { defer a.wg.Done(); a.floodExchange(fctx, n, w) }()
	}
	return func() {
		cancel()
		stop()
		a.wg.Wait()
	}
}

// floodAnnounce publishes Strength announcements per second.
func (a *attacker) floodAnnounce(ctx context.Context, n *Node) {
	every := max(time.Duration(float64(time.Second)/a.adv.Strength), 100*time.Microsecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = n.ann.Publish(ctx) // fails only once the announcer is closed
		}
	}
}

// floodExchange opens exchanges back to back, going round the partners;
// worker w starts at the w-th so the workers spread over them.
func (a *attacker) floodExchange(ctx context.Context, n *Node, w int) {
	for i := w; ctx.Err() == nil; i++ {
		peers := n.partners()
		if len(peers) == 0 {
			if sleepCtx(ctx, 50*time.Millisecond) != nil {
				return
			}
			continue
		}
		ectx, cancel := context.WithTimeout(ctx, n.cfg.ExchangeTimeout)
		_, err := n.svc.Exchange(ectx, peers[i%len(peers)].Peer, a.floodSnapshot(n))
		cancel()
		if errors.Is(err, gossip.ErrClosed) {
			return
		}
		// A refusal that comes back at once (a dial that fails, a peer that
		// is gone) would otherwise spin.
		if err != nil && sleepCtx(ctx, 5*time.Millisecond) != nil {
			return
		}
	}
}

// floodSnapshot is the model the flood sends, refreshed once a second: a
// copy per exchange would cost a model's worth of memory each, and one
// snapshot lets the service reuse its encoded frame.
func (a *attacker) floodSnapshot(n *Node) params.Snapshot {
	a.floodMu.Lock()
	defer a.floodMu.Unlock()
	if now := a.now(); a.floodSnp.Params == nil || now.Sub(a.floodAt) >= time.Second {
		a.floodSnp, a.floodAt = n.trainer.SnapshotInto(nil), now
	}
	return a.floodSnp
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
