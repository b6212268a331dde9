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
func (o SGD) Update(w, mom, grad []float32, lr float64) {
	mu, wd, eta := float32(o.Momentum), float32(o.WeightDecay), float32(lr)
	w = w[:len(grad)]
	mom = mom[:len(grad)]
	for i, g := range grad {
		g += wd * w[i]
		m := mu*mom[i] + g
		mom[i] = m
		w[i] -= eta * m
	}
}
