package averaging

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/meshtrain/meshtrain/params"
)

func TestRadiusConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  RadiusConfig
		bad  []string // substrings, one per expected error
	}{
		{"zero takes defaults", RadiusConfig{}, nil},
		{"defaults", DefaultRadiusConfig(), nil},
		{"smallest", RadiusConfig{Window: 1, MinSamples: 1, Scale: 1.01, OutlierScale: 1.01}, nil},
		{"largest window", RadiusConfig{Window: MaxRadiusWindow}, nil},
		{"negative window", RadiusConfig{Window: -1}, []string{"window -1"}},
		{"window too large", RadiusConfig{Window: MaxRadiusWindow + 1}, []string{"window 4097"}},
		{"min samples above window", RadiusConfig{Window: 4}, []string{"min samples 8"}},
		{"negative min samples", RadiusConfig{MinSamples: -3}, []string{"min samples -3"}},
		{"scale one", RadiusConfig{Scale: 1}, []string{"scale 1 "}},
		{"negative scale", RadiusConfig{Scale: -2}, []string{"scale -2 "}},
		{"NaN scale", RadiusConfig{Scale: math.NaN(), OutlierScale: 6}, []string{"scale NaN ", "outlier scale 6"}},
		{"Inf scale", RadiusConfig{Scale: math.Inf(1), OutlierScale: math.Inf(1)}, []string{"scale +Inf ", "outlier scale +Inf"}},
		{"outlier below scale", RadiusConfig{Scale: 8}, []string{"outlier scale 6 "}},
		{"NaN outlier scale", RadiusConfig{OutlierScale: math.NaN()}, []string{"outlier scale NaN"}},
		{"every field", RadiusConfig{Window: -1, MinSamples: -1, Scale: 0.5, OutlierScale: 0.25},
			[]string{"window -1", "min samples -1", "scale 0.5 ", "outlier scale 0.25"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != (len(tc.bad) == 0) {
				t.Fatalf("Validate() = %v, want %d errors", err, len(tc.bad))
			}
			_, nerr := NewRadius(tc.cfg)
			if (nerr == nil) != (err == nil) {
				t.Errorf("NewRadius error %v, Validate %v", nerr, err)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrBadRadiusConfig) {
				t.Errorf("error does not wrap ErrBadRadiusConfig: %v", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.bad) {
				t.Errorf("%d errors, want %d: %v", len(lines), len(tc.bad), err)
			}
			for _, want := range tc.bad {
				if !strings.Contains(err.Error()+" ", want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

func TestRadiusDefaultsFilled(t *testing.T) {
	r, err := NewRadius(RadiusConfig{Scale: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultRadiusConfig()
	want.Scale = 3
	if got := r.Config(); got != want {
		t.Errorf("Config() = %+v, want %+v", got, want)
	}
}

func mustRadius(t testing.TB, c RadiusConfig) *Radius {
	t.Helper()
	r, err := NewRadius(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRadiusWarmUp(t *testing.T) {
	r := mustRadius(t, RadiusConfig{})
	if r.Median() != 0 || r.Len() != 0 || !math.IsInf(r.Radius(), 1) {
		t.Fatalf("empty: median %v, len %d, radius %v", r.Median(), r.Len(), r.Radius())
	}
	for i := range 7 {
		r.Observe(1)
		if !math.IsInf(r.Radius(), 1) {
			t.Fatalf("radius %v after %d samples, want +Inf", r.Radius(), i+1)
		}
		if r.Outlier(1e30) {
			t.Fatalf("outlier after %d samples", i+1)
		}
	}
	if r.Median() != 1 {
		t.Errorf("median %v before warm-up, want 1", r.Median())
	}
	r.Observe(1)
	if r.Radius() != 2 || r.Len() != 8 {
		t.Errorf("warm: radius %v, len %d; want 2, 8", r.Radius(), r.Len())
	}
	if r.Outlier(6) || !r.Outlier(6.0001) {
		t.Error("outlier threshold is not 6 * median")
	}
}

func TestRadiusIgnoresNonDistances(t *testing.T) {
	r := mustRadius(t, RadiusConfig{MinSamples: 1})
	for _, d := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1)} {
		r.Observe(d)
	}
	if r.Len() != 0 || r.Median() != 0 {
		t.Fatalf("non-distances stored: len %d, median %v", r.Len(), r.Median())
	}
	// Zeros in a warm window would make the radius zero and, being capped
	// at it, keep it there.
	r.Observe(1)
	for range 200 {
		r.Observe(0)
	}
	if r.Radius() != 2 {
		t.Errorf("radius %v after zero distances, want 2", r.Radius())
	}
}

func TestRadiusOutlierNonFinite(t *testing.T) {
	r := mustRadius(t, RadiusConfig{})
	for _, warm := range []bool{false, true} {
		if warm {
			for range 8 {
				r.Observe(1)
			}
		}
		for _, d := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1} {
			if !r.Outlier(d) {
				t.Errorf("warm %v: Outlier(%v) = false", warm, d)
			}
		}
		if r.Outlier(0) {
			t.Errorf("warm %v: Outlier(0) = true", warm)
		}
	}
}

// As training converges the distance between honest models shrinks; the
// radius must follow it down rather than stay at its early size, and must
// never clip the honest peers it follows.
func TestRadiusFollowsShrinkingDistances(t *testing.T) {
	r := mustRadius(t, RadiusConfig{})
	w := r.Config().Window
	d := make([]float64, 600)
	for i := range d {
		d[i] = 10 * math.Pow(0.99, float64(i))
	}
	for i, x := range d {
		if i >= 8 && r.Radius() < x {
			t.Fatalf("step %d: honest distance %v clipped by radius %v", i, x, r.Radius())
		}
		r.Observe(x)
		if i+1 >= w {
			// The window holds d[i-w+1..i], decreasing, so its lower
			// median is the (w/2)th smallest, d[i-w/2+1].
			if want := 2 * d[i-w/2+1]; r.Radius() != want {
				t.Fatalf("step %d: radius %v, want %v", i, r.Radius(), want)
			}
		}
	}
	if last := d[len(d)-1]; r.Radius() > 4*last {
		t.Errorf("radius %v stayed far above the current distance %v", r.Radius(), last)
	}
}

// An attacker whose distances make up 40% of the observations, in any
// order, cannot lift the median above the largest honest distance, and so
// cannot lift the radius above Scale times it.
func TestRadiusMinorityAttackerBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 100 {
		cfg := RadiusConfig{Window: 24 + rng.IntN(120)}
		cfg.MinSamples = 1 + rng.IntN(cfg.Window)
		r := mustRadius(t, cfg)
		lo := math.Pow(10, 4*rng.Float64()-2)
		hi := lo * (1 + 10*rng.Float64())
		// Two attacker slots in every block of five, in random places:
		// 40% overall, and at most half of any 24 consecutive
		// observations or of any prefix of eight or more (a prefix of
		// seven can hold four).
		var block [5]bool
		for i := range 1000 {
			if i%5 == 0 {
				block = [5]bool{true, true, false, false, false}
				rng.Shuffle(len(block), func(a, b int) { block[a], block[b] = block[b], block[a] })
			}
			if block[i%5] {
				// Huge, or just past the radius: the most a capped
				// observation can store.
				if rng.IntN(2) == 0 {
					r.Observe(math.MaxFloat64)
				} else {
					r.Observe(math.Nextafter(r.Radius(), math.Inf(1)))
				}
			} else {
				r.Observe(lo + (hi-lo)*rng.Float64())
			}
			if r.Len() < 8 {
				continue
			}
			if r.Median() > hi || (r.Len() >= cfg.MinSamples && r.Radius() > 2*hi) {
				t.Fatalf("trial %d (%+v), step %d: median %v, radius %v; honest max %v",
					trial, cfg, i, r.Median(), r.Radius(), hi)
			}
		}
	}
}

// An attacker with the whole window still has to fill half of it at the
// radius before the median moves: the radius grows Scale-fold per half
// window, not to whatever it is sent.
func TestRadiusMajorityAttackerGrowsGeometrically(t *testing.T) {
	r := mustRadius(t, RadiusConfig{})
	for range 64 {
		r.Observe(1)
	}
	for i := range 32 {
		r.Observe(1e30)
		if r.Radius() != 2 {
			t.Fatalf("attacker observation %d: radius %v, want 2", i+1, r.Radius())
		}
	}
	r.Observe(1e30)
	if r.Radius() != 4 {
		t.Errorf("after 33 attacker observations: radius %v, want 4", r.Radius())
	}
}

func TestRadiusCheck(t *testing.T) {
	r := mustRadius(t, RadiusConfig{})
	local := []float32{1, 1, 1, 1}
	at := func(d float32) []float32 { return []float32{1, 1 + d, 1, 1} }

	v, err := r.Check(local, at(1024))
	if err != nil || v.Outlier || v.Clip != 1 || !math.IsInf(v.Radius, 1) || v.Distance != 1024 {
		t.Fatalf("cold Check = %+v, %v", v, err)
	}
	for range 8 {
		r.Observe(1)
	}
	tests := []struct {
		d       float32
		clip    float64
		outlier bool
	}{
		{0, 1, false},
		{1, 1, false},
		{2, 1, false},
		{4, 0.5, false},
		{6, 1.0 / 3, false},
		{8, 0.25, true},
	}
	for _, tc := range tests {
		remote := at(tc.d)
		v, err := r.Check(local, remote)
		if err != nil {
			t.Fatal(err)
		}
		want := Verdict{Distance: float64(tc.d), Radius: 2, Clip: tc.clip, Outlier: tc.outlier}
		if v != want {
			t.Errorf("Check at %v = %+v, want %+v", tc.d, v, want)
		}
		// What the node does with the verdict: the clipped model lands on
		// the sphere, and ClipDelta agrees on the factor.
		if v.Clip < 1 {
			c, err := ClipDelta(remote, local, remote, v.Radius)
			if err != nil || c != v.Clip {
				t.Fatalf("ClipDelta = %v, %v; Check said %v", c, err, v.Clip)
			}
			if d, _ := Distance(local, remote); math.Abs(d-v.Radius) > 1e-6 {
				t.Errorf("clipped distance %v, radius %v", d, v.Radius)
			}
		}
	}
	if r.Len() != 8 {
		t.Errorf("Check observed: len %d", r.Len())
	}
}

func TestRadiusCheckErrors(t *testing.T) {
	r := mustRadius(t, RadiusConfig{})
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		name          string
		local, remote []float32
		want          error
	}{
		{"short remote", []float32{1, 2}, []float32{1}, ErrLength},
		{"NaN remote", []float32{1, 2}, []float32{1, nan}, params.ErrNonFinite},
		{"Inf remote", []float32{1, 2}, []float32{inf, 2}, params.ErrNonFinite},
		{"Inf both", []float32{inf, 2}, []float32{inf, 2}, params.ErrNonFinite},
		{"NaN local", []float32{nan, 2}, []float32{1, 2}, params.ErrNonFinite},
	}
	for _, tc := range tests {
		v, err := r.Check(tc.local, tc.remote)
		if !errors.Is(err, tc.want) || v != (Verdict{}) {
			t.Errorf("%s: Check = %+v, %v; want %v", tc.name, v, err, tc.want)
		}
	}
	// Finite float32 extremes are a (large) finite distance, not an error.
	big := float32(math.MaxFloat32)
	if v, err := r.Check([]float32{-big, -big}, []float32{big, big}); err != nil || math.IsInf(v.Distance, 0) {
		t.Errorf("Check of float32 extremes = %+v, %v", v, err)
	}
}

func TestRadiusNoAllocs(t *testing.T) {
	r := mustRadius(t, RadiusConfig{})
	rng := rand.New(rand.NewPCG(5, 5))
	local, remote := randVec(rng, 1000, 1), randVec(rng, 1000, 1)
	for range 100 {
		r.Observe(rng.Float64())
	}
	var sink float64
	checks := map[string]func(){
		"Check": func() {
			v, err := r.Check(local, remote)
			if err != nil {
				t.Fatal(err)
			}
			sink += v.Clip
		},
		"Radius":  func() { sink += r.Radius() },
		"Outlier": func() { _ = r.Outlier(sink) },
		"Observe": func() { r.Observe(rng.Float64()) },
	}
	for name, f := range checks {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s allocates %v times per call", name, a)
		}
	}
}

// BenchmarkCheck is a pre-merge check of the default MNIST MLP (235,146
// parameters): one distance pass over both vectors.
func BenchmarkCheck(b *testing.B) {
	const n = 235146
	rng := rand.New(rand.NewPCG(9, 9))
	local, remote := randVec(rng, n, 1), randVec(rng, n, 1)
	r := mustRadius(b, RadiusConfig{})
	for range 64 {
		r.Observe(1 + rng.Float64())
	}
	b.SetBytes(2 * 4 * n)
	for b.Loop() {
		if _, err := r.Check(local, remote); err != nil {
			b.Fatal(err)
		}
	}
}
