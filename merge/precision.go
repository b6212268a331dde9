package merge

import "time"

// Precision decides whether a node sends its models as fp16 or as int8
// (half fp16's bytes, each value within 1/254 of its block's largest; see
// gossip's int8 frames). int8 costs the models some accuracy at every
// merge, so it is worth it only where moving the model is what slows the
// exchanges down: a link whose bandwidth, not the node's cores, sets how
// long an exchange keeps it busy. The pace says when that may be so: its
// wait is set by the link (half the link time of recent exchanges), not by
// its floor. Such a link and a node whose cores are too busy to move a
// frame quickly look alike there, so the node tries int8 and keeps it only
// if its exchanges' link time drops by at least a quarter; otherwise it
// goes back to fp16 and waits longer each time before trying again. A kept
// int8 is checked again after 100 int8 exchanges, then 200, 400 and so
// on: three in fp16, and int8 stays only if it still takes at most three
// quarters of their time.
//
// Link times are exchange durations less their answer's time (Pace). The
// zero value starts at fp16 with Floor 0; set Floor to the pace's.
type Precision struct {
	Floor time.Duration
	int8  bool
	// seen counts exchanges since the last change. trial counts the
	// exchanges of a trial so far (0: none running): of int8, begun from
	// fp16, or of fp16 (a re-check), begun from int8. Its link times, sum,
	// are judged against before, the other precision's when it began.
	seen, trial int
	before, sum time.Duration
	// hold is how many fp16 exchanges the next int8 trial waits for after
	// a failed one or a return (doubling each time); recheck, how many
	// int8 exchanges the next re-check waits for (doubling each time int8
	// is confirmed); tried, that a trial has begun (the first judges the
	// first exchange alone: the swarm mixes most while its models are
	// young).
	hold, recheck int
	tried         bool
}

const (
	// PrecisionSettle is how many exchanges the node sees after a change
	// before it judges again, and how many an int8 trial lasts. Few: on a
	// slow link each takes half a second or more, and where the bytes set
	// the pace int8 halves them at once; a trial that misjudges a noisy
	// link costs little, since the next waits PrecisionHold exchanges.
	PrecisionSettle = 3
	// PrecisionGain is the share of fp16's link time an int8 trial must
	// reach to be kept.
	PrecisionGain = 0.75
	// PrecisionHold is how many exchanges the first failed trial makes the
	// next one wait for; each further failure doubles it.
	PrecisionHold = 100
)

// Int8 reports whether the node sends int8 now.
func (p *Precision) Int8() bool { return p.int8 }

// Exchanged takes a successful exchange's link time and the pace's moving
// average of link times (Pace.Exchange less Pace.Answer), and reports
// whether to send int8 from now on.
func (p *Precision) Exchanged(link, avg time.Duration) bool {
	p.seen++
	switch {
	case p.trial > 0:
		p.sum += link
		if p.trial++; p.trial <= PrecisionSettle {
			break
		}
		mean := float64(p.sum) / PrecisionSettle
		int8Faster := mean <= PrecisionGain*float64(p.before) // an int8 trial
		if !p.int8 {
			int8Faster = float64(p.before) <= PrecisionGain*mean // a re-check in fp16
		}
		if int8Faster {
			// Confirmed: check again later, and less often each time.
			p.int8, p.recheck = true, max(PrecisionHold, 2*p.recheck)
		} else {
			// Not the link: the bytes were not what took the time.
			p.int8, p.hold = false, max(PrecisionHold, 2*p.hold)
		}
		p.trial, p.seen = 0, 0
	case p.int8:
		switch {
		case p.seen >= PrecisionSettle && avg < p.Floor:
			// Back to fp16 once the link time of int8 exchanges, about
			// half what fp16's would be, is below the floor, where fp16's
			// wait would be set by the floor again. As after a failed
			// trial, the next waits: a link where int8 more than halves
			// the time would otherwise swing between the two every few
			// exchanges (and a node's first exchanges, slow while the
			// swarm starts, end here on loopback).
			p.int8, p.seen, p.hold = false, 0, max(PrecisionHold, 2*p.hold)
		case p.seen >= p.recheck:
			// Is int8 still faster? A trial kept on a slow start, or a
			// link that sped up, shows here.
			p.int8, p.seen, p.trial, p.before, p.sum = false, 0, 1, avg, 0
		}
	default:
		need := max(PrecisionSettle, p.hold)
		if !p.tried {
			need = 1
		}
		if p.seen >= need && avg/2 > p.Floor {
			p.int8, p.seen, p.trial, p.before, p.sum, p.tried = true, 0, 1, avg, 0, true
		}
	}
	return p.int8
}
