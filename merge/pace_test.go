package merge

import (
	"testing"
	"time"
)

func TestPace(t *testing.T) {
	ms := time.Millisecond
	p := Pace{Floor: 10 * ms}
	if got := p.Wait(0, 0.5); got != 10*ms {
		t.Errorf("before any exchange: %v, want the floor", got)
	}
	if got := p.Wait(0, 0); got != 8*ms {
		t.Errorf("jitter 0: %v, want 0.8 x the floor", got)
	}
	if got := p.Wait(0, 2); got != 12*ms {
		t.Errorf("jitter clamped to 1: %v, want 1.2 x the floor", got)
	}
	// Fast exchanges leave the floor in charge, up to twice the floor.
	for range 20 {
		p.Exchanged(18*ms, ms)
	}
	if got := p.Wait(0, 0.5); got != 10*ms {
		t.Errorf("18 ms exchanges: %v, want the floor", got)
	}
	// A slow link: the average follows within about ten exchanges, and
	// the wait with it.
	for range 20 {
		p.Exchanged(150*ms, 2*ms)
	}
	if e := p.Exchange(); e < 140*ms || e > 150*ms {
		t.Errorf("average after 20 exchanges of 150 ms: %v", e)
	}
	if got, want := p.Wait(0, 0.5), (p.Exchange()-p.Answer())/2; got != want || got < 70*ms {
		t.Errorf("slow link: %v, want half the average exchange less its answer's time, %v", got, want)
	}
	// A slow node waits at least one of its steps.
	if got := p.Wait(time.Second, 0.5); got != time.Second {
		t.Errorf("1 s steps: %v, want 1 s", got)
	}
	// Nonsense durations are ignored.
	e := p.Exchange()
	p.Exchanged(0, 0)
	p.Exchanged(-time.Second, ms)
	if p.Exchange() != e {
		t.Errorf("non-positive durations moved the average to %v", p.Exchange())
	}
	if got := (&Pace{}).Wait(-time.Second, 0.5); got != 0 {
		t.Errorf("zero pace with a negative step: %v, want 0", got)
	}
}

// A link that is far but fast: the exchange is mostly the round trip its
// answer takes, and the wait is half the rest (the models crossing), not
// half the whole. On a slow link the transfer dominates and the wait stays
// about half the exchange.
func TestPaceDiscountsTheRoundTrip(t *testing.T) {
	ms := time.Millisecond
	far := Pace{Floor: 10 * ms}
	slow := Pace{Floor: 10 * ms}
	for range 30 {
		far.Exchanged(100*ms, 60*ms)  // 40 ms round trip and scheduling, 40 ms crossing
		slow.Exchanged(400*ms, 45*ms) // 0.47 MB at 10 Mbit/s
	}
	if a := far.Answer(); a < 59*ms || a > 61*ms {
		t.Errorf("average answer %v, want 60 ms", a)
	}
	if got := far.Wait(0, 0.5); got < 19*ms || got > 21*ms {
		t.Errorf("far link: wait %v, want half of 100 - 60 ms", got)
	}
	if got := slow.Wait(0, 0.5); got < 175*ms || got > 180*ms {
		t.Errorf("slow link: wait %v, want half of 400 - 45 ms", got)
	}
	// An answer can not take longer than its exchange, nor less than 0.
	p := Pace{}
	p.Exchanged(50*ms, time.Second)
	if p.Answer() != 50*ms || p.Wait(0, 0.5) != 0 {
		t.Errorf("answer capped at the exchange: answer %v wait %v", p.Answer(), p.Wait(0, 0.5))
	}
	p = Pace{}
	p.Exchanged(50*ms, -ms)
	if p.Answer() != 0 || p.Wait(0, 0.5) != 25*ms {
		t.Errorf("negative answer: answer %v wait %v, want 0 and 25 ms", p.Answer(), p.Wait(0, 0.5))
	}
}
