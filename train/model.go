package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/train/internal/gemm"
)

// Limits on the model string, so a typo or a hostile peer's metadata cannot
// ask for an absurd network.
const (
	MaxHiddenLayers = 8
	MaxWidth        = 1 << 16
)

// Model is a feed-forward classifier: softmax regression (no hidden layer)
// or an MLP with ReLU after every hidden layer. Its parameters live in one
// flat vector laid out as PyTorch's nn.Linear stores them, layer by layer:
// "fc1.weight" [out,in], "fc1.bias" [out], ..., "fcL.weight", "fcL.bias".
// A Model holds no parameters or buffers; it is immutable and safe to share.
type Model struct {
	spec   string
	sizes  []int // input, hidden..., classes
	layout params.Layout
	wOff   []int // offset of fc(l+1).weight
	bOff   []int // offset of fc(l+1).bias
}

// ParseModel builds the model named by spec for inputs of dimension dim and
// the given number of classes. spec is "softmax" or "mlp:H1,H2,..." with
// 1 to MaxHiddenLayers hidden widths, each 1 to MaxWidth.
func ParseModel(spec string, dim, classes int) (*Model, error) {
	hidden, err := parseHidden(spec)
	if err != nil {
		return nil, err
	}
	if dim < 1 || dim > params.MaxElements || classes < 2 || classes > MaxWidth {
		return nil, fmt.Errorf("%w: %q for %d inputs and %d classes", ErrBadModel, spec, dim, classes)
	}
	sizes := append(append([]int{dim}, hidden...), classes)
	specs := make([]params.TensorSpec, 0, 2*(len(sizes)-1))
	for l := 1; l < len(sizes); l++ {
		specs = append(specs,
			params.TensorSpec{Name: fmt.Sprintf("fc%d.weight", l), Shape: []int{sizes[l], sizes[l-1]}},
			params.TensorSpec{Name: fmt.Sprintf("fc%d.bias", l), Shape: []int{sizes[l]}})
	}
	layout, err := params.NewLayout(specs...)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadModel, spec, err)
	}
	m := &Model{spec: canonicalSpec(hidden), sizes: sizes, layout: layout}
	for _, t := range layout.Tensors() {
		if strings.HasSuffix(t.Name, ".weight") {
			m.wOff = append(m.wOff, t.Offset)
		} else {
			m.bOff = append(m.bOff, t.Offset)
		}
	}
	return m, nil
}

// ModelFromLayout rebuilds a model from its spec string and a layout read
// back from a file (e.g. safetensors), inferring the input dimension and the
// classes from the first and last layers. It fails unless the layout is
// exactly the one the model would have.
func ModelFromLayout(spec string, l params.Layout) (*Model, error) {
	hidden, err := parseHidden(spec)
	if err != nil {
		return nil, err
	}
	first, ok1 := l.Lookup("fc1.weight")
	last, ok2 := l.Lookup(fmt.Sprintf("fc%d.weight", len(hidden)+1))
	if !ok1 || !ok2 || len(first.Shape) != 2 || len(last.Shape) != 2 {
		return nil, fmt.Errorf("%w: layout %q does not fit model %q", ErrBadModel, l.String(), spec)
	}
	m, err := ParseModel(spec, first.Shape[1], last.Shape[0])
	if err != nil {
		return nil, err
	}
	if !m.layout.Equal(l) {
		return nil, fmt.Errorf("%w: layout %q does not fit model %q (want %q)", ErrBadModel, l.String(), spec, m.layout.String())
	}
	return m, nil
}

func parseHidden(spec string) ([]int, error) {
	if spec == "softmax" {
		return nil, nil
	}
	rest, ok := strings.CutPrefix(spec, "mlp:")
	if !ok {
		if spec == "mlp" {
			return nil, fmt.Errorf("%w: %q needs hidden layer widths, e.g. \"mlp:256,128\"", ErrBadModel, spec)
		}
		return nil, fmt.Errorf("%w: %q: want \"softmax\" or \"mlp:H1,H2,...\"", ErrBadModel, spec)
	}
	if rest == "" {
		return nil, fmt.Errorf("%w: %q has no hidden layer widths, e.g. \"mlp:256,128\"", ErrBadModel, spec)
	}
	fields := strings.Split(rest, ",")
	if len(fields) > MaxHiddenLayers {
		return nil, fmt.Errorf("%w: %q has %d hidden layers (at most %d)", ErrBadModel, spec, len(fields), MaxHiddenLayers)
	}
	hidden := make([]int, len(fields))
	for i, f := range fields {
		if f == "" || len(f) > 9 || strings.TrimLeft(f, "0123456789") != "" {
			return nil, fmt.Errorf("%w: %q: hidden width %q is not a positive integer", ErrBadModel, spec, f)
		}
		n, _ := strconv.Atoi(f)
		if n < 1 || n > MaxWidth {
			return nil, fmt.Errorf("%w: %q: hidden width %d not in [1,%d]", ErrBadModel, spec, n, MaxWidth)
		}
		hidden[i] = n
	}
	return hidden, nil
}

func canonicalSpec(hidden []int) string {
	if len(hidden) == 0 {
		return "softmax"
	}
	parts := make([]string, len(hidden))
	for i, h := range hidden {
		parts[i] = strconv.Itoa(h)
	}
	return "mlp:" + strings.Join(parts, ",")
}

// Spec is the canonical model string ("softmax", "mlp:256,128"): store it
// next to exported parameters so ModelFromLayout can rebuild the model.
func (m *Model) Spec() string { return m.spec }

// Layout describes the flat parameter vector; the fingerprint hashes it.
func (m *Model) Layout() params.Layout { return m.layout }

// Size is the number of parameters.
func (m *Model) Size() int { return m.layout.Size() }

// Dim is the number of input features and Classes the number of outputs.
func (m *Model) Dim() int     { return m.sizes[0] }
func (m *Model) Classes() int { return m.sizes[len(m.sizes)-1] }

// Sizes returns the layer widths, input first and classes last.
func (m *Model) Sizes() []int { return append([]int(nil), m.sizes...) }

func (m *Model) layers() int { return len(m.sizes) - 1 }

func (m *Model) weight(v []float32, l int) []float32 {
	return v[m.wOff[l] : m.wOff[l]+m.sizes[l+1]*m.sizes[l]]
}

func (m *Model) bias(v []float32, l int) []float32 {
	return v[m.bOff[l] : m.bOff[l]+m.sizes[l+1]]
}

// Init fills w as torch.nn.Linear.reset_parameters does: weights and biases
// uniform in ±1/sqrt(fan_in) (Kaiming-uniform with a = sqrt(5)), drawn from
// a generator seeded by seed, so every peer with the same seed starts from
// the same model.
func (m *Model) Init(w []float32, seed uint64) error {
	if err := m.layout.Check(w); err != nil {
		return fmt.Errorf("train: init %s: %w", m.spec, err)
	}
	r := rand.New(rand.NewPCG(seed, 0x1417))
	for l := range m.layers() {
		bound := 1 / math.Sqrt(float64(m.sizes[l]))
		for _, v := range [][]float32{m.weight(w, l), m.bias(w, l)} {
			for i := range v {
				v[i] = float32((2*r.Float64() - 1) * bound)
			}
		}
	}
	return nil
}

// FLOPs counts the multiply-adds (×2) of the matrix products for a batch:
// forward alone, and a training step (forward, weight gradients and the
// input gradients of every layer but the first).
func (m *Model) FLOPs(batch int) (forward, step int64) {
	var sum, first int64
	for l := range m.layers() {
		p := int64(m.sizes[l]) * int64(m.sizes[l+1])
		sum += p
		if l == 0 {
			first = p
		}
	}
	b := int64(batch)
	return 2 * b * sum, 2 * b * (3*sum - first)
}

// Workspace holds the activations and deltas of one batch size. It belongs
// to one goroutine at a time; reusing it keeps a training step free of
// allocations.
type Workspace struct {
	batch int
	act   [][]float32 // act[l] for l = 1..L, batch×sizes[l]; act[0] unused
	delta [][]float32 // delta[l] for l = 1..L, batch×sizes[l]
}

// NewWorkspace allocates buffers for batches of up to batch samples.
func (m *Model) NewWorkspace(batch int) *Workspace {
	batch = max(batch, 1)
	ws := &Workspace{batch: batch, act: make([][]float32, len(m.sizes)), delta: make([][]float32, len(m.sizes))}
	for l := 1; l < len(m.sizes); l++ {
		ws.act[l] = make([]float32, batch*m.sizes[l])
		ws.delta[l] = make([]float32, batch*m.sizes[l])
	}
	return ws
}

// Batch is the largest batch the workspace holds.
func (ws *Workspace) Batch() int { return ws.batch }

func (m *Model) check(ws *Workspace, w, x []float32, y []uint8) (int, error) {
	b := len(y)
	switch {
	case len(w) != m.layout.Size():
		return 0, fmt.Errorf("%w: %d parameters for %s (want %d)", ErrBadModel, len(w), m.spec, m.layout.Size())
	case b == 0 || b > ws.batch:
		return 0, fmt.Errorf("%w: batch of %d for a workspace of %d", ErrBadModel, b, ws.batch)
	case len(x) != b*m.sizes[0]:
		return 0, fmt.Errorf("%w: %d features for %d samples of dimension %d", ErrBadModel, len(x), b, m.sizes[0])
	case len(ws.act) != len(m.sizes) || len(ws.act[len(m.sizes)-1]) < ws.batch*m.Classes():
		return 0, fmt.Errorf("%w: workspace made for another model", ErrBadModel)
	}
	return b, nil
}

// forward computes the logits of x (b rows) into ws.act[L].
func (m *Model) forward(ws *Workspace, w, x []float32, b int) []float32 {
	in := x
	for l := range m.layers() {
		nIn, nOut := m.sizes[l], m.sizes[l+1]
		out := ws.act[l+1][:b*nOut]
		bias := m.bias(w, l)
		for r := range b {
			copy(out[r*nOut:(r+1)*nOut], bias)
		}
		// out = in · Wᵀ + bias, with W stored [out,in].
		gemm.Sgemm(false, true, b, nOut, nIn, 1, in, nIn, m.weight(w, l), nIn, 1, out, nOut)
		if l < m.layers()-1 {
			for i, v := range out {
				if v < 0 {
					out[i] = 0
				}
			}
		}
		in = out
	}
	return in
}

// Grad computes the mean cross-entropy loss of the batch (x: len(y) rows,
// y: labels) at parameters w and writes its gradient into grad (same layout
// as w). It allocates nothing.
func (m *Model) Grad(ws *Workspace, w, x []float32, y []uint8, grad []float32) (float64, error) {
	b, err := m.check(ws, w, x, y)
	if err != nil {
		return 0, err
	}
	if len(grad) != len(w) {
		return 0, fmt.Errorf("%w: gradient of %d for %d parameters", ErrBadModel, len(grad), len(w))
	}
	L := m.layers()
	logits := m.forward(ws, w, x, b)
	k := m.Classes()
	d := ws.delta[L][:b*k]
	inv := 1 / float32(b)
	var loss float64
	for r := range b {
		z := logits[r*k : (r+1)*k]
		dz := d[r*k : (r+1)*k]
		label := int(y[r])
		if label >= k {
			return 0, fmt.Errorf("%w: label %d for %d classes", ErrBadModel, label, k)
		}
		mx := z[0]
		for _, v := range z[1:] {
			mx = max(mx, v)
		}
		var sum float32
		for j, v := range z {
			e := float32(math.Exp(float64(v - mx)))
			dz[j] = e
			sum += e
		}
		// Cross-entropy as lse - z_y with lse = mx + log(sum): stable for
		// any logits.
		loss += float64(mx) + math.Log(float64(sum)) - float64(z[label])
		scale := inv / sum
		for j := range dz {
			dz[j] *= scale
		}
		dz[label] -= inv
	}
	for l := L - 1; l >= 0; l-- {
		nIn, nOut := m.sizes[l], m.sizes[l+1]
		dOut := ws.delta[l+1][:b*nOut]
		in := x
		if l > 0 {
			in = ws.act[l][:b*nIn]
		}
		// dW = dOutᵀ · in  ([out,b]·[b,in]).
		gemm.Sgemm(true, false, nOut, nIn, b, 1, dOut, nOut, in, nIn, 0, m.weight(grad, l), nIn)
		gb := m.bias(grad, l)
		clear(gb)
		for r := range b {
			for j, v := range dOut[r*nOut : (r+1)*nOut] {
				gb[j] += v
			}
		}
		if l == 0 {
			break
		}
		// dIn = dOut · W  ([b,out]·[out,in]), then through the ReLU.
		dIn := ws.delta[l][:b*nIn]
		gemm.Sgemm(false, false, b, nIn, nOut, 1, dOut, nOut, m.weight(w, l), nIn, 0, dIn, nIn)
		for i, a := range in {
			if a <= 0 {
				dIn[i] = 0
			}
		}
	}
	return loss / float64(b), nil
}

// Loss returns the summed cross-entropy and the number of correct argmax
// predictions over the batch, without computing gradients.
func (m *Model) Loss(ws *Workspace, w, x []float32, y []uint8) (lossSum float64, correct int, err error) {
	b, err := m.check(ws, w, x, y)
	if err != nil {
		return 0, 0, err
	}
	logits := m.forward(ws, w, x, b)
	k := m.Classes()
	for r := range b {
		z := logits[r*k : (r+1)*k]
		label := int(y[r])
		if label >= k {
			return 0, 0, fmt.Errorf("%w: label %d for %d classes", ErrBadModel, label, k)
		}
		best := 0
		for j, v := range z {
			if v > z[best] {
				best = j
			}
		}
		if best == label {
			correct++
		}
		mx := z[best]
		var sum float64
		for _, v := range z {
			sum += math.Exp(float64(v - mx))
		}
		lossSum += float64(mx) + math.Log(sum) - float64(z[label])
	}
	return lossSum, correct, nil
}
