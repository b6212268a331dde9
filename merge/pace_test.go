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
		p.Exchanged(18 * ms)
	}
	if got := p.Wait(0, 0.5); got != 10*ms {
		t.Errorf("18 ms exchanges: %v, want the floor", got)
	}
	// A slow link: the average follows within about ten exchanges, and
	// the wait with it.
	for range 20 {
		p.Exchanged(150 * ms)
	}
	if e := p.Exchange(); e < 140*ms || e > 150*ms {
		t.Errorf("average after 20 exchanges of 150 ms: %v", e)
	}
	if got := p.Wait(0, 0.5); got != p.Exchange()/2 {
		t.Errorf("slow link: %v, want half the average exchange %v", got, p.Exchange())
	}
	// A slow node waits at least one of its steps.
	if got := p.Wait(time.Second, 0.5); got != time.Second {
		t.Errorf("1 s steps: %v, want 1 s", got)
	}
	// Nonsense durations are ignored.
	e := p.Exchange()
	p.Exchanged(0)
	p.Exchanged(-time.Second)
	if p.Exchange() != e {
		t.Errorf("non-positive durations moved the average to %v", p.Exchange())
	}
	if got := (&Pace{}).Wait(-time.Second, 0.5); got != 0 {
		t.Errorf("zero pace with a negative step: %v, want 0", got)
	}
}
