package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train"
)

func runEval(_ context.Context, e *env, args []string) int {
	fs := newFlags(e, "[flags] MODEL.safetensors")
	dataPath := fs.String("data", "", "folder of MNIST IDX files (default: the copy built into the binary)")
	seed := fs.Uint64("seed", 1, "seed of the synthetic dataset, when the model file does not record it")
	threads := fs.Int("threads", 0, "cores to use (0: all)")
	jsonOut := fs.Bool("json", false, "print JSON")
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return usageError(e, "want exactly one model file, got %d arguments", fs.NArg())
	}
	if *threads < 0 {
		return usageError(e, "--threads must be >= 0")
	}
	if *threads > 0 {
		runtime.GOMAXPROCS(*threads)
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return failure(e, err)
	}
	layout, w, meta, err := params.ReadSafetensors(f, 0)
	f.Close()
	if err != nil {
		return failure(e, fmt.Errorf("%s: %w", fs.Arg(0), err))
	}
	m, err := train.ModelFromLayout(meta[node.MetaModel], layout)
	if err != nil {
		return failure(e, fmt.Errorf("%s: not a meshtrain model: %w", fs.Arg(0), err))
	}
	dataset := meta[node.MetaDataset]
	if dataset == "" {
		dataset = train.DatasetMNIST
	}
	if s, err := strconv.ParseUint(meta[node.MetaSeed], 10, 64); err == nil {
		*seed = s
	}
	_, test, err := train.LoadData(dataset, *dataPath, *seed)
	if err != nil {
		return failure(e, err)
	}
	r, err := train.Evaluate(m, w, test, 0, runtime.GOMAXPROCS(0))
	if err != nil {
		return failure(e, err)
	}
	step, _ := strconv.ParseInt(meta[node.MetaStep], 10, 64)
	if *jsonOut {
		_ = json.NewEncoder(e.stdout).Encode(map[string]any{
			"model": m.Spec(), "dataset": dataset, "step": step, "n": r.N,
			"test_accuracy": r.Accuracy, "test_loss": r.Loss,
		})
		return exitOK
	}
	fmt.Fprintf(e.stdout, "%s (%s, step %d) on %s test set: accuracy %.2f%% (%d/%d), loss %.4f\n",
		fs.Arg(0), m.Spec(), step, dataset, 100*r.Accuracy, r.Correct, r.N, r.Loss)
	return exitOK
}
