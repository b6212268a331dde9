package sim

import "time"

// kind is what an event does.
type kind uint8

const (
	evStep      kind = iota // a node starts a step (and applies it at once, as the trainer does before its slowdown sleep)
	evRound                 // a node's averager starts a round
	evServe                 // an exchange or pull request reaches the partner, which snapshots its model
	evDeliverB              // the initiator's model has reached the partner, which merges it
	evDeliverA              // the partner's model has reached the initiator (or the exchange failed)
	evLeave                 // a session ends
	evJoin                  // a node joins (trace) or an arrival happens (lifetime model: n is nil)
	evReport                // a report point
	evTraceJoin             // a trace session begins
)

// event is one thing that happens at a virtual time. seq breaks ties in
// the order events were scheduled, so a run is deterministic.
type event struct {
	at      time.Duration
	seq     uint64
	kind    kind
	session int // the node's session when the event was scheduled
	n       *node
	x       *exchange
}

// queue is a binary min-heap of events by (at, seq). It is written out
// rather than built on container/heap to avoid an interface call and an
// allocation per event: a large run schedules millions.
type queue struct {
	h   []event
	seq uint64
}

func (q *queue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *queue) pop() (event, bool) {
	if len(q.h) == 0 {
		return event{}, false
	}
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h[last] = event{}
	q.h = q.h[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q.h) && q.less(l, m) {
			m = l
		}
		if r < len(q.h) && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top, true
}

func (q *queue) less(i, j int) bool {
	a, b := &q.h[i], &q.h[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}
