package merge

import (
	"maps"
	"math"
	"slices"
	"testing"
)

// counter is a deterministic intn: 0, 1, 2, ... mod k. It fails the test
// when asked for an index in an empty range.
func counter(t *testing.T) func(int) int {
	n := 0
	return func(k int) int {
		if k < 1 {
			t.Fatalf("intn(%d)", k)
		}
		i := n % k
		n++
		return i
	}
}

// noDraw is an intn for choices that must not be random.
func noDraw(t *testing.T) func(int) int {
	return func(k int) int {
		t.Errorf("intn(%d) called for a choice that is not random", k)
		return 0
	}
}

// draws returns how often each peer was chosen over n rounds with the
// counter, failing on a catch-up or an empty choice.
func draws(t *testing.T, cands []Candidate, own float64, last string, threshold float64, n int) map[string]int {
	t.Helper()
	intn := counter(t)
	got := map[string]int{}
	for range n {
		c := ChoosePartner(cands, nil, own, last, threshold, false, intn)
		if c.CatchUp || c.Peer == "" {
			t.Fatalf("got %+v, want an exchange partner", c)
		}
		got[c.Peer]++
	}
	return got
}

func TestChoosePartnerNone(t *testing.T) {
	for _, cands := range [][]Candidate{nil, {}} {
		if c := ChoosePartner(cands, nil, 100, "a", 1000, false, noDraw(t)); c != (Choice{}) {
			t.Errorf("no candidates: %+v, want none", c)
		}
	}
}

func TestChoosePartnerCatchUp(t *testing.T) {
	tests := []struct {
		name  string
		cands []Candidate
		own   float64
		last  string
		want  Choice
	}{
		{"the second most advanced", []Candidate{{"a", 1500}, {"b", 9000}, {"c", 3000}}, 1000, "", Choice{Peer: "c", CatchUp: true}},
		{"even the previous partner", []Candidate{{"a", 5000}, {"b", 9000}}, 1000, "a", Choice{Peer: "a", CatchUp: true}},
		{"the only one", []Candidate{{"a", 2001}}, 1000, "", Choice{Peer: "a", CatchUp: true}},
		{"ties: the later", []Candidate{{"a", 1500}, {"b", 9000}, {"c", 9000}}, 1000, "", Choice{Peer: "c", CatchUp: true}},
		{"the second most advanced before the first", []Candidate{{"a", 9000}, {"b", 1500}, {"c", 3000}}, 1000, "", Choice{Peer: "c", CatchUp: true}},
		{"with peers far behind too", []Candidate{{"a", 0}, {"b", 30000}, {"c", 30000}}, 10000, "", Choice{Peer: "c", CatchUp: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := ChoosePartner(tt.cands, nil, tt.own, tt.last, 1000, false, noDraw(t)); c != tt.want {
				t.Errorf("got %+v, want %+v", c, tt.want)
			}
		})
	}
	// Exactly the threshold ahead is not "more than": an exchange.
	got := draws(t, []Candidate{{"a", 2000}, {"b", 2000}}, 1000, "", 1000, 10)
	if got["a"] == 0 || got["b"] == 0 {
		t.Errorf("at the threshold: chose %v, want exchanges with both", got)
	}
	// One peer claiming far more than the others (a liar, or one far
	// faster) is not pulled: nobody else corroborates its claim.
	got = draws(t, []Candidate{{"a", 1e12}, {"b", 1500}, {"c", 1200}}, 1000, "", 1000, 30)
	if got["a"] == 0 || got["b"] == 0 || got["c"] == 0 {
		t.Errorf("one peer far ahead: chose %v, want exchanges with all three", got)
	}
}

// TestCatchUpSource: the second most advanced of the candidates, or the
// only one, whatever their order.
func TestCatchUpSource(t *testing.T) {
	tests := []struct {
		cands []Candidate
		want  string
	}{
		{[]Candidate{{"a", 5}}, "a"},
		{[]Candidate{{"a", 5}, {"b", 9}}, "a"},
		{[]Candidate{{"a", 9}, {"b", 5}}, "b"},
		{[]Candidate{{"a", 1}, {"b", 9}, {"c", 5}, {"d", 2}}, "c"},
		{[]Candidate{{"a", 9}, {"b", 1}, {"c", 2}, {"d", 5}}, "d"},
		{[]Candidate{{"a", 5}, {"b", 1}, {"c", 9}}, "a"},
		{[]Candidate{{"a", 7}, {"b", 7}, {"c", 1}}, "b"},
		{[]Candidate{{"a", 0}, {"b", 0}, {"c", 0}}, "b"},
	}
	for _, tt := range tests {
		if got := CatchUpSource(tt.cands); got.Peer != tt.want {
			t.Errorf("CatchUpSource(%v) = %v, want %s", tt.cands, got, tt.want)
		}
	}
}

// TestCredit: a model taken whole is credited its claim up to the highest
// claim another peer makes, or up to the catch-up threshold above ours.
func TestCredit(t *testing.T) {
	tests := []struct {
		name        string
		p, own, gap float64
		others      []float64
		want        float64
	}{
		{"corroborated", 500_000, 0, 60_000, []float64{510_000, 200_000}, 500_000},
		{"above every other claim", 1e12, 0, 60_000, []float64{510_000, 200_000}, 510_000},
		{"nobody else heard of: a merge's bound", 1e12, 1000, 60_000, nil, 61_000},
		{"others below the merge's bound", 1e12, 1000, 60_000, []float64{30_000}, 61_000},
		{"under the merge's bound", 50_000, 1000, 60_000, nil, 50_000},
		{"a NaN claim is no claim", 1e12, 1000, 60_000, []float64{math.NaN()}, 61_000},
	}
	for _, tt := range tests {
		if got := Credit(tt.p, tt.own, tt.gap, slices.Values(tt.others)); got != tt.want {
			t.Errorf("%s: Credit(%v, %v, %v, %v) = %v, want %v", tt.name, tt.p, tt.own, tt.gap, tt.others, got, tt.want)
		}
	}
}

// TestChoosePartnerStarting: a starting node (no catch-up judged since it
// started) also pulls from a peer with more than twice its progress, however
// small the gap in samples; once started, or with catch-up off, it
// exchanges.
func TestChoosePartnerStarting(t *testing.T) {
	cands := []Candidate{{"a", 5000}, {"b", 6000}, {"c", 4000}}
	tests := []struct {
		name      string
		own       float64
		starting  bool
		threshold float64
		want      Choice // zero: an exchange, not a catch-up
	}{
		{"untrained newcomer", 0, true, 60000, Choice{Peer: "a", CatchUp: true}},
		{"under half the source", 2499, true, 60000, Choice{Peer: "a", CatchUp: true}},
		{"exactly half", 2500, true, 60000, Choice{}},
		{"under half the best only", 2999, true, 60000, Choice{}},
		{"above half", 4500, true, 60000, Choice{}},
		{"started already", 0, false, 60000, Choice{}},
		{"catch-up off", 0, true, 0, Choice{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ChoosePartner(cands, nil, tt.own, "", tt.threshold, tt.starting, counter(t))
			if tt.want.CatchUp {
				if c != tt.want {
					t.Errorf("got %+v, want %+v", c, tt.want)
				}
			} else if c.CatchUp || c.Peer == "" {
				t.Errorf("got %+v, want an exchange", c)
			}
		})
	}
	// Nobody has progress yet (a swarm's first round): an exchange.
	zero := []Candidate{{"a", 0}, {"b", 0}}
	if c := ChoosePartner(zero, nil, 0, "", 60000, true, counter(t)); c.CatchUp || c.Peer == "" {
		t.Errorf("all at zero: got %+v, want an exchange", c)
	}
}

func TestChoosePartnerRandom(t *testing.T) {
	abcd := []Candidate{{"a", 1000}, {"b", 1200}, {"c", 900}, {"d", 1100}}
	tests := []struct {
		name      string
		cands     []Candidate
		own       float64
		last      string
		threshold float64
		want      []string // every one chosen, and nothing else
	}{
		{"all, no previous", abcd, 1000, "", 1000, []string{"a", "b", "c", "d"}},
		{"not the previous", abcd, 1000, "b", 1000, []string{"a", "c", "d"}},
		{"previous not a candidate", abcd, 1000, "z", 1000, []string{"a", "b", "c", "d"}},
		{"two: always the other", abcd[:2], 1000, "a", 1000, []string{"b"}},
		{"only the previous", abcd[:1], 1000, "a", 1000, []string{"a"}},
		// A peer far behind stays a candidate: what we know of its progress
		// may be stale, and a peer never chosen is never judged.
		{"far behind ones too", []Candidate{{"a", 0}, {"b", 9500}, {"c", 10200}, {"d", 8000}}, 10000, "", 2000,
			[]string{"a", "b", "c", "d"}},
		{"far behind and the previous", []Candidate{{"a", 0}, {"b", 9500}, {"c", 10200}}, 10000, "b", 1000,
			[]string{"a", "c"}},
		{"threshold 0: no catch-up, none left out", []Candidate{{"a", 0}, {"b", 1e12}, {"c", 5000}}, 5000, "", 0,
			[]string{"a", "b", "c"}},
		{"threshold 0, not the previous", []Candidate{{"a", 0}, {"b", 1e12}, {"c", 5000}}, 5000, "c", 0,
			[]string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.cands)
			got := draws(t, tt.cands, tt.own, tt.last, tt.threshold, 40*len(tt.cands))
			if chosen := slices.Sorted(maps.Keys(got)); !slices.Equal(chosen, tt.want) {
				t.Errorf("chose %v (%v), want each of %v", chosen, got, tt.want)
			}
			if !slices.Equal(tt.cands, before) {
				t.Errorf("candidates changed: %v, was %v", tt.cands, before)
			}
		})
	}
}

// TestChoosePartnerUniform: the draw is uniform over the pool (intn gets
// its size and its index is used as is).
func TestChoosePartnerUniform(t *testing.T) {
	cands := []Candidate{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"e", 5}}
	got := draws(t, cands, 3, "c", 1000, 400)
	for _, p := range []string{"a", "b", "d", "e"} {
		if got[p] != 100 {
			t.Errorf("chose %v, want each of a, b, d, e 100 times", got)
			break
		}
	}
}

// TestCatchUpDue: the rule a starting node also applies to a model a peer
// sends it unasked (such a model is pulled, not merged): past the
// threshold always, past twice our progress only while starting, never
// with the threshold at 0.
func TestCatchUpDue(t *testing.T) {
	tests := []struct {
		best, own, threshold float64
		starting, want       bool
	}{
		{125000, 0, 60000, true, true},
		{125000, 62000, 60000, true, true},  // past the threshold
		{125000, 66000, 60000, true, false}, // neither
		{125000, 62500, 60000, false, true}, // past the threshold, started
		{100, 40, 60000, true, true},        // twice ours, starting
		{100, 40, 60000, false, false},      // twice ours, started
		{100, 50, 60000, true, false},       // exactly twice
		{125000, 0, 0, true, false},         // catch-up off
		{0, 0, 60000, true, false},          // nobody has trained
	}
	for _, tt := range tests {
		if got := CatchUpDue(tt.best, tt.own, tt.threshold, tt.starting); got != tt.want {
			t.Errorf("CatchUpDue(best %v, own %v, threshold %v, starting %v) = %v, want %v",
				tt.best, tt.own, tt.threshold, tt.starting, got, tt.want)
		}
	}
}

func TestTakeWhole(t *testing.T) {
	tests := []struct {
		name      string
		p, own    float64
		threshold float64
		known     []float64
		want      bool
	}{
		{"more than twice ours, nobody known", 300, 100, 60000, nil, true},
		{"more than twice ours, the known peers no further", 300, 100, 60000, []float64{280, 500}, true},
		{"a claim ahead of the source: no other peer corroborates it", 300, 100, 60000, []float64{250, 500}, false},
		{"a claim far above every known peer's", 1e12, 100, 60000, []float64{1e12, 100_000, 90_000}, false},
		{"a claim far above the only known peer's", 1e12, 100, 60000, []float64{1e12}, true},
		{"two known peers more than twice the model", 300, 100, 60000, []float64{650, 700}, false},
		{"one known peer more than twice the model: uncorroborated", 300, 100, 60000, []float64{290, 700}, true},
		{"a known peer the threshold ahead of the model", 100000, 0, 60000, []float64{170000}, false},
		{"not twice ours", 200, 100, 60000, nil, false},
		{"the threshold ahead", 70000, 9000, 60000, []float64{75000}, true},
		{"catch-up off", 300, 0, 0, nil, false},
	}
	for _, tt := range tests {
		known := func(yield func(float64) bool) {
			for _, q := range tt.known {
				if !yield(q) {
					return
				}
			}
		}
		if got := TakeWhole(tt.p, tt.own, tt.threshold, known); got != tt.want {
			t.Errorf("%s: TakeWhole(%v, %v, %v, %v) = %v, want %v", tt.name, tt.p, tt.own, tt.threshold, tt.known, got, tt.want)
		}
	}
}

// TestClaimCut: a cut is worth counting when it exceeds the threshold.
func TestClaimCut(t *testing.T) {
	for _, tt := range []struct {
		claim, credited, gap float64
		want                 bool
	}{
		{1e12, 61000, 60000, true},
		{105_000, 100_000, 60000, false},
		{160_000, 100_000, 60000, false},
		{160_001, 100_000, 60000, true},
		{100, 100, 60000, false},
	} {
		if got := ClaimCut(tt.claim, tt.credited, tt.gap); got != tt.want {
			t.Errorf("ClaimCut(%v, %v, %v) = %v, want %v", tt.claim, tt.credited, tt.gap, got, tt.want)
		}
	}
}

// TestChoosePartnerSourceAmongHeard: the catch-up source is the second most
// advanced of every peer heard of, and it is pulled only when we can reach
// it: one peer we reach that claims far more than the peers we heard of
// (but cannot reach yet) is not pulled.
func TestChoosePartnerSourceAmongHeard(t *testing.T) {
	heard := []Candidate{{"a", 1e12}, {"b", 1500}, {"c", 1200}}
	if c := ChoosePartner([]Candidate{{"a", 1e12}}, heard, 1000, "", 1000, false, counter(t)); c != (Choice{Peer: "a"}) {
		t.Errorf("the liar the only peer reached: got %+v, want an exchange with it", c)
	}
	heard = []Candidate{{"a", 9000}, {"b", 8000}, {"c", 1200}}
	if c := ChoosePartner([]Candidate{{"a", 9000}, {"c", 1200}}, heard, 1000, "", 1000, false, counter(t)); c.CatchUp {
		t.Errorf("the source not reached: got %+v, want an exchange", c)
	}
	if c := ChoosePartner([]Candidate{{"b", 8000}, {"c", 1200}}, heard, 1000, "", 1000, false, noDraw(t)); c != (Choice{Peer: "b", CatchUp: true}) {
		t.Errorf("the source reached: got %+v, want a pull of b", c)
	}
	// The source not reached: the most advanced peer reached that claims
	// no more stands in for it, if it is far enough ahead too.
	heard = []Candidate{{"a", 9000}, {"b", 8000}, {"c", 7000}, {"d", 6500}, {"e", 1200}}
	if c := ChoosePartner([]Candidate{{"a", 9000}, {"d", 6500}, {"c", 7000}, {"e", 1200}}, heard, 1000, "", 1000, false, noDraw(t)); c != (Choice{Peer: "c", CatchUp: true}) {
		t.Errorf("the source not reached: got %+v, want a pull of c", c)
	}
}
