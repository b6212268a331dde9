package averaging

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/meshtrain/meshtrain/params"
)

func TestStalenessSteps(t *testing.T) {
	nan, inf := params.Progress(math.NaN()), params.Progress(math.Inf(1))
	tests := []struct {
		name          string
		local, remote params.Progress
		batch         int
		want          float64
		wantErr       error
	}{
		{"remote behind", 6400, 3200, 64, 50, nil},
		{"fractional steps", 100, 68, 64, 0.5, nil},
		{"equal", 640, 640, 32, 0, nil},
		{"remote ahead is fresh", 100, 1e6, 64, 0, nil},
		{"both zero", 0, 0, 1, 0, nil},
		{"batch zero", 10, 0, 0, 0, ErrBadBatch},
		{"batch negative", 10, 0, -64, 0, ErrBadBatch},
		{"local NaN", nan, 0, 64, 0, ErrBadProgress},
		{"remote NaN", 0, nan, 64, 0, ErrBadProgress},
		{"local Inf", inf, 0, 64, 0, ErrBadProgress},
		{"remote Inf", 0, inf, 64, 0, ErrBadProgress},
		{"remote negative", 10, -1, 64, 0, ErrBadProgress},
		{"local negative", -5, 0, 64, 0, ErrBadProgress},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StalenessSteps(tc.local, tc.remote, tc.batch)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("s = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMix(t *testing.T) {
	tests := []struct {
		name      string
		dst, src  []float32
		a         float64
		want      []float32
		wantErr   error
		errSubstr string
	}{
		{"half", []float32{0, 2, -4, 10, 1}, []float32{2, 2, 4, -10, 2}, 0.5, []float32{1, 2, 0, 0, 1.5}, nil, ""},
		{"quarter", []float32{0, 4, 8, 0, 0, 0, 0, 0, 4}, []float32{4, 0, 0, 8, 0, 0, 0, 0, 0}, 0.25, []float32{1, 3, 6, 2, 0, 0, 0, 0, 3}, nil, ""},
		{"zero weight", []float32{1, 2, 3}, []float32{9, 9, 9}, 0, []float32{1, 2, 3}, nil, ""},
		{"full weight", []float32{1, 2, 3}, []float32{9, -9, 0.5}, 1, []float32{9, -9, 0.5}, nil, ""},
		{"empty", []float32{}, []float32{}, 0.5, []float32{}, nil, ""},
		{"length mismatch", []float32{1, 2}, []float32{1}, 0.5, []float32{1, 2}, ErrLength, "mix of 1 into 2"},
		{"negative weight", []float32{1}, []float32{2}, -0.1, []float32{1}, ErrBadWeight, "-0.1"},
		{"weight above one", []float32{1}, []float32{2}, 1.5, []float32{1}, ErrBadWeight, "1.5"},
		{"NaN weight", []float32{1}, []float32{2}, math.NaN(), []float32{1}, ErrBadWeight, "NaN"},
		{"Inf weight", []float32{1}, []float32{2}, math.Inf(1), []float32{1}, ErrBadWeight, "Inf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Mix(tc.dst, tc.src, tc.a)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.errSubstr) {
				t.Errorf("error %q does not mention %q", err, tc.errSubstr)
			}
			if !slices.Equal(tc.dst, tc.want) {
				t.Errorf("dst = %v, want %v", tc.dst, tc.want)
			}
		})
	}
}

// TestMixMatchesFormula checks the unrolled loop against the plain formula
// in float64 for every length around the unroll width.
func TestMixMatchesFormula(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := range 23 {
		a := r.Float64()
		dst, src := randVec(r, n, 10), randVec(r, n, 10)
		want := make([]float64, n)
		for i := range n {
			want[i] = (1-a)*float64(dst[i]) + a*float64(src[i])
		}
		if err := Mix(dst, src, a); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if math.Abs(float64(dst[i])-want[i]) > 1e-5 {
				t.Fatalf("n=%d a=%v: dst[%d] = %v, want %v", n, a, i, dst[i], want[i])
			}
		}
	}
}

func TestMixIdenticalIsIdentity(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		n := r.IntN(100)
		x := randVec(r, n, math.Pow(10, r.Float64()*60-30))
		before := slices.Clone(x)
		if err := Mix(x, slices.Clone(x), r.Float64()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(x, before) {
			t.Fatalf("merging a vector with itself changed it: %v -> %v", before, x)
		}
	}
}

func TestMergerValidate(t *testing.T) {
	if err := DefaultMerger().Validate(); err != nil {
		t.Fatalf("default merger invalid: %v", err)
	}
	f, err := ParseStaleness(DefaultStaleness)
	if err != nil {
		t.Fatal(err)
	}
	if d := DefaultMerger(); d.Staleness != f || d.Alpha != DefaultAlpha || d.Momentum != DefaultMomentumPolicy {
		t.Errorf("DefaultMerger() = %+v, want alpha %v, %v, %v", d, DefaultAlpha, f, DefaultMomentumPolicy)
	}
	for _, alpha := range []float64{0, -0.5, 1.0000001, math.NaN(), math.Inf(1)} {
		m := DefaultMerger()
		m.Alpha = alpha
		if err := m.Validate(); !errors.Is(err, ErrBadAlpha) {
			t.Errorf("alpha %v: err = %v, want ErrBadAlpha", alpha, err)
		}
	}
	for _, alpha := range []float64{1, 0.5, 1e-9} {
		m := DefaultMerger()
		m.Alpha = alpha
		if err := m.Validate(); err != nil {
			t.Errorf("alpha %v: %v", alpha, err)
		}
	}
	// Every bad field is reported at once.
	err = Merger{Alpha: 2, Momentum: 7}.Validate()
	for _, want := range []error{ErrBadAlpha, ErrBadStaleness, ErrBadMomentumPolicy} {
		if !errors.Is(err, want) {
			t.Errorf("Validate() = %v, missing %v", err, want)
		}
	}
}

// badStaleness is a foreign Staleness that breaks the [0, 1] contract.
type badStaleness float64

func (b badStaleness) Weight(float64) float64 { return float64(b) }
func (badStaleness) String() string           { return "bad" }

func TestMergerWeight(t *testing.T) {
	hinge, _ := HingeStaleness(1, 2)
	m := Merger{Alpha: 0.8, Staleness: hinge}
	for s, want := range map[float64]float64{0: 0.8, 2: 0.8, 3: 0.4, 6: 0.16} {
		got, err := m.Weight(s)
		if err != nil || math.Abs(got-want) > 1e-12 {
			t.Errorf("Weight(%v) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, b := range []badStaleness{-0.1, 1.1, badStaleness(math.NaN())} {
		if _, err := (Merger{Alpha: 0.5, Staleness: b}).Weight(1); !errors.Is(err, ErrBadStaleness) {
			t.Errorf("staleness returning %v: err = %v, want ErrBadStaleness", float64(b), err)
		}
	}
	if _, err := (Merger{Alpha: 0}).Weight(0); !errors.Is(err, ErrBadAlpha) {
		t.Errorf("invalid merger: err = %v", err)
	}
}

var fpA = params.NewFingerprint(params.MustLayout(params.TensorSpec{Name: "w", Shape: []int{4}}), "synthetic", "test")

// mergeCase builds a local side and a remote snapshot over 4 parameters.
func mergeCase() (Local, params.Snapshot) {
	p := params.Progress(6400)
	local := Local{
		Fingerprint: fpA,
		Params:      []float32{0, 2, 4, 8},
		Momentum:    []float32{1, -1, 2, 0},
		Progress:    &p,
		Batch:       64,
	}
	remote := params.Snapshot{Fingerprint: fpA, Step: 10, Progress: 3200, Params: []float32{4, 2, 0, -8}}
	return local, remote
}

func TestMerge(t *testing.T) {
	hinge, _ := HingeStaleness(1, 49) // s = 50 steps gives f = 1/2
	m := Merger{Alpha: 0.5, Staleness: hinge, Momentum: MomentumMix}
	local, remote := mergeCase()
	out, err := m.Merge(local, remote, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Outcome{Staleness: 50, Decay: 0.5, Weight: 0.25, ProgressBefore: 6400, ProgressAfter: 5600}
	if out != want {
		t.Errorf("outcome = %+v, want %+v", out, want)
	}
	if w := []float32{1, 2, 3, 4}; !slices.Equal(local.Params, w) {
		t.Errorf("params = %v, want %v", local.Params, w)
	}
	if mo := []float32{0.75, -0.75, 1.5, 0}; !slices.Equal(local.Momentum, mo) {
		t.Errorf("momentum = %v, want %v", local.Momentum, mo)
	}
	if *local.Progress != 5600 {
		t.Errorf("progress = %v, want 5600", *local.Progress)
	}
	if remote.Params[0] != 4 || remote.Progress != 3200 {
		t.Errorf("remote snapshot was written: %+v", remote)
	}

	// With the remote momentum given, mix blends it like the parameters.
	local, remote = mergeCase()
	if _, err := m.Merge(local, remote, []float32{5, 3, -2, 4}); err != nil {
		t.Fatal(err)
	}
	if mo := []float32{2, 0, 1, 1}; !slices.Equal(local.Momentum, mo) {
		t.Errorf("momentum mixed with remote = %v, want %v", local.Momentum, mo)
	}

	// A trainer without momentum passes nil.
	local, remote = mergeCase()
	local.Momentum = nil
	if _, err := m.Merge(local, remote, nil); err != nil {
		t.Fatalf("merge without momentum: %v", err)
	}
}

func TestMergeFullyDecayed(t *testing.T) {
	e, _ := ExpStaleness(1e-300)
	local, remote := mergeCase()
	before := slices.Clone(local.Params)
	out, err := Merger{Alpha: 0.5, Staleness: e, Momentum: MomentumReset}.Merge(local, remote, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Weight != 0 || !slices.Equal(local.Params, before) || *local.Progress != 6400 {
		t.Errorf("a model 50 steps old under exp:1e-300 changed the local one: %+v %v", out, local.Params)
	}
	if local.Momentum[0] != 1 {
		t.Errorf("reset cleared momentum although nothing was merged: %v", local.Momentum)
	}
}

func TestMergeErrors(t *testing.T) {
	other := params.NewFingerprint(params.MustLayout(params.TensorSpec{Name: "w", Shape: []int{4}}), "mnist", "test")
	tests := []struct {
		name    string
		edit    func(m *Merger, l *Local, r *params.Snapshot, rm *[]float32)
		wantErr error
	}{
		{"invalid merger", func(m *Merger, _ *Local, _ *params.Snapshot, _ *[]float32) { m.Alpha = 0 }, ErrBadAlpha},
		{"fingerprint mismatch", func(_ *Merger, _ *Local, r *params.Snapshot, _ *[]float32) { r.Fingerprint = other }, ErrFingerprint},
		{"local fingerprint unset", func(_ *Merger, l *Local, _ *params.Snapshot, _ *[]float32) { l.Fingerprint = params.Fingerprint{} }, ErrFingerprint},
		{"nil progress", func(_ *Merger, l *Local, _ *params.Snapshot, _ *[]float32) { l.Progress = nil }, ErrBadProgress},
		{"remote too short", func(_ *Merger, _ *Local, r *params.Snapshot, _ *[]float32) { r.Params = r.Params[:3] }, ErrLength},
		{"remote too long", func(_ *Merger, _ *Local, r *params.Snapshot, _ *[]float32) { r.Params = append(r.Params, 1) }, ErrLength},
		{"local momentum length", func(_ *Merger, l *Local, _ *params.Snapshot, _ *[]float32) { l.Momentum = l.Momentum[:1] }, ErrLength},
		{"remote momentum length", func(_ *Merger, _ *Local, _ *params.Snapshot, rm *[]float32) { *rm = []float32{1} }, ErrLength},
		{"batch zero", func(_ *Merger, l *Local, _ *params.Snapshot, _ *[]float32) { l.Batch = 0 }, ErrBadBatch},
		{"remote progress NaN", func(_ *Merger, _ *Local, r *params.Snapshot, _ *[]float32) { r.Progress = params.Progress(math.NaN()) }, ErrBadProgress},
		{"remote progress negative", func(_ *Merger, _ *Local, r *params.Snapshot, _ *[]float32) { r.Progress = -1 }, ErrBadProgress},
		{"local progress Inf", func(_ *Merger, l *Local, _ *params.Snapshot, _ *[]float32) {
			p := params.Progress(math.Inf(1))
			l.Progress = &p
		}, ErrBadProgress},
		{"remote params NaN", func(_ *Merger, _ *Local, r *params.Snapshot, _ *[]float32) { r.Params[3] = float32(math.NaN()) }, params.ErrNonFinite},
		{"remote params Inf", func(_ *Merger, _ *Local, r *params.Snapshot, _ *[]float32) { r.Params[0] = float32(math.Inf(-1)) }, params.ErrNonFinite},
		{"remote momentum Inf", func(_ *Merger, _ *Local, _ *params.Snapshot, rm *[]float32) {
			*rm = []float32{0, 0, float32(math.Inf(1)), 0}
		}, params.ErrNonFinite},
		{"foreign staleness out of range", func(m *Merger, _ *Local, _ *params.Snapshot, _ *[]float32) { m.Staleness = badStaleness(2) }, ErrBadStaleness},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := Merger{Alpha: 0.5, Staleness: ConstStaleness(), Momentum: MomentumMix}
			local, remote := mergeCase()
			var rm []float32
			tc.edit(&m, &local, &remote, &rm)
			var (
				w  = slices.Clone(local.Params)
				mo = slices.Clone(local.Momentum)
				p  params.Progress
			)
			if local.Progress != nil {
				p = *local.Progress
			}
			out, err := m.Merge(local, remote, rm)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if out != (Outcome{}) {
				t.Errorf("outcome %+v alongside an error", out)
			}
			if !slices.Equal(local.Params, w) || !slices.Equal(local.Momentum, mo) ||
				(local.Progress != nil && !sameProgress(*local.Progress, p)) {
				t.Errorf("failed merge changed the local model: %v %v", local.Params, local.Momentum)
			}
		})
	}
}

func sameProgress(a, b params.Progress) bool {
	return a == b || (math.IsNaN(float64(a)) && math.IsNaN(float64(b)))
}

func TestMergeDoesNotAllocate(t *testing.T) {
	m := DefaultMerger()
	local, remote := mergeCase()
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := m.Merge(local, remote, nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Merge allocated %v times per run", allocs)
	}
}

// randVec returns n values uniform in [-scale, scale).
func randVec(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((2*r.Float64() - 1) * scale)
	}
	return v
}

// node is one simulated peer's model.
type node struct {
	w []float32
	p params.Progress
}

// exchange runs one symmetric exchange: both sides snapshot, then each
// merges the other's snapshot with its own weight.
func exchange(t *testing.T, m Merger, a, b *node, batch int) (Outcome, Outcome) {
	t.Helper()
	sa := params.Snapshot{Fingerprint: fpA, Progress: a.p, Params: slices.Clone(a.w)}
	sb := params.Snapshot{Fingerprint: fpA, Progress: b.p, Params: slices.Clone(b.w)}
	oa, err := m.Merge(Local{Fingerprint: fpA, Params: a.w, Progress: &a.p, Batch: batch}, sb, nil)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := m.Merge(Local{Fingerprint: fpA, Params: b.w, Progress: &b.p, Batch: batch}, sa, nil)
	if err != nil {
		t.Fatal(err)
	}
	return oa, ob
}

// meanOf returns the coordinate-wise mean of the nodes' vectors in float64.
func meanOf(nodes []*node) []float64 {
	mean := make([]float64, len(nodes[0].w))
	for _, n := range nodes {
		for i, x := range n.w {
			mean[i] += float64(x) / float64(len(nodes))
		}
	}
	return mean
}

// variance is the total squared distance of the vectors to their mean.
func variance(nodes []*node) float64 {
	mean := meanOf(nodes)
	var v float64
	for _, n := range nodes {
		for i, x := range n.w {
			v += (float64(x) - mean[i]) * (float64(x) - mean[i])
		}
	}
	return v
}

// spread is the largest distance of a node's vector to the population mean.
func spread(nodes []*node) float64 {
	mean := meanOf(nodes)
	var worst float64
	for _, n := range nodes {
		var d float64
		for i, x := range n.w {
			d += (float64(x) - mean[i]) * (float64(x) - mean[i])
		}
		worst = max(worst, math.Sqrt(d))
	}
	return worst
}

func TestSymmetricMergePreservesPairMean(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	m := Merger{Alpha: 0.5, Staleness: ConstStaleness(), Momentum: MomentumKeep}
	for range 200 {
		dim := 1 + r.IntN(50)
		a := &node{w: randVec(r, dim, 100), p: params.Progress(r.IntN(100000))}
		b := &node{w: randVec(r, dim, 100), p: params.Progress(r.IntN(100000))}
		wantMean := meanOf([]*node{a, b})
		wantP := (a.p + b.p) / 2
		oa, ob := exchange(t, m, a, b, 32)
		if oa.Weight != 0.5 || ob.Weight != 0.5 {
			t.Fatalf("weights %v, %v; want 0.5 both", oa.Weight, ob.Weight)
		}
		for i, got := range meanOf([]*node{a, b}) {
			if math.Abs(got-wantMean[i]) > 1e-5 {
				t.Fatalf("pair mean[%d] moved from %v to %v", i, wantMean[i], got)
			}
		}
		if a.p != wantP || b.p != wantP {
			t.Fatalf("progress %v, %v; want both %v", a.p, b.p, wantP)
		}
	}
}

// TestConsensus runs random symmetric pairwise merges over 16 differently
// initialised models: the population mean must stay put and every model
// must converge to it.
func TestConsensus(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	m := Merger{Alpha: 0.5, Staleness: ConstStaleness(), Momentum: MomentumKeep}
	const n, dim = 16, 64
	nodes := make([]*node, n)
	for i := range nodes {
		// Different scales and offsets: no two models start alike.
		nodes[i] = &node{w: randVec(r, dim, float64(i+1)), p: params.Progress(1000 * i)}
		for j := range nodes[i].w {
			nodes[i].w[j] += float32(i) - 8
		}
	}
	mean0, spread0 := meanOf(nodes), spread(nodes)
	prevVar := variance(nodes)
	for range 30 * n {
		i, j := r.IntN(n), r.IntN(n-1)
		if j >= i {
			j++
		}
		exchange(t, m, nodes[i], nodes[j], 64)
		// Equal-weight pairwise averaging can only shrink the total
		// squared deviation from the mean (up to float32 rounding).
		v := variance(nodes)
		if v > prevVar*(1+1e-6)+1e-12 {
			t.Fatalf("total squared deviation grew from %v to %v", prevVar, v)
		}
		prevVar = v
	}
	if s := spread(nodes); !(s < spread0/1e3) {
		t.Errorf("spread went from %v to %v: less than 1000x", spread0, s)
	}
	for i, got := range meanOf(nodes) {
		if math.Abs(got-mean0[i]) > 1e-4 {
			t.Errorf("population mean[%d] moved from %v to %v", i, mean0[i], got)
		}
	}
	var pMean params.Progress
	for _, nd := range nodes {
		pMean += nd.p / n
	}
	if want := params.Progress(1000 * (n - 1) / 2); math.Abs(float64(pMean-want)) > 1e-6 {
		t.Errorf("mean progress %v, want %v", pMean, want)
	}
}

// TestConsensusWithStaleness checks that decayed, unequal weights (which do
// not preserve the mean) still bring the population together.
func TestConsensusWithStaleness(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	poly, _ := PolyStaleness(1)
	m := Merger{Alpha: 0.5, Staleness: poly, Momentum: MomentumKeep}
	const n, dim = 16, 32
	nodes := make([]*node, n)
	for i := range nodes {
		nodes[i] = &node{w: randVec(r, dim, 10), p: params.Progress(r.IntN(64 * 200))}
	}
	spread0 := spread(nodes)
	for range 40 * n {
		i, j := r.IntN(n), r.IntN(n-1)
		if j >= i {
			j++
		}
		exchange(t, m, nodes[i], nodes[j], 64)
	}
	if s := spread(nodes); !(s < spread0/1e3) {
		t.Errorf("spread went from %v to %v: less than 1000x", spread0, s)
	}
}
