package averaging_test

import (
	"fmt"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/params"
)

func ExampleParseStaleness() {
	f, err := averaging.ParseStaleness("hinge:10,4")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range []float64{0, 4, 5, 14} {
		fmt.Printf("%v f(%v) = %.4f\n", f, s, f.Weight(s))
	}
	_, err = averaging.ParseStaleness("exp:2")
	fmt.Println(err)
	// Output:
	// hinge:10,4 f(0) = 1.0000
	// hinge:10,4 f(4) = 1.0000
	// hinge:10,4 f(5) = 0.0909
	// hinge:10,4 f(14) = 0.0099
	// averaging: bad staleness function: exp: d must be in (0,1], got 2 (in "exp:2")
}

func ExampleMerger_Merge() {
	fp := params.NewFingerprint(params.MustLayout(params.TensorSpec{Name: "w", Shape: []int{2}}), "synthetic", "demo")
	w := []float32{0, 10}
	progress := params.Progress(640) // 10 steps of 64
	remote := params.Snapshot{Fingerprint: fp, Progress: 480, Params: []float32{4, 2}}

	// alpha 0.5, poly:0.5, lag relative, momentum mix: the remote model is
	// 25% behind ours.
	m := averaging.DefaultMerger()
	out, err := m.Merge(averaging.Local{Fingerprint: fp, Params: w, Progress: &progress, Batch: 64}, remote, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("staleness %v, weight %.4f\n", out.Staleness, out.Weight)
	fmt.Println("params", w, "progress", float64(progress))
	// Output:
	// staleness 25, weight 0.0981
	// params [0.39223227 9.215535] progress 624.3107091889453
}
