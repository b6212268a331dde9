package averaging

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestNewPushSum(t *testing.T) {
	v := []float32{1, -2, 4}
	p, err := NewPushSum(v, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.X, []float32{0.5, -1, 2}) || p.W != 0.5 {
		t.Errorf("NewPushSum = %+v", p)
	}
	p.X[0] = 9
	if v[0] != 1 {
		t.Error("NewPushSum shares the caller's slice")
	}
	for _, w := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := NewPushSum(v, w); !errors.Is(err, ErrBadPushSumWeight) {
			t.Errorf("weight %v: err = %v", w, err)
		}
	}
}

func TestPushSumHalveAddEstimate(t *testing.T) {
	p, _ := NewPushSum([]float32{2, 4, -6}, 1)
	orig := PushSum{X: slices.Clone(p.X), W: p.W}
	share := p.Halve(nil)
	if !slices.Equal(p.X, []float32{1, 2, -3}) || p.W != 0.5 || !slices.Equal(share.X, p.X) || share.W != 0.5 {
		t.Fatalf("after Halve: kept %+v, sent %+v", p, share)
	}
	if &share.X[0] == &p.X[0] {
		t.Fatal("the share aliases the kept half")
	}
	if err := p.Add(share); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.X, orig.X) || p.W != orig.W {
		t.Errorf("halves do not add back: %+v, want %+v", p, orig)
	}

	// A share buffer with room is reused, so a steady gossip loop does not allocate.
	buf := make([]float32, 0, 8)
	if s := p.Halve(buf); &s.X[0] != &buf[:1][0] {
		t.Error("Halve did not reuse a buffer with enough capacity")
	}
	allocs := testing.AllocsPerRun(50, func() { buf = p.Halve(buf).X })
	if allocs != 0 {
		t.Errorf("Halve with a buffer allocated %v times", allocs)
	}

	// Weighted estimate: nodes holding (v=1, w=3) and (v=5, w=1) average to 2.
	a, _ := NewPushSum([]float32{1}, 3)
	b, _ := NewPushSum([]float32{5}, 1)
	if err := a.Add(b); err != nil {
		t.Fatal(err)
	}
	est := make([]float32, 1)
	if err := a.Estimate(est); err != nil || est[0] != 2 {
		t.Errorf("estimate = %v, %v; want 2", est, err)
	}
}

func TestPushSumErrors(t *testing.T) {
	p, _ := NewPushSum([]float32{1, 2}, 1)
	before := PushSum{X: slices.Clone(p.X), W: p.W}
	for _, tc := range []struct {
		name    string
		q       PushSum
		wantErr error
	}{
		{"length", PushSum{X: []float32{1}, W: 1}, ErrLength},
		{"zero weight", PushSum{X: []float32{1, 1}}, ErrBadPushSumWeight},
		{"negative weight", PushSum{X: []float32{1, 1}, W: -1}, ErrBadPushSumWeight},
		{"NaN weight", PushSum{X: []float32{1, 1}, W: math.NaN()}, ErrBadPushSumWeight},
	} {
		if err := p.Add(tc.q); !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.wantErr)
		}
		if !slices.Equal(p.X, before.X) || p.W != before.W {
			t.Fatalf("%s: failed Add changed the state to %+v", tc.name, p)
		}
	}
	if err := p.Estimate(make([]float32, 3)); !errors.Is(err, ErrLength) {
		t.Errorf("estimate into a short dst: %v", err)
	}
	var zero PushSum
	if err := zero.Estimate(nil); !errors.Is(err, ErrBadPushSumWeight) {
		t.Errorf("estimate of the zero value: %v", err)
	}
}

// randomGraph returns the adjacency lists of a connected undirected graph
// on n nodes: a random spanning tree plus extra random edges.
func randomGraph(r *rand.Rand, n, extra int) [][]int {
	adj := make([][]int, n)
	link := func(i, j int) {
		if i != j && !slices.Contains(adj[i], j) {
			adj[i] = append(adj[i], j)
			adj[j] = append(adj[j], i)
		}
	}
	perm := r.Perm(n)
	for k := 1; k < n; k++ {
		link(perm[k], perm[r.IntN(k)])
	}
	for range extra {
		link(r.IntN(n), r.IntN(n))
	}
	return adj
}

func TestPushSumConvergesOnRandomGraphs(t *testing.T) {
	for seed := range uint64(6) {
		r := rand.New(rand.NewPCG(seed, 99))
		n, dim := 8+r.IntN(25), 6
		adj := randomGraph(r, n, r.IntN(2*n))
		nodes := make([]PushSum, n)
		// The true answer is the weighted average sum(w v) / sum(w).
		want := make([]float64, dim)
		var wantW, absMass float64
		for i := range nodes {
			v, w := randVec(r, dim, 100), 0.5+r.Float64()*4
			var err error
			if nodes[i], err = NewPushSum(v, w); err != nil {
				t.Fatal(err)
			}
			for k := range dim {
				want[k] += float64(nodes[i].X[k])
				absMass += math.Abs(float64(nodes[i].X[k]))
			}
			wantW += w
		}
		mass0 := slices.Clone(want)
		for k := range want {
			want[k] /= wantW
		}

		shares := make([]PushSum, n)
		targets := make([]int, n)
		for round := range 400 {
			// Everyone sends before anyone receives: a synchronous round.
			for i := range nodes {
				shares[i] = nodes[i].Halve(shares[i].X)
				targets[i] = adj[i][r.IntN(len(adj[i]))]
			}
			for i, j := range targets {
				if err := nodes[j].Add(shares[i]); err != nil {
					t.Fatal(err)
				}
			}
			// Mass is conserved: X to float32 rounding, W almost exactly.
			var totalW float64
			totalX := make([]float64, dim)
			for _, nd := range nodes {
				totalW += nd.W
				for k, x := range nd.X {
					totalX[k] += float64(x)
				}
			}
			if math.Abs(totalW-wantW) > 1e-12*wantW {
				t.Fatalf("seed %d round %d: total weight %v, want %v", seed, round, totalW, wantW)
			}
			for k := range dim {
				if math.Abs(totalX[k]-mass0[k]) > 1e-5*absMass {
					t.Fatalf("seed %d round %d: total X[%d] %v, want %v", seed, round, k, totalX[k], mass0[k])
				}
			}
		}
		est := make([]float32, dim)
		for i, nd := range nodes {
			if err := nd.Estimate(est); err != nil {
				t.Fatal(err)
			}
			for k := range dim {
				if math.Abs(float64(est[k])-want[k]) > 1e-3 {
					t.Fatalf("seed %d (n=%d): node %d estimate[%d] = %v, want %v", seed, n, i, k, est[k], want[k])
				}
			}
		}
	}
}
