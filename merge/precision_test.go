package merge

import (
	"testing"
	"time"
)

const floor = 12500 * time.Microsecond

// run feeds p n exchanges whose link time is link(int8) and returns how
// many of them were sent as int8. The average passed is the link time
// itself: the pace's average of a steady link.
func run(p *Precision, n int, link func(int8 bool) time.Duration) (int8s int) {
	for range n {
		l := link(p.Int8())
		if p.Int8() {
			int8s++
		}
		p.Exchanged(l, l)
	}
	return int8s
}

// TestPrecisionStaysFP16WhileTheFloorRules: on loopback the floor sets the
// pace (half the link time is below it), and no exchange goes as int8.
func TestPrecisionStaysFP16WhileTheFloorRules(t *testing.T) {
	p := Precision{Floor: floor}
	if n := run(&p, 1000, func(bool) time.Duration { return 2*floor - time.Millisecond }); n != 0 {
		t.Fatalf("%d int8 exchanges where the floor sets the pace", n)
	}
}

// TestPrecisionKeepsInt8WhereBandwidthRules: on a link where the bytes
// take the time, int8 halves it, and the node keeps int8 after its trial.
func TestPrecisionKeepsInt8WhereBandwidthRules(t *testing.T) {
	p := Precision{Floor: floor}
	link := func(int8 bool) time.Duration {
		if int8 {
			return 50 * time.Millisecond
		}
		return 100 * time.Millisecond
	}
	run(&p, PrecisionSettle, link)
	if !p.Int8() {
		t.Fatalf("fp16 after %d link-bound exchanges", PrecisionSettle)
	}
	// All of them but the re-checks: three fp16 exchanges after 100 int8
	// ones, then after 200 more.
	if n := run(&p, 500, link); n != 500-2*PrecisionSettle || !p.Int8() {
		t.Fatalf("%d of 500 exchanges after the switch went as int8, want all but two re-checks", n)
	}
}

// TestPrecisionBacksOffWhereBytesAreNotTheCost: exchanges slow for
// another reason (busy cores) take as long as int8: each trial fails, and
// the next waits longer, so almost every exchange stays fp16.
func TestPrecisionBacksOffWhereBytesAreNotTheCost(t *testing.T) {
	p := Precision{Floor: floor}
	var switches []int
	prev := false
	for i := range 2000 {
		p.Exchanged(40*time.Millisecond, 40*time.Millisecond)
		if p.Int8() && !prev {
			switches = append(switches, i)
		}
		prev = p.Int8()
	}
	// Trials start after the first exchange, then after 100, 200, 400 and
	// 800 fp16 exchanges, and each lasts 3: at 0, 103, 306, 709 and 1512.
	want := []int{0, 103, 306, 709, 1512}
	if len(switches) != len(want) {
		t.Fatalf("trials began at exchanges %v, want %v", switches, want)
	}
	for i := range want {
		if switches[i] != want[i] {
			t.Fatalf("trials began at exchanges %v, want %v", switches, want)
		}
	}
}

// TestPrecisionReturnsToFP16WhenTheLinkSpeedsUp: once int8's link time is
// below the floor, fp16's wait would be the floor again.
func TestPrecisionReturnsToFP16WhenTheLinkSpeedsUp(t *testing.T) {
	p := Precision{Floor: floor}
	fast := false
	link := func(int8 bool) time.Duration {
		d := 100 * time.Millisecond
		if fast {
			d = 16 * time.Millisecond
		}
		if int8 {
			d /= 2
		}
		return d
	}
	run(&p, 100, link)
	if !p.Int8() {
		t.Fatal("fp16 on a link-bound link")
	}
	fast = true
	run(&p, PrecisionSettle, link)
	if p.Int8() {
		t.Fatal("still int8 on a link where fp16's exchanges leave the floor in charge")
	}
	if n := run(&p, 50, link); n != 0 {
		t.Fatalf("%d int8 exchanges after the link sped up", n)
	}
	// A link where int8 takes a third of fp16's time: it would swing back
	// and forth; the hold after a return keeps it on fp16 for 100.
	swing := func(int8 bool) time.Duration {
		if int8 {
			return 10 * time.Millisecond
		}
		return 30 * time.Millisecond
	}
	// The return was the first of the three fast exchanges above.
	if run(&p, PrecisionHold-(PrecisionSettle-1)-50-1, swing); p.Int8() {
		t.Fatal("a trial within the hold")
	}
	if run(&p, 1, swing); !p.Int8() {
		t.Fatal("no trial once the hold is over")
	}
	// The trial, kept; three more int8 exchanges, and the return after
	// the last.
	run(&p, 2*PrecisionSettle, swing)
	if p.Int8() {
		t.Fatal("int8 below the floor")
	}
	if run(&p, 2*PrecisionHold-1, swing); p.Int8() {
		t.Fatal("a trial within the doubled hold")
	}
	if run(&p, 1, swing); !p.Int8() {
		t.Fatal("no trial once the doubled hold is over")
	}
	run(&p, 500, link)
	// Once its hold is over (400 exchanges, past by now), a slow link
	// again switches at once.
	fast = false
	run(&p, PrecisionSettle, link)
	if !p.Int8() {
		t.Fatal("fp16 after the link slowed down again")
	}
}

// TestPrecisionRechecksAKeptInt8: a first exchange slowed by the start
// makes int8 look faster than it is, and the trial keeps it; the re-check
// after PrecisionHold int8 exchanges finds fp16 as fast and returns to it.
// On a link where int8 pays, every re-check keeps it, less often each
// time.
func TestPrecisionRechecksAKeptInt8(t *testing.T) {
	p := Precision{Floor: floor}
	p.Exchanged(100*time.Millisecond, 100*time.Millisecond) // the start
	busy := func(bool) time.Duration { return 40 * time.Millisecond }
	if run(&p, PrecisionSettle, busy); !p.Int8() {
		t.Fatal("the trial after a slow start was not kept")
	}
	if n := run(&p, PrecisionHold+PrecisionSettle, busy); n != PrecisionHold || p.Int8() {
		t.Fatalf("%d int8 exchanges before the re-check, now int8 %v: want %d and fp16", n, p.Int8(), PrecisionHold)
	}
	// From then on, trials after 100, 200, 400 fp16 exchanges, all failed.
	if n := run(&p, 1000, busy); n != 3*PrecisionSettle {
		t.Fatalf("%d int8 exchanges in 1000, want three failed trials of %d", n, PrecisionSettle)
	}
}
