package train

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Dataset is a labelled classification dataset held in memory, in one of
// two forms: float features in X (the synthetic set) or byte features in Pix
// (MNIST's pixels, a quarter of the memory), which RowTo and RowsTo scale as
// they copy. It is never written after construction, so any number of
// trainers and evaluations may share one.
type Dataset struct {
	// Name identifies the data for fingerprints ("mnist", or the synthetic
	// recipe): models trained on different data must never merge.
	Name string
	// N is the number of samples, Dim the features per sample and Classes
	// the number of labels (labels are 0..Classes-1).
	N, Dim, Classes int
	// X holds N×Dim features, row-major, in a float dataset; nil in a byte
	// dataset.
	X []float32
	// Pix holds N×Dim features, row-major, in a byte dataset: byte b stands
	// for the feature float32(b) / PixScale, in [0,1]. Nil in a float
	// dataset.
	Pix []uint8
	// Y holds N labels.
	Y []uint8
}

// PixScale divides a byte of Pix into its feature: float32(b) / PixScale.
const PixScale = 255

// pixFloat maps a byte of Pix to its feature. A table lookup costs less than
// a scalar division and gives the same bits, since it is that division; the
// AVX2 loop divides eight at a time instead, which beats the table.
var pixFloat = func() (t [256]float32) {
	for b := range t {
		t[b] = float32(b) / PixScale
	}
	return t
}()

// NewDataset checks that the float features x, the labels y and the sizes
// agree and that every label is below classes, then wraps them without
// copying.
func NewDataset(name string, x []float32, y []uint8, dim, classes int) (*Dataset, error) {
	if err := checkDataset(name, "features", len(x), y, dim, classes); err != nil {
		return nil, err
	}
	return &Dataset{Name: name, N: len(y), Dim: dim, Classes: classes, X: x, Y: y}, nil
}

// NewByteDataset is NewDataset for byte features (see Dataset.Pix).
func NewByteDataset(name string, pix, y []uint8, dim, classes int) (*Dataset, error) {
	if err := checkDataset(name, "feature bytes", len(pix), y, dim, classes); err != nil {
		return nil, err
	}
	return &Dataset{Name: name, N: len(y), Dim: dim, Classes: classes, Pix: pix, Y: y}, nil
}

// checkDataset checks the sizes, with features the length of X or Pix (what
// names them in the error), and the labels.
func checkDataset(name, what string, features int, y []uint8, dim, classes int) error {
	switch {
	case dim <= 0:
		return fmt.Errorf("%w: %s: dimension %d", ErrBadDataset, name, dim)
	case classes < 2 || classes > 256:
		return fmt.Errorf("%w: %s: %d classes (want 2 to 256)", ErrBadDataset, name, classes)
	case len(y) == 0:
		return fmt.Errorf("%w: %s: no samples", ErrBadDataset, name)
	case features != len(y)*dim:
		return fmt.Errorf("%w: %s: %d %s for %d samples of dimension %d", ErrBadDataset, name, features, what, len(y), dim)
	}
	for i, l := range y {
		if int(l) >= classes {
			return fmt.Errorf("%w: %s: sample %d has label %d, want below %d", ErrBadDataset, name, i, l, classes)
		}
	}
	return nil
}

// RowTo writes sample i's features into dst[:Dim].
func (d *Dataset) RowTo(dst []float32, i int) {
	dst = dst[:d.Dim]
	if d.X != nil {
		copy(dst, d.X[i*d.Dim:(i+1)*d.Dim])
		return
	}
	scalePix(dst, d.Pix[i*d.Dim:(i+1)*d.Dim])
}

// RowsTo returns the features of samples lo to hi-1, row-major: a view of X
// in a float dataset (dst unused, may be nil), else scaled into dst, which
// must hold (hi-lo)×Dim values. The caller must not write to the result.
func (d *Dataset) RowsTo(dst []float32, lo, hi int) []float32 {
	if d.X != nil {
		return d.X[lo*d.Dim : hi*d.Dim]
	}
	pix := d.Pix[lo*d.Dim : hi*d.Dim]
	scalePix(dst, pix)
	return dst[:len(pix)]
}

// scalePix writes the features of pix into dst[:len(pix)]: the vector loop,
// where there is one, does the longest prefix of a multiple of 8 (about 1.6
// times as fast as the table, bound by the divider), and scalePixGo the
// rest. Both give pixFloat's bits.
func scalePix(dst []float32, pix []uint8) {
	dst = dst[:len(pix)]
	n := pixVec(dst, pix)
	scalePixGo(dst[n:], pix[n:])
}

// scalePixGo is scalePix with the table alone. Slicing dst to pix's length
// first lets the compiler drop the bounds check in the loop (a third of the
// time of a row).
func scalePixGo(dst []float32, pix []uint8) {
	dst = dst[:len(pix)]
	for j, b := range pix {
		dst[j] = pixFloat[b]
	}
}

// Floats returns d itself if it holds floats, else a float copy of it (four
// times the memory): for a small set scored often, such as a node's
// holdout, that is cheaper than scaling its rows at every pass.
func (d *Dataset) Floats() *Dataset {
	if d.X != nil {
		return d
	}
	f := *d
	f.X, f.Pix = d.RowsTo(make([]float32, len(d.Pix)), 0, d.N), nil
	return &f
}

// ClassCounts returns how many samples carry each label.
func (d *Dataset) ClassCounts() []int {
	c := make([]int, d.Classes)
	for _, l := range d.Y {
		c[l]++
	}
	return c
}

// Subset copies the samples at idx into a new dataset of the same form and
// name.
func (d *Dataset) Subset(idx []int) (*Dataset, error) {
	y := make([]uint8, 0, len(idx))
	for _, i := range idx {
		if i < 0 || i >= d.N {
			return nil, fmt.Errorf("%w: %s: index %d out of range [0,%d)", ErrBadDataset, d.Name, i, d.N)
		}
		y = append(y, d.Y[i])
	}
	if d.X == nil {
		pix := make([]uint8, 0, len(idx)*d.Dim)
		for _, i := range idx {
			pix = append(pix, d.Pix[i*d.Dim:(i+1)*d.Dim]...)
		}
		return NewByteDataset(d.Name, pix, y, d.Dim, d.Classes)
	}
	x := make([]float32, 0, len(idx)*d.Dim)
	for _, i := range idx {
		x = append(x, d.X[i*d.Dim:(i+1)*d.Dim]...)
	}
	return NewDataset(d.Name, x, y, d.Dim, d.Classes)
}

// MNIST sizes, checked when the files are read.
const (
	MNISTTrainSize = 60000
	MNISTTestSize  = 10000
	MNISTDim       = 28 * 28
	MNISTClasses   = 10
)

// FromIDX builds a byte dataset from an images array (count×rows×cols or
// count×features) and a labels array (count), without copying either.
func FromIDX(name string, images, labels *IDX, classes int) (*Dataset, error) {
	if len(images.Dims) < 2 {
		return nil, fmt.Errorf("%w: %s: images have dimensions %v, want count×features", ErrBadDataset, name, images.Dims)
	}
	if len(labels.Dims) != 1 {
		return nil, fmt.Errorf("%w: %s: labels have dimensions %v, want one", ErrBadDataset, name, labels.Dims)
	}
	n := images.Dims[0]
	if labels.Dims[0] != n {
		return nil, fmt.Errorf("%w: %s: %d images but %d labels", ErrBadDataset, name, n, labels.Dims[0])
	}
	return NewByteDataset(name, images.Data, labels.Data, len(images.Data)/n, classes)
}

// The base names of the standard files; a directory may hold each one
// gzip-compressed (".gz") or plain.
const (
	mnistTrainImages = "train-images-idx3-ubyte"
	mnistTrainLabels = "train-labels-idx1-ubyte"
	mnistTestImages  = "t10k-images-idx3-ubyte"
	mnistTestLabels  = "t10k-labels-idx1-ubyte"
)

// LoadMNIST returns the 60000-sample training set and the 10000-sample test
// set. dir == "" reads the files embedded in the binary (through the cache
// in MNISTCacheDir, see loadEmbeddedIDX); otherwise dir must hold the four
// files under their standard names, each gzip-compressed (".gz") or plain.
func LoadMNIST(dir string) (trainSet, testSet *Dataset, err error) {
	if trainSet, err = loadMNISTPair(dir, mnistTrainImages, mnistTrainLabels, MNISTTrainSize); err != nil {
		return nil, nil, err
	}
	if testSet, err = loadMNISTPair(dir, mnistTestImages, mnistTestLabels, MNISTTestSize); err != nil {
		return nil, nil, err
	}
	return trainSet, testSet, nil
}

// loadMNISTPair reads one images file and one labels file of n samples.
func loadMNISTPair(dir, imagesBase, labelsBase string, n int) (*Dataset, error) {
	var arr [2]*IDX
	files := []struct {
		base string
		size int64 // of a good file's data
	}{{imagesBase, int64(n) * MNISTDim}, {labelsBase, int64(n)}}
	cache := ""
	if dir == "" {
		cache = MNISTCacheDir()
	}
	for i, file := range files {
		if dir == "" {
			var err error
			if arr[i], _, err = loadEmbeddedIDX(cache, file.base, file.size); err != nil {
				return nil, fmt.Errorf("read MNIST embedded %s.gz: %w", file.base, err)
			}
			continue
		}
		f, where, err := openMNIST(dir, file.base)
		if err != nil {
			return nil, fmt.Errorf("train: open MNIST %s: %w", where, err)
		}
		arr[i], err = readIDX(f, 0, file.size)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read MNIST %s: %w", where, err)
		}
	}
	if err := checkMNIST(arr[0], arr[1], n); err != nil {
		return nil, fmt.Errorf("MNIST %s and %s: %w", imagesBase, labelsBase, err)
	}
	return FromIDX("mnist", arr[0], arr[1], MNISTClasses)
}

// openMNIST opens base.gz or base from dir, and says where it looked.
func openMNIST(dir, base string) (io.ReadCloser, string, error) {
	for _, name := range []string{base + ".gz", base} {
		p := filepath.Join(dir, name)
		f, err := os.Open(p)
		if err == nil {
			return f, p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, p, err
		}
	}
	return nil, filepath.Join(dir, base+"[.gz]"), fs.ErrNotExist
}

func checkMNIST(images, labels *IDX, n int) error {
	if len(images.Dims) != 3 || images.Dims[0] != n || images.Dims[1] != 28 || images.Dims[2] != 28 {
		return fmt.Errorf("%w: images have dimensions %v, want [%d 28 28]", ErrBadDataset, images.Dims, n)
	}
	if len(labels.Dims) != 1 || labels.Dims[0] != n {
		return fmt.Errorf("%w: labels have dimensions %v, want [%d]", ErrBadDataset, labels.Dims, n)
	}
	return nil
}
