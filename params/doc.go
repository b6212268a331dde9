// Package params owns the model's parameters as one flat float32 vector and
// everything needed to agree on what that vector means: its Layout (named
// tensors with shapes, laid end to end), the Fingerprint that two peers must
// share before they may merge, the Progress counter that says how many
// training samples a model embodies, and safetensors I/O.
//
// It is a leaf package: no imports of ours, no goroutines, no I/O beyond the
// io.Reader and io.Writer it is handed.
//
//	l, _ := params.NewLayout(
//		params.TensorSpec{Name: "fc1.weight", Shape: []int{128, 784}},
//		params.TensorSpec{Name: "fc1.bias", Shape: []int{128}},
//	)
//	w := make([]float32, l.Size())
//	fp := params.NewFingerprint(l, "mnist", "main")
//	err := params.WriteSafetensors(f, l, w, map[string]string{"fingerprint": fp.String()})
package params
