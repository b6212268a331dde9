package averaging

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParseStaleness(t *testing.T) {
	// Expected weights are worked out by hand from the formulas.
	tests := []struct {
		spec  string
		canon string
		at    map[float64]float64 // s -> f(s)
	}{
		{"const", "const", map[float64]float64{0: 1, 1: 1, 1e9: 1}},
		{"  const  ", "const", map[float64]float64{0: 1, 7: 1}},
		{"poly:1", "poly:1", map[float64]float64{0: 1, 1: 0.5, 3: 0.25}},
		{"poly:0.5", "poly:0.5", map[float64]float64{0: 1, 3: 0.5, 99: 0.1}},
		{"poly: 2 ", "poly:2", map[float64]float64{1: 0.25, 9: 0.01}},
		{"poly:0", "poly:0", map[float64]float64{0: 1, 1e6: 1}},
		{"poly:-0", "poly:0", map[float64]float64{5: 1}},
		{"poly:1e0", "poly:1", map[float64]float64{1: 0.5}},
		{"exp:0.5", "exp:0.5", map[float64]float64{0: 1, 1: 0.5, 2: 0.25, 0.5: math.Sqrt(0.5)}},
		{"exp:1", "exp:1", map[float64]float64{0: 1, 1e9: 1}},
		{"exp:0.9", "exp:0.9", map[float64]float64{2: 0.81}},
		{"hinge:10,4", "hinge:10,4", map[float64]float64{0: 1, 4: 1, 4.5: 1.0 / 6, 5: 1.0 / 11}},
		{"hinge:1,0", "hinge:1,0", map[float64]float64{0: 1, 1: 0.5, 3: 0.25}},
		{"hinge:0,3", "hinge:0,3", map[float64]float64{100: 1}},
		{"hinge: 0.5 , 2", "hinge:0.5,2", map[float64]float64{4: 0.5}},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			f, err := ParseStaleness(tc.spec)
			if err != nil {
				t.Fatalf("ParseStaleness(%q): %v", tc.spec, err)
			}
			if got := f.String(); got != tc.canon {
				t.Errorf("String() = %q, want %q", got, tc.canon)
			}
			for s, want := range tc.at {
				if got := f.Weight(s); math.Abs(got-want) > 1e-12 {
					t.Errorf("Weight(%v) = %v, want %v", s, got, want)
				}
			}
		})
	}
}

func TestParseStalenessErrors(t *testing.T) {
	tests := []struct {
		spec, wantMsg string
	}{
		{"", "empty spec"},
		{"   ", "empty spec"},
		{"linear", `unknown function "linear"`},
		{"Poly:1", `unknown function "Poly"`},
		{":1", `unknown function ""`},
		{"const:1", "const takes 0 parameter(s)"},
		{"const:", "const takes 0 parameter(s)"},
		{"poly", "poly takes 1 parameter(s) (poly:p), got 0"},
		{"poly:", "parameter 1 of poly is empty"},
		{"poly:1,2", "poly takes 1 parameter(s) (poly:p), got 2"},
		{"poly:x", `"x" is not a number`},
		{"poly:NaN", "p must be finite"},
		{"poly:inf", "p must be finite"},
		{"poly:-1", "p must be >= 0"},
		{"poly:1e999", "is not a number"},
		{"exp", "exp takes 1 parameter(s) (exp:d), got 0"},
		{"exp:0.5,1", "got 2"},
		{"exp:0", "d must be in (0,1]"},
		{"exp:-0.5", "d must be in (0,1]"},
		{"exp:1.5", "d must be in (0,1]"},
		{"exp:nan", "d must be finite"},
		{"exp:-Inf", "d must be finite"},
		{"hinge", "hinge takes 2 parameter(s) (hinge:a,b), got 0"},
		{"hinge:10", "got 1"},
		{"hinge:10,4,1", "got 3"},
		{"hinge:10,", "parameter 2 of hinge is empty"},
		{"hinge:,4", "parameter 1 of hinge is empty"},
		{"hinge:-1,4", "a must be >= 0"},
		{"hinge:1,-4", "b must be >= 0"},
		{"hinge:NaN,4", "a must be finite"},
		{"hinge:1,+Inf", "b must be finite"},
		{"hinge:1;4", "hinge takes 2 parameter(s) (hinge:a,b), got 1"},
		{"hinge:1;4,2", `"1;4" is not a number`},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			f, err := ParseStaleness(tc.spec)
			if err == nil {
				t.Fatalf("ParseStaleness(%q) = %v, want error", tc.spec, f)
			}
			if !errors.Is(err, ErrBadStaleness) {
				t.Errorf("error %v does not wrap ErrBadStaleness", err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tc.wantMsg)
			}
			if f != nil {
				t.Errorf("got function %v alongside the error", f)
			}
		})
	}
}

func TestStalenessConstructorErrors(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		make func() (Staleness, error)
	}{
		{"poly NaN", func() (Staleness, error) { return PolyStaleness(nan) }},
		{"poly -Inf", func() (Staleness, error) { return PolyStaleness(-inf) }},
		{"poly negative", func() (Staleness, error) { return PolyStaleness(-1e-300) }},
		{"exp zero", func() (Staleness, error) { return ExpStaleness(0) }},
		{"exp above one", func() (Staleness, error) { return ExpStaleness(math.Nextafter(1, 2)) }},
		{"exp Inf", func() (Staleness, error) { return ExpStaleness(inf) }},
		{"hinge a Inf", func() (Staleness, error) { return HingeStaleness(inf, 0) }},
		{"hinge b NaN", func() (Staleness, error) { return HingeStaleness(1, nan) }},
		{"hinge b negative", func() (Staleness, error) { return HingeStaleness(1, -1) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.make(); !errors.Is(err, ErrBadStaleness) {
				t.Fatalf("err = %v, want ErrBadStaleness", err)
			}
		})
	}
}

// randomStaleness draws a staleness function with parameters spread over
// many orders of magnitude, edges included.
func randomStaleness(t testing.TB, r *rand.Rand) Staleness {
	t.Helper()
	mag := func() float64 {
		switch r.IntN(8) {
		case 0:
			return 0
		case 1:
			return 1e300
		}
		return math.Pow(10, r.Float64()*12-6)
	}
	var (
		f   Staleness
		err error
	)
	switch r.IntN(4) {
	case 0:
		f = ConstStaleness()
	case 1:
		f, err = PolyStaleness(mag())
	case 2:
		d := 1 - r.Float64() // (0, 1]
		if r.IntN(8) == 0 {
			d = []float64{1, math.SmallestNonzeroFloat64, 1e-300, math.Nextafter(1, 0)}[r.IntN(4)]
		}
		f, err = ExpStaleness(d)
	default:
		f, err = HingeStaleness(mag(), mag())
	}
	if err != nil {
		t.Fatalf("building a random staleness function: %v", err)
	}
	return f
}

// randomS draws a staleness value: mostly ordinary, sometimes extreme.
func randomS(r *rand.Rand) float64 {
	switch r.IntN(10) {
	case 0:
		return []float64{0, math.Inf(1), math.NaN(), -1, math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64}[r.IntN(7)]
	case 1:
		return r.Float64()
	}
	return math.Pow(10, r.Float64()*16-4)
}

func TestStalenessProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		f := randomStaleness(t, r)
		if w := f.Weight(0); w != 1 {
			t.Fatalf("%v: f(0) = %v, want 1", f, w)
		}
		if w := f.Weight(-3); w != 1 {
			t.Fatalf("%v: f(-3) = %v, want f(0) = 1", f, w)
		}
		if a, b := f.Weight(math.NaN()), f.Weight(math.Inf(1)); a != b {
			t.Fatalf("%v: f(NaN) = %v, want f(+Inf) = %v", f, a, b)
		}
		g, err := ParseStaleness(f.String())
		if err != nil || g != f {
			t.Fatalf("round trip of %v: got %v, %v", f, g, err)
		}
		for range 50 {
			s1, s2 := randomS(r), randomS(r)
			if math.IsNaN(s1) || math.IsNaN(s2) {
				continue
			}
			if s1 > s2 {
				s1, s2 = s2, s1
			}
			w1, w2 := f.Weight(s1), f.Weight(s2)
			for _, w := range []float64{w1, w2} {
				if !(w >= 0 && w <= 1) {
					t.Fatalf("%v: weight %v outside [0,1]", f, w)
				}
			}
			if increases(f, w1, w2) {
				t.Fatalf("%v: f(%v) = %v < f(%v) = %v: increasing", f, s1, w1, s2, w2)
			}
			// Neighbouring floats are where rounding could break monotonicity.
			if s := math.Nextafter(s1, math.Inf(1)); increases(f, w1, f.Weight(s)) {
				t.Fatalf("%v: f(%v) = %v > f(%v) = %v: increasing", f, s, f.Weight(s), s1, w1)
			}
		}
	}
}

// increases reports whether going from weight w1 to w2 at a larger s breaks
// monotonicity: exactly for const and hinge, beyond math.Exp's last-bit
// rounding (a few ulps) for poly and exp, as the Staleness doc says.
func increases(f Staleness, w1, w2 float64) bool {
	switch f.(type) {
	case polyStaleness, expStaleness:
		return w2 > w1*(1+4e-16)
	}
	return w2 > w1
}

func FuzzParseStaleness(f *testing.F) {
	for _, s := range []string{"const", "poly:0.5", "exp:0.9", "hinge:10,4", "hinge:0,0", "poly:", "exp:2", "", ":", ",", "poly:1e-320", "hinge:1e308,1e308"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		fn, err := ParseStaleness(spec)
		if err != nil {
			if !errors.Is(err, ErrBadStaleness) || fn != nil {
				t.Fatalf("ParseStaleness(%q) = %v, %v", spec, fn, err)
			}
			return
		}
		canon := fn.String()
		again, err := ParseStaleness(canon)
		if err != nil || again != fn || again.String() != canon {
			t.Fatalf("round trip of %q via %q: %v, %v", spec, canon, again, err)
		}
		if w := fn.Weight(0); w != 1 {
			t.Fatalf("%v: f(0) = %v", fn, w)
		}
		prev := 1.0
		for _, s := range []float64{0, 1e-9, 0.5, 1, 2, 10, 1e3, 1e9, 1e300, math.Inf(1)} {
			w := fn.Weight(s)
			if !(w >= 0 && w <= 1) || increases(fn, prev, w) {
				t.Fatalf("%v: f(%v) = %v after %v", fn, s, w, prev)
			}
			prev = w
		}
	})
}
