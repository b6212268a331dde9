package averaging

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Staleness maps how stale a received model is (s, in the receiver's local
// steps) to a decay factor in [0, 1] that scales the merge weight.
//
// Every implementation here satisfies: Weight(0) = 1; Weight(s) is in
// [0, 1] for every input; Weight is non-increasing in s (exactly for const
// and hinge; poly and exp go through math.Exp, which is not correctly
// rounded, so between neighbouring s they may rise by an ulp, a relative
// 2e-16, which no merge can notice). Inputs the
// math does not define are mapped so those rules still hold: s < 0 counts as
// 0 (a model from the future is not fresher than fresh), and NaN counts as
// +Inf (a model of unknown age is trusted least).
//
// String returns the canonical form accepted by ParseStaleness, so
// ParseStaleness(f.String()) gives back f.
type Staleness interface {
	Weight(s float64) float64
	String() string
}

// Names of the staleness functions as written in ParseStaleness specs.
const (
	StalenessConst = "const"
	StalenessPoly  = "poly"
	StalenessExp   = "exp"
	StalenessHinge = "hinge"
)

// ParseStaleness parses a staleness function spec:
//
//	const       f(s) = 1 (no decay: plain gossip averaging)
//	poly:p      f(s) = (1+s)^-p, p >= 0
//	exp:d       f(s) = d^s, 0 < d <= 1
//	hinge:a,b   f(s) = 1 if s <= b, else 1/(a(s-b)+1), a >= 0, b >= 0
//
// Parameters are finite decimal numbers; surrounding spaces are ignored.
// Errors wrap ErrBadStaleness and name the offending part.
func ParseStaleness(spec string) (Staleness, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, fmt.Errorf("%w: empty spec (want const, poly:p, exp:d or hinge:a,b)", ErrBadStaleness)
	}
	name, args, hasArgs := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	var fields []string
	if hasArgs {
		fields = strings.Split(args, ",")
	}
	want := map[string]int{StalenessConst: 0, StalenessPoly: 1, StalenessExp: 1, StalenessHinge: 2}
	n, ok := want[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q: unknown function %q (want const, poly:p, exp:d or hinge:a,b)", ErrBadStaleness, spec, name)
	}
	if len(fields) != n {
		usage := map[string]string{StalenessConst: "const", StalenessPoly: "poly:p", StalenessExp: "exp:d", StalenessHinge: "hinge:a,b"}[name]
		return nil, fmt.Errorf("%w: %q: %s takes %d parameter(s) (%s), got %d", ErrBadStaleness, spec, name, n, usage, len(fields))
	}
	vals := make([]float64, n)
	for i, f := range fields {
		f = strings.TrimSpace(f)
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			if f == "" {
				return nil, fmt.Errorf("%w: %q: parameter %d of %s is empty", ErrBadStaleness, spec, i+1, name)
			}
			return nil, fmt.Errorf("%w: %q: parameter %d of %s: %q is not a number", ErrBadStaleness, spec, i+1, name, f)
		}
		vals[i] = v
	}
	var (
		fn  Staleness
		err error
	)
	switch name {
	case StalenessConst:
		fn = ConstStaleness()
	case StalenessPoly:
		fn, err = PolyStaleness(vals[0])
	case StalenessExp:
		fn, err = ExpStaleness(vals[0])
	case StalenessHinge:
		fn, err = HingeStaleness(vals[0], vals[1])
	}
	if err != nil {
		return nil, fmt.Errorf("%w (in %q)", err, spec)
	}
	return fn, nil
}

// checkParam reports a parameter that is NaN, infinite or below min.
func checkParam(fn, param string, v, min float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%w: %s: %s must be finite, got %v", ErrBadStaleness, fn, param, v)
	case v < min:
		return fmt.Errorf("%w: %s: %s must be >= %v, got %v", ErrBadStaleness, fn, param, min, v)
	}
	return nil
}

// formatParam writes a parameter so that ParseFloat returns the same value.
func formatParam(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// normStaleness maps the inputs the formulas leave undefined onto the
// documented ones: negative to 0, NaN to +Inf.
func normStaleness(s float64) float64 {
	switch {
	case math.IsNaN(s):
		return math.Inf(1)
	case s < 0:
		return 0
	}
	return s
}

type constStaleness struct{}

// ConstStaleness returns f(s) = 1: every model counts the same whatever its
// age (AD-PSGD-style gossip averaging).
func ConstStaleness() Staleness { return constStaleness{} }

func (constStaleness) Weight(float64) float64 { return 1 }
func (constStaleness) String() string         { return StalenessConst }

type polyStaleness struct{ p float64 }

// PolyStaleness returns f(s) = (1+s)^-p for a finite p >= 0 (p = 0 is const).
func PolyStaleness(p float64) (Staleness, error) {
	if err := checkParam("poly", "p", p, 0); err != nil {
		return nil, err
	}
	return polyStaleness{p: p + 0}, nil // + 0 turns -0 into 0 so String is canonical
}

func (f polyStaleness) Weight(s float64) float64 {
	if f.p == 0 {
		return 1
	}
	// exp(-p log1p(s)) rather than math.Pow(1+s, -p): Pow's last-bit errors
	// make it increase between neighbouring s about once in a thousand
	// draws, while this form inherits only math.Exp's rare one-ulp wobble.
	return clamp01(math.Exp(-f.p * math.Log1p(normStaleness(s))))
}

func (f polyStaleness) String() string { return StalenessPoly + ":" + formatParam(f.p) }

type expStaleness struct{ d float64 }

// ExpStaleness returns f(s) = d^s for 0 < d <= 1 (d = 1 is const). A model
// s steps old counts d^s as much as a fresh one.
func ExpStaleness(d float64) (Staleness, error) {
	if err := checkParam("exp", "d", d, math.Inf(-1)); err != nil {
		return nil, err
	}
	if d <= 0 || d > 1 {
		return nil, fmt.Errorf("%w: exp: d must be in (0,1], got %v", ErrBadStaleness, d)
	}
	return expStaleness{d: d}, nil
}

func (f expStaleness) Weight(s float64) float64 {
	if f.d == 1 {
		return 1
	}
	// s * log(d) is exactly monotone in s (one correctly rounded multiply),
	// so only math.Exp's rounding stands between this and a monotone f.
	return clamp01(math.Exp(normStaleness(s) * math.Log(f.d)))
}

func (f expStaleness) String() string { return StalenessExp + ":" + formatParam(f.d) }

type hingeStaleness struct{ a, b float64 }

// HingeStaleness returns f(s) = 1 for s <= b and 1/(a(s-b)+1) beyond, for
// finite a, b >= 0: models up to b steps old count fully, older ones decay
// hyperbolically at rate a (a = 0 is const).
func HingeStaleness(a, b float64) (Staleness, error) {
	if err := checkParam("hinge", "a", a, 0); err != nil {
		return nil, err
	}
	if err := checkParam("hinge", "b", b, 0); err != nil {
		return nil, err
	}
	return hingeStaleness{a: a + 0, b: b + 0}, nil
}

func (f hingeStaleness) Weight(s float64) float64 {
	s = normStaleness(s)
	// a == 0 is tested first because 0 * (+Inf - b) is NaN.
	if f.a == 0 || s <= f.b {
		return 1
	}
	return clamp01(1 / (f.a*(s-f.b) + 1))
}

func (f hingeStaleness) String() string {
	return StalenessHinge + ":" + formatParam(f.a) + "," + formatParam(f.b)
}

// clamp01 keeps a decay inside [0, 1] whatever rounding does at the edges.
func clamp01(x float64) float64 {
	switch {
	case x > 1:
		return 1
	case x >= 0:
		return x
	}
	return 0 // negative or NaN
}
