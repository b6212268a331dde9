package train

// SGD is stochastic gradient descent with momentum and L2 weight decay, in
// PyTorch's formulation (torch.optim.SGD, dampening 0, no Nesterov):
//
//	g  <- grad + WeightDecay·w
//	m  <- Momentum·m + g
//	w  <- w - lr·m
//
// The momentum buffer m is a flat vector with the parameters' layout: it is
// optimizer state that checkpoints store and merges keep, reset or mix.
type SGD struct {
	Momentum    float64
	WeightDecay float64
}

// Update applies one step in place. w, mom and grad must have equal lengths.
//
// On amd64 with AVX the bulk runs eight values at a time (about a quarter
// of a default step's time in the scalar loop); each value goes through
// the same float32 multiplications, additions and subtraction in the same
// order either way, unfused, so both paths give the same bits and a
// checkpoint resumes identically on any machine.
func (o SGD) Update(w, mom, grad []float32, lr float64) {
	mu, wd, eta := float32(o.Momentum), float32(o.WeightDecay), float32(lr)
	w = w[:len(grad)]
	mom = mom[:len(grad)]
	n := sgdUpdateVec(w, mom, grad, mu, wd, eta)
	sgdUpdateScalar(w[n:], mom[n:], grad[n:], mu, wd, eta)
}

// sgdUpdateScalar is Update's loop; w and mom are at least len(grad) long.
func sgdUpdateScalar(w, mom, grad []float32, mu, wd, eta float32) {
	w = w[:len(grad)]
	mom = mom[:len(grad)]
	for i, g := range grad {
		// Every product rounded before its add: no fused multiply-add,
		// which Go uses on arm64 and for GOAMD64=v3, so that every build
		// gives the AVX loop's bits.
		g += float32(wd * w[i])
		m := float32(mu*mom[i]) + g
		mom[i] = m
		w[i] -= float32(eta * m)
	}
}
