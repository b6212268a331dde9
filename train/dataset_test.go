package train

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/meshtrain/meshtrain/train/mnistdata"
)

func TestNewDatasetRejects(t *testing.T) {
	x := make([]float32, 6)
	cases := []struct {
		name         string
		x            []float32
		y            []uint8
		dim, classes int
	}{
		{"zero dim", x, []uint8{0, 1}, 0, 2},
		{"one class", x, []uint8{0, 0}, 3, 1},
		{"no samples", nil, nil, 3, 2},
		{"short x", x[:5], []uint8{0, 1}, 3, 2},
		{"label too big", x, []uint8{0, 2}, 3, 2},
	}
	for _, c := range cases {
		if _, err := NewDataset("t", c.x, c.y, c.dim, c.classes); !errors.Is(err, ErrBadDataset) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	d, err := NewDataset("t", x, []uint8{0, 1}, 3, 2)
	if err != nil || d.N != 2 || d.Dim != 3 {
		t.Fatalf("valid dataset: %+v, %v", d, err)
	}
}

// embeddedTestSet decodes the embedded MNIST test set once per test binary.
var embeddedTestSet = sync.OnceValues(func() (*Dataset, error) {
	return loadMNISTPair("", mnistTestImages, mnistTestLabels, MNISTTestSize)
})

// The embedded test files decode to 10000 labelled 28×28 images in [0,1];
// the training files have the same format and go through the same code
// (decoding them is left to the CLI's end-to-end tier).
func TestEmbeddedMNISTTestSet(t *testing.T) {
	d, err := embeddedTestSet()
	if err != nil {
		t.Fatal(err)
	}
	if d.N != MNISTTestSize || d.Dim != MNISTDim || d.Classes != MNISTClasses || d.Name != "mnist" {
		t.Fatalf("N %d Dim %d Classes %d Name %q", d.N, d.Dim, d.Classes, d.Name)
	}
	if d.X != nil || len(d.Pix) != d.N*d.Dim {
		t.Fatalf("%d float and %d byte features, want only bytes", len(d.X), len(d.Pix))
	}
	var lo, hi float32 = 1, 0
	row := make([]float32, d.Dim)
	for i := range d.N {
		d.RowTo(row, i)
		for _, v := range row {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if lo != 0 || hi != 1 {
		t.Fatalf("pixels span [%v,%v], want [0,1]", lo, hi)
	}
	for c, n := range d.ClassCounts() {
		if n < 800 || n > 1200 {
			t.Fatalf("class %d has %d test samples", c, n)
		}
	}
	for _, name := range []string{mnistdata.TrainImages, mnistdata.TrainLabels, mnistdata.TestImages, mnistdata.TestLabels} {
		if st, err := fs.Stat(mnistdata.FS, name); err != nil || st.Size() < 1000 {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

func TestLoadMNISTDirErrors(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := LoadMNIST(dir); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "train-images-idx3-ubyte") {
		t.Fatalf("empty dir: %v", err)
	}
	// Plain (uncompressed) files are accepted, and their shapes checked:
	// a tiny set under the standard names is refused as not MNIST.
	write := func(name string, dims []int, data []byte) {
		var b bytes.Buffer
		if err := WriteIDX(&b, dims, data); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("train-images-idx3-ubyte", []int{2, 28, 28}, make([]byte, 2*28*28))
	write("train-labels-idx1-ubyte", []int{2}, []byte{1, 2})
	write("t10k-images-idx3-ubyte", []int{1, 28, 28}, make([]byte, 28*28))
	write("t10k-labels-idx1-ubyte", []int{1}, []byte{3})
	_, _, err := LoadMNIST(dir)
	if !errors.Is(err, ErrBadDataset) || !strings.Contains(err.Error(), "train-images") {
		t.Fatalf("tiny set: %v", err)
	}
	// A corrupt file is reported with its path.
	if err := os.WriteFile(filepath.Join(dir, "train-images-idx3-ubyte.gz"), []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = LoadMNIST(dir)
	if !errors.Is(err, ErrBadIDX) || !strings.Contains(err.Error(), "train-images-idx3-ubyte.gz") {
		t.Fatalf("corrupt file: %v", err)
	}
}

// A directory holding copies of the embedded test-set files, one
// gzip-compressed and one plain, loads like the embedded data. (The training
// files go through the same code; decoding them is left to the CLI tier.)
func TestLoadMNISTDirMatchesEmbedded(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{mnistdata.TestImages, mnistdata.TestLabels} {
		f, err := mnistdata.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if name == mnistdata.TestLabels {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
			name = strings.TrimSuffix(name, ".gz")
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fromDir, err := loadMNISTPair(dir, mnistTestImages, mnistTestLabels, MNISTTestSize)
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := embeddedTestSet()
	if err != nil {
		t.Fatal(err)
	}
	if fromDir.N != MNISTTestSize || !bytes.Equal(fromDir.Y, embedded.Y) || !bytes.Equal(fromDir.Pix, embedded.Pix) {
		t.Fatal("directory and embedded data differ")
	}
	if _, err := loadMNISTPair(dir, mnistTestImages, mnistTestLabels, MNISTTrainSize); !errors.Is(err, ErrBadDataset) {
		t.Fatalf("wrong count accepted: %v", err)
	}
}

func TestSynthetic(t *testing.T) {
	c := DefaultSynthetic()
	a, err := Synthetic(c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Synthetic(c)
	if !bytes.Equal(a.Y, b.Y) || a.X[100] != b.X[100] || a.Name != b.Name {
		t.Fatal("same seed, different data")
	}
	c.Seed = 2
	other, _ := Synthetic(c)
	if other.X[100] == a.X[100] || other.Name == a.Name {
		t.Fatal("different seeds, same data")
	}
	for cl, n := range a.ClassCounts() {
		if n != c.N/c.Classes {
			t.Fatalf("class %d has %d samples", cl, n)
		}
	}
	for _, bad := range []SyntheticConfig{{}, {N: 10, Dim: 2, Classes: 1, Clusters: 1}, {N: 10, Dim: 2, Classes: 2, Clusters: 0}, {N: 10, Dim: 2, Classes: 2, Clusters: 1, Noise: -1}} {
		if _, err := Synthetic(bad); !errors.Is(err, ErrBadDataset) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestSubset(t *testing.T) {
	d, _ := Synthetic(DefaultSynthetic())
	s, err := d.Subset([]int{5, 7})
	if err != nil {
		t.Fatal(err)
	}
	got, want := make([]float32, d.Dim), make([]float32, d.Dim)
	s.RowTo(got, 0)
	d.RowTo(want, 5)
	if s.N != 2 || s.Y[1] != d.Y[7] || got[3] != want[3] {
		t.Fatalf("subset %+v", s)
	}
	if _, err := d.Subset([]int{d.N}); !errors.Is(err, ErrBadDataset) {
		t.Fatalf("out of range: %v", err)
	}
}
