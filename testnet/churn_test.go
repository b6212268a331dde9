package testnet

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseShare(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		bad  bool
	}{
		{"0.2", 0.2, false}, {"20%", 0.2, false}, {" 20 % ", 0.2, false}, {"0", 0, false}, {"150%", 1.5, false},
		{"-5%", -0.05, false}, // a number: ChurnConfig.Validate judges the range
		{"", 0, true}, {"%", 0, true}, {"x", 0, true}, {"20%%", 0, true}, {"NaN", 0, true}, {"inf", 0, true},
	} {
		got, err := ParseShare(c.in)
		if (err != nil) != c.bad || (!c.bad && math.Abs(got-c.want) > 1e-12) {
			t.Errorf("ParseShare(%q) = %v, %v; want %v (error: %v)", c.in, got, err, c.want, c.bad)
		}
	}
}

func TestChurnConfigValidate(t *testing.T) {
	good := []ChurnConfig{{}, {Rate: 0.2, NeverReturn: 0.3}, {Rate: MaxChurnRate, NeverReturn: 1, Grace: time.Second}}
	for _, c := range good {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	// Every bad field is named at once.
	err := ChurnConfig{Rate: -0.1, NeverReturn: 1.5, Grace: -time.Second}.Validate()
	for _, want := range []string{"churn rate -0.1", "never-return share 1.5", "churn grace -1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
	if err := (ChurnConfig{Rate: math.NaN()}).Validate(); err == nil {
		t.Error("a NaN rate passed")
	}
	if err := (ChurnConfig{Rate: MaxChurnRate + 1}).Validate(); err == nil {
		t.Error("a rate above the cap passed")
	}
}

func TestConfigValidateNodesAndChurn(t *testing.T) {
	base := Config{Binary: "meshtrain", Dir: "tn", Nodes: MaxNodes}
	if err := base.Validate(); err != nil {
		t.Fatalf("%d nodes: %v", MaxNodes, err)
	}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"too many nodes", func(c *Config) { c.Nodes = MaxNodes + 1 }, "--nodes 257 not in [1,256]"},
		{"churn alone", func(c *Config) { c.Nodes, c.Churn.Rate = 1, 0.2 }, "at least 2 nodes"},
		{"churn detached", func(c *Config) { c.Churn.Rate, c.Detach = 0.2, true }, "no --detach"},
		{"churn on a WAN", func(c *Config) { c.Churn.Rate, c.WAN = 0.2, &WAN{} }, "no churn on an emulated WAN"},
		{"bad churn", func(c *Config) { c.Churn.NeverReturn = 2 }, "never-return share 2"},
		{"bad target", func(c *Config) { c.Target = 1.5 }, "target accuracy 1.5"},
		{"bad parallelism", func(c *Config) { c.StartParallel = -1 }, "start parallelism -1"},
	} {
		cfg := base
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// The mean gap is a minute over Rate x live nodes: the share per minute.
func TestChurnPlanRate(t *testing.T) {
	for _, c := range []struct {
		rate float64
		live int
	}{{0.2, 30}, {0.2, 100}, {1, 4}, {MaxChurnRate, 256}} {
		p := newChurnPlan(ChurnConfig{Rate: c.rate, Seed: 7}, c.live)
		const n = 20000
		var sum time.Duration
		for range n {
			g := p.gap(c.live)
			if g < 0 {
				t.Fatalf("negative gap %v", g)
			}
			sum += g
		}
		want := time.Minute.Seconds() / (c.rate * float64(c.live))
		if got := (sum / n).Seconds(); math.Abs(got/want-1) > 0.03 {
			t.Errorf("rate %v, %d live: mean gap %.3f s, want %.3f s", c.rate, c.live, got, want)
		}
	}
	if g := newChurnPlan(ChurnConfig{}, 4).gap(4); g != time.Minute {
		t.Errorf("no churn: gap %v, want a minute", g)
	}
}

// simulate runs a plan over events, bringing every returning leaver back to
// the pool at once, and checks the invariants of every event.
func simulate(t *testing.T, cfg ChurnConfig, nodes, events int) []churnEvent {
	t.Helper()
	p := newChurnPlan(cfg, nodes)
	live := make([]int, nodes)
	for i := range live {
		live[i] = i
	}
	seen := map[int]bool{}
	for _, i := range live {
		seen[i] = true
	}
	next := nodes
	var out []churnEvent
	for range events {
		pool := slices.Clone(p.pool)
		ev, ok := p.event(live)
		if !ok {
			t.Fatalf("no event with %d live", len(live))
		}
		if !slices.Contains(live, ev.Leave) {
			t.Fatalf("%+v: the leaver is not live (%v)", ev, live)
		}
		if slices.Contains(live, ev.Join) {
			t.Fatalf("%+v: the joiner is live", ev)
		}
		switch {
		case ev.Returning && !slices.Contains(pool, ev.Join):
			t.Fatalf("%+v: returns but was not in the pool %v", ev, pool)
		case !ev.Returning && (ev.Join != next || seen[ev.Join]):
			t.Fatalf("%+v: a newcomer should be node %d", ev, next)
		case !ev.Returning:
			next++
		}
		seen[ev.Join] = true
		if len(ev.Bootstrap) != min(bootstrapPeers, len(live)-1) || slices.Contains(ev.Bootstrap, ev.Leave) {
			t.Fatalf("%+v: bootstrap wants %d live nodes other than the leaver", ev, min(bootstrapPeers, len(live)-1))
		}
		for k, b := range ev.Bootstrap {
			if !slices.Contains(live, b) || slices.Contains(ev.Bootstrap[:k], b) {
				t.Fatalf("%+v: bootstrap through %d: not live or twice", ev, b)
			}
		}
		live = slices.DeleteFunc(live, func(i int) bool { return i == ev.Leave })
		live = append(live, ev.Join)
		if ev.Returns {
			p.back(ev.Leave)
		}
		out = append(out, ev)
	}
	return out
}

func TestChurnPlanEvents(t *testing.T) {
	for _, nodes := range []int{2, 3, 30} {
		simulate(t, ChurnConfig{Rate: 0.2, NeverReturn: 0.3, Seed: 1}, nodes, 2000)
	}
	if _, ok := newChurnPlan(ChurnConfig{Rate: 1}, 1).event([]int{0}); ok {
		t.Error("an event with one live node: nobody would be left to bootstrap through")
	}
}

func TestChurnPlanNeverReturn(t *testing.T) {
	for _, share := range []float64{0, 0.3, 1} {
		evs := simulate(t, ChurnConfig{Rate: 0.2, NeverReturn: share, Seed: 3}, 30, 5000)
		gone, returning := 0, 0
		for _, ev := range evs {
			if !ev.Returns {
				gone++
			}
			if ev.Returning {
				returning++
			}
		}
		if got := float64(gone) / float64(len(evs)); math.Abs(got-share) > 0.03 {
			t.Errorf("never-return %v: %.3f of the leavers never returned", share, got)
		}
		// A joiner comes back with chance 1/2 whenever the pool has one.
		want := returnChance
		if share == 1 {
			want = 0
		}
		if got := float64(returning) / float64(len(evs)); math.Abs(got-want) > 0.03 {
			t.Errorf("never-return %v: %.3f of the joiners returned, want %.2f", share, got, want)
		}
	}
}

func TestChurnPlanSeeded(t *testing.T) {
	cfg := ChurnConfig{Rate: 0.2, NeverReturn: 0.3, Seed: 42}
	a, b := simulate(t, cfg, 30, 500), simulate(t, cfg, 30, 500)
	if !slices.EqualFunc(a, b, eventEqual) {
		t.Error("the same seed drew different events")
	}
	cfg.Seed++
	if slices.EqualFunc(a, simulate(t, cfg, 30, 500), eventEqual) {
		t.Error("another seed drew the same events")
	}
	// The live nodes' order does not matter, only the set.
	p, q := newChurnPlan(cfg, 5), newChurnPlan(cfg, 5)
	ea, _ := p.event([]int{0, 1, 2, 3, 4})
	eb, _ := q.event([]int{4, 2, 0, 3, 1})
	if !eventEqual(ea, eb) {
		t.Errorf("order of the live nodes changed the draw: %+v, %+v", ea, eb)
	}
	ga, gb := newChurnPlan(cfg, 5).gap(30), newChurnPlan(cfg, 5).gap(30)
	if ga != gb {
		t.Errorf("the same seed drew gaps %v and %v", ga, gb)
	}
}

// How many nodes are live at an event (a joiner may still be starting)
// changes who leaves, not when events come or which bring a node back.
func TestChurnPlanFatesFollowTheSeed(t *testing.T) {
	cfg := ChurnConfig{Rate: 0.2, NeverReturn: 0.3, Seed: 42}
	p, q := newChurnPlan(cfg, 30), newChurnPlan(cfg, 30)
	p.back(100)
	q.back(100) // a pool that never runs dry
	live := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = 1000 + i
		}
		return out
	}
	for k := range 200 {
		gp, gq := p.gap(30), q.gap(30-k%3)
		if want := time.Duration(float64(gp) * 30 / float64(30-k%3)); (gq - want).Abs() > time.Microsecond {
			t.Fatalf("event %d: gap %v, then %v with fewer nodes live: want the same draw, scaled", k, gp, gq)
		}
		a, _ := p.event(live(30))
		b, _ := q.event(live(28 + k%3))
		if a.Returns != b.Returns || a.Returning != b.Returning {
			t.Fatalf("event %d: fates %+v and %+v differ with the live count", k, a, b)
		}
		if a.Returning {
			p.back(a.Join)
			q.back(b.Join)
		}
	}
}

func eventEqual(a, b churnEvent) bool {
	return a.Leave == b.Leave && a.Returns == b.Returns && a.Join == b.Join && a.Returning == b.Returning &&
		slices.Equal(a.Bootstrap, b.Bootstrap)
}
