package gemm_test

import (
	"fmt"

	"github.com/meshtrain/meshtrain/train/internal/gemm"
)

// A dense layer's forward pass: Y = X·Wᵀ for a batch of two inputs of three
// features and a layer of two outputs, weights stored [out, in].
func ExampleSgemm() {
	x := []float32{
		1, 2, 3,
		4, 5, 6,
	}
	w := []float32{
		1, 0, -1,
		0.5, 0.5, 0.5,
	}
	y := make([]float32, 2*2)
	gemm.Sgemm(false, true, 2, 2, 3, 1, x, 3, w, 3, 0, y, 2)
	fmt.Println(y)
	// Output: [-2 3 -2 7.5]
}
