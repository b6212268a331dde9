package merge

import "time"

// Pace decides how long a node waits between the exchanges it starts. An
// exchange moves a model each way, so a fixed interval tuned for loopback
// (a few ms per exchange) would keep a node's uplink saturated on a slow
// link and queue its exchanges behind each other, while one tuned for a
// slow link wastes a fast one. The wait is the longest of:
//
//   - Floor, the configured interval (--avg-interval): the most often a
//     node starts an exchange;
//   - half the recent duration of its exchanges (a moving average of the
//     successful ones): a node spends at most about two thirds of its time
//     in exchanges it started, leaving room on its link for those its
//     peers start and for everything else. On loopback an exchange takes
//     a few ms of scheduling and the floor rules; on a slow link the
//     transfer does (0.47 MB each way is about 40 ms at 100 Mbit/s);
//   - one local step: merging more often than the model changes brings in
//     nothing of ours.
//
// then stretched by a jitter in [0.8, 1.2) so peers that started together
// drift apart. Pace is pure: the caller reports durations and passes the
// jitter draw. The zero value waits Floor = 0; set Floor.
type Pace struct {
	Floor time.Duration
	// exchange is the moving average of successful exchanges (0: none yet).
	exchange time.Duration
}

// paceWeight is the share of the newest exchange in the moving average:
// about the last ten count.
const paceWeight = 0.2

// Exchanged records the duration of a successful exchange. Failures are
// not recorded: they end in a timeout or a refusal, which says nothing
// about how long a model takes to move (backoff handles them).
func (p *Pace) Exchanged(d time.Duration) {
	if d <= 0 {
		return
	}
	if p.exchange == 0 {
		p.exchange = d
		return
	}
	p.exchange += time.Duration(paceWeight * float64(d-p.exchange))
}

// Exchange is the moving average of exchange durations (0: none yet).
func (p *Pace) Exchange() time.Duration { return p.exchange }

// Wait is the time until the next exchange: the longest of Floor, half
// the average exchange and step (the node's current step time, 0 if not
// known), times 0.8 + 0.4*jitter for a jitter in [0, 1).
func (p *Pace) Wait(step time.Duration, jitter float64) time.Duration {
	base := max(p.Floor, p.exchange/2, step, 0)
	return time.Duration(float64(base) * (0.8 + 0.4*min(max(jitter, 0), 1)))
}
