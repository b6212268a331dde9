package testnet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeNodes stands in for node processes: start takes startTime to
// "listen", a stopped member takes stopTime to exit. It checks what the
// churn asks of it: never two processes of one node at once, never a
// return before the leaver has exited, joins only through running nodes.
type fakeNodes struct {
	t                   *testing.T
	startTime, stopTime time.Duration
	failStart           func(l launch) bool // a start that never listens

	mu      sync.Mutex
	running map[int]*Member
	exited  map[int]bool // nodes whose last process has exited
	starts  []launch
}

func newFakeNodes(t *testing.T, nodes int) (*fakeNodes, *Testnet) {
	f := &fakeNodes{t: t, startTime: time.Second, stopTime: 2 * time.Second, running: map[int]*Member{}, exited: map[int]bool{}}
	tn := &Testnet{cfg: Config{Nodes: nodes, Target: DefaultTarget}, t0: time.Now()}
	for i := range nodes {
		tn.Members = append(tn.Members, f.member(i, false))
	}
	return f, tn
}

func (f *fakeNodes) member(i int, returning bool) *Member {
	m := &Member{Index: i, Returning: returning, PeerID: fmt.Sprintf("peer-%d", i), started: time.Now(),
		Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/peer-%d", 4000+i, i)}, done: make(chan struct{}), last: map[string]any{}}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[i] != nil {
		f.t.Errorf("node %d started while its process runs", i)
	}
	f.running[i] = m
	delete(f.exited, i)
	return m
}

// exit ends a member's process (as if it exited with code 0).
func (f *fakeNodes) exit(m *Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[m.Index] == m {
		delete(f.running, m.Index)
		f.exited[m.Index] = true
	}
	m.ended = time.Now()
	close(m.done)
}

func (f *fakeNodes) start(ctx context.Context, l launch) (*Member, error) {
	f.mu.Lock()
	f.starts = append(f.starts, l)
	if l.returning && !f.exited[l.index] {
		f.t.Errorf("node %d returns but never left", l.index)
	}
	if l.fresh == l.returning {
		f.t.Errorf("node %d: returning %v with fresh %v: a returner resumes, a newcomer starts fresh", l.index, l.returning, l.fresh)
	}
	if len(l.bootstrap) == 0 {
		f.t.Errorf("node %d joins through nobody", l.index)
	}
	for _, b := range l.bootstrap {
		if !slices.ContainsFunc(mapValues(f.running), func(m *Member) bool { return m.Addrs[0] == b }) {
			f.t.Errorf("node %d joins through %s, which does not run", l.index, b)
		}
	}
	f.mu.Unlock()
	m := f.member(l.index, l.returning)
	select {
	case <-time.After(f.startTime):
	case <-ctx.Done():
		f.exit(m)
		return m, ctx.Err()
	}
	if f.failStart != nil && f.failStart(l) {
		f.exit(m)
		return m, fmt.Errorf("testnet: node %d exited during start-up", l.index)
	}
	return m, nil
}

func (f *fakeNodes) stop(m *Member, grace time.Duration) {
	m.mu.Lock()
	m.stopping = endLeft
	m.mu.Unlock()
	time.Sleep(min(f.stopTime, grace))
	if f.stopTime > grace {
		m.mu.Lock()
		m.killed = true
		m.mu.Unlock()
	}
	f.exit(m)
}

func mapValues(m map[int]*Member) []*Member {
	var out []*Member
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// runChurn runs a churner on the fake swarm until d has passed or the
// churn ends, and returns whether it ended by itself.
func runChurn(t *testing.T, f *fakeNodes, tn *Testnet, cfg ChurnConfig, d time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	tn.cfg.Churn = cfg
	c := &churner{tn: tn, plan: newChurnPlan(cfg, tn.cfg.Nodes), grace: cmpOr(cfg.Grace, DefaultChurnGrace), start: f.start, stop: f.stop}
	c.run(ctx)
	return ctx.Err() == nil
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

func TestChurnReplacesNodesAtTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, tn := newFakeNodes(t, 30)
		// 0.2 of 30 nodes a minute for 10 minutes: 60 events expected.
		if runChurn(t, f, tn, ChurnConfig{Rate: 0.2, NeverReturn: 0.3, Seed: 1}, 10*time.Minute) {
			t.Fatal("the churn ended by itself")
		}
		s := tn.Churn()
		if s.Events < 40 || s.Events > 80 || s.Skipped != 0 {
			t.Errorf("%+v: want about 60 events, none skipped", s)
		}
		if s.Returns == 0 || s.Newcomers == 0 || s.Returns+s.Newcomers != s.Events || s.Killed != 0 || s.FailedStarts != 0 {
			t.Errorf("%+v: want returns and newcomers, one per event", s)
		}
		// Every event started one session, recorded at once.
		if len(tn.Members) != 30+s.Events && len(tn.Members) != 30+s.Events-1 {
			t.Errorf("%d sessions after %d events", len(tn.Members), s.Events)
		}
		f.mu.Lock()
		if len(f.running) < 29 || len(f.running) > 30 {
			t.Errorf("%d nodes run, want 30 (29 while an event is under way)", len(f.running))
		}
		f.mu.Unlock()
		f.exitAll(tn)
	})
}

func TestChurnSeededRunsAgree(t *testing.T) {
	draw := func() []launch {
		var starts []launch
		synctest.Test(t, func(t *testing.T) {
			f, tn := newFakeNodes(t, 10)
			runChurn(t, f, tn, ChurnConfig{Rate: 0.5, NeverReturn: 0.3, Seed: 9}, 5*time.Minute)
			starts = f.starts
			for _, m := range tn.Members {
				if !m.exited() {
					f.exit(m)
				}
			}
		})
		return starts
	}
	a, b := draw(), draw()
	if len(a) < 10 || !slices.EqualFunc(a, b, func(x, y launch) bool {
		return x.index == y.index && x.returning == y.returning && slices.Equal(x.bootstrap, y.bootstrap)
	}) {
		t.Errorf("two runs of one seed started different nodes:\n%v\n%v", a, b)
	}
}

func TestChurnNeverReturnAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, tn := newFakeNodes(t, 10)
		runChurn(t, f, tn, ChurnConfig{Rate: 1, NeverReturn: 1, Seed: 2}, 5*time.Minute)
		if s := tn.Churn(); s.Returns != 0 || s.Newcomers < 20 {
			t.Errorf("%+v: want only newcomers", s)
		}
		f.exitAll(tn)
	})
}

// A leaver that outlasts the grace is killed; a joiner that fails to
// start is recorded, and its node does not count as live.
func TestChurnKillsAndFailedStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, tn := newFakeNodes(t, 6)
		f.stopTime = time.Minute
		f.failStart = func(l launch) bool { return l.index == 7 }
		runChurn(t, f, tn, ChurnConfig{Rate: 1, NeverReturn: 0, Seed: 4, Grace: 3 * time.Second}, 3*time.Minute)
		s := tn.Churn()
		if s.Killed == 0 || s.Killed != s.Events {
			t.Errorf("%+v: every leaver outlasts the grace: want it killed", s)
		}
		if s.FailedStarts != 1 {
			t.Errorf("%+v: node 7 fails to start: want one failed start", s)
		}
		ss := tn.Sessions()
		var failed []Session
		for _, x := range ss {
			if x.End == SessionNoStart {
				failed = append(failed, x)
			}
		}
		if len(failed) != 1 || failed[0].Index != 7 || !strings.Contains(failed[0].Problem, "exited during start-up") {
			t.Errorf("failed starts %+v", failed)
		}
		f.exitAll(tn)
	})
}

// When every node has exited on its own (their runs ended), the churn has
// nobody to stop or to bootstrap through: it ends.
func TestChurnEndsWhenNoNodeIsLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, tn := newFakeNodes(t, 4)
		go func() {
			time.Sleep(30 * time.Second)
			for _, m := range slices.Clone(tn.Members[:4]) {
				f.exit(m)
			}
		}()
		// A rate so low that no event comes first.
		if !runChurn(t, f, tn, ChurnConfig{Rate: 0.001, Seed: 1}, time.Hour) {
			t.Error("the churn went on with no node live")
		}
	})
}

// StartChurn and Stop: Stop ends the churn and waits for it, Done waits
// for the churn too, and both are safe to call twice.
func TestStartChurnStopsWithTheTestnet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, tn := newFakeNodes(t, 5)
		tn.cfg.Churn = ChurnConfig{Rate: 2, Seed: 5}
		c := &churner{tn: tn, plan: newChurnPlan(tn.cfg.Churn, 5), grace: time.Second, start: f.start, stop: f.stop}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		tn.churnStop, tn.churnDone = cancel, done
		go func() { defer close(done); c.run(ctx) }()
		all := tn.Done()
		time.Sleep(2 * time.Minute)
		tn.stopChurn()
		tn.stopChurn()
		if tn.Churn().Events == 0 {
			t.Fatal("no churn in two minutes at rate 2")
		}
		n := len(tn.members())
		time.Sleep(time.Minute)
		if len(tn.members()) != n {
			t.Error("a session started after the churn was stopped")
		}
		select {
		case <-all:
			t.Fatal("Done before the nodes exited")
		default:
		}
		for _, m := range tn.members() {
			if !m.exited() {
				f.exit(m)
			}
		}
		<-all
	})
}

// exitAll lets every member still running exit, so the test's bubble ends.
func (f *fakeNodes) exitAll(tn *Testnet) {
	for _, m := range tn.Members {
		if !m.exited() {
			f.exit(m)
		}
	}
}
