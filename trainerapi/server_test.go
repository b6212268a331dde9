package trainerapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/params"
)

func testSpec() Spec {
	return Spec{Run: "test-run", TrainSamples: 1000, Batch: 10,
		Tensors:   []TensorSpec{{Name: "w", Dtype: "F32", Shape: []int{2, 3}}, {Name: "b", Dtype: "F32", Shape: []int{2}}},
		Optimizer: []TensorSpec{{Name: "opt.0.momentum_buffer", Dtype: "F32", Shape: []int{8}}}}
}

// testServer serves on a Unix socket in a temp dir; the first
// registration builds an External, later ones must repeat it.
func testServer(t testing.TB) (*Server, func() *External) {
	t.Helper()
	return testServerWith(t, RunConfig{Network: "n", Epochs: 2, Schedule: "cosine:warmup=10%"})
}

// testServerWith is testServer with the node's side of the run rc.
func testServerWith(t testing.TB, rc RunConfig) (*Server, func() *External) {
	t.Helper()
	var ext *External
	attach := func(_ context.Context, s Spec) (*External, error) {
		if ext != nil {
			if !SameRun(ext.Spec(), s) {
				return nil, errors.New("another run")
			}
			return ext, nil
		}
		x, err := NewExternal(s, rc)
		ext = x
		return x, err
	}
	srv, err := Listen(Config{Listen: "unix:" + filepath.Join(t.TempDir(), "trainer.sock"), Attach: attach})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, func() *External { return ext }
}

func dial(t *testing.T, srv *Server) *Client {
	t.Helper()
	c, err := Dial(srv.Addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.c.Close() })
	return c
}

// readReply reads one reply frame and returns its refusal, if any.
func readReply(c net.Conn) error {
	var raw json.RawMessage
	if _, err := readHeader(c, 1<<30, &raw); err != nil {
		return err
	}
	var st struct {
		OK          bool
		Code, Error string
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return err
	}
	if !st.OK {
		return &Error{Code: st.Code, Message: st.Error}
	}
	return nil
}

// encodeFrame is a frame's prefix and header declaring payload bytes.
func encodeFrame(t *testing.T, hdr any, payload uint64) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := writeFrame(&b, hdr); err != nil {
		t.Fatal(err)
	}
	out := b.Bytes()
	binary.LittleEndian.PutUint64(out[8:16], payload)
	return out
}

func vec(n int, f func(i int) float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = f(i)
	}
	return v
}

func code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// TestDeltaKeepsLocalSteps: the trainer pushes S0, the node merges M into
// its mirror, the trainer pushes S1 = S0 + local steps: the delta is
// exactly M, and trainer and node then agree on S1 + M.
func TestDeltaKeepsLocalSteps(t *testing.T) {
	srv, ext := testServer(t)
	c := dial(t, srv)
	reg, err := c.Register(testSpec())
	if err != nil || reg.Resume {
		t.Fatalf("register: %+v, %v", reg, err)
	}
	s0 := vec(8, func(i int) float32 { return float32(i) })
	delta := make([]float32, 8)
	p, err := c.Push(s0, nil, 0, 0, 1, delta)
	if err != nil || p.Delta {
		t.Fatalf("first push: %+v, %v (want no delta)", p, err)
	}
	merge := vec(8, func(i int) float32 { return 0.25 * float32(i+1) })
	if err := ext().Apply(func(w, opt []float32, pr *params.Progress) error {
		if opt != nil {
			t.Error("a merge saw the opaque optimizer state")
		}
		for i := range w {
			w[i] += merge[i]
		}
		*pr += 5
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s1 := vec(8, func(i int) float32 { return s0[i] - 0.5 }) // local steps
	p, err = c.Push(s1, nil, 30, 3, 0.5, delta)
	if err != nil || !p.Delta || p.Merges != 1 {
		t.Fatalf("second push: %+v, %v (want a delta after one merge)", p, err)
	}
	if !slices.Equal(delta, merge) {
		t.Fatalf("delta %v, want the merge %v", delta, merge)
	}
	local := vec(8, func(i int) float32 { return s1[i] + delta[i] })
	snap := ext().SnapshotInto(nil)
	if !slices.Equal(snap.Params, local) {
		t.Fatalf("node model %v, trainer's %v", snap.Params, local)
	}
	if snap.Progress != 35 || snap.Step != 3 {
		t.Fatalf("progress %v step %d, want 35 (30 pushed + 5 merged) and 3", snap.Progress, snap.Step)
	}
	// No merge since: the next push has no delta.
	if p, err = c.Push(local, nil, 10, 1, 0.5, delta); err != nil || p.Delta {
		t.Fatalf("third push: %+v, %v (want no delta)", p, err)
	}
	// Step reports what the pushes brought.
	r, err := ext().Step(context.Background())
	if err != nil || r.Batch != 40 || math.Abs(r.Loss-0.5) > 1e-12 {
		t.Fatalf("step %+v, %v: want 40 samples at loss 0.5", r, err)
	}
}

// TestRefusals: each bad request gets its code and leaves the node's
// model as it was; the connection goes on (malformed frames excepted).
func TestRefusals(t *testing.T) {
	srv, ext := testServer(t)
	raw, err := net.Dial("unix", srv.Addr()[len("unix:"):])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Write(encodeFrame(t, map[string]any{"op": "pull"}, 0)); err != nil {
		t.Fatal(err)
	}
	if err := readReply(raw); code(err) != CodeBadRequest {
		t.Fatalf("pull before hello: %v, want bad_request", err)
	}
	raw.Close()
	c := dial(t, srv)
	if _, err := c.call(map[string]any{"op": "pull"}, nil, nil); code(err) != CodeNotRegistered {
		t.Fatalf("pull before register: %v, want not_registered", err)
	}
	spec := testSpec()
	f16 := spec
	f16.Tensors = []TensorSpec{{Name: "w", Dtype: "F16", Shape: []int{8}}}
	if _, err := c.Register(f16); err == nil {
		t.Fatal("client accepted an F16 tensor")
	}
	if _, err := c.call(map[string]any{"op": "register", "run": "r", "tensors": f16.Tensors, "train_samples": 10, "batch": 1}, nil, nil); code(err) != CodeBadRequest {
		t.Fatalf("F16 register: %v, want bad_request", err)
	}
	if _, err := c.Register(spec); err != nil {
		t.Fatal(err)
	}
	good := vec(8, func(i int) float32 { return 1 })
	delta := make([]float32, 8)
	if _, err := c.Push(good, nil, 10, 1, 1, delta); err != nil {
		t.Fatal(err)
	}
	before := ext().SnapshotInto(nil)
	if _, err := c.Push(good[:7], nil, 10, 1, 1, delta); code(err) != CodeBadShape {
		t.Fatalf("short push: %v, want bad_shape", err)
	}
	nan := slices.Clone(good)
	nan[6] = float32(math.NaN())
	if _, err := c.Push(nan, nil, 10, 1, 1, delta); code(err) != CodeNonFinite {
		t.Fatalf("NaN push: %v, want non_finite", err)
	}
	if _, err := c.Push(good, vec(8, func(int) float32 { return float32(math.Inf(1)) }), 10, 1, 1, delta); code(err) != CodeNonFinite {
		t.Fatalf("Inf optimizer push: %v, want non_finite", err)
	}
	if err := c.Eval(1.5, 0); code(err) != CodeBadRequest {
		t.Fatalf("accuracy 1.5: %v, want bad_request", err)
	}
	if _, err := c.call(map[string]any{"op": "jump"}, nil, nil); code(err) != CodeBadRequest {
		t.Fatalf("unknown op: %v, want bad_request", err)
	}
	after := ext().SnapshotInto(nil)
	if !slices.Equal(before.Params, after.Params) || before.Progress != after.Progress {
		t.Fatalf("refused pushes changed the model: %v -> %v", before, after)
	}
	// The connection still works.
	if p, err := c.Push(good, nil, 10, 1, 1, delta); err != nil || p.Delta {
		t.Fatalf("push after refusals: %+v, %v", p, err)
	}
	// A second trainer is refused while the first is registered, and can
	// register once the first has left; a different run is refused.
	c2 := dial(t, srv)
	if _, err := c2.Register(spec); code(err) != CodeBusy {
		t.Fatalf("second trainer: %v, want busy", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	other := spec
	other.Run = "other"
	if _, err := c2.Register(other); code(err) != CodeMismatch {
		t.Fatalf("another run: %v, want mismatch", err)
	}
	reg, err := c2.Register(spec)
	if err != nil || !reg.Resume {
		t.Fatalf("second trainer after the first left: %+v, %v (want resume)", reg, err)
	}
	got := srv.Rejections()
	for _, k := range []string{CodeBadRequest, CodeBadShape, CodeNonFinite, CodeBusy, CodeMismatch} {
		if got[k] == 0 {
			t.Errorf("rejections %v: no %s counted", got, k)
		}
	}
}

// TestMalformedFrames: a bad magic or an oversized payload gets an error
// and the connection is closed; the server keeps serving others.
func TestMalformedFrames(t *testing.T) {
	srv, _ := testServer(t)
	for name, frame := range map[string][]byte{
		"magic":   append([]byte("XXXX"), make([]byte, 12)...),
		"header":  append([]byte("MTT1\xff\xff\xff\x7f"), make([]byte, 8)...),
		"payload": append(append([]byte("MTT1\x02\x00\x00\x00"), []byte{8, 0, 0, 0, 0, 0, 0, 0}...), []byte("{}")...),
	} {
		c, err := net.Dial("unix", srv.Addr()[len("unix:"):])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(frame); err != nil {
			t.Fatal(err)
		}
		err = readReply(c)
		if code(err) != CodeBadRequest {
			t.Errorf("%s: %v, want bad_request", name, err)
		}
		// Then the server closes the connection.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("%s: after the error the connection gave %d bytes, %v; want it closed", name, n, err)
		}
		c.Close()
	}
	if _, err := dial(t, srv).Register(testSpec()); err != nil {
		t.Fatalf("server after malformed frames: %v", err)
	}
}

// TestTrainerDiesMidTransfer: half a push's payload, then the connection
// drops: nothing is applied and the next trainer registers and resumes.
func TestTrainerDiesMidTransfer(t *testing.T) {
	srv, ext := testServer(t)
	c := dial(t, srv)
	if _, err := c.Register(testSpec()); err != nil {
		t.Fatal(err)
	}
	good := vec(8, func(i int) float32 { return float32(i) })
	if _, err := c.Push(good, nil, 10, 1, 1, make([]float32, 8)); err != nil {
		t.Fatal(err)
	}
	before := ext().SnapshotInto(nil)
	// A push frame declaring the model's 32 bytes, of which 12 arrive.
	frame := encodeFrame(t, map[string]any{"op": "push", "samples": 10, "steps": 1}, 32)
	if _, err := c.c.Write(append(frame, make([]byte, 12)...)); err != nil {
		t.Fatal(err)
	}
	c.c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for srv.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("the dead trainer is still registered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := srv.Rejections()["transfer"]; got != 1 {
		t.Errorf("transfers lost: %d, want 1", got)
	}
	after := ext().SnapshotInto(nil)
	if !slices.Equal(before.Params, after.Params) || before.Progress != after.Progress {
		t.Fatal("a half-sent push changed the model")
	}
	c2 := dial(t, srv)
	reg, err := c2.Register(testSpec())
	if err != nil || !reg.Resume {
		t.Fatalf("restarted trainer: %+v, %v", reg, err)
	}
	w, opt := make([]float32, 8), make([]float32, 8)
	if hasOpt, err := c2.Pull(w, opt); err != nil || hasOpt || !slices.Equal(w, good) {
		t.Fatalf("pull: %v opt %v err %v, want %v and no optimizer state", w, hasOpt, err, good)
	}
}

// TestResumeWithOptimizer: the optimizer state pushed is checkpointed and
// comes back from a pull after a restart from that checkpoint.
func TestResumeWithOptimizer(t *testing.T) {
	srv, ext := testServer(t)
	c := dial(t, srv)
	if _, err := c.Register(testSpec()); err != nil {
		t.Fatal(err)
	}
	w := vec(8, func(i int) float32 { return float32(i) / 3 })
	opt := vec(8, func(i int) float32 { return -float32(i) })
	if _, err := c.Push(w, opt, 20, 2, 1, make([]float32, 8)); err != nil {
		t.Fatal(err)
	}
	st := ext().State()
	fresh, err := NewExternal(testSpec(), RunConfig{Network: "n", Epochs: 2, Schedule: "cosine:warmup=10%"})
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Ready() {
		t.Fatal("a new mirror is ready before any push")
	}
	if err := fresh.Restore(st); err != nil {
		t.Fatal(err)
	}
	gw, gopt := make([]float32, 8), make([]float32, 8)
	_, samples, hasOpt, _, err := fresh.pull(gw, gopt)
	if err != nil || !hasOpt || !slices.Equal(gw, w) || !slices.Equal(gopt, opt) || samples != 20 {
		t.Fatalf("restored pull: %v %v opt %v samples %d err %v", gw, gopt, hasOpt, samples, err)
	}
	other := testSpec()
	other.Batch = 11
	o, _ := NewExternal(other, RunConfig{Network: "n", Epochs: 2, Schedule: "const"})
	if err := o.Restore(st); err == nil {
		t.Fatal("a checkpoint of another registration was restored")
	}
	if fresh.Fingerprint() == o.Fingerprint() {
		t.Fatal("two runs share a fingerprint")
	}
}

// TestTCPToken: over TCP, hello without the token is refused.
func TestTCPToken(t *testing.T) {
	dir := t.TempDir()
	srv, err := Listen(Config{Listen: "tcp:127.0.0.1:0", TokenFile: filepath.Join(dir, "token"),
		Attach: func(context.Context, Spec) (*External, error) { return nil, errors.New("unused") }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := Dial(srv.Addr(), "wrong"); code(err) != CodeUnauthorized {
		t.Fatalf("wrong token: %v, want unauthorized", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(dir, "token"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	c, err := Dial(srv.Addr(), string(b[:len(b)-1]))
	if err != nil {
		t.Fatalf("right token: %v", err)
	}
	c.Close()
}

// TestSocketMode: the Unix socket is the owner's only.
func TestSocketMode(t *testing.T) {
	srv, _ := testServer(t)
	fi, err := os.Stat(srv.Addr()[len("unix:"):])
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestLRScaleInRunInfo: the node's speed factor reaches the trainer inside
// lr_factor; values that are not finite and positive are ignored.
func TestLRScaleInRunInfo(t *testing.T) {
	x, err := NewExternal(testSpec(), RunConfig{Network: "n", Epochs: 2, Schedule: "const"})
	if err != nil {
		t.Fatal(err)
	}
	if f := x.runInfo().LRFactor; f != 1 {
		t.Fatalf("lr_factor %v before any scale, want 1 (const schedule)", f)
	}
	x.SetLRScale(2.5)
	x.SetLRScale(math.NaN())
	x.SetLRScale(-1)
	x.SetLRScale(0)
	if f := x.runInfo().LRFactor; f != 2.5 {
		t.Errorf("lr_factor %v, want 2.5", f)
	}
}

// TestPushesCountAsChanges: every push taken counts as a change, steps or
// none (an optimizer state pushed after the last step's push changes what
// a checkpoint holds), and one after the run stopped does not.
func TestPushesCountAsChanges(t *testing.T) {
	srv, ext := testServer(t)
	c := dial(t, srv)
	if _, err := c.Register(testSpec()); err != nil {
		t.Fatal(err)
	}
	w := vec(8, func(i int) float32 { return float32(i) })
	if _, err := c.Push(w, nil, 20, 2, 1, make([]float32, 8)); err != nil {
		t.Fatal(err)
	}
	if got := ext().Changes(); got != 1 {
		t.Fatalf("changes after a push of 2 steps: %d, want 1", got)
	}
	opt := vec(8, func(i int) float32 { return -float32(i) })
	if _, err := c.Push(w, opt, 0, 0, 0, make([]float32, 8)); err != nil {
		t.Fatal(err)
	}
	if got, steps := ext().Changes(), ext().Stats().Steps; got != 2 || steps != 2 {
		t.Fatalf("after a push of no steps: changes %d (want 2), steps %d (want 2)", got, steps)
	}
	ext().Stop("finished")
	c.Push(w, opt, 10, 1, 1, make([]float32, 8)) // refused or ignored: the run is over
	if got := ext().Changes(); got != 2 {
		t.Fatalf("a push after the run stopped counted: changes %d, want 2", got)
	}
}
