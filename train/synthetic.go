package train

import (
	"fmt"
	"math/rand/v2"
)

// SyntheticConfig describes a dataset of Gaussian clusters: each class owns
// Clusters centres drawn from N(0, 1) per feature, and each sample is a
// centre plus N(0, Noise²) per feature. With a few clusters per class the
// classes are not linearly separable, so an MLP has something to gain over
// softmax regression; with Noise near 1 neither reaches 100%.
type SyntheticConfig struct {
	N        int     // samples (> 0)
	Dim      int     // features per sample (> 0)
	Classes  int     // labels, 2 to 256
	Clusters int     // centres per class (>= 1)
	Noise    float64 // per-feature standard deviation around a centre (>= 0)
	Seed     uint64  // same seed, same dataset, on every platform
}

// DefaultSynthetic is a small set that trains in milliseconds: 2000 samples
// in 32 dimensions, 10 classes of 2 clusters each.
func DefaultSynthetic() SyntheticConfig {
	return SyntheticConfig{N: 2000, Dim: 32, Classes: 10, Clusters: 2, Noise: 1, Seed: 1}
}

// Synthetic generates the dataset described by c. Labels cycle through the
// classes so every class has N/Classes samples (±1); the order is shuffled.
func Synthetic(c SyntheticConfig) (*Dataset, error) {
	if c.N <= 0 || c.Dim <= 0 || c.Classes < 2 || c.Classes > 256 || c.Clusters < 1 || !(c.Noise >= 0) ||
		c.N > 1<<26 || c.Dim > 1<<20 || int64(c.N)*int64(c.Dim) > 1<<30 || c.Classes*c.Clusters > 1<<16 {
		return nil, fmt.Errorf("%w: synthetic %+v", ErrBadDataset, c)
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x5eed_da7a))
	centres := make([]float64, c.Classes*c.Clusters*c.Dim)
	for i := range centres {
		centres[i] = r.NormFloat64()
	}
	x := make([]float32, c.N*c.Dim)
	y := make([]uint8, c.N)
	order := r.Perm(c.N)
	for i := range c.N {
		label := i % c.Classes
		k := label*c.Clusters + r.IntN(c.Clusters)
		row := x[order[i]*c.Dim : (order[i]+1)*c.Dim]
		for j := range row {
			row[j] = float32(centres[k*c.Dim+j] + c.Noise*r.NormFloat64())
		}
		y[order[i]] = uint8(label)
	}
	name := fmt.Sprintf("synthetic:n=%d,dim=%d,classes=%d,clusters=%d,noise=%g,seed=%d",
		c.N, c.Dim, c.Classes, c.Clusters, c.Noise, c.Seed)
	return NewDataset(name, x, y, c.Dim, c.Classes)
}
