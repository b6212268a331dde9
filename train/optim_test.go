package train

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

func TestSGDUpdate(t *testing.T) {
	o := SGD{Momentum: 0.9, WeightDecay: 0.1}
	w := []float32{1, -2}
	m := []float32{0, 0.5}
	g := []float32{0.5, 1}
	o.Update(w, m, g, 0.1)
	// g' = g + 0.1 w = (0.6, 0.8); m = 0.9 m + g' = (0.6, 1.25); w -= 0.1 m.
	want := [][2]float32{{0.94, -2.125}, {0.6, 1.25}}
	for i, got := range [][]float32{w, m} {
		for j := range got {
			if math.Abs(float64(got[j]-want[i][j])) > 1e-6 {
				t.Fatalf("after update: w %v m %v", w, m)
			}
		}
	}
}

func TestParseSchedule(t *testing.T) {
	good := map[string]Schedule{
		"const":                           {Kind: "const"},
		"cosine":                          {Kind: "cosine"},
		"const:warmup=100":                {Kind: "const", Warmup: 100},
		"cosine:warmup=3200,total=180000": {Kind: "cosine", Warmup: 3200, Total: 180000},
		"cosine:total=1e5":                {Kind: "cosine", Total: 1e5},
	}
	for in, want := range good {
		got, err := ParseSchedule(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v", in, got, err)
		}
		if back, err := ParseSchedule(got.String()); err != nil || back != got {
			t.Errorf("%q: round trip %q: %+v, %v", in, got.String(), back, err)
		}
	}
	for _, in := range []string{"", "linear", "cosine:", "cosine:warmup", "cosine:warmup=-1", "cosine:warmup=x",
		"cosine:warmup=NaN", "cosine:warmup=1,warmup=2", "cosine:steps=5", "cosine:warmup=10,total=10", "cosine:warmup=inf"} {
		if got, err := ParseSchedule(in); !errors.Is(err, ErrBadSchedule) {
			t.Errorf("%q accepted as %+v (%v)", in, got, err)
		}
	}
}

func TestScheduleFactor(t *testing.T) {
	s := Schedule{Kind: "cosine", Warmup: 100, Total: 1100}
	cases := []struct{ p, want float64 }{
		{0, 0}, {50, 0.5}, {100, 1}, {600, 0.5}, {1100, 0}, {5000, 0},
		{100 + 1000.0/3, 0.75},
	}
	for _, c := range cases {
		if got := s.Factor(params.Progress(c.p)); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("cosine at %v: %v, want %v", c.p, got, c.want)
		}
	}
	c := Schedule{Kind: "const", Warmup: 10}
	if c.Factor(5) != 0.5 || c.Factor(10) != 1 || c.Factor(1e9) != 1 {
		t.Error("const with warmup")
	}
	// Progress can fall after a merge; the factor follows it back.
	if s.Factor(600) >= s.Factor(300) {
		t.Error("cosine does not decay")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	c := Config{
		Model: "mlp:", Batch: 0, Epochs: -1, LR: math.NaN(), Momentum: 1, WeightDecay: -1, EMA: 1, EMAPeers: math.NaN(),
		Schedule: "linear", Shard: "4/4", Alpha: -1, Network: "", Slowdown: 0.5,
		BaseStep: -time.Second, CalibrationSteps: 0, Threads: 0,
	}
	err := c.Validate()
	if !errors.Is(err, ErrBadConfig) {
		t.Fatalf("bad config: %v", err)
	}
	for _, field := range []string{"model", "batch", "epochs", "learning rate", "momentum", "weight decay", "ema 1", "ema-peers", "schedule",
		"shard", "alpha", "network", "slowdown", "base step", "calibration", "threads"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("no report for %s in:\n%v", field, err)
		}
	}
	c = DefaultConfig()
	c.Epochs, c.Schedule = 0, "cosine"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "total") {
		t.Errorf("endless cosine: %v", err)
	}
	c.Schedule = "cosine:total=1000"
	if err := c.Validate(); err != nil {
		t.Errorf("endless cosine with total: %v", err)
	}
}

func TestEvaluate(t *testing.T) {
	d, _ := Synthetic(DefaultSynthetic())
	m := mustModel(t, "mlp:16", d.Dim, d.Classes)
	w := make([]float32, m.Size())
	_ = m.Init(w, 4)
	one, err := Evaluate(m, w, d, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	ws := m.NewWorkspace(d.N)
	sum, correct, _ := m.Loss(ws, w, d.X, d.Y)
	if one.N != d.N || one.Correct != correct || math.Abs(one.Loss-sum/float64(d.N)) > 1e-9 ||
		one.Accuracy != float64(correct)/float64(d.N) {
		t.Fatalf("Evaluate %+v, direct loss %v correct %d", one, sum/float64(d.N), correct)
	}
	for _, c := range []struct{ batch, threads int }{{7, 3}, {333, 4}, {5000, 2}} {
		got, err := Evaluate(m, w, d, c.batch, c.threads)
		if err != nil || got.Correct != one.Correct || math.Abs(got.Loss-one.Loss) > 1e-6 {
			t.Fatalf("batch %d threads %d: %+v vs %+v (%v)", c.batch, c.threads, got, one, err)
		}
	}
	// Same batches, any thread count: identical bits.
	a, _ := Evaluate(m, w, d, 100, 1)
	b, _ := Evaluate(m, w, d, 100, 3)
	if a != b {
		t.Fatalf("threads change the result: %+v vs %+v", a, b)
	}
	if _, err := Evaluate(mustModel(t, "softmax", d.Dim+1, d.Classes), make([]float32, (d.Dim+2)*d.Classes), d, 0, 1); !errors.Is(err, ErrBadModel) {
		t.Fatalf("mismatched model: %v", err)
	}
	if _, err := Evaluate(m, w[:3], d, 0, 1); err == nil {
		t.Fatal("short parameters accepted")
	}
}
