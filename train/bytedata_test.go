package train

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"weak"
)

// floatTwin is the float dataset that FromIDX used to build from the same
// bytes, each scaled on its own as float32(b) / 255: the reference that a
// byte dataset must match bit for bit.
func floatTwin(t testing.TB, d *Dataset) *Dataset {
	t.Helper()
	if d.X != nil || len(d.Pix) != d.N*d.Dim {
		t.Fatalf("%s is not a byte dataset", d.Name)
	}
	x := make([]float32, len(d.Pix))
	for i, b := range d.Pix {
		x[i] = float32(b) / 255
	}
	f, err := NewDataset(d.Name, x, d.Y, d.Dim, d.Classes)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// mnistPair is the embedded MNIST test set as loaded (bytes) and its float
// twin.
func mnistPair(t testing.TB) (bytes, floats *Dataset) {
	t.Helper()
	d, err := embeddedTestSet()
	if err != nil {
		t.Fatal(err)
	}
	return d, floatTwin(t, d)
}

// Every byte value scales to exactly float32(b) / 255, and rows read
// through RowTo and RowsTo match the float twin's bit for bit.
func TestByteDatasetRowsMatchFloat(t *testing.T) {
	for b := range 256 {
		if got, want := pixFloat[b], float32(b)/255; math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("byte %d scales to %v, want %v", b, got, want)
		}
	}
	bd, fd := mnistPair(t)
	row, frow := make([]float32, bd.Dim), make([]float32, bd.Dim)
	for i := 0; i < bd.N; i += 1 + i%61 { // the scaling itself is checked above
		bd.RowTo(row, i)
		fd.RowTo(frow, i)
		if !slicesEqual(row, frow) || !slicesEqual(row, fd.X[i*fd.Dim:(i+1)*fd.Dim]) {
			t.Fatalf("row %d differs", i)
		}
	}
	buf := make([]float32, 777*bd.Dim)
	for _, r := range [][2]int{{0, 1}, {0, 777}, {5000, 5500}, {bd.N - 3, bd.N}} {
		got := bd.RowsTo(buf, r[0], r[1])
		want := fd.RowsTo(nil, r[0], r[1])
		if !slicesEqual(got, want) {
			t.Fatalf("rows %d to %d differ", r[0], r[1])
		}
		if &want[0] != &fd.X[r[0]*fd.Dim] {
			t.Fatal("RowsTo copied a float dataset's rows")
		}
	}
}

// Floats makes the float twin of a byte dataset, and leaves a float one be.
func TestByteDatasetFloats(t *testing.T) {
	bd, fd := mnistPair(t)
	f := bd.Floats()
	if f.Pix != nil || !slicesEqual(f.X, fd.X) || string(f.Y) != string(fd.Y) || f.N != fd.N || f.Dim != fd.Dim ||
		f.Classes != fd.Classes || f.Name != fd.Name {
		t.Fatal("the float copy differs from the float twin")
	}
	if bd.X != nil || len(bd.Pix) != bd.N*bd.Dim {
		t.Fatal("Floats changed the byte dataset")
	}
	if fd.Floats() != fd {
		t.Fatal("Floats copied a float dataset")
	}
}

// Subset keeps a byte dataset in bytes, with the rows and labels the float
// twin's Subset picks.
func TestByteDatasetSubsetMatchesFloat(t *testing.T) {
	bd, fd := mnistPair(t)
	r := rand.New(rand.NewPCG(1, 2))
	idx := make([]int, 300)
	for i := range idx {
		idx[i] = r.IntN(bd.N) // repeats too
	}
	bs, err := bd.Subset(idx)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := fd.Subset(idx)
	if err != nil {
		t.Fatal(err)
	}
	if bs.X != nil || len(bs.Pix) != len(idx)*bd.Dim || fs.Pix != nil {
		t.Fatalf("subset forms: byte X %d Pix %d, float Pix %d", len(bs.X), len(bs.Pix), len(fs.Pix))
	}
	if bs.N != fs.N || bs.Name != fs.Name || string(bs.Y) != string(fs.Y) {
		t.Fatal("subset sizes, names or labels differ")
	}
	if !slicesEqual(bs.RowsTo(make([]float32, len(bs.Pix)), 0, bs.N), fs.X) {
		t.Fatal("subset rows differ")
	}
	if _, err := bd.Subset([]int{0, bd.N}); !errors.Is(err, ErrBadDataset) {
		t.Fatalf("out of range: %v", err)
	}
}

// Evaluate scores a byte dataset exactly as its float twin, whatever the
// chunking and the number of workers.
func TestByteDatasetEvaluateMatchesFloat(t *testing.T) {
	all, _ := mnistPair(t)
	bd, err := all.Subset(firstN(2000))
	if err != nil {
		t.Fatal(err)
	}
	fd := floatTwin(t, bd)
	for _, spec := range []string{"softmax", "mlp:32"} {
		m := mustModel(t, spec, bd.Dim, bd.Classes)
		w := make([]float32, m.Size())
		if err := m.Init(w, 3); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ batch, threads int }{{0, 1}, {0, 2}, {333, 2}, {bd.N, 1}, {bd.N + 1, 2}} {
			got, err := Evaluate(m, w, bd, c.batch, c.threads)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Evaluate(m, w, fd, c.batch, c.threads)
			if err != nil {
				t.Fatal(err)
			}
			if got != want || got.N != bd.N {
				t.Fatalf("%s batch %d threads %d: bytes %+v, floats %+v", spec, c.batch, c.threads, got, want)
			}
		}
	}
}

// A trainer on a byte dataset takes the float twin's steps bit for bit: same
// losses, same weights and momentum, over shards of either kind, epoch
// boundaries and short last batches.
func TestByteDatasetTrainerMatchesFloat(t *testing.T) {
	bd, fd := mnistPair(t)
	for _, c := range []struct {
		shard string
		alpha float64
		steps int
	}{{"all", 0, 30}, {"3/40", 0, 60}, {"2/8", 0.5, 60}} {
		cfg := DefaultConfig()
		cfg.Model, cfg.Batch, cfg.Epochs, cfg.Schedule = "mlp:16", 64, 0, "const"
		cfg.Shard, cfg.Alpha, cfg.Seed, cfg.OrderSeed = c.shard, c.alpha, 5, 11
		a, b := newTestTrainer(t, cfg, bd), newTestTrainer(t, cfg, fd)
		ctx := context.Background()
		for i := range c.steps {
			sa, err := a.Step(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sb, err := b.Step(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if math.Float64bits(sa.Loss) != math.Float64bits(sb.Loss) || sa.Batch != sb.Batch {
				t.Fatalf("shard %s step %d: loss %v batch %d on bytes, %v %d on floats", c.shard, i, sa.Loss, sa.Batch, sb.Loss, sb.Batch)
			}
		}
		x, y := a.State(), b.State()
		if !slicesEqual(x.Params, y.Params) || !slicesEqual(x.Momentum, y.Momentum) || x.Epoch != y.Epoch || x.Pos != y.Pos {
			t.Fatalf("shard %s: the trainers' states differ", c.shard)
		}
		if c.shard != "all" && x.Epoch == 0 {
			t.Fatalf("shard %s: %d steps stayed in the first epoch", c.shard, c.steps)
		}
	}
}

// A trainer on a shard steps as a trainer on a dataset of that shard's
// samples alone (same seeds, same order), and does not keep the rest of
// the data alive, so a node that trains on 1/100 of MNIST can drop the
// other 99.
func TestShardTrainerHoldsOnlyItsShard(t *testing.T) {
	for _, alpha := range []float64{0, 0.5} {
		bd, _ := mnistPair(t)
		full, err := bd.Subset(firstN(4000))
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Model, cfg.Batch, cfg.Epochs, cfg.Schedule = "softmax", 32, 0, "const"
		cfg.Shard, cfg.Alpha, cfg.Seed, cfg.OrderSeed = "1/10", alpha, 2, 3
		idx, err := ShardIndices(full, Shard{1, 10}, cfg.Seed, cfg.Alpha)
		if err != nil {
			t.Fatal(err)
		}
		alone, err := full.Subset(idx)
		if err != nil {
			t.Fatal(err)
		}
		a := newTestTrainer(t, cfg, full)
		all := cfg
		all.Shard, all.Alpha = "all", 0
		b := newTestTrainer(t, all, alone)
		ctx := context.Background()
		for i := range 40 {
			sa, _ := a.Step(ctx)
			sb, _ := b.Step(ctx)
			if math.Float64bits(sa.Loss) != math.Float64bits(sb.Loss) {
				t.Fatalf("alpha %v step %d: loss %v on the shard, %v on its samples alone", alpha, i, sa.Loss, sb.Loss)
			}
		}
		if !slicesEqual(a.State().Params, b.State().Params) {
			t.Fatalf("alpha %v: the shard's and its samples' trainers differ", alpha)
		}

		gone := weak.Make(full)
		full = nil
		for range 5 {
			runtime.GC()
		}
		if gone.Value() != nil {
			t.Fatalf("alpha %v: the trainer of shard %s keeps the whole dataset alive", alpha, cfg.Shard)
		}
		runtime.KeepAlive(a)
	}
}

func firstN(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// NewByteDataset checks the byte form as NewDataset checks the float one,
// and says which sizes or label are wrong.
func TestNewByteDatasetRejects(t *testing.T) {
	pix := make([]uint8, 6)
	cases := []struct {
		name         string
		pix, y       []uint8
		dim, classes int
		want         string
	}{
		{"zero dim", pix, []uint8{0, 1}, 0, 2, "dimension 0"},
		{"one class", pix, []uint8{0, 0}, 3, 1, "1 classes"},
		{"no samples", nil, nil, 3, 2, "no samples"},
		{"no pixels", nil, []uint8{0, 1}, 3, 2, "0 feature bytes for 2 samples of dimension 3"},
		{"short pixels", pix[:5], []uint8{0, 1}, 3, 2, "5 feature bytes for 2 samples of dimension 3"},
		{"long pixels", append(pix, 0), []uint8{0, 1}, 3, 2, "7 feature bytes for 2 samples of dimension 3"},
		{"too few labels", pix, []uint8{0}, 3, 2, "6 feature bytes for 1 samples of dimension 3"},
		{"label too big", pix, []uint8{0, 2}, 3, 2, "sample 1 has label 2, want below 2"},
	}
	for _, c := range cases {
		d, err := NewByteDataset("t", c.pix, c.y, c.dim, c.classes)
		if !errors.Is(err, ErrBadDataset) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %+v, %v (want an error saying %q)", c.name, d, err, c.want)
		}
	}
	d, err := NewByteDataset("t", pix, []uint8{0, 1}, 3, 2)
	if err != nil || d.N != 2 || d.Dim != 3 || d.X != nil || len(d.Pix) != 6 {
		t.Fatalf("valid dataset: %+v, %v", d, err)
	}
}
