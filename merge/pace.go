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
//   - half the recent time its exchanges keep the link busy (a moving
//     average of the successful ones, less the moving average of the
//     time their answer took to come back): a node's own transfers take
//     at most about two thirds of its link, leaving room for those its
//     peers start and for everything else. The answer's time is the
//     path's round trip, during which our frame is already on its way:
//     on a link with a long round trip the exchange is mostly waiting,
//     not moving bytes, and counting that wait as load would leave the
//     link idle. On loopback an exchange takes a few ms of scheduling and
//     the floor rules; on a slow link the transfer does (0.47 MB each way
//     is about 40 ms at 100 Mbit/s);
//   - one local step: merging more often than the model changes brings in
//     nothing of ours.
//
// then stretched by a jitter in [0.8, 1.2) so peers that started together
// drift apart. Pace is pure: the caller reports durations and passes the
// jitter draw. The zero value waits Floor = 0; set Floor.
type Pace struct {
	Floor time.Duration
	// exchange and answer are the moving averages of successful
	// exchanges and of their answers' times (0: none yet).
	exchange, answer time.Duration
}

// paceWeight is the share of the newest exchange in the moving average:
// about the last ten count.
const paceWeight = 0.2

// Exchanged records a successful exchange: d its duration, answer the
// time from its request to the responder's answer (0 if not known; it is
// capped at d). Failures are not recorded: they end in a timeout or a
// refusal, which says nothing about how long a model takes to move
// (backoff handles them).
func (p *Pace) Exchanged(d, answer time.Duration) {
	if d <= 0 {
		return
	}
	answer = min(max(answer, 0), d)
	if p.exchange == 0 {
		p.exchange, p.answer = d, answer
		return
	}
	p.exchange += time.Duration(paceWeight * float64(d-p.exchange))
	p.answer += time.Duration(paceWeight * float64(answer-p.answer))
}

// Exchange is the moving average of exchange durations (0: none yet).
func (p *Pace) Exchange() time.Duration { return p.exchange }

// Answer is the moving average of the answers' times (0: none yet).
func (p *Pace) Answer() time.Duration { return p.answer }

// Wait is the time until the next exchange: the longest of Floor, half
// the average exchange less its answer's time, and step (the node's
// current step time, 0 if not known), times 0.8 + 0.4*jitter for a
// jitter in [0, 1).
func (p *Pace) Wait(step time.Duration, jitter float64) time.Duration {
	base := max(p.Floor, (p.exchange-p.answer)/2, step, 0)
	return time.Duration(float64(base) * (0.8 + 0.4*min(max(jitter, 0), 1)))
}
