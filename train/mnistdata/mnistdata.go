package mnistdata

import (
	"embed"
	"io/fs"
)

// The standard MNIST file names, as shipped by the original distribution.
const (
	TrainImages = "train-images-idx3-ubyte.gz"
	TrainLabels = "train-labels-idx1-ubyte.gz"
	TestImages  = "t10k-images-idx3-ubyte.gz"
	TestLabels  = "t10k-labels-idx1-ubyte.gz"
)

// FS holds the four files at its root under the names above.
//
//go:embed *.gz
var FS embed.FS

// Open opens one of the embedded files by its name.
func Open(name string) (fs.File, error) { return FS.Open(name) }
