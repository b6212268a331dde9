// Package train owns local training: datasets (MNIST from IDX files, embedded
// or on disk, and a synthetic generator), shards (iid and Dirichlet
// label-skewed), models (softmax regression and ReLU MLPs laid out like
// PyTorch's nn.Linear in one flat params vector), SGD with momentum and
// weight decay, learning-rate schedules driven by progress in samples,
// evaluation, and the built-in Trainer with its heterogeneity emulation
// (Slowdown).
//
// MNIST stays in memory as the bytes of its files (Dataset.Pix, a quarter
// of the floats' size); rows become float32 features only as a batch or an
// evaluation chunk gathers them, with the same bits as floats scaled ahead.
//
// The math (Model, SGD, Schedule, shards, Evaluate) is plain functions on
// slices with no goroutines or clock. The Trainer adds the state a node
// needs: one goroutine steps it, others snapshot it, merge into it between
// steps with Apply, and checkpoint it with State and Restore.
//
//	trainSet, testSet, err := train.LoadMNIST("") // "" = embedded files
//	if err != nil { ... }
//	cfg := train.DefaultConfig() // mlp:256,128, batch 64, 3 epochs
//	t, err := train.New(cfg, trainSet)
//	if err != nil { ... }
//	for {
//		st, err := t.Step(ctx)
//		if errors.Is(err, train.ErrDone) { break }
//		if err != nil { ... }
//		_ = st.Loss
//	}
//	res, err := t.Evaluate(testSet) // res.Accuracy ≈ 0.98
package train
