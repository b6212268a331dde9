package trainerapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/meshtrain/meshtrain/params"
)

// TestReportedAverage: with an average on, the node reports (and serves to
// the trainer's "average" op) the moving average of the pushed models, at
// a decay per step the pushes carried, and of the peers' models it merges;
// the trainer's own model, pulls and deltas are untouched by it, and a
// checkpoint carries it.
func TestReportedAverage(t *testing.T) {
	rc := RunConfig{Network: "n", Schedule: "const", EMA: 0.5, EMAPeers: 1}
	srv, ext := testServerWith(t, rc)
	c := dial(t, srv)
	if _, err := c.Register(testSpec()); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 8)
	if _, err := c.Average(got); code(err) != CodeBadRequest {
		t.Fatalf("average before any model: %v, want %s", err, CodeBadRequest)
	}
	fill := func(x float32) []float32 { return vec(8, func(int) float32 { return x }) }
	near := func(v []float32, want float64) bool {
		return !slices.ContainsFunc(v, func(x float32) bool { return math.Abs(float64(x)-want) > 1e-5 })
	}
	check := func(what string, want float64) {
		t.Helper()
		averaged, err := c.Average(got)
		if err != nil || !averaged || !near(got, want) {
			t.Fatalf("%s: average %v (averaged %v, err %v), want all %v", what, got, averaged, err, want)
		}
	}
	delta := make([]float32, 8)
	if _, err := c.Push(fill(1), nil, 0, 0, 0, delta); err != nil {
		t.Fatal(err)
	}
	check("first model", 1)
	// Update 0 after a reset: decay min(0.5^1, 1/10) = 0.1.
	if _, err := c.Push(fill(3), nil, 10, 1, 0, delta); err != nil {
		t.Fatal(err)
	}
	check("one step", 0.1*1+0.9*3)
	// Update 1, two steps: decay min(0.5^2, 2/11) = 2/11.
	if _, err := c.Push(fill(5), nil, 20, 2, 0, delta); err != nil {
		t.Fatal(err)
	}
	a := 2.0/11*2.8 + 9.0/11*5
	check("two steps", a)
	// A push of no steps moves nothing.
	if _, err := c.Push(fill(7), nil, 0, 0, 0, delta); err != nil {
		t.Fatal(err)
	}
	check("no steps", a)
	// A push that counts samples but no steps moves it by its batches:
	// 10 samples at batch 10, update 2, decay min(0.5^1, 3/12) = 0.25.
	if _, err := c.Push(fill(9), nil, 10, 0, 0, delta); err != nil {
		t.Fatal(err)
	}
	a = 0.25*a + 0.75*9
	check("samples without steps", a)
	// A merged peer's model at half a fresh merge's weight: update 3,
	// weight (1 - min(0.5^4, 4/13)) * 0.5 * 1 = 0.46875.
	peer := fill(-1)
	if err := ext().Apply(func(w, _ []float32, _ *params.Progress) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := ext().AverageIn(peer, 0.5); err != nil {
		t.Fatal(err)
	}
	a += 0.46875 * (-1 - a)
	check("merged peer", a)
	if err := ext().AverageIn(make([]float32, 3), 1); err == nil {
		t.Fatal("a peer model of the wrong size joined the average")
	}
	// The trainer's model is the pushed one, not the average.
	w, opt := make([]float32, 8), make([]float32, 8)
	if _, err := c.Pull(w, opt); err != nil || !near(w, 9) {
		t.Fatalf("pull %v err %v, want the pushed model (9)", w, err)
	}
	// The node reports the average; a checkpoint carries it.
	if s := ext().AverageInto(nil); !near(s.Params, a) {
		t.Fatalf("reported %v, want %v", s.Params, a)
	}
	st := ext().State()
	fresh, err := NewExternal(testSpec(), rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Restore(st); err != nil {
		t.Fatal(err)
	}
	if s := fresh.AverageInto(nil); !near(s.Params, a) {
		t.Fatalf("restored average %v, want %v", s.Params, a)
	}
	// A catch-up restarts it at the model.
	fresh.ResetAverage()
	if s := fresh.AverageInto(nil); !near(s.Params, 9) {
		t.Fatalf("reset average %v, want the model (9)", s.Params)
	}
	// A checkpoint written without an average restarts it at the model.
	st.Average = nil
	if err := fresh.Restore(st); err != nil {
		t.Fatal(err)
	}
	if s := fresh.AverageInto(nil); !near(s.Params, 9) {
		t.Fatalf("average restored from a checkpoint without one %v, want the model (9)", s.Params)
	}
	st.Average = []float32{1}
	if err := fresh.Restore(st); err == nil {
		t.Fatal("a checkpoint with an average of the wrong size was restored")
	}
	st.Average = fill(float32(math.NaN()))
	if err := fresh.Restore(st); err == nil {
		t.Fatal("a checkpoint with a NaN average was restored")
	}
	var own ownState
	if err := json.Unmarshal(st.Own, &own); err != nil {
		t.Fatal(err)
	}
	own.AverageUpdates = -1
	st.Own, _ = json.Marshal(own)
	st.Average = fill(1)
	if err := fresh.Restore(st); err == nil {
		t.Fatal("a checkpoint whose average has -1 updates was restored")
	}
}

// TestNoAverage: with EMA 0 the node reports the pushed model and says so.
func TestNoAverage(t *testing.T) {
	srv, ext := testServerWith(t, RunConfig{Network: "n", Schedule: "const"})
	c := dial(t, srv)
	if _, err := c.Register(testSpec()); err != nil {
		t.Fatal(err)
	}
	w := vec(8, func(i int) float32 { return float32(i) })
	if _, err := c.Push(w, nil, 10, 1, 0, make([]float32, 8)); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 8)
	if averaged, err := c.Average(got); err != nil || averaged || !slices.Equal(got, w) {
		t.Fatalf("average %v (averaged %v, err %v), want the model %v", got, averaged, err, w)
	}
	if err := ext().AverageIn(w, 1); err != nil {
		t.Fatal(err)
	}
	if s := ext().AverageInto(nil); !slices.Equal(s.Params, w) || ext().State().Average != nil {
		t.Fatalf("reported %v with no average, want the model %v", s.Params, w)
	}
	for _, rc := range []RunConfig{{Schedule: "const", EMA: 1}, {Schedule: "const", EMA: -0.1},
		{Schedule: "const", EMA: math.NaN()}, {Schedule: "const", EMA: 0.9, EMAPeers: 2}} {
		if _, err := NewExternal(testSpec(), rc); err == nil {
			t.Errorf("NewExternal accepted ema %v ema-peers %v", rc.EMA, rc.EMAPeers)
		}
	}
}

// TestHelloListsOps: the hello reply lists every op the node serves, and
// the node serves each op it lists (none is an unknown op to it).
func TestHelloListsOps(t *testing.T) {
	srv, _ := testServer(t)
	c := dial(t, srv)
	for _, op := range []string{"hello", "register", "pull", "push", "average", "eval", "bye"} {
		if !c.Supports(op) {
			t.Errorf("hello lists %v: %q missing", c.ops, op)
		}
	}
	if c.Supports("jump") {
		t.Error("Supports says yes to an op nobody listed")
	}
	if _, err := c.Register(testSpec()); err != nil {
		t.Fatal(err)
	}
	for _, op := range Ops {
		if op == "hello" || op == "bye" {
			continue // a second hello and a bye end nothing worth checking here
		}
		_, err := c.call(map[string]any{"op": op}, nil, func(n uint64) ([]float32, error) { return make([]float32, n/4), nil })
		var e *Error
		if errors.As(err, &e) && strings.Contains(e.Message, "unknown op") {
			t.Errorf("op %q is listed but unknown to the node: %v", op, err)
		}
	}
}

// TestAverageOnAnOlderNode: against a node whose hello lists no ops (one
// older than the list, and than the average op), Average fails with
// ErrUnsupported and names the node, without sending a request.
func TestAverageOnAnOlderNode(t *testing.T) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	requests := make(chan string, 4)
	go func() {
		r := bufio.NewReader(b)
		for {
			var hdr struct {
				Op string `json:"op"`
			}
			if _, err := readHeader(r, 1<<20, &hdr); err != nil {
				close(requests)
				return
			}
			requests <- hdr.Op
			// As a node before the list answered: hello without ops, and
			// the average op unknown.
			reply := map[string]any{"ok": true, "version": Version, "node": "meshtrain 0.9"}
			if hdr.Op != "hello" {
				reply = map[string]any{"ok": false, "code": CodeBadRequest, "error": fmt.Sprintf("unknown op %q", hdr.Op)}
			}
			if err := writeFrame(b, reply); err != nil {
				return
			}
		}
	}()
	c, err := hello(a, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Average(make([]float32, 8))
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "meshtrain 0.9") {
		t.Fatalf("average on an older node: %v, want ErrUnsupported naming the node", err)
	}
	a.Close()
	var seen []string
	for op := range requests {
		seen = append(seen, op)
	}
	if !slices.Equal(seen, []string{"hello"}) {
		t.Fatalf("requests sent: %v, want only the hello", seen)
	}
}
