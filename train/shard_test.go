package train

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestParseShard(t *testing.T) {
	good := map[string]Shard{"all": AllData, "0/1": AllData, "0/4": {0, 4}, "3/4": {3, 4}, "007/10": {7, 10}}
	for in, want := range good {
		got, err := ParseShard(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "all ", "ALL", "auto", "1", "4/4", "5/4", "-1/4", "+1/4", "0/0", "1/0", " 1/4", "1/ 4", "1/4/5", "a/4", "0x1/4", "1.0/4", "0/65537", "0/99999999999"} {
		if got, err := ParseShard(in); !errors.Is(err, ErrBadShard) {
			t.Errorf("%q accepted as %+v (%v)", in, got, err)
		}
	}
	for _, s := range []Shard{AllData, {2, 5}} {
		if back, err := ParseShard(s.String()); err != nil || back != s {
			t.Errorf("%+v -> %q -> %+v, %v", s, s.String(), back, err)
		}
	}
}

// checkPartition asserts that parts are sorted, disjoint and cover 0..n-1.
func checkPartition(t *testing.T, parts [][]int, n int) {
	t.Helper()
	seen := make([]bool, n)
	for p, part := range parts {
		if !slices.IsSorted(part) {
			t.Fatalf("part %d not sorted", p)
		}
		for _, i := range part {
			if i < 0 || i >= n || seen[i] {
				t.Fatalf("index %d out of range or in two parts", i)
			}
			seen[i] = true
		}
	}
	if i := slices.Index(seen, false); i >= 0 {
		t.Fatalf("index %d in no part", i)
	}
}

func TestIIDSplit(t *testing.T) {
	for _, c := range []struct{ n, count int }{{10, 1}, {10, 3}, {1000, 7}, {5, 5}} {
		t.Run(fmt.Sprint(c.n, "/", c.count), func(t *testing.T) {
			parts, err := IIDSplit(c.n, c.count, 42)
			if err != nil {
				t.Fatal(err)
			}
			checkPartition(t, parts, c.n)
			for _, p := range parts {
				if len(p) < c.n/c.count || len(p) > c.n/c.count+1 {
					t.Fatalf("unbalanced sizes")
				}
			}
			again, _ := IIDSplit(c.n, c.count, 42)
			if !slices.EqualFunc(parts, again, slices.Equal) {
				t.Fatal("same seed, different split")
			}
		})
	}
	a, _ := IIDSplit(1000, 2, 1)
	b, _ := IIDSplit(1000, 2, 2)
	if slices.Equal(a[0], b[0]) {
		t.Fatal("different seeds, same split")
	}
	if _, err := IIDSplit(3, 4, 1); !errors.Is(err, ErrBadShard) {
		t.Fatalf("more shards than samples: %v", err)
	}
}

// skew is the mean, over parts, of the largest class's share of the part.
func skew(labels []uint8, classes int, parts [][]int) float64 {
	total := 0.0
	for _, p := range parts {
		counts := make([]int, classes)
		for _, i := range p {
			counts[labels[i]]++
		}
		total += float64(slices.Max(counts)) / float64(len(p))
	}
	return total / float64(len(parts))
}

func TestDirichletSplit(t *testing.T) {
	d, err := Synthetic(SyntheticConfig{N: 4000, Dim: 2, Classes: 10, Clusters: 1, Noise: 1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	skewed, err := DirichletSplit(d.Y, d.Classes, 8, 0.1, 7)
	if err != nil {
		t.Fatal(err)
	}
	checkPartition(t, skewed, d.N)
	for _, p := range skewed {
		if len(p) < 10 {
			t.Fatalf("part of %d samples", len(p))
		}
	}
	again, _ := DirichletSplit(d.Y, d.Classes, 8, 0.1, 7)
	if !slices.EqualFunc(skewed, again, slices.Equal) {
		t.Fatal("same seed, different split")
	}
	near, err := DirichletSplit(d.Y, d.Classes, 8, 1000, 7)
	if err != nil {
		t.Fatal(err)
	}
	checkPartition(t, near, d.N)
	iid, _ := IIDSplit(d.N, 8, 7)
	sSkew, sNear, sIID := skew(d.Y, d.Classes, skewed), skew(d.Y, d.Classes, near), skew(d.Y, d.Classes, iid)
	t.Logf("largest-class share: alpha 0.1 %.2f, alpha 1000 %.2f, iid %.2f", sSkew, sNear, sIID)
	// Ten balanced classes: an iid part's largest class holds about 10%.
	if sSkew < 0.4 || sNear > 0.2 || sIID > 0.2 {
		t.Fatalf("skew not as expected: alpha 0.1 %.2f, alpha 1000 %.2f, iid %.2f", sSkew, sNear, sIID)
	}
	for _, alpha := range []float64{0, -1} {
		if _, err := DirichletSplit(d.Y, d.Classes, 8, alpha, 1); !errors.Is(err, ErrBadShard) {
			t.Errorf("alpha %v: %v", alpha, err)
		}
	}
	// A split that cannot give every shard samples fails clearly.
	if _, err := DirichletSplit(d.Y[:40], d.Classes, 40, 0.001, 1); !errors.Is(err, ErrBadShard) {
		t.Fatalf("impossible split: %v", err)
	}
}

func TestShardIndices(t *testing.T) {
	d, _ := Synthetic(DefaultSynthetic())
	all, err := ShardIndices(d, AllData, 1, 0)
	if err != nil || len(all) != d.N {
		t.Fatalf("all: %d, %v", len(all), err)
	}
	for _, alpha := range []float64{0, 0.5} {
		var parts [][]int
		for i := range 4 {
			p, err := ShardIndices(d, Shard{i, 4}, 9, alpha)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, p)
		}
		checkPartition(t, parts, d.N)
	}
	if _, err := ShardIndices(d, Shard{4, 4}, 1, 0); !errors.Is(err, ErrBadShard) {
		t.Fatalf("bad shard: %v", err)
	}
}

func TestShardFromKey(t *testing.T) {
	counts := make([]int, 4)
	for i := range 400 {
		s, err := ShardFromKey(fmt.Appendf(nil, "peer-%d", i), 4)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := ShardFromKey(fmt.Appendf(nil, "peer-%d", i), 4)
		if s != again || s.Count != 4 {
			t.Fatalf("%+v then %+v", s, again)
		}
		counts[s.Index]++
	}
	for i, c := range counts {
		if c < 60 {
			t.Fatalf("shard %d chosen by %d of 400 keys: %v", i, c, counts)
		}
	}
	if _, err := ShardFromKey(nil, 4); !errors.Is(err, ErrBadShard) {
		t.Fatal("empty key accepted")
	}
	if _, err := ShardFromKey([]byte("k"), 0); !errors.Is(err, ErrBadShard) {
		t.Fatal("zero shards accepted")
	}
}

func TestParseAutoShard(t *testing.T) {
	for _, c := range []struct {
		in     string
		n      int
		ok     bool
		failed bool
	}{
		{"auto", DefaultAutoShards, true, false},
		{"auto:16", 16, true, false},
		{"auto:1", 1, true, false},
		{"all", 0, false, false},
		{"3/8", 0, false, false},
		{"auto:0", 0, true, true},
		{"auto:", 0, true, true},
		{"auto:-2", 0, true, true},
		{"auto16", 0, true, true},
		{"auto:65537", 0, true, true},
		{"auto: 4", 0, true, true},
	} {
		n, ok, err := ParseAutoShard(c.in)
		if n != c.n || ok != c.ok || (err != nil) != c.failed {
			t.Errorf("ParseAutoShard(%q) = %d, %v, %v; want %d, %v, error %v", c.in, n, ok, err, c.n, c.ok, c.failed)
		}
		if err != nil && !errors.Is(err, ErrBadShard) {
			t.Errorf("ParseAutoShard(%q): error %v does not wrap ErrBadShard", c.in, err)
		}
	}
}

func TestOrderSeedFromKey(t *testing.T) {
	a, b := OrderSeedFromKey([]byte("peer-1")), OrderSeedFromKey([]byte("peer-2"))
	if a == b || a != OrderSeedFromKey([]byte("peer-1")) {
		t.Errorf("order seeds %d, %d: want distinct per key and the same for the same key", a, b)
	}
}
