package node

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/reputation"
)

// How often the watcher feeds the run clock and checks for a partner.
// Between two feeds the clock extrapolates each peer from its announced
// rate for at least clockHorizon (2 s) after its announcement arrived, and
// a peer announces every second or less often, so feeding it every half
// second loses nothing; every 100 ms cost about 5% of each node's CPU in a
// testnet of 40 (a sort of the announced peers each time).
//
// The start of training is the exception. A peer that has just begun to
// train is counted from its first announcement after that, which it makes
// at its first step kickAfter into training rather than up to an announce
// interval later; a clock fed every 500 ms would take that in up to 500 ms
// late again. So the watcher feeds the clock every clockFastEvery while the
// node waits for its start (a start file) and for the first clockFastFor of
// training. Without this, in a testnet of four started together, each node
// counted only its own samples for up to a second, an eighth to a third of
// the swarm's, and the fast nodes read the learning-rate warmup about 2.7
// times too long (docs/benchmarks.md).
const (
	// kickAfter: a node makes its out-of-schedule announcement at its
	// first step this long into training. Its rate (samples over busy
	// time) is then worth extrapolating: at its first step it was a tenth
	// of the node's pace in a testnet of four (the first steps of four
	// processes starting on two cores at once), and a peer's clock would
	// have extrapolated it until the next scheduled announcement.
	kickAfter      = 100 * time.Millisecond
	clockEvery     = 500 * time.Millisecond
	clockFastEvery = 50 * time.Millisecond
	clockFastFor   = 2 * time.Second
	aloneEvery     = time.Second
)

// watcher feeds the run clock from the announcements and tells the user
// when the node trains alone. It owns nothing but its loop: the clock and
// the diagnosis are published through their own locks and atomics.
func (n *Node) watcher(ctx context.Context) {
	tick := time.NewTimer(clockFastEvery)
	defer tick.Stop()
	var lastAlone time.Time
	var withPartner time.Time // last time we had a partner (or the start)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			tick.Reset(n.clockFeedEvery(now))
			n.observeClock(now)
			if now.Sub(lastAlone) < aloneEvery {
				continue
			}
			lastAlone = now
			n.checkAlone(now, &withPartner)
		}
	}
}

// clockFeedEvery is the wait until the run clock's next feed at now:
// clockFastEvery before training starts and in its first clockFastFor,
// else clockEvery.
func (n *Node) clockFeedEvery(now time.Time) time.Duration {
	if start := n.trainStart.Load(); start == nil || now.Sub(*start) < clockFastFor {
		return clockFastEvery
	}
	return clockEvery
}

// observeClock hands the run clock the fresh announcements of the peers
// not banned.
func (n *Node) observeClock(now time.Time) {
	fresh := n.ann.FreshShared()
	obs := make([]clockObservation, 0, len(fresh))
	for _, p := range fresh {
		// A banned peer is not heard; one merely ignored (a model or two
		// judged outliers) still trains for the run, and leaving it out
		// would hold this node's clock back behind the swarm's.
		if p.Peer == n.id || p.Fingerprint != n.fp || n.standing(p.Peer) == reputation.Banned {
			continue
		}
		obs = append(obs, clockObservation{Peer: p.Peer, Samples: p.Samples, Rate: p.SamplesPerSec,
			Estimate: p.RunSamples, Seen: p.SeenAt, Interval: time.Duration(p.IntervalMs) * time.Millisecond})
	}
	n.clock.observe(now, n.trainer.Stats().SamplesPerSec, obs)
	n.scaleLR(obs)
}

// checkAlone updates the lone-node diagnosis: once the trainer has run
// for aloneAfter with no partner, the status says why and the log says
// so once per reason; a partner found clears it.
func (n *Node) checkAlone(now time.Time, withPartner *time.Time) {
	start := n.trainStart.Load()
	if n.cfg.Mode == ModeLocal || start == nil {
		return
	}
	if withPartner.IsZero() || withPartner.Before(*start) {
		*withPartner = *start
	}
	in := n.aloneInputs(now)
	if in.inMode-in.excluded-in.relayed > 0 {
		*withPartner = now
		if prev := n.alone.Swap(nil); prev != nil {
			n.log.Info("found a partner: training with the swarm", "peers", in.inMode-in.excluded)
		}
		return
	}
	since := now.Sub(*withPartner)
	if since < aloneAfter {
		return
	}
	reason, msg := diagnose(in)
	prev := n.alone.Swap(&Alone{Reason: reason, Message: msg, SinceS: since.Seconds()})
	if prev == nil || prev.Reason != reason {
		n.log.Warn(msg, "reason", string(reason), "alone_s", since.Round(time.Second).Seconds())
	}
}

// aloneInputs gathers what diagnose needs.
func (n *Node) aloneInputs(now time.Time) aloneInputs {
	in := aloneInputs{profile: n.cfg.Host.Profile, mode: n.cfg.Mode, bootstrap: len(n.cfg.Host.Bootstrap),
		ourFP: n.fp.Short(), modes: map[string]int{}}
	if n.host == nil {
		return in
	}
	in.bootErrs = n.host.BootstrapErrors()
	in.connected = len(n.host.Network().Peers())
	sameFP := map[peer.ID]bool{}
	for _, p := range n.ann.Fresh() {
		if p.Peer == n.id || p.Fingerprint != n.fp {
			continue
		}
		sameFP[p.Peer] = true
		in.sameFP++
		if p.Mode != string(n.cfg.Mode) {
			in.modes[p.Mode]++
			continue
		}
		in.inMode++
		switch {
		case n.standing(p.Peer) != reputation.OK:
			in.excluded++
		case n.host.PathKind(p.Peer) == PathRelayed:
			in.relayed++
		}
	}
	for _, p := range n.otherFP.recent(now) {
		if !sameFP[p] {
			in.otherFP++
		}
	}
	return in
}

// Alone returns the lone-node diagnosis, nil while the node has a partner
// (or has not trained long enough without one to say).
func (n *Node) Alone() *Alone {
	a := n.alone.Load()
	if a == nil {
		return nil
	}
	c := *a
	return &c
}

// runPosition is the run clock at now, given our own samples. In sync mode
// it is the group model's progress instead: every member's batch of every
// round, the same on every member after a round, so the whole group ends
// the run at the same round rather than leaving its last members waiting
// for one that stopped first.
//
// In diloco mode it is the group model's progress at the last outer round:
// the same on every member, so all end the run after the same round.
func (n *Node) runPosition(now time.Time, own float64) float64 {
	if n.cfg.Mode == ModeSync && !n.cfg.Offline {
		return float64(n.trainer.Stats().Progress)
	}
	if n.cfg.Mode == ModeDiloco && !n.cfg.Offline {
		return f64(&n.groupProgress)
	}
	return n.clock.value(now, own)
}
