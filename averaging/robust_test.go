package averaging

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshtrain/meshtrain/params"
)

func TestL2AndDistance(t *testing.T) {
	if got := L2([]float32{3, 4}); got != 5 {
		t.Errorf("L2(3,4) = %v", got)
	}
	if got := L2(nil); got != 0 {
		t.Errorf("L2(nil) = %v", got)
	}
	// Squares of float32 extremes overflow float32 but not the float64 sum.
	big := float32(math.MaxFloat32)
	if got, want := L2([]float32{big, big}), math.Sqrt2*math.MaxFloat32; math.Abs(got-want) > want*1e-15 {
		t.Errorf("L2 of two MaxFloat32 = %v, want %v", got, want)
	}
	if d, err := Distance([]float32{1, 1, 1}, []float32{1, 4, 5}); err != nil || d != 5 {
		t.Errorf("Distance = %v, %v; want 5", d, err)
	}
	if _, err := Distance([]float32{1}, []float32{1, 2}); !errors.Is(err, ErrLength) {
		t.Errorf("Distance of unequal lengths: %v", err)
	}
}

func TestClipDelta(t *testing.T) {
	local := []float32{1, 1, 1, 1}
	tests := []struct {
		name    string
		remote  []float32
		radius  float64
		want    []float32
		scale   float64
		wantErr error
	}{
		{"inside", []float32{1, 4, 1, 5}, 6, []float32{1, 4, 1, 5}, 1, nil},
		{"on the sphere", []float32{1, 4, 1, 5}, 5, []float32{1, 4, 1, 5}, 1, nil},
		{"outside", []float32{1, 4, 1, 5}, 2.5, []float32{1, 2.5, 1, 3}, 0.5, nil},
		{"radius zero", []float32{9, 9, 9, 9}, 0, []float32{1, 1, 1, 1}, 0, nil},
		{"no clipping", []float32{1e30, -1e30, 0, 1}, math.Inf(1), []float32{1e30, -1e30, 0, 1}, 1, nil},
		{"same model", []float32{1, 1, 1, 1}, 0, []float32{1, 1, 1, 1}, 1, nil},
		{"negative radius", []float32{1, 1, 1, 2}, -1, nil, 0, ErrBadRadius},
		{"NaN radius", []float32{1, 1, 1, 2}, math.NaN(), nil, 0, ErrBadRadius},
		{"NaN remote", []float32{1, float32(math.NaN()), 1, 2}, 1, nil, 0, params.ErrNonFinite},
		{"Inf remote", []float32{1, float32(math.Inf(1)), 1, 2}, 1, nil, 0, params.ErrNonFinite},
		{"short remote", []float32{1, 1, 1}, 1, nil, 0, ErrLength},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := []float32{7, 7, 7, 7}
			remote := slices.Clone(tc.remote)
			c, err := ClipDelta(dst, local, remote, tc.radius)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if !slices.Equal(dst, []float32{7, 7, 7, 7}) {
					t.Errorf("dst written on error: %v", dst)
				}
				return
			}
			if c != tc.scale || !slices.Equal(dst, tc.want) {
				t.Errorf("ClipDelta = %v, %v; want %v, %v", dst, c, tc.want, tc.scale)
			}
			if !slices.Equal(remote, tc.remote) || local[0] != 1 {
				t.Error("inputs were written")
			}
		})
	}
	// In place, over the remote or over the local vector.
	remote := []float32{1, 4, 1, 5}
	if c, err := ClipDelta(remote, local, remote, 2.5); err != nil || c != 0.5 || !slices.Equal(remote, []float32{1, 2.5, 1, 3}) {
		t.Errorf("in place over remote: %v, %v, %v", remote, c, err)
	}
	l := slices.Clone(local)
	if _, err := ClipDelta(l, l, []float32{1, 4, 1, 5}, 2.5); err != nil || !slices.Equal(l, []float32{1, 2.5, 1, 3}) {
		t.Errorf("in place over local: %v, %v", l, err)
	}
}

func TestClipDeltaProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for range 500 {
		n := 1 + r.IntN(200)
		local := randVec(r, n, math.Pow(10, r.Float64()*4-2))
		remote := randVec(r, n, math.Pow(10, r.Float64()*6-2))
		norm, _ := Distance(local, remote)
		radius := norm * r.Float64() * 2
		dst := make([]float32, n)
		c, err := ClipDelta(dst, local, remote, radius)
		if err != nil {
			t.Fatal(err)
		}
		if !(c > 0 && c <= 1) {
			t.Fatalf("scale %v outside (0,1]", c)
		}
		after, _ := Distance(local, dst)
		if norm <= radius {
			if c != 1 || !slices.Equal(dst, remote) {
				t.Fatalf("within the radius (%v <= %v) the remote was changed (scale %v)", norm, radius, c)
			}
			continue
		}
		// The result is rounded to float32 around local, so allow one
		// float32 ulp per coordinate on top of the exact bound.
		var slack float64
		for _, x := range dst {
			u := float64(math.Nextafter32(float32(math.Abs(float64(x))), math.MaxFloat32)) - math.Abs(float64(x))
			slack += u * u
		}
		slack = math.Sqrt(slack)
		if after > norm+slack {
			t.Fatalf("clipping grew the delta from %v to %v", norm, after)
		}
		if after > radius+slack || after < radius-slack {
			t.Fatalf("clipped delta %v, want the radius %v (slack %v)", after, radius, slack)
		}
		if want := radius / norm; math.Abs(c-want) > 1e-15 {
			t.Fatalf("scale %v, want %v", c, want)
		}
	}
}

func TestMean(t *testing.T) {
	dst := make([]float32, 3)
	if err := Mean(dst, [][]float32{{1, 2, 3}, {3, 2, 1}, {5, 5, -10}}); err != nil || !slices.Equal(dst, []float32{3, 3, -2}) {
		t.Errorf("Mean = %v, %v", dst, err)
	}
	a := []float32{2, 4}
	if err := Mean(a, [][]float32{a, {4, 8}}); err != nil || !slices.Equal(a, []float32{3, 6}) {
		t.Errorf("Mean into one of its inputs = %v, %v", a, err)
	}
	if err := Mean(dst, nil); !errors.Is(err, ErrEmpty) {
		t.Errorf("Mean of nothing: %v", err)
	}
	if err := Mean(dst, [][]float32{{1, 2, 3}, {1, 2}}); !errors.Is(err, ErrLength) {
		t.Errorf("Mean of unequal lengths: %v", err)
	}
}

func TestTrimmedMean(t *testing.T) {
	vs := [][]float32{
		{1, 100, -5},
		{2, 1, -4},
		{3, 2, -3},
		{4, 3, 1e30},
		{-1e30, 4, -2},
	}
	tests := []struct {
		name    string
		vs      [][]float32
		trim    int
		want    []float32
		wantErr error
	}{
		{"trim one", vs, 1, []float32{2, 3, -3}, nil},
		{"trim two", vs, 2, []float32{2, 3, -3}, nil},
		{"no trim is the mean", vs[:3], 0, []float32{2, 103.0 / 3, -4}, nil},
		{"single vector", vs[:1], 0, []float32{1, 100, -5}, nil},
		{"even count", vs[:4], 1, []float32{2.5, 2.5, -3.5}, nil},
		{"trim too large", vs, 3, nil, ErrBadTrim},
		{"trim half of even", vs[:4], 2, nil, ErrBadTrim},
		{"negative trim", vs, -1, nil, ErrBadTrim},
		{"empty", nil, 0, nil, ErrEmpty},
		{"unequal lengths", [][]float32{{1, 2, 3}, {1, 2}, {1, 2, 3}}, 1, nil, ErrLength},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := []float32{7, 7, 7}
			err := TrimmedMean(dst, tc.vs, tc.trim)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if !slices.Equal(dst, []float32{7, 7, 7}) {
					t.Errorf("dst written on error: %v", dst)
				}
				return
			}
			for i := range dst {
				if math.Abs(float64(dst[i]-tc.want[i])) > 1e-5 {
					t.Fatalf("TrimmedMean = %v, want %v", dst, tc.want)
				}
			}
		})
	}
}

// TestTrimmedMeanIgnoresOutliers corrupts up to t values per coordinate,
// in different vectors for different coordinates, with arbitrary values:
// every coordinate of the result must stay within the honest range.
func TestTrimmedMeanIgnoresOutliers(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	wild := []float32{
		math.MaxFloat32, -math.MaxFloat32, 1e30, -1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0, 1e-30,
	}
	for range 300 {
		k := 3 + r.IntN(10)
		trim := r.IntN((k-1)/2) + 1
		if 2*trim >= k {
			trim = (k - 1) / 2
		}
		dim := 1 + r.IntN(20)
		vs := make([][]float32, k)
		for j := range vs {
			vs[j] = randVec(r, dim, 1)
		}
		lo, hi := make([]float32, dim), make([]float32, dim)
		for i := range dim {
			// Corrupt up to trim randomly chosen vectors at this coordinate.
			bad := r.Perm(k)[:r.IntN(trim+1)]
			for _, j := range bad {
				if r.IntN(3) == 0 {
					vs[j][i] = float32((2*r.Float64() - 1) * 1e6)
				} else {
					vs[j][i] = wild[r.IntN(len(wild))]
				}
			}
			lo[i], hi[i] = float32(math.Inf(1)), float32(math.Inf(-1))
			for j := range vs {
				if !slices.Contains(bad, j) {
					lo[i], hi[i] = min(lo[i], vs[j][i]), max(hi[i], vs[j][i])
				}
			}
		}
		dst := make([]float32, dim)
		if err := TrimmedMean(dst, vs, trim); err != nil {
			t.Fatal(err)
		}
		for i := range dim {
			if !(dst[i] >= lo[i] && dst[i] <= hi[i]) {
				t.Fatalf("k=%d t=%d: coordinate %d = %v outside the honest range [%v, %v]", k, trim, i, dst[i], lo[i], hi[i])
			}
		}
	}
}
