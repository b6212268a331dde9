//go:build testhooks

package testnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshtrain/meshtrain/api"
	"github.com/meshtrain/meshtrain/node"
)

// fakeNodeEnv makes this test binary act as a `meshtrain node` (see
// fakeNode), so the suite's process handling is tested in seconds.
const fakeNodeEnv = "TESTNET_FAKE_NODE"

func TestMain(m *testing.M) {
	if os.Getenv(fakeNodeEnv) == "1" {
		os.Exit(fakeNode(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeNode plays a node for the suite: it reports the listening event,
// serves /v1/status and /v1/peers, and on SIGINT a final event. Each
// fake leaves a file named after its peer ID in the testnet dir, saying
// whether it attacks; an honest fake lists every other fake, and shows an
// attacker banned half a second after the common start, and when stopped
// says it took the model of every other fake (its status counts 1 cut).
// Its final
// accuracy is 0.9, or 0.89 in a swarm with an attacker (0.1 for an
// attacker). An attacker started without the unlock variable exits 2, as
// the real node refuses to start.
func fakeNode(args []string) int {
	flag := func(name string) string {
		if i := slices.Index(args, "--"+name); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	attacker := flag("adversary") != ""
	if attacker && os.Getenv(node.UnlockAdversaryEnv) != node.UnlockAdversaryValue {
		fmt.Fprintln(os.Stderr, "locked")
		return 2
	}
	dataDir, startFile := flag("data-dir"), flag("start-file")
	id := "fake-" + filepath.Base(dataDir)
	peersDir := filepath.Join(filepath.Dir(dataDir), "peers")
	role := "honest"
	if attacker {
		role = "attacker"
	}
	if os.MkdirAll(peersDir, 0o755) != nil || os.WriteFile(filepath.Join(peersDir, id), []byte(role), 0o644) != nil {
		return 1
	}
	roles := func() map[string]string {
		out := map[string]string{}
		ents, _ := os.ReadDir(peersDir)
		for _, e := range ents {
			b, _ := os.ReadFile(filepath.Join(peersDir, e.Name()))
			out[e.Name()] = string(b)
		}
		return out
	}
	l, err := net.Listen("tcp", flag("api"))
	if err != nil {
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/status", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"peer_id":"`+id+`","test_accuracy":0.5,"catch_up_claims_cut":1}`)
	})
	mux.HandleFunc("/v1/peers", func(w http.ResponseWriter, _ *http.Request) {
		var since time.Duration = -1
		if st, err := os.Stat(startFile); err == nil {
			since = time.Since(st.ModTime())
		}
		peers := []map[string]any{} // [] when alone, as the API sends it
		for p, r := range roles() {
			if p == id {
				continue
			}
			e := map[string]any{"peer_id": p, "connected": true, "reputation": 0.5, "reputation_state": "ok",
				"verdicts": map[string]int{"accepted": 2}}
			if r == "attacker" && !attacker && since >= 500*time.Millisecond {
				e["reputation"], e["reputation_state"], e["connected"] = -3.0, "banned", false
				e["banned_until"], e["verdicts"] = time.Now().Add(time.Hour).Format(time.RFC3339), map[string]int{"non_finite": 4, "accepted": 1}
			}
			peers = append(peers, e)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"peers": peers})
	})
	go func() { _ = http.Serve(l, mux) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	fmt.Printf(`{"event":"api","url":"http://%s"}`+"\n", l.Addr())
	fmt.Printf(`{"event":"listening","peer_id":%q,"addrs":["/ip4/127.0.0.1/tcp/1/p2p/%s"]}`+"\n", id, id)
	// Before the common start: outside the accuracy window.
	fmt.Printf(`{"event":"eval","test_accuracy":0.5}` + "\n")
	<-sig
	acc := 0.9
	for p, r := range roles() {
		if r == "attacker" {
			acc = 0.89
		}
		// An honest fake says it took the model of every other fake.
		if p != id && !attacker {
			fmt.Printf(`{"event":"catchup","message":"took the model of %s, pulled (progress 9, ours was 1)"}`+"\n", p)
		}
	}
	if attacker {
		acc = 0.1
	}
	// Two evaluations in the window, whose mean is acc.
	fmt.Printf(`{"event":"eval","test_accuracy":%g}`+"\n", acc-0.01)
	fmt.Printf(`{"event":"final","test_accuracy":%g}`+"\n", acc+0.01)
	return 0
}

// TestRunHostileWithFakeNodes runs the whole suite on fake nodes: the
// attackers get their flags and the unlock variable (a locked one would
// not start), the bans are timed from the common start, the accuracies
// are the means of the evaluations in the window (the one before the
// common start is not), and the files are written.
func TestRunHostileWithFakeNodes(t *testing.T) {
	t.Setenv(fakeNodeEnv, "1")
	t.Setenv(node.UnlockAdversaryEnv, "") // only the attackers' own environment unlocks
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultHostileConfig()
	cfg.Binary, cfg.Out = exe, t.TempDir()
	cfg.Attacks, cfg.Strengths = []string{node.AdversaryNaN, node.AdversaryScale}, map[string]float64{node.AdversaryScale: 3}
	cfg.Nodes, cfg.Attackers, cfg.Duration = 4, 1, 1500*time.Millisecond
	cfg.Settle, cfg.PollEvery, cfg.AccuracyWindow = 0, 50*time.Millisecond, time.Second
	var progress strings.Builder
	cfg.Progress = &progress
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := RunHostile(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("progress:\n%s", progress.String())
	if res.Baseline == nil || len(res.Runs) != 2 {
		t.Fatalf("baseline %v and %d runs, want a baseline and 2", res.Baseline != nil, len(res.Runs))
	}
	for _, run := range append([]AttackRun{*res.Baseline}, res.Runs...) {
		if run.Error != "" {
			t.Fatalf("%s: %s", run.Attack, run.Error)
		}
		if len(run.HonestBans) != 0 {
			t.Errorf("%s: honest bans %+v", run.Attack, run.HonestBans)
		}
		honest, from := 3, 3 // each honest fake took the attacker's model once
		if run.Attack == AttackNone {
			honest, from = 4, 0
		}
		// Each honest fake took the model of every other fake.
		if run.HonestCatchUps != int64(3*honest) || run.HonestClaimsCut != int64(honest) || run.HonestCatchUpsFromAttackers != from {
			t.Errorf("%s: honest catch-ups %d, claims cut %d, from an attacker %d; want %d, %d, %d",
				run.Attack, run.HonestCatchUps, run.HonestClaimsCut, run.HonestCatchUpsFromAttackers, 3*honest, honest, from)
		}
	}
	if b := res.Baseline; b.Attack != AttackNone || len(b.Pairs) != 0 || math.Abs(b.HonestAccuracyMean-0.9) > 1e-9 || b.AccuracyDeltaPP != nil {
		t.Errorf("baseline %+v", b)
	}
	for i, run := range res.Runs {
		if want := cfg.Attacks[i]; run.Attack != want {
			t.Errorf("run %d attacks %s, want %s", i, run.Attack, want)
		}
		if !run.AllBanned || run.BannedPairs != 3 || len(run.Pairs) != 3 {
			t.Errorf("%s: banned %d of %d pairs", run.Attack, run.BannedPairs, len(run.Pairs))
		}
		for _, p := range run.Pairs {
			if p.Target != 3 || p.State != StateBanned || p.BannedAtS == nil || *p.BannedAtS < 0.5 || *p.ExchangesAtBan != 5 {
				t.Errorf("%s: pair %+v", run.Attack, p)
			}
		}
		if math.Abs(run.HonestAccuracyMean-0.89) > 1e-9 || run.AccuracyDeltaPP == nil || fmt.Sprintf("%.2f", *run.AccuracyDeltaPP) != "-1.00" {
			t.Errorf("%s: accuracy %v, delta %v", run.Attack, run.HonestAccuracyMean, run.AccuracyDeltaPP)
		}
		for _, n := range run.Nodes {
			if n.Attacker != (n.Index == 3) || n.AccuracyFrom != "mean of 2" {
				t.Errorf("%s: node %+v", run.Attack, n)
			}
		}
	}
	if s := res.Runs[1].Strength; s != 3 {
		t.Errorf("scale ran at %v, want the configured 3", s)
	}
	if s := res.Runs[0].Strength; s != 0.01 {
		t.Errorf("nan ran at %v, want its default 0.01", s)
	}
	if err := WriteHostile(cfg.Out, res); err != nil {
		t.Fatal(err)
	}
	back, err := ReadHostileFile(filepath.Join(cfg.Out, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Runs, res.Runs) {
		t.Error("results.json does not read back as written")
	}
	md, err := os.ReadFile(filepath.Join(cfg.Out, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| none (all honest) | - | 90.00% / 90.00% |", "| nan | 0.01 | 89.00% / 89.00% | -1.00 pp | 3/3 |",
		"| scale | 3 |", "| nan | 0 | 3 | banned | -3.00 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(progress.String(), "banned attacker node 3 after 5 verdicts") {
		t.Errorf("no progress line for the bans:\n%s", progress.String())
	}
}

// TestPerNodeEnvironment: without the unlock variable in its own
// environment an attacker does not start, and the swarm is a failed run.
func TestPerNodeEnvironment(t *testing.T) {
	t.Setenv(fakeNodeEnv, "1")
	t.Setenv(node.UnlockAdversaryEnv, "")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Up(t.Context(), Config{Binary: exe, Dir: t.TempDir(), Nodes: 2, StartTimeout: 30 * time.Second,
		PerNode: func(i int) ([]string, []string) {
			if i == 1 {
				return []string{"--adversary", "nan"}, nil
			}
			return nil, nil
		}})
	if err == nil || !strings.Contains(err.Error(), "node 1 exited during start-up") {
		t.Fatalf("a locked attacker started: %v", err)
	}
}

// servePeers answers GET /v1/peers with body, as a node's API would.
func servePeers(t *testing.T, body string) *api.Client {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/peers" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(ts.Close)
	c, err := api.NewClient(ts.URL, ts.Client())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPeerViewsThroughTheAPIClient: the suite reads /v1/peers through
// api.Client, and what it counts (state, score, verdicts) is what the
// body says, for the API's pinned example and for a swarm with bans.
func TestPeerViewsThroughTheAPIClient(t *testing.T) {
	b, err := os.ReadFile("../api/testdata/peers.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Body struct {
			Peers []map[string]any `json:"peers"`
		} `json:"body"`
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(golden.Body)
	views, err := servePeers(t, string(body)).Peers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != len(golden.Body.Peers) || len(views) == 0 {
		t.Fatalf("%d entries read of %d", len(views), len(golden.Body.Peers))
	}
	for i, raw := range golden.Body.Peers {
		v := views[i]
		state, _ := raw["reputation_state"].(string)
		score, scored := raw["reputation"].(float64)
		var sum float64
		verdicts, _ := raw["verdicts"].(map[string]any)
		for _, n := range verdicts {
			sum += n.(float64)
		}
		if v.PeerID != raw["peer_id"] || v.ReputationState != state || exchanges(v) != int64(sum) ||
			(v.Reputation != nil) != scored || (scored && *v.Reputation != score) {
			t.Errorf("golden entry %d read as %+v from %v", i, v, raw)
		}
	}

	const withReputation = `{"peers":[
	 {"peer_id":"A","connected":true,"reputation":0.4,"reputation_state":"ok","verdicts":{"accepted":7,"outlier":1}},
	 {"peer_id":"B","connected":false,"reputation":-4.5,"reputation_state":"banned","banned_until":"2026-01-02T03:04:05Z",
	  "verdicts":{"non_finite":3,"size_mismatch":2}},
	 {"peer_id":"C","connected":true,"reputation":-1,"reputation_state":"ignored","verdicts":{}}]}`
	views, err = servePeers(t, withReputation).Peers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id, state string
		exchanges int64
		connected bool
	}{{"A", StateOK, 8, true}, {"B", StateBanned, 5, false}, {"C", StateIgnored, 0, true}}
	if len(views) != len(want) {
		t.Fatalf("%d entries, want %d", len(views), len(want))
	}
	for i, w := range want {
		v := views[i]
		if v.PeerID != w.id || v.ReputationState != w.state || exchanges(v) != w.exchanges || v.Connected != w.connected {
			t.Errorf("entry %d: %+v, want %+v", i, v, w)
		}
	}
	if u := views[1].BannedUntil; u == nil || !u.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("banned_until %v", u)
	}
	tr := newBanTracker([]string{"h", "A", "B", "C"})
	if got := tr.observe(1, 0, views); len(got) != 1 || got[0].Target != 2 || *got[0].ExchangesAtBan != 5 {
		t.Errorf("bans %+v, want B after 5 verdicts", got)
	}

	for _, bad := range []string{``, `{`, `{"peers":{}}`, `{"error":"x"}`, `[]`, `{"peers":null}`} {
		if _, err := servePeers(t, bad).Peers(t.Context()); !errors.Is(err, api.ErrResponse) {
			t.Errorf("body %q: %v, want api.ErrResponse", bad, err)
		}
	}
}

func TestBanTracker(t *testing.T) {
	peers := []string{"h0", "h1", "h2", "a3"}
	tr := newBanTracker(peers)
	view := func(id, state string, verdicts map[string]int64) api.PeerStatus {
		return api.PeerStatus{PeerID: id, ReputationState: state, Verdicts: verdicts}
	}
	if got := tr.observe(0.5, 0, []api.PeerStatus{view("h1", StateOK, nil), view("a3", StateOK, map[string]int64{"accepted": 2}),
		view("stranger", StateBanned, nil), view("h0", StateBanned, nil)}); len(got) != 0 {
		t.Fatalf("new bans %+v, want none (strangers and self do not count)", got)
	}
	got := tr.observe(1.5, 0, []api.PeerStatus{view("a3", StateBanned, map[string]int64{"accepted": 2, "outlier": 4})})
	if len(got) != 1 || got[0].Target != 3 || *got[0].BannedAtS != 1.5 || *got[0].ExchangesAtBan != 6 {
		t.Fatalf("new bans %+v, want a3 at 1.5s after 6", got)
	}
	// Still banned later, with more verdicts: the first time stands.
	if got := tr.observe(2.5, 0, []api.PeerStatus{view("a3", StateBanned, map[string]int64{"outlier": 9})}); len(got) != 0 {
		t.Fatalf("a ban reported twice: %+v", got)
	}
	tr.observe(2.5, 1, []api.PeerStatus{view("a3", StateIgnored, map[string]int64{"outlier": 2}), view("h2", StateBanned, nil)})

	var run AttackRun
	tr.outcome(&run, 3)
	if len(run.Pairs) != 3 || run.BannedPairs != 1 || run.AllBanned {
		t.Fatalf("pairs %+v, banned %d", run.Pairs, run.BannedPairs)
	}
	p0, p1, p2 := run.Pairs[0], run.Pairs[1], run.Pairs[2]
	if !p0.Listed || p0.State != StateBanned || *p0.BannedAtS != 1.5 || *p0.ExchangesAtBan != 6 || p0.Verdicts["outlier"] != 9 {
		t.Errorf("node 0's view of the attacker: %+v", p0)
	}
	if p1.State != StateIgnored || p1.BannedAtS != nil {
		t.Errorf("node 1's view of the attacker: %+v", p1)
	}
	if p2.Listed || p2.State != "" || p2.BannedAtS != nil || p2.ObserverPeer != "h2" || p2.TargetPeer != "a3" {
		t.Errorf("node 2 never listed the attacker: %+v", p2)
	}
	if len(run.HonestBans) != 1 || run.HonestBans[0].Observer != 1 || run.HonestBans[0].Target != 2 {
		t.Errorf("honest bans %+v, want node 1 banning node 2", run.HonestBans)
	}
}

func TestAccuracies(t *testing.T) {
	nodes := func(accs ...float64) []NodeOutcome {
		var out []NodeOutcome
		for i, a := range accs {
			out = append(out, NodeOutcome{Index: i, FinalAccuracy: a, Attacker: i == len(accs)-1})
		}
		return out
	}
	base := &AttackRun{Attack: AttackNone, Nodes: nodes(0.90, 0.92, 0.10)}
	base.Nodes[2].Attacker = false
	accuracies(base, 2, nil)
	run := &AttackRun{Attack: "nan", Nodes: nodes(0.89, 0.90, 0.05)}
	accuracies(run, 2, base)
	if base.HonestAccuracyMean != 0.91 || base.AccuracyDeltaPP != nil {
		t.Errorf("baseline mean %v delta %v: want 0.91 over nodes 0 and 1, no delta", base.HonestAccuracyMean, base.AccuracyDeltaPP)
	}
	if fmt.Sprintf("%.4f %.2f %.2f", run.HonestAccuracyMean, run.HonestAccuracyMin, *run.AccuracyDeltaPP) != "0.8950 0.89 -1.50" {
		t.Errorf("attack mean %v min %v delta %v", run.HonestAccuracyMean, run.HonestAccuracyMin, *run.AccuracyDeltaPP)
	}
}

func TestHostileConfigValidate(t *testing.T) {
	ok := DefaultHostileConfig()
	ok.Binary = "meshtrain"
	if err := ok.Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	c := ok
	c.Binary, c.Out = "", ""
	c.Attacks = []string{"nan", "telepathy"}
	c.Strengths = map[string]float64{"scale": 2}
	c.Nodes, c.Attackers = 3, 3
	c.Duration, c.AvgInterval, c.Threads, c.PollEvery = 0, 0, 0, 0
	c.Dataset, c.Model = "imagenet", "transformer"
	err := c.Validate()
	for _, want := range []string{"no binary", "no output dir", `"telepathy"`, `strength for "scale"`, "attackers 3",
		"duration 0s", "averaging interval", "threads 0", "poll interval", `dataset "imagenet"`, "transformer"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to name %q", err, want)
		}
	}
	if !errors.Is(err, ErrHostile) {
		t.Errorf("%v does not wrap ErrHostile", err)
	}
}
