package train

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/meshtrain/meshtrain/params"
)

func TestParseModel(t *testing.T) {
	good := map[string]string{
		"softmax":     "fc1.weight[10,784];fc1.bias[10]",
		"mlp:256,128": "fc1.weight[256,784];fc1.bias[256];fc2.weight[128,256];fc2.bias[128];fc3.weight[10,128];fc3.bias[10]",
		"mlp:32":      "fc1.weight[32,784];fc1.bias[32];fc2.weight[10,32];fc2.bias[10]",
		"mlp:007":     "fc1.weight[7,784];fc1.bias[7];fc2.weight[10,7];fc2.bias[10]",
	}
	for spec, layout := range good {
		m, err := ParseModel(spec, 784, 10)
		if err != nil {
			t.Fatalf("%q: %v", spec, err)
		}
		if got := m.Layout().String(); got != layout {
			t.Errorf("%q: layout %s", spec, got)
		}
		if m.Size() != m.Layout().Size() || m.Dim() != 784 || m.Classes() != 10 {
			t.Errorf("%q: sizes", spec)
		}
	}
	if m, _ := ParseModel("mlp:007", 784, 10); m.Spec() != "mlp:7" {
		t.Errorf("canonical spec %q", m.Spec())
	}
	bad := []string{"", "mlp", "mlp:", "mlp:0", "mlp:abc", "mlp:256,", "mlp:,256", "mlp:256,,128",
		"mlp:-5", "mlp:+5", "mlp: 5", "mlp:65537", "mlp:1,2,3,4,5,6,7,8,9", "Softmax", "cnn", "mlp:9999999999"}
	for _, spec := range bad {
		_, err := ParseModel(spec, 784, 10)
		if !errors.Is(err, ErrBadModel) {
			t.Errorf("%q: %v", spec, err)
		}
	}
	if _, err := ParseModel("softmax", 0, 10); !errors.Is(err, ErrBadModel) {
		t.Error("zero inputs accepted")
	}
	// Too many parameters overall is refused through the layout limit.
	if _, err := ParseModel("mlp:65536,65536,65536", 65536, 10); !errors.Is(err, ErrBadModel) {
		t.Errorf("huge model: %v", err)
	}
}

// An exported model reads back through safetensors into the same model.
func TestModelFromLayoutSafetensors(t *testing.T) {
	m, _ := ParseModel("mlp:16,8", 12, 3)
	w := make([]float32, m.Size())
	if err := m.Init(w, 5); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := params.WriteSafetensors(&buf, m.Layout(), w, map[string]string{"model": m.Spec()}); err != nil {
		t.Fatal(err)
	}
	l, back, meta, err := params.ReadSafetensors(&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := ModelFromLayout(meta["model"], l)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Spec() != m.Spec() || m2.Dim() != 12 || m2.Classes() != 3 || back[7] != w[7] {
		t.Fatal("round trip changed the model")
	}
	for _, spec := range []string{"softmax", "mlp:16", "mlp:16,9", "mlp:x"} {
		if _, err := ModelFromLayout(spec, l); !errors.Is(err, ErrBadModel) {
			t.Errorf("%q fits a mlp:16,8 layout: %v", spec, err)
		}
	}
}

func TestInit(t *testing.T) {
	m, _ := ParseModel("mlp:64", 100, 10)
	a := make([]float32, m.Size())
	b := make([]float32, m.Size())
	if err := m.Init(a, 1); err != nil {
		t.Fatal(err)
	}
	_ = m.Init(b, 1)
	if !slicesEqual(a, b) {
		t.Fatal("same seed, different init")
	}
	_ = m.Init(b, 2)
	if slicesEqual(a, b) {
		t.Fatal("different seeds, same init")
	}
	// PyTorch's nn.Linear bound: 1/sqrt(fan_in), and the draws fill it.
	for l, fanIn := range []int{100, 64} {
		bound := float32(1 / math.Sqrt(float64(fanIn)))
		var mx float32
		for _, v := range m.weight(a, l) {
			mx = max(mx, float32(math.Abs(float64(v))))
		}
		if mx > bound || mx < 0.9*bound {
			t.Errorf("layer %d: max |w| %v, bound %v", l+1, mx, bound)
		}
	}
	if err := m.Init(a[:5], 1); err == nil {
		t.Fatal("short vector accepted")
	}
}

func slicesEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// refLoss recomputes the mean cross-entropy in float64 with plain loops,
// independently of the gemm-based code.
func refLoss(m *Model, w []float64, x []float32, y []uint8) float64 {
	b := len(y)
	L := m.layers()
	total := 0.0
	for r := range b {
		in := make([]float64, m.sizes[0])
		for j := range in {
			in[j] = float64(x[r*m.sizes[0]+j])
		}
		for l := range L {
			nIn, nOut := m.sizes[l], m.sizes[l+1]
			out := make([]float64, nOut)
			for o := range nOut {
				s := w[m.bOff[l]+o]
				for i := range nIn {
					s += w[m.wOff[l]+o*nIn+i] * in[i]
				}
				if l < L-1 {
					s = math.Max(s, 0)
				}
				out[o] = s
			}
			in = out
		}
		mx := in[0]
		for _, v := range in {
			mx = math.Max(mx, v)
		}
		sum := 0.0
		for _, v := range in {
			sum += math.Exp(v - mx)
		}
		total += mx + math.Log(sum) - in[y[r]]
	}
	return total / float64(b)
}

func TestGradientCheck(t *testing.T) {
	for _, spec := range []string{"softmax", "mlp:7", "mlp:6,5"} {
		t.Run(spec, func(t *testing.T) {
			m, err := ParseModel(spec, 9, 4)
			if err != nil {
				t.Fatal(err)
			}
			const batch = 5
			r := rand.New(rand.NewPCG(1, 2))
			x := make([]float32, batch*9)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			y := []uint8{0, 3, 1, 2, 3}
			w := make([]float32, m.Size())
			_ = m.Init(w, 3)
			grad := make([]float32, m.Size())
			ws := m.NewWorkspace(batch)
			loss, err := m.Grad(ws, w, x, y, grad)
			if err != nil {
				t.Fatal(err)
			}
			w64 := make([]float64, len(w))
			for i, v := range w {
				w64[i] = float64(v)
			}
			if ref := refLoss(m, w64, x, y); math.Abs(ref-loss) > 1e-5 {
				t.Fatalf("loss %v, float64 reference %v", loss, ref)
			}
			const h = 1e-5
			worst := 0.0
			for i := range w64 {
				orig := w64[i]
				w64[i] = orig + h
				up := refLoss(m, w64, x, y)
				w64[i] = orig - h
				down := refLoss(m, w64, x, y)
				w64[i] = orig
				num := (up - down) / (2 * h)
				diff := math.Abs(num-float64(grad[i])) / math.Max(1e-2, math.Abs(num))
				worst = math.Max(worst, diff)
				if diff > 1e-3 {
					t.Fatalf("parameter %d: analytic %v, numeric %v", i, grad[i], num)
				}
			}
			t.Logf("%d parameters, worst relative error %.2g", len(w), worst)
		})
	}
}

func TestGradAndLossAgree(t *testing.T) {
	d, _ := Synthetic(DefaultSynthetic())
	m, _ := ParseModel("mlp:20", d.Dim, d.Classes)
	w := make([]float32, m.Size())
	_ = m.Init(w, 1)
	ws := m.NewWorkspace(64)
	x, y := d.X[:64*d.Dim], d.Y[:64]
	loss, err := m.Grad(ws, w, x, y, make([]float32, len(w)))
	if err != nil {
		t.Fatal(err)
	}
	sum, correct, err := m.Loss(ws, w, x, y)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(sum/64-loss) > 1e-5 || correct < 0 || correct > 64 {
		t.Fatalf("Grad loss %v, Loss mean %v", loss, sum/64)
	}
	// A short last batch works in the same workspace.
	if _, err := m.Grad(ws, w, x[:3*d.Dim], y[:3], make([]float32, len(w))); err != nil {
		t.Fatal(err)
	}
}

func TestGradRejectsBadInput(t *testing.T) {
	m, _ := ParseModel("softmax", 3, 2)
	ws := m.NewWorkspace(2)
	w := make([]float32, m.Size())
	g := make([]float32, m.Size())
	x := make([]float32, 6)
	cases := map[string]func() error{
		"short w":     func() error { _, err := m.Grad(ws, w[:1], x, []uint8{0, 1}, g); return err },
		"short grad":  func() error { _, err := m.Grad(ws, w, x, []uint8{0, 1}, g[:1]); return err },
		"big batch":   func() error { _, err := m.Grad(ws, w, make([]float32, 9), []uint8{0, 1, 0}, g); return err },
		"empty batch": func() error { _, err := m.Grad(ws, w, nil, nil, g); return err },
		"short x":     func() error { _, err := m.Grad(ws, w, x[:5], []uint8{0, 1}, g); return err },
		"label":       func() error { _, err := m.Grad(ws, w, x, []uint8{0, 2}, g); return err },
		"loss label":  func() error { _, _, err := m.Loss(ws, w, x, []uint8{0, 2}); return err },
		"foreign space": func() error {
			_, err := m.Grad(mustModel(t, "mlp:4", 3, 2).NewWorkspace(2), w, x, []uint8{0, 1}, g)
			return err
		},
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, ErrBadModel) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func mustModel(t testing.TB, spec string, dim, classes int) *Model {
	t.Helper()
	m, err := ParseModel(spec, dim, classes)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Huge logits must not overflow the loss: log-softmax subtracts the max.
func TestLossStableForLargeLogits(t *testing.T) {
	m := mustModel(t, "softmax", 1, 2)
	w := []float32{1000, -1000, 0, 0} // fc1.weight [2,1], fc1.bias [2]
	ws := m.NewWorkspace(1)
	g := make([]float32, 4)
	loss, err := m.Grad(ws, w, []float32{1}, []uint8{1}, g)
	if err != nil || math.IsInf(loss, 0) || math.IsNaN(loss) || math.Abs(loss-2000) > 1e-3 {
		t.Fatalf("loss %v, %v", loss, err)
	}
	if math.IsNaN(float64(g[0])) || math.Abs(float64(g[0])-1) > 1e-6 {
		t.Fatalf("gradient %v", g)
	}
}

func TestFLOPs(t *testing.T) {
	m := mustModel(t, "mlp:256,128", 784, 10)
	fwd, step := m.FLOPs(64)
	sum := int64(784*256 + 256*128 + 128*10)
	if fwd != 2*64*sum || step != 2*64*(3*sum-784*256) {
		t.Fatalf("forward %d step %d", fwd, step)
	}
	if !strings.HasPrefix(m.Spec(), "mlp:") {
		t.Fatal(m.Spec())
	}
}
