package train

import (
	"fmt"

	"github.com/meshtrain/meshtrain/params"
)

// Datasets the node knows by name.
const (
	DatasetMNIST     = "mnist"
	DatasetSynthetic = "synthetic"
)

// syntheticTest is how many extra samples the synthetic dataset generates
// for its test split (same cluster centres as the training split).
const syntheticTest = 1000

// LoadData returns the training and test sets of a named dataset. For MNIST,
// dir == "" reads the copy embedded in the binary and any other value names a
// folder of IDX files. The synthetic set is generated from seed.
func LoadData(name, dir string, seed uint64) (trainSet, testSet *Dataset, err error) {
	switch name {
	case DatasetMNIST:
		return LoadMNIST(dir)
	case DatasetSynthetic:
		c := DefaultSynthetic()
		c.Seed = seed
		c.N += syntheticTest
		all, err := Synthetic(c)
		if err != nil {
			return nil, nil, err
		}
		trainIdx, testIdx := make([]int, c.N-syntheticTest), make([]int, syntheticTest)
		for i := range trainIdx {
			trainIdx[i] = i
		}
		for i := range testIdx {
			testIdx[i] = c.N - syntheticTest + i
		}
		if trainSet, err = all.Subset(trainIdx); err != nil {
			return nil, nil, err
		}
		if testSet, err = all.Subset(testIdx); err != nil {
			return nil, nil, err
		}
		return trainSet, testSet, nil
	}
	return nil, nil, fmt.Errorf("train: unknown dataset %q (want %s or %s)", name, DatasetMNIST, DatasetSynthetic)
}

// Shape returns the feature count and classes of a named dataset without
// loading it.
func Shape(dataset string) (dim, classes int, err error) {
	switch dataset {
	case DatasetMNIST, "":
		return MNISTDim, MNISTClasses, nil
	case DatasetSynthetic:
		c := DefaultSynthetic()
		return c.Dim, c.Classes, nil
	}
	return 0, 0, fmt.Errorf("train: unknown dataset %q", dataset)
}

// LayoutFor rebuilds the parameter layout of a model spec on a dataset and
// checks that it holds n parameters (n < 0 skips the check).
func LayoutFor(model, dataset string, n int) (params.Layout, error) {
	dim, classes, err := Shape(dataset)
	if err != nil {
		return params.Layout{}, err
	}
	m, err := ParseModel(model, dim, classes)
	if err != nil {
		return params.Layout{}, err
	}
	if n >= 0 && m.Size() != n {
		return params.Layout{}, fmt.Errorf("train: model %s on %s has %d parameters, the data holds %d", model, dataset, m.Size(), n)
	}
	return m.Layout(), nil
}
