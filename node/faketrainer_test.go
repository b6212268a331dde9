package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/train"
)

// fakeTrainer is a node.Trainer that is not the built-in one: plain SGD
// of its own on a train.Model's gradient, over the whole synthetic set in
// order, with none of train.Trainer's machinery (no shards, schedule,
// emulated speed or checkpointed data order). It stands for a trainer in
// another process.
type fakeTrainer struct {
	model      *train.Model
	data, test *train.Dataset
	fp         params.Fingerprint
	batch      int
	lr         float64

	mu       sync.Mutex // guards everything below
	w, mom   []float32
	grad     []float32
	ws       *train.Workspace
	xb       []float32
	yb       []uint8
	pos      int
	steps    int64
	samples  int64
	progress params.Progress
	applied  int
}

var _ node.Trainer = (*fakeTrainer)(nil)

func newFakeTrainer(t *testing.T, cfg node.Config) *fakeTrainer {
	t.Helper()
	data, test, err := train.LoadData(cfg.Dataset, "", cfg.Train.Seed)
	if err != nil {
		t.Fatal(err)
	}
	m, err := train.ParseModel(cfg.Train.Model, data.Dim, data.Classes)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTrainer{model: m, data: data, test: test, batch: cfg.Train.Batch, lr: cfg.Train.LR,
		// The fingerprint the built-in trainer computes for the same model,
		// data, network and run: peers must agree on it to merge.
		fp: params.RunFingerprint(m.Layout(), data.Name, cfg.Train.Network, node.RunSpec(cfg.Epochs*float64(data.N), cfg.Train.Schedule)),
		w:  make([]float32, m.Size()), mom: make([]float32, m.Size()), grad: make([]float32, m.Size()),
		ws: m.NewWorkspace(cfg.Train.Batch), xb: make([]float32, cfg.Train.Batch*data.Dim), yb: make([]uint8, cfg.Train.Batch)}
	if err := m.Init(f.w, cfg.Train.Seed); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeTrainer) Step(ctx context.Context) (node.StepResult, error) {
	if err := ctx.Err(); err != nil {
		return node.StepResult{}, err
	}
	began := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	b := min(f.batch, f.data.N-f.pos)
	x := f.data.RowsTo(f.xb, f.pos, f.pos+b)
	copy(f.yb[:b], f.data.Y[f.pos:f.pos+b])
	loss, err := f.model.Grad(f.ws, f.w, x, f.yb[:b], f.grad)
	if err != nil {
		return node.StepResult{}, err
	}
	for i := range f.w {
		f.mom[i] = 0.9*f.mom[i] + f.grad[i]
		f.w[i] -= float32(f.lr) * f.mom[i]
	}
	f.pos = (f.pos + b) % f.data.N
	f.steps++
	f.samples += int64(b)
	f.progress = f.progress.Step(b)
	// A little emulated hardware, so that a few nodes fit on two cores.
	time.Sleep(time.Millisecond)
	d := time.Since(began)
	return node.StepResult{Batch: b, Loss: loss, LR: f.lr, EpochEnd: f.pos < b, Compute: d, Busy: d}, nil
}

func (f *fakeTrainer) SnapshotInto(dst []float32) params.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cap(dst) < len(f.w) {
		dst = make([]float32, len(f.w))
	}
	dst = dst[:len(f.w)]
	copy(dst, f.w)
	return params.Snapshot{Fingerprint: f.fp, Step: f.steps, Progress: f.progress, Params: dst}
}

func (f *fakeTrainer) Apply(fn func(w, opt []float32, p *params.Progress) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, mom, p := append([]float32(nil), f.w...), append([]float32(nil), f.mom...), f.progress
	if err := fn(w, mom, &p); err != nil {
		return err
	}
	if params.CheckFinite(w) != nil || !p.Valid() {
		return errors.New("fake trainer: merge left a non-finite model")
	}
	f.w, f.mom, f.progress = w, mom, p
	f.applied++
	return nil
}

type fakeState struct {
	Pos int `json:"pos"`
}

func (f *fakeTrainer) State() node.TrainerState {
	f.mu.Lock()
	defer f.mu.Unlock()
	own, _ := json.Marshal(fakeState{Pos: f.pos})
	return node.TrainerState{Params: append([]float32(nil), f.w...), Opt: append([]float32(nil), f.mom...),
		Step: f.steps, Progress: f.progress, Samples: f.samples, Own: own}
}

func (f *fakeTrainer) Restore(s node.TrainerState) error {
	var st fakeState
	if err := json.Unmarshal(s.Own, &st); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(s.Params) != len(f.w) || len(s.Opt) != len(f.mom) {
		return errors.New("fake trainer: state of another size")
	}
	copy(f.w, s.Params)
	copy(f.mom, s.Opt)
	f.steps, f.progress, f.samples, f.pos = s.Step, s.Progress, s.Samples, st.Pos
	return nil
}

func (f *fakeTrainer) Stats() node.TrainerStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return node.TrainerStats{Steps: f.steps, Samples: f.samples, Progress: f.progress, Schedule: "const"}
}

func (f *fakeTrainer) Fingerprint() params.Fingerprint { return f.fp }
func (f *fakeTrainer) Layout() params.Layout           { return f.model.Layout() }
func (f *fakeTrainer) Info() node.TrainerInfo {
	return node.TrainerInfo{Model: f.model.Spec(), Dataset: f.data.Name, Network: "fake", TrainSamples: f.data.N}
}
func (f *fakeTrainer) SetClock(float64) {}

func (f *fakeTrainer) HoldoutLoss(w []float32) (float64, bool, error) {
	r, err := train.Evaluate(f.model, w, f.test, 0, 1) // any sample will do for a fake
	return r.Loss, true, err
}

func (f *fakeTrainer) Test(w []float32) (node.TestResult, error) {
	r, err := train.Evaluate(f.model, w, f.test, 0, 1)
	return node.TestResult{Accuracy: r.Accuracy, Loss: r.Loss}, err
}

func (f *fakeTrainer) merged() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// TestNodeWithAnotherTrainer: a node driving a trainer that is not the
// built-in one merges with a peer on the built-in trainer, both ways, and
// neither holds the other's models against it.
func TestNodeWithAnotherTrainer(t *testing.T) {
	checkGoroutines(t)
	cfg := meshConfig("fake-trainer")
	goNode := newMeshNode(t, cfg, nil)
	cf := cfg
	cf.Host.Bootstrap = bootstrapOff(t, goNode.Node)
	fake := newFakeTrainer(t, cf)
	if fake.Fingerprint() != node.TrainerOf(goNode.Node).Fingerprint() {
		t.Fatalf("the fake trainer's fingerprint %s is not the built-in one's %s", fake.Fingerprint().Short(),
			node.TrainerOf(goNode.Node).Fingerprint().Short())
	}
	m := &meshNode{done: make(chan struct{})}
	n, err := node.NewWith(context.Background(), cf, fake, nil, nil, m.emit)
	if err != nil {
		t.Fatal(err)
	}
	m.Node = n
	goNode.start(t)
	m.start(t)
	eventually(t, time.Minute, "merges both ways", func() bool {
		return goNode.Status().PeerMerges[n.ID().String()] >= 3 && m.Status().PeerMerges[goNode.ID().String()] >= 3 && fake.merged() >= 1
	})
	for name, st := range map[string]node.Status{"built-in": goNode.Status(), "fake": m.Status()} {
		if st.Trust.Banned != 0 || st.Trust.Refused["outlier"] != 0 {
			t.Errorf("%s node: trust %+v", name, st.Trust)
		}
		if math.IsNaN(st.Loss) || st.Step == 0 {
			t.Errorf("%s node: step %d, loss %v", name, st.Step, st.Loss)
		}
	}
	t.Logf("built-in node: %d merges; fake-trainer node: %d merges, %d applied by its trainer",
		goNode.Status().Merges, m.Status().Merges, fake.merged())
}

// idleTrainer is a fakeTrainer that trains a few steps and then only
// waits, as an external trainer does between pushes; change stands for a
// push that carries no steps (an optimizer state sent after the last
// step's push): it changes the state and counts a change.
type idleTrainer struct {
	*fakeTrainer
	steps   int64
	changes atomic.Int64
}

var _ node.ChangeCounter = (*idleTrainer)(nil)

func (f *idleTrainer) Step(ctx context.Context) (node.StepResult, error) {
	if f.Stats().Steps < f.steps {
		return f.fakeTrainer.Step(ctx)
	}
	select {
	case <-ctx.Done():
		return node.StepResult{}, ctx.Err()
	case <-time.After(5 * time.Millisecond):
		return node.StepResult{}, nil
	}
}

func (f *idleTrainer) Changes() int64 { return f.changes.Load() }

func (f *idleTrainer) change() {
	f.mu.Lock()
	for i := range f.mom {
		f.mom[i] += 1
	}
	f.mu.Unlock()
	f.changes.Add(1)
}

// TestIdleCheckpointAfterAChangeWithoutSteps: while its trainer waits, a
// node checkpoints once a change it counts (not a step, not a merge) is
// not saved yet, and writes nothing while nothing changes.
func TestIdleCheckpointAfterAChangeWithoutSteps(t *testing.T) {
	checkGoroutines(t)
	cfg := meshConfig("idle-ckpt")
	cfg.Offline = true
	cfg.CheckpointEvery = 20 * time.Millisecond
	st := store.NewMemory()
	tr := &idleTrainer{fakeTrainer: newFakeTrainer(t, cfg), steps: 5}
	startWith(t, cfg, tr, st)
	newest := func() store.Info {
		infos, err := st.List()
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) == 0 {
			return store.Info{}
		}
		return infos[0]
	}
	eventually(t, time.Minute, "a checkpoint of the 5 steps", func() bool { return newest().Step == 5 })
	before := newest()
	time.Sleep(10 * cfg.CheckpointEvery)
	if now := newest(); now.ID != before.ID {
		t.Fatalf("checkpoint %d written while nothing changed (the newest was %d)", now.ID, before.ID)
	}
	tr.change()
	eventually(t, time.Minute, "a checkpoint of the change", func() bool { return newest().ID > before.ID })
	ck, err := st.Load(context.Background(), newest().ID)
	if err != nil {
		t.Fatal(err)
	}
	want := tr.State().Opt
	if !slices.Equal(ck.OptState, want) || ck.Step != 5 {
		t.Fatalf("the checkpoint after the change holds step %d and not the changed optimizer state", ck.Step)
	}
}

// steppedTrainer is an idleTrainer that says when the node first asks it
// for a step: by then Run has done everything it does before training.
type steppedTrainer struct {
	*idleTrainer
	once    sync.Once
	stepped chan struct{}
}

func (f *steppedTrainer) Step(ctx context.Context) (node.StepResult, error) {
	f.once.Do(func() { close(f.stepped) })
	return f.idleTrainer.Step(ctx)
}

// TestFreshSupersedesOnlyAnOldRun: --fresh over a checkpoint of this run
// writes a checkpoint of the new start before the first step, so a crash
// cannot resume the dropped run; --fresh into a store with no checkpoint
// of this run writes nothing before training.
func TestFreshSupersedesOnlyAnOldRun(t *testing.T) {
	checkGoroutines(t)
	cfg := meshConfig("fresh-supersede")
	cfg.Offline = true
	cfg.CheckpointEvery = time.Hour // only the writes Run makes of its own
	st := store.NewMemory()
	// runFresh starts a fresh node on st and returns the checkpoints in st
	// at its first step.
	runFresh := func() []store.Info {
		c := cfg
		c.Fresh = true
		tr := &steppedTrainer{idleTrainer: &idleTrainer{fakeTrainer: newFakeTrainer(t, c)}, stepped: make(chan struct{})}
		m := startWith(t, c, tr, st)
		select {
		case <-tr.stepped:
		case <-time.After(time.Minute):
			t.Fatal("no step within a minute")
		}
		infos, err := st.List()
		if err != nil {
			t.Fatal(err)
		}
		m.stop(t)
		return infos
	}
	if infos := runFresh(); len(infos) != 0 {
		t.Fatalf("--fresh into an empty store wrote %d checkpoint(s) before training: %+v", len(infos), infos)
	}
	// The stop above wrote that run's checkpoint. Train on over it, then
	// start fresh again.
	tr := &idleTrainer{fakeTrainer: newFakeTrainer(t, cfg), steps: 3}
	m := startWith(t, cfg, tr, st)
	eventually(t, time.Minute, "3 steps", func() bool { return tr.Stats().Steps >= 3 })
	m.stop(t)
	infos, err := st.List()
	if err != nil || len(infos) == 0 || infos[0].Step != 3 {
		t.Fatalf("after 3 steps: checkpoints %+v, %v", infos, err)
	}
	old := infos[0].ID
	infos = runFresh()
	if len(infos) == 0 || infos[0].ID == old || infos[0].Step != 0 {
		t.Fatalf("--fresh over the checkpoint of step 3 (id %d): at the first step the newest is %+v, want one of step 0", old, infos)
	}
}

// startWith starts a node around the trainer tr on st.
func startWith(t *testing.T, cfg node.Config, tr node.Trainer, st store.Store) *meshNode {
	t.Helper()
	m := &meshNode{done: make(chan struct{})}
	n, err := node.NewWith(context.Background(), cfg, tr, st, nil, m.emit)
	if err != nil {
		t.Fatal(err)
	}
	m.Node = n
	m.start(t)
	return m
}
