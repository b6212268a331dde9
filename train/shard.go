package train

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// MaxShards bounds n in "i/n": far more peers than one dataset can feed.
const MaxShards = 1 << 16

// Shard selects part Index of Count (0 <= Index < Count). {0, 1} is the whole
// dataset, written "all".
type Shard struct {
	Index, Count int
}

// AllData is the shard that holds every sample.
var AllData = Shard{Index: 0, Count: 1}

// ParseShard reads "all" or "i/n" with a 0-based i: "0/4" is the first of
// four shards.
func ParseShard(s string) (Shard, error) {
	if s == "all" {
		return AllData, nil
	}
	is, ns, ok := strings.Cut(s, "/")
	if !ok {
		return Shard{}, fmt.Errorf("%w: %q: want \"all\" or \"i/n\" with 0 <= i < n", ErrBadShard, s)
	}
	i, err1 := parseCount(is)
	n, err2 := parseCount(ns)
	if err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("%w: %q: i and n must be non-negative decimal integers", ErrBadShard, s)
	}
	sh := Shard{Index: i, Count: n}
	if err := sh.Validate(); err != nil {
		return Shard{}, fmt.Errorf("%w (from %q)", err, s)
	}
	return sh, nil
}

// parseCount accepts plain decimal digits only: no sign, space or base prefix.
func parseCount(s string) (int, error) {
	if s == "" || len(s) > 9 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, ErrBadShard
	}
	return strconv.Atoi(s)
}

// Validate reports whether the shard can exist.
func (s Shard) Validate() error {
	if s.Count < 1 || s.Count > MaxShards {
		return fmt.Errorf("%w: %d shards (want 1 to %d)", ErrBadShard, s.Count, MaxShards)
	}
	if s.Index < 0 || s.Index >= s.Count {
		return fmt.Errorf("%w: index %d not in [0,%d) (indices are 0-based)", ErrBadShard, s.Index, s.Count)
	}
	return nil
}

// String is the form ParseShard reads.
func (s Shard) String() string {
	if s == AllData {
		return "all"
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// ShardFromKey derives a shard of n from a key, typically a peer ID, so that
// peers in an open mesh pick shards with no coordination: the same key
// always gets the same shard, and distinct keys spread evenly over the n.
// It is the hook behind "--shard auto".
func ShardFromKey(key []byte, n int) (Shard, error) {
	if n < 1 || n > MaxShards {
		return Shard{}, fmt.Errorf("%w: %d shards (want 1 to %d)", ErrBadShard, n, MaxShards)
	}
	if len(key) == 0 {
		return Shard{}, fmt.Errorf("%w: empty key", ErrBadShard)
	}
	h := sha256.Sum256(append([]byte("meshtrain-shard-v1:"), key...))
	return Shard{Index: int(binary.BigEndian.Uint64(h[:8]) % uint64(n)), Count: n}, nil
}

// DefaultAutoShards is how many shards "--shard auto" splits the training
// set into. A mesh with fewer peers leaves some shards untrained (a peer
// still learns them through its partners' models only if someone trains
// them); one with more has several peers on a shard, each in its own
// order. Eight keeps each MNIST shard at 7,500 samples, enough for a
// model of its own to be worth merging, while a handful of volunteers
// already covers most of the set.
const DefaultAutoShards = 8

// ParseAutoShard reads "auto" (DefaultAutoShards shards) or "auto:N". ok
// reports whether s is an auto form at all; err whether it is a bad one.
func ParseAutoShard(s string) (n int, ok bool, err error) {
	rest, found := strings.CutPrefix(s, "auto")
	switch {
	case !found:
		return 0, false, nil
	case rest == "":
		return DefaultAutoShards, true, nil
	}
	ns, colon := strings.CutPrefix(rest, ":")
	n, perr := parseCount(ns)
	if !colon || perr != nil || n < 1 || n > MaxShards {
		return 0, true, fmt.Errorf("%w: %q: want auto or auto:N with 1 <= N <= %d", ErrBadShard, s, MaxShards)
	}
	return n, true, nil
}

// OrderSeedFromKey derives a sample order from a key (a peer ID), so peers
// that "--shard auto" puts on the same shard walk it in different orders.
func OrderSeedFromKey(key []byte) uint64 {
	h := sha256.Sum256(append([]byte("meshtrain-order-v1:"), key...))
	return binary.BigEndian.Uint64(h[:8])
}

// IIDSplit shuffles 0..n-1 with seed and cuts it into count contiguous parts
// whose sizes differ by at most one. The parts are disjoint, cover every
// index, and are sorted.
func IIDSplit(n, count int, seed uint64) ([][]int, error) {
	if count < 1 || count > MaxShards || n < count {
		return nil, fmt.Errorf("%w: %d samples into %d iid shards", ErrBadShard, n, count)
	}
	perm := rand.New(rand.NewPCG(seed, 0x5ba4d)).Perm(n)
	parts := make([][]int, count)
	for i := range parts {
		lo, hi := i*n/count, (i+1)*n/count
		parts[i] = slices.Clone(perm[lo:hi])
		slices.Sort(parts[i])
	}
	return parts, nil
}

// dirichletAttempts bounds the resampling that keeps every shard non-empty.
const dirichletAttempts = 1000

// DirichletSplit makes label-skewed shards: for every class it draws the
// class's proportions across the count shards from Dirichlet(alpha, ...,
// alpha) and deals the class's samples out accordingly (the scheme of Hsu et
// al. 2019 used by FedML and Flower). Small alpha (0.1) gives shards
// dominated by a few classes; large alpha (100) approaches iid. Draws are
// repeated until every shard has at least min(10, n/count) samples. The parts
// are disjoint, cover every index, and are sorted.
func DirichletSplit(labels []uint8, classes, count int, alpha float64, seed uint64) ([][]int, error) {
	n := len(labels)
	if count < 1 || count > MaxShards || n < count {
		return nil, fmt.Errorf("%w: %d samples into %d shards", ErrBadShard, n, count)
	}
	if !(alpha > 0) || math.IsInf(alpha, 0) {
		return nil, fmt.Errorf("%w: Dirichlet alpha %v must be positive and finite", ErrBadShard, alpha)
	}
	byClass := make([][]int, classes)
	for i, l := range labels {
		if int(l) >= classes {
			return nil, fmt.Errorf("%w: label %d of sample %d not below %d", ErrBadShard, l, i, classes)
		}
		byClass[l] = append(byClass[l], i)
	}
	r := rand.New(rand.NewPCG(seed, 0xd1c1e7))
	minSize := min(10, n/count)
	props := make([]float64, count)
	for range dirichletAttempts {
		parts := make([][]int, count)
		for _, idx := range byClass {
			if len(idx) == 0 {
				continue
			}
			idx = slices.Clone(idx)
			r.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
			dirichlet(r, alpha, props)
			cum, lo := 0.0, 0
			for s := range count {
				cum += props[s]
				hi := int(math.Round(cum * float64(len(idx))))
				if s == count-1 {
					hi = len(idx)
				}
				hi = max(lo, min(hi, len(idx)))
				parts[s] = append(parts[s], idx[lo:hi]...)
				lo = hi
			}
		}
		if slices.ContainsFunc(parts, func(p []int) bool { return len(p) < minSize }) {
			continue
		}
		for _, p := range parts {
			slices.Sort(p)
		}
		return parts, nil
	}
	return nil, fmt.Errorf("%w: no Dirichlet(%v) split of %d samples into %d shards gave every shard %d samples in %d draws; raise alpha or use fewer shards",
		ErrBadShard, alpha, n, count, minSize, dirichletAttempts)
}

// ShardIndices returns the sorted sample indices of shard s of d: iid when
// alpha is 0, Dirichlet(alpha) label skew otherwise. Every peer of a network
// must use the same seed and alpha so that shards are disjoint.
func ShardIndices(d *Dataset, s Shard, seed uint64, alpha float64) ([]int, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s == AllData {
		idx := make([]int, d.N)
		for i := range idx {
			idx[i] = i
		}
		return idx, nil
	}
	var parts [][]int
	var err error
	if alpha == 0 {
		parts, err = IIDSplit(d.N, s.Count, seed)
	} else {
		parts, err = DirichletSplit(d.Y, d.Classes, s.Count, alpha, seed)
	}
	if err != nil {
		return nil, fmt.Errorf("shard %s of %s: %w", s, d.Name, err)
	}
	return parts[s.Index], nil
}

// dirichlet fills p with one draw from Dirichlet(alpha, ..., alpha).
func dirichlet(r *rand.Rand, alpha float64, p []float64) {
	sum := 0.0
	for i := range p {
		p[i] = GammaSample(r, alpha)
		sum += p[i]
	}
	if sum == 0 {
		// Every draw underflowed (tiny alpha): put all mass on one part,
		// which is the limit the distribution approaches.
		clear(p)
		p[r.IntN(len(p))] = 1
		return
	}
	for i := range p {
		p[i] /= sum
	}
}

// GammaSample draws from Gamma(shape, 1) by Marsaglia and Tsang's method,
// boosting shapes below one with the U^(1/shape) trick.
func GammaSample(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return GammaSample(r, shape+1) * math.Pow(r.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
