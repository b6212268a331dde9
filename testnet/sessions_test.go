package testnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	at := func(v float64) *float64 { return &v }
	ss := []Session{
		{Session: 0, Index: 0, StartS: 0, EndS: 600, End: SessionStopped, ToTargetS: at(12)},
		{Session: 1, Index: 1, StartS: 0, EndS: 130, End: SessionLeft, ToTargetS: at(30)},
		{Session: 2, Index: 2, StartS: 0, EndS: 119.9, End: SessionLeft},                  // short: not judged
		{Session: 3, Index: 30, StartS: 119.9, EndS: 250, End: SessionLeft, Killed: true}, // long, missed
		{Session: 4, Index: 2, StartS: 200, EndS: 600, End: SessionStopped, Returning: true, ToTargetS: at(3)},
		{Session: 5, Index: 31, StartS: 300, EndS: 301, End: SessionNoStart, Problem: "exited during start-up"},
		{Session: 6, Index: 5, StartS: 0, EndS: 20, End: SessionFailed, Problem: "exited with exit status 1"},
		{Session: 7, Index: 6, StartS: 0, EndS: 120, End: SessionExited, ToTargetS: at(100)}, // exactly the minimum
	}
	r := Summarize(ss, 0.9, 2*time.Minute)
	if r.Long != 5 || r.Reached != 4 || !slices.Equal(r.Missed, []int{3}) || !slices.Equal(r.Failed, []int{5, 6}) {
		t.Errorf("long %d, reached %d, missed %v, failed %v; want 5, 4, [3], [5 6]", r.Long, r.Reached, r.Missed, r.Failed)
	}
	if r.OK() {
		t.Error("a report with a miss and failures is OK")
	}
	want := "sessions that lasted >= 2m0s: 5; reached 90%: 4 (not: session 3 (node 30, 130 s)); failed: " +
		"session 5 (node 31, 1 s), session 6 (node 5, 20 s)"
	if got := r.Verdict(); got != want {
		t.Errorf("verdict\n%s\nwant\n%s", got, want)
	}
	ok := Summarize(ss[:2], 0.975, time.Minute)
	if !ok.OK() || ok.Verdict() != "sessions that lasted >= 1m0s: 2; reached 97.5%: 2" {
		t.Errorf("%+v: %s", ok, ok.Verdict())
	}
	// An empty record is a report too, with lists rather than nulls.
	b, _ := json.Marshal(Summarize(nil, 0.9, time.Minute))
	if !strings.Contains(string(b), `"missed":[]`) || !strings.Contains(string(b), `"failed":[]`) {
		t.Errorf("empty report %s", b)
	}
}

func TestWriteSessions(t *testing.T) {
	at := 12.0
	r := Summarize([]Session{
		{Session: 0, Index: 0, PeerID: "12D3KooWabcdefghijkl", StartS: 0, EndS: 200, End: SessionStopped, StartEvent: "start",
			ToTargetS: &at, BestAccuracy: 0.921},
		{Session: 1, Index: 1, StartS: 50, EndS: 90, End: SessionLeft, Killed: true, Returning: true, StartEvent: "resumed", StartStep: 340},
	}, 0.9, 2*time.Minute)
	r.Churn = &ChurnStats{Events: 1, Returns: 1, Killed: 1}
	var b bytes.Buffer
	WriteSessions(&b, r)
	out := b.String()
	for _, want := range []string{"TO 90% S", "…efghijkl", "returning", "left (SIGKILL)", "340", "92.1%",
		"churn: 1 events (0 newcomers, 1 returns), 0 skipped, 1 leavers killed after the grace, 0 joiners failed to start, 0 still starting at the end",
		"sessions that lasted >= 2m0s: 1; reached 90%: 1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	dir := t.TempDir()
	if err := WriteSessionsFile(dir, r); err != nil {
		t.Fatal(err)
	}
	var back SessionsReport
	raw, _ := os.ReadFile(filepath.Join(dir, SessionsFile))
	if err := json.Unmarshal(raw, &back); err != nil || len(back.Sessions) != 2 || back.Sessions[1].StartStep != 340 ||
		*back.Sessions[0].ToTargetS != 12 || back.Churn.Killed != 1 || back.MinSessionS != 120 {
		t.Errorf("read back %+v, %v", back, err)
	}
}

// follow reads how a session began and when it first reached the target
// from the node's events, as `meshtrain node --json` prints them.
func TestFollowRecordsStartAndTarget(t *testing.T) {
	m := &Member{target: 0.9, last: map[string]any{}, done: make(chan struct{})}
	lines := `{"event":"resumed","step":340,"epoch":0,"progress":1200,"elapsed_s":0,"checkpoint":4,"run_samples":51200,"message":"resumed from checkpoint 4"}
not json
{"event":"api","url":"http://127.0.0.1:4567","message":"dashboard, REST API and /metrics at http://127.0.0.1:4567"}
{"event":"listening","peer_id":"12D3KooWx","addrs":["/ip4/127.0.0.1/tcp/1/p2p/12D3KooWx"]}
{"event":"eval","step":400,"test_accuracy":0.85}
{"event":"progress","step":410,"loss":0.3}
{"event":"eval","step":500,"test_accuracy":0.91}
{"event":"eval","step":600,"test_accuracy":0.95}
{"event":"final","step":700,"test_accuracy":0.93,"merges":3,"message":"interrupted","status":{"mode":"gossip"}}
`
	listening := make(chan event, 1)
	before := time.Now()
	m.follow(strings.NewReader(lines), listening)
	if ev := <-listening; ev.PeerID != "12D3KooWx" || ev.API != "127.0.0.1:4567" {
		t.Errorf("listening %+v, want peer 12D3KooWx with its API at 127.0.0.1:4567", ev)
	}
	// A detached node's log is read back the same way.
	log := filepath.Join(t.TempDir(), "node.log")
	if err := os.WriteFile(log, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	tailListening(t.Context(), log, nil, listening)
	if ev := <-listening; ev.PeerID != "12D3KooWx" || ev.API != "127.0.0.1:4567" {
		t.Errorf("listening in a log %+v, want peer 12D3KooWx with its API at 127.0.0.1:4567", ev)
	}
	if m.first.kind != "resumed" || m.first.step != 340 || m.first.clock != 51200 {
		t.Errorf("first %+v", m.first)
	}
	if m.reached.Before(before) || m.best != 0.95 || m.final == nil || m.final.Merges != 3 {
		t.Errorf("reached %v, best %v, final %+v", m.reached, m.best, m.final)
	}
	fresh := &Member{target: 0.9, last: map[string]any{}}
	fresh.follow(strings.NewReader(`{"event":"start","step":0,"message":"no checkpoint: starting fresh"}
{"event":"resumed","step":9}
{"event":"eval","test_accuracy":0.5}
`), make(chan event, 1))
	if fresh.first.kind != "start" || fresh.first.step != 0 || !fresh.reached.IsZero() || fresh.best != 0.5 {
		t.Errorf("fresh: first %+v, reached %v, best %v", fresh.first, fresh.reached, fresh.best)
	}
}

// Sessions tells how each ended from what the testnet did to it.
func TestSessionsEnds(t *testing.T) {
	t0 := time.Now()
	member := func(i int, stopping string, killed bool, exit, startErr error) *Member {
		m := &Member{Index: i, started: t0.Add(time.Duration(i) * time.Second), ended: t0.Add(100 * time.Second),
			done: make(chan struct{}), stopping: stopping, killed: killed, exit: exit, startErr: startErr}
		close(m.done)
		return m
	}
	killedErr := errors.New("signal: killed")
	running := &Member{Index: 9, started: t0, done: make(chan struct{})}
	running.reached = t0.Add(-time.Second) // before training started: counts as at once
	tn := &Testnet{t0: t0.Add(2 * time.Second), Members: []*Member{
		member(0, endLeft, false, nil, nil),
		member(1, endLeft, true, killedErr, nil),
		member(2, endStopped, false, nil, nil),
		member(3, "", false, nil, nil),
		member(4, "", false, errors.New("exit status 2"), nil),
		member(5, endLeft, false, errors.New("exit status 1"), nil),
		member(6, "", false, killedErr, errors.New("testnet: node 6 did not start within 1m0s")),
		running,
	}}
	ss := tn.Sessions()
	want := []string{SessionLeft, SessionLeft, SessionStopped, SessionExited, SessionFailed, SessionFailed, SessionNoStart, SessionRunning}
	for k, s := range ss {
		if s.End != want[k] || s.Session != k {
			t.Errorf("session %d: end %q, want %q (%+v)", k, s.End, want[k], s)
		}
	}
	if !ss[1].Killed || !strings.Contains(ss[5].Problem, "after a stop signal") || !strings.Contains(ss[6].Problem, "did not start") {
		t.Errorf("killed %v, problems %q, %q", ss[1].Killed, ss[5].Problem, ss[6].Problem)
	}
	// Times count from training's start; a gated node's session starts there.
	if ss[0].StartS != 0 || ss[4].StartS != 2 || ss[4].EndS != 98 {
		t.Errorf("start %v, %v, end %v", ss[0].StartS, ss[4].StartS, ss[4].EndS)
	}
	if r := ss[7]; r.ToTargetS == nil || *r.ToTargetS != 0 || r.EndS < 0 {
		t.Errorf("running session %+v", r)
	}
}

// TestMemberKeepsItsLatestAccuracies: a member records the test accuracies
// a node prints, newest last, and keeps a bounded number of them however
// long the node runs.
func TestMemberKeepsItsLatestAccuracies(t *testing.T) {
	m := &Member{last: map[string]any{}}
	var lines strings.Builder
	const n = 3*maxTimedAccuracies + 5
	for i := range n {
		fmt.Fprintf(&lines, `{"event":"eval","step":%d,"test_accuracy":%g}`+"\n", i, float64(i)/n)
	}
	lines.WriteString(`{"event":"progress","step":1}` + "\n")
	m.follow(strings.NewReader(lines.String()), make(chan event, 1))
	if len(m.accs) < maxTimedAccuracies/2 || len(m.accs) > maxTimedAccuracies {
		t.Fatalf("%d accuracies kept, want %d to %d", len(m.accs), maxTimedAccuracies/2, maxTimedAccuracies)
	}
	for i, a := range m.accs {
		if want := float64(n-len(m.accs)+i) / n; a.acc != want {
			t.Fatalf("accuracy %d of %d is %g, want %g: not the latest, in order", i, len(m.accs), a.acc, want)
		}
	}
}
