package testnet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

// StateFile records a detached testnet so `meshtrain testnet down` can stop it.
const StateFile = "testnet.json"

// Config describes a local testnet.
type Config struct {
	// Binary is the meshtrain executable every node runs.
	Binary string
	// Dir holds one data dir and one log file per node, and StateFile.
	Dir string
	// Nodes is how many node processes to start, in [1,MaxNodes]. Node i
	// trains shard i/Nodes; a newcomer of the churn (index >= Nodes) trains
	// shard (i mod Nodes)/Nodes.
	Nodes int
	// Slowdowns, one per node or empty (all 1); a shorter list repeats.
	Slowdowns []float64
	// NodeArgs are passed to every `meshtrain node` (after the testnet's own).
	NodeArgs []string
	// PerNode, if set, gives node i flags of its own (after NodeArgs) and
	// environment variables (KEY=VALUE, added to this process's).
	PerNode func(i int) (args, env []string)
	// Detach starts the nodes in their own session, writing straight to
	// their log files, so they outlive this process.
	Detach bool
	// StartTimeout bounds the wait for each node to report its addresses.
	StartTimeout time.Duration
	// StartParallel bounds how many nodes start at once after the first
	// (0: DefaultStartParallel). A node's start-up is mostly CPU (its
	// dataset, its store, its keys), so more than a few at once on a small
	// machine only slows each down. With a WAN they start one by one, in
	// order (its endpoints are the nodes, in order).
	StartParallel int
	// BaseStep, when set, is every node's --base-step: the step time the
	// slowdowns multiply, measured once (CalibrateBaseStep) rather than by
	// each node while the others start up on the same cores.
	BaseStep time.Duration
	// Threads, when > 0, is every node's --threads.
	Threads int
	// Gate holds every node's training until Release (a start file in Dir),
	// so a swarm starts together once its nodes have found each other.
	Gate bool
	// Fresh starts every node's run over (--fresh) rather than resuming
	// what its data dir holds.
	Fresh bool
	// WAN, if set, puts every node behind this emulated network: each
	// listens for QUIC only, on 127.0.0.1, and announces its public address
	// on the WAN instead (--listen, --announce), so every packet between
	// nodes crosses it. The caller starts and closes it.
	WAN *WAN
	// Churn, if its Rate is > 0, replaces nodes while the testnet trains,
	// once StartChurn is called. Not with Detach or WAN.
	Churn ChurnConfig
	// Target is the test accuracy whose first crossing each session
	// records (Session.ToTargetS); 0: DefaultTarget.
	Target float64
}

// MaxNodes bounds Config.Nodes.
const MaxNodes = 256

// DefaultStartParallel is Config.StartParallel's default.
const DefaultStartParallel = 4

// DefaultTarget is Config.Target's default.
const DefaultTarget = 0.9

// GateFile is the start file of a gated testnet, in its Dir.
const GateFile = "start"

// Validate reports every bad field at once.
func (c Config) Validate() error {
	var errs []error
	if c.Binary == "" {
		errs = append(errs, errors.New("testnet: no binary"))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("testnet: no dir"))
	}
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		errs = append(errs, fmt.Errorf("testnet: --nodes %d not in [1,%d]", c.Nodes, MaxNodes))
	}
	if c.StartParallel < 0 {
		errs = append(errs, fmt.Errorf("testnet: start parallelism %d: must be >= 0", c.StartParallel))
	}
	if !(c.Target >= 0 && c.Target <= 1) {
		errs = append(errs, fmt.Errorf("testnet: target accuracy %v not in (0,1]", c.Target))
	}
	if err := c.Churn.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Churn.Rate > 0 {
		if c.Nodes < 2 {
			errs = append(errs, errors.New("testnet: churn needs at least 2 nodes (a joiner bootstraps through a node that stays)"))
		}
		if c.Detach {
			errs = append(errs, errors.New("testnet: churn runs in this process: it cannot outlive it (no --detach)"))
		}
		if c.WAN != nil {
			errs = append(errs, errors.New("testnet: no churn on an emulated WAN"))
		}
	}
	for _, s := range c.Slowdowns {
		if !(s >= 1 && s <= 1000) {
			errs = append(errs, fmt.Errorf("testnet: slowdown %v not in [1,1000]", s))
		}
	}
	if c.WAN != nil && c.Detach {
		errs = append(errs, errors.New("testnet: an emulated WAN lives in this process: it cannot outlive it (no --detach)"))
	}
	return errors.Join(errs...)
}

// ParseSlowdowns reads "2,2,4,8".
func ParseSlowdowns(s string) ([]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v >= 1 && v <= 1000) {
			return nil, fmt.Errorf("testnet: slowdown %q: want a number in [1,1000]", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// Member is one session of a node of a testnet: one process, from its
// start to its exit. Without churn every node has one; with churn a node
// that comes back (same Index, data dir and peer ID) has one per return.
type Member struct {
	Index    int      `json:"index"`
	PID      int      `json:"pid"`
	PeerID   string   `json:"peer_id"`
	Addrs    []string `json:"addrs"`
	API      string   `json:"api"`
	DataDir  string   `json:"data_dir"`
	Log      string   `json:"log"`
	Slowdown float64  `json:"slowdown"`
	// Returning: the churn started this node again on its data dir.
	Returning bool `json:"returning,omitempty"`

	cmd     *exec.Cmd
	done    chan struct{}
	target  float64   // the test accuracy whose first crossing follow records
	started time.Time // when the process was started
	ended   time.Time // when it exited: written before done is closed
	exit    error     // written before done is closed
	// startErr: the churn started it, but it did not report its addresses.
	startErr error

	mu       sync.Mutex
	last     map[string]any // latest progress-like event
	final    *FinalEvent    // the node's final event, once printed
	stopping string         // why the testnet signalled it (endLeft, endStopped), "" if it did not
	killed   bool           // the testnet sent it SIGKILL
	first    struct {       // its first event: start (fresh) or resumed
		kind  string
		step  int64
		clock float64
	}
	reached time.Time       // when it first printed a test accuracy >= target
	best    float64         // the best test accuracy it printed
	accs    []timedAccuracy // the test accuracies it printed last, oldest first
	// caughtUpFrom: the peers whose models its catchup events say it took
	// whole (at most maxCaughtUpFrom, the first ones).
	caughtUpFrom []string
}

// exited reports whether the member's process has exited.
func (m *Member) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// FinalEvent is the part of a node's final event a testnet reports.
type FinalEvent struct {
	Step         int64    `json:"step"`
	TestAccuracy *float64 `json:"test_accuracy"`
	Merges       int64    `json:"merges"`
	Message      string   `json:"message"`
	Status       struct {
		Mode         string  `json:"mode"`
		BusyFraction float64 `json:"busy_fraction"`
		Peers        int     `json:"peers"`
		Alone        *struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"alone"`
		Run struct {
			Samples      float64 `json:"samples"`
			TotalSamples float64 `json:"total_samples"`
		} `json:"run"`
	} `json:"status"`
}

// Testnet is a running set of node processes.
//
// Members is every session in start order: the Nodes that Up started (node
// i at Members[i]), then the churn's joiners, which its goroutine appends
// under mu. Read it directly only before StartChurn; the methods take mu.
type Testnet struct {
	cfg     Config
	Members []*Member `json:"members"`

	mu         sync.Mutex
	t0         time.Time     // when training started: Release, or the end of Up
	churnStop  func()        // cancels the churn (nil: none started)
	churnDone  chan struct{} // closed when the churn goroutine has returned
	churnStats ChurnStats
}

// members is a snapshot of Members.
func (tn *Testnet) members() []*Member {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return slices.Clone(tn.Members)
}

// event is the part of a node's JSON output the testnet reads.
type event struct {
	Event  string   `json:"event"`
	PeerID string   `json:"peer_id"`
	Addrs  []string `json:"addrs"`
	URL    string   `json:"url"` // of the "api" event
	API    string   `json:"-"`   // host:port of the API, from the "api" event before "listening"
}

// apiAddr is the host:port of an "api" event's URL.
func apiAddr(url string) string { return strings.TrimPrefix(url, "http://") }

// Up starts the nodes: the first is the bootstrap; the others join it, a
// few at a time (Config.StartParallel).
func Up(ctx context.Context, cfg Config) (*Testnet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.StartParallel == 0 {
		cfg.StartParallel = DefaultStartParallel
	}
	if cfg.WAN != nil {
		cfg.StartParallel = 1
	}
	if cfg.Target == 0 {
		cfg.Target = DefaultTarget
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if cfg.Gate {
		// A start file left by an earlier testnet would release this one at
		// once.
		if err := os.Remove(filepath.Join(cfg.Dir, GateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	tn := &Testnet{cfg: cfg}
	first, err := tn.start(ctx, launch{index: 0, fresh: cfg.Fresh})
	if err != nil {
		return nil, err
	}
	tn.Members = []*Member{first}
	bootstrap := tn.bootAddr(first)
	if bootstrap == "" {
		tn.Stop(10 * time.Second)
		return nil, fmt.Errorf("testnet: node 0 reported no address to bootstrap from: %v", first.Addrs)
	}
	rest := make([]*Member, cfg.Nodes-1)
	errs := make([]error, cfg.Nodes-1)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, cfg.StartParallel)
	var wg sync.WaitGroup
	for i := 1; i < cfg.Nodes && sctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rest[i-1], errs[i-1] = tn.start(sctx, launch{index: i, bootstrap: []string{bootstrap}, fresh: cfg.Fresh})
			if errs[i-1] != nil {
				cancel() // the others need not finish starting
			}
		})
	}
	wg.Wait()
	for _, m := range rest {
		if m != nil {
			tn.Members = append(tn.Members, m)
		}
	}
	if i := slices.IndexFunc(errs, func(e error) bool { return e != nil && !errors.Is(e, context.Canceled) }); i >= 0 || ctx.Err() != nil {
		tn.Stop(10 * time.Second)
		if i >= 0 {
			return nil, errs[i]
		}
		return nil, ctx.Err()
	}
	tn.t0 = time.Now()
	if cfg.Detach {
		if err := tn.save(); err != nil {
			return nil, err
		}
	}
	return tn, nil
}

// bootAddr is the address other nodes bootstrap through m with.
func (tn *Testnet) bootAddr(m *Member) string {
	if tn.cfg.WAN != nil {
		return quicAddr(m.Addrs)
	}
	return tcpAddr(m.Addrs)
}

func tcpAddr(addrs []string) string {
	for _, a := range addrs {
		if strings.Contains(a, "/tcp/") {
			return a
		}
	}
	return ""
}

func quicAddr(addrs []string) string {
	for _, a := range addrs {
		if strings.Contains(a, "/quic-v1") {
			return a
		}
	}
	return ""
}

// joinWAN makes node i an endpoint of the testnet's WAN (WAN.Join) and
// returns its flags: listen for QUIC there, announce the public address.
func (tn *Testnet) joinWAN(i int) ([]string, error) {
	listen, pub, err := tn.cfg.WAN.Join(fmt.Sprintf("node %d", i))
	if err != nil {
		return nil, err
	}
	return []string{"--listen", QUICAddr(listen), "--announce", QUICAddr(pub)}, nil
}

// QUICAddr is the QUIC multiaddr of a UDP address on 127.0.0.1.
func QUICAddr(a netip.AddrPort) string {
	return fmt.Sprintf("/ip4/%s/udp/%d/quic-v1", a.Addr(), a.Port())
}

func (tn *Testnet) slowdown(i int) float64 {
	if len(tn.cfg.Slowdowns) == 0 {
		return 1
	}
	return tn.cfg.Slowdowns[i%len(tn.cfg.Slowdowns)]
}

// launch is what one start of a node needs.
type launch struct {
	index     int
	bootstrap []string // addresses to join through (none for the first node)
	fresh     bool     // --fresh: start the run over rather than resume the data dir's
	returning bool     // the churn brings the node back
}

// start launches a node and waits for its "listening" event.
func (tn *Testnet) start(ctx context.Context, l launch) (*Member, error) {
	i := l.index
	m := &Member{Index: i, Slowdown: tn.slowdown(i), Returning: l.returning,
		DataDir: filepath.Join(tn.cfg.Dir, fmt.Sprintf("node-%d", i)),
		Log:     filepath.Join(tn.cfg.Dir, fmt.Sprintf("node-%d.log", i)),
		done:    make(chan struct{}), last: map[string]any{}, target: tn.cfg.Target}
	// The node binds a port of its own choosing and says which in its "api"
	// event: a port picked here and freed for it could be taken first.
	args := []string{"node", "--profile", "local", "--json", "--data-dir", m.DataDir, "--api", "127.0.0.1:0",
		"--shard", fmt.Sprintf("%d/%d", i%tn.cfg.Nodes, tn.cfg.Nodes), "--slowdown", strconv.FormatFloat(m.Slowdown, 'g', -1, 64)}
	for _, b := range l.bootstrap {
		args = append(args, "--bootstrap", b)
	}
	if tn.cfg.BaseStep > 0 {
		args = append(args, "--base-step", tn.cfg.BaseStep.String())
	}
	if tn.cfg.Threads > 0 {
		args = append(args, "--threads", strconv.Itoa(tn.cfg.Threads))
	}
	if tn.cfg.Gate {
		args = append(args, "--start-file", filepath.Join(tn.cfg.Dir, GateFile))
	}
	if l.fresh {
		args = append(args, "--fresh")
	}
	if tn.cfg.WAN != nil {
		more, err := tn.joinWAN(i)
		if err != nil {
			return nil, fmt.Errorf("testnet: node %d: %w", i, err)
		}
		args = append(args, more...)
	}
	args = append(args, tn.cfg.NodeArgs...)
	var env []string
	if tn.cfg.PerNode != nil {
		more, e := tn.cfg.PerNode(i)
		args, env = append(args, more...), e
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if l.returning {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND // the log of every session
	}
	logf, err := os.OpenFile(m.Log, flags, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(tn.cfg.Binary, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	m.cmd = cmd
	m.started = time.Now()
	listening := make(chan event, 1)
	if tn.cfg.Detach {
		// The node writes its own log; we read it back for the addresses.
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, fmt.Errorf("testnet: start node %d: %w", i, err)
		}
		logf.Close()
		go func() {
			m.exit = cmd.Wait()
			m.ended = time.Now()
			close(m.done)
		}()
		go tailListening(ctx, m.Log, m.done, listening)
	} else {
		out, err := cmd.StdoutPipe()
		if err != nil {
			logf.Close()
			return nil, err
		}
		cmd.Stderr = logf
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, fmt.Errorf("testnet: start node %d: %w", i, err)
		}
		go func() {
			m.follow(io.TeeReader(out, logf), listening)
			m.exit = cmd.Wait()
			m.ended = time.Now()
			logf.Close()
			close(m.done)
		}()
	}
	m.PID = cmd.Process.Pid
	select {
	case ev := <-listening:
		m.PeerID, m.Addrs, m.API = ev.PeerID, ev.Addrs, ev.API
		if m.API == "" {
			_ = cmd.Process.Kill()
			return m, fmt.Errorf("testnet: node %d did not say where its API is; see %s", i, m.Log)
		}
		return m, nil
	case <-m.done:
		return m, fmt.Errorf("testnet: node %d exited during start-up; see %s", i, m.Log)
	case <-time.After(tn.cfg.StartTimeout):
		_ = cmd.Process.Kill()
		return m, fmt.Errorf("testnet: node %d did not start within %v; see %s", i, tn.cfg.StartTimeout, m.Log)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return m, ctx.Err()
	}
}

// follow reads a node's JSON events, remembering the latest of each kind,
// how its session began, and when it first reached its target accuracy.
func (m *Member) follow(r io.Reader, listening chan<- event) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var api string
	for sc.Scan() {
		var raw map[string]any
		if json.Unmarshal(sc.Bytes(), &raw) != nil {
			continue
		}
		kind, _ := raw["event"].(string)
		if url, ok := raw["url"].(string); kind == "api" && ok {
			api = apiAddr(url)
		}
		if kind == "listening" {
			var ev event
			_ = json.Unmarshal(sc.Bytes(), &ev)
			ev.API = api
			select {
			case listening <- ev:
			default:
			}
		}
		var final *FinalEvent
		if kind == "final" {
			final = new(FinalEvent)
			if json.Unmarshal(sc.Bytes(), final) != nil {
				final = nil
			}
		}
		acc, hasAcc := raw["test_accuracy"].(float64) // eval, epoch and final events
		now := time.Now()
		m.mu.Lock()
		if final != nil {
			m.final = final
		}
		if (kind == "start" || kind == "resumed") && m.first.kind == "" {
			m.first.kind = kind
			m.first.step = int64(field(raw, "step"))
			m.first.clock = field(raw, "run_samples")
		}
		if msg, _ := raw["message"].(string); kind == "catchup" && len(m.caughtUpFrom) < maxCaughtUpFrom {
			if rest, ok := strings.CutPrefix(msg, "took the model of "); ok {
				if from, _, ok := strings.Cut(rest, ","); ok {
					m.caughtUpFrom = append(m.caughtUpFrom, from)
				}
			}
		}
		if hasAcc {
			if len(m.accs) >= maxTimedAccuracies {
				m.accs = append(m.accs[:0], m.accs[len(m.accs)/2:]...)
			}
			m.accs = append(m.accs, timedAccuracy{at: now, acc: acc})
			m.best = max(m.best, acc)
			if acc >= m.target && m.reached.IsZero() {
				m.reached = now
			}
		}
		for k, v := range raw {
			if k != "event" && k != "message" && k != "status" {
				m.last[k] = v
			}
		}
		m.last["event"] = kind
		m.mu.Unlock()
	}
}

// maxCaughtUpFrom bounds a member's record of the peers it caught up from.
const maxCaughtUpFrom = 1 << 12

// maxTimedAccuracies bounds a member's record of its test accuracies (a
// minute of a softmax node evaluating at each end of a pass over a fifth
// of MNIST, and more); the oldest half goes first.
const maxTimedAccuracies = 4096

// timedAccuracy is a test accuracy a node printed, and when it was read.
type timedAccuracy struct {
	at  time.Time
	acc float64
}

// field is a number field of a decoded event (0 if absent).
func field(raw map[string]any, k string) float64 {
	v, _ := raw[k].(float64)
	return v
}

// tailListening polls a detached node's log for its "listening" event
// (and the "api" event before it).
func tailListening(ctx context.Context, path string, done <-chan struct{}, out chan<- event) {
	for {
		if b, err := os.ReadFile(path); err == nil {
			var api string
			for _, line := range strings.Split(string(b), "\n") {
				var ev event
				if json.Unmarshal([]byte(line), &ev) != nil {
					continue
				}
				if ev.Event == "api" {
					api = apiAddr(ev.URL)
				}
				if ev.Event == "listening" {
					ev.API = api
					out <- ev
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Row is one node's line in the live summary.
type Row struct {
	Index                                  int
	PeerID, API                            string
	Slowdown                               float64
	Step                                   int64
	Loss, Accuracy, SamplesPerSec, Elapsed float64
	// Run is the run clock as a share of the run (0 with no end), LR the
	// latest step's learning rate.
	Run, LR       float64
	Peers, Merges int64
	Alive         bool
}

// Summary returns the latest state of every node: one row per session,
// but none for the sessions the churn ended.
func (tn *Testnet) Summary() []Row {
	ms := tn.members()
	rows := make([]Row, 0, len(ms))
	for _, m := range ms {
		m.mu.Lock()
		get := func(k string) float64 { return field(m.last, k) }
		r := Row{Index: m.Index, PeerID: m.PeerID, API: m.API, Slowdown: m.Slowdown, Step: int64(get("step")),
			Loss: get("loss"), Accuracy: get("test_accuracy"), SamplesPerSec: get("samples_per_s"),
			Peers: int64(get("peers")), Merges: int64(get("merges")), Elapsed: get("elapsed_s"), LR: get("lr")}
		if total := get("run_total"); total > 0 {
			r.Run = min(1, get("run_samples")/total)
		}
		left := m.stopping == endLeft
		m.mu.Unlock()
		if left {
			continue
		}
		r.Alive = !m.exited()
		rows = append(rows, r)
	}
	return rows
}

// Done is closed when every node has exited and, if StartChurn was called
// before, the churn has ended.
func (tn *Testnet) Done() <-chan struct{} {
	tn.mu.Lock()
	churn := tn.churnDone
	tn.mu.Unlock()
	ch := make(chan struct{})
	go func() {
		if churn != nil {
			<-churn // no session starts after this
		}
		for _, m := range tn.members() {
			<-m.done
		}
		close(ch)
	}()
	return ch
}

// Stop ends the churn, if any, then sends SIGINT to every node (each
// finishes its step and writes a final checkpoint), waits up to grace,
// then kills what is left. It is safe to call twice.
func (tn *Testnet) Stop(grace time.Duration) {
	tn.stopChurn()
	ms := tn.members()
	for _, m := range ms {
		m.mu.Lock()
		if m.stopping == "" && !m.exited() {
			m.stopping = endStopped
		}
		m.mu.Unlock()
		_ = m.cmd.Process.Signal(os.Interrupt)
	}
	deadline := time.After(grace)
	for _, m := range ms {
		select {
		case <-m.done:
		case <-deadline:
			for _, k := range ms {
				if !k.exited() {
					k.mu.Lock()
					k.killed = true
					k.mu.Unlock()
					_ = k.cmd.Process.Kill()
				}
			}
			for _, k := range ms {
				<-k.done
			}
			return
		}
	}
}

func (tn *Testnet) save() error {
	b, err := json.MarshalIndent(tn, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(tn.cfg.Dir, StateFile), b, 0o644)
}

// Down stops a detached testnet recorded in dir: SIGINT, then SIGKILL after
// grace. It returns how many nodes it stopped.
func Down(dir string, grace time.Duration) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return 0, fmt.Errorf("testnet: no detached testnet in %s: %w", dir, err)
	}
	tn, err := readState(b)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range tn.Members {
		if alive(m) && syscall.Kill(m.PID, syscall.SIGINT) == nil {
			n++
		}
	}
	deadline := time.Now().Add(grace)
	for _, m := range tn.Members {
		for alive(m) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(m) {
			_ = syscall.Kill(m.PID, syscall.SIGKILL)
		}
	}
	return n, os.Remove(filepath.Join(dir, StateFile))
}

func readState(b []byte) (*Testnet, error) {
	var tn Testnet
	if err := json.Unmarshal(b, &tn); err != nil {
		return nil, fmt.Errorf("testnet: %s: %w", StateFile, err)
	}
	return &tn, nil
}

// alive reports whether a detached member still runs. A PID is ours only
// while its command line still names our data dir: after a reboot the
// number may belong to something else.
func alive(m *Member) bool {
	cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", m.PID))
	return m.PID > 0 && err == nil && strings.Contains(string(cl), m.DataDir) && syscall.Kill(m.PID, 0) == nil
}

// WriteTable prints the live summary.
func WriteTable(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPEER\tSLOWDOWN\tSTEP\tRUN\tLR\tLOSS\tTEST ACC\tSAMPLES/S\tPEERS\tMERGES\tAPI\tSTATE")
	for _, r := range rows {
		state := "running"
		if !r.Alive {
			state = "exited"
		}
		acc := "-"
		if r.Accuracy > 0 {
			acc = fmt.Sprintf("%.2f%%", 100*r.Accuracy)
		}
		peer := r.PeerID
		if len(peer) > 12 {
			peer = "…" + peer[len(peer)-8:]
		}
		run := "-"
		if r.Run > 0 {
			run = fmt.Sprintf("%.0f%%", 100*r.Run)
		}
		fmt.Fprintf(tw, "%d\t%s\t%gx\t%d\t%s\t%.3g\t%.4f\t%s\t%.0f\t%d\t%d\t%s\t%s\n", r.Index, peer, r.Slowdown, r.Step, run,
			r.LR, r.Loss, acc, r.SamplesPerSec, r.Peers, r.Merges, r.API, state)
	}
	tw.Flush()
}
