package testnet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
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
	// Nodes is how many node processes to start (>= 1).
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
}

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
	if c.Nodes < 1 || c.Nodes > 64 {
		errs = append(errs, fmt.Errorf("testnet: --nodes %d not in [1,64]", c.Nodes))
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

// Member is one node of a testnet.
type Member struct {
	Index    int      `json:"index"`
	PID      int      `json:"pid"`
	PeerID   string   `json:"peer_id"`
	Addrs    []string `json:"addrs"`
	API      string   `json:"api"`
	DataDir  string   `json:"data_dir"`
	Log      string   `json:"log"`
	Slowdown float64  `json:"slowdown"`

	cmd   *exec.Cmd
	done  chan struct{}
	mu    sync.Mutex
	last  map[string]any // latest progress-like event
	final *FinalEvent    // the node's final event, once printed
	exit  error
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
type Testnet struct {
	cfg     Config
	Members []*Member `json:"members"`
}

// event is the part of a node's JSON output the testnet reads.
type event struct {
	Event  string   `json:"event"`
	PeerID string   `json:"peer_id"`
	Addrs  []string `json:"addrs"`
}

// Up starts the nodes: the first is the bootstrap; the others join it.
func Up(ctx context.Context, cfg Config) (*Testnet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
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
	var bootstrap string
	for i := range cfg.Nodes {
		m, err := tn.start(ctx, i, bootstrap)
		if err != nil {
			tn.Stop(10 * time.Second)
			return nil, err
		}
		tn.Members = append(tn.Members, m)
		if i == 0 {
			bootstrap = tcpAddr(m.Addrs)
			if cfg.WAN != nil {
				bootstrap = quicAddr(m.Addrs)
			}
			if bootstrap == "" {
				tn.Stop(10 * time.Second)
				return nil, fmt.Errorf("testnet: node 0 reported no address to bootstrap from: %v", m.Addrs)
			}
		}
	}
	if cfg.Detach {
		if err := tn.save(); err != nil {
			return nil, err
		}
	}
	return tn, nil
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

// start launches node i and waits for its "listening" event.
func (tn *Testnet) start(ctx context.Context, i int, bootstrap string) (*Member, error) {
	api, err := freePort()
	if err != nil {
		return nil, err
	}
	m := &Member{Index: i, API: api, Slowdown: tn.slowdown(i),
		DataDir: filepath.Join(tn.cfg.Dir, fmt.Sprintf("node-%d", i)),
		Log:     filepath.Join(tn.cfg.Dir, fmt.Sprintf("node-%d.log", i)),
		done:    make(chan struct{}), last: map[string]any{}}
	args := []string{"node", "--profile", "local", "--json", "--data-dir", m.DataDir, "--api", api,
		"--shard", fmt.Sprintf("%d/%d", i, tn.cfg.Nodes), "--slowdown", strconv.FormatFloat(m.Slowdown, 'g', -1, 64)}
	if bootstrap != "" {
		args = append(args, "--bootstrap", bootstrap)
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
	if tn.cfg.Fresh {
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
	logf, err := os.OpenFile(m.Log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(tn.cfg.Binary, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	m.cmd = cmd
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
		go func() { _ = cmd.Wait(); close(m.done) }()
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
			logf.Close()
			close(m.done)
		}()
	}
	m.PID = cmd.Process.Pid
	select {
	case ev := <-listening:
		m.PeerID, m.Addrs = ev.PeerID, ev.Addrs
		return m, nil
	case <-m.done:
		return nil, fmt.Errorf("testnet: node %d exited during start-up; see %s", i, m.Log)
	case <-time.After(tn.cfg.StartTimeout):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("testnet: node %d did not start within %v; see %s", i, tn.cfg.StartTimeout, m.Log)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

// follow reads a node's JSON events, remembering the latest of each kind.
func (m *Member) follow(r io.Reader, listening chan<- event) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var raw map[string]any
		if json.Unmarshal(sc.Bytes(), &raw) != nil {
			continue
		}
		kind, _ := raw["event"].(string)
		if kind == "listening" {
			var ev event
			_ = json.Unmarshal(sc.Bytes(), &ev)
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
		m.mu.Lock()
		if final != nil {
			m.final = final
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

// tailListening polls a detached node's log for its "listening" event.
func tailListening(ctx context.Context, path string, done <-chan struct{}, out chan<- event) {
	for {
		if b, err := os.ReadFile(path); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				var ev event
				if json.Unmarshal([]byte(line), &ev) == nil && ev.Event == "listening" {
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

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
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

// Summary returns the latest state of every node.
func (tn *Testnet) Summary() []Row {
	rows := make([]Row, 0, len(tn.Members))
	for _, m := range tn.Members {
		m.mu.Lock()
		num := func(k string) float64 { v, _ := m.last[k].(float64); return v }
		r := Row{Index: m.Index, PeerID: m.PeerID, API: m.API, Slowdown: m.Slowdown, Step: int64(num("step")),
			Loss: num("loss"), Accuracy: num("test_accuracy"), SamplesPerSec: num("samples_per_s"),
			Peers: int64(num("peers")), Merges: int64(num("merges")), Elapsed: num("elapsed_s"), LR: num("lr")}
		if total := num("run_total"); total > 0 {
			r.Run = min(1, num("run_samples")/total)
		}
		m.mu.Unlock()
		select {
		case <-m.done:
		default:
			r.Alive = true
		}
		rows = append(rows, r)
	}
	return rows
}

// Done is closed when every node has exited.
func (tn *Testnet) Done() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for _, m := range tn.Members {
			<-m.done
		}
		close(ch)
	}()
	return ch
}

// Stop sends SIGINT to every node (each finishes its step and writes a
// final checkpoint), waits up to grace, then kills what is left.
func (tn *Testnet) Stop(grace time.Duration) {
	for _, m := range tn.Members {
		_ = m.cmd.Process.Signal(os.Interrupt)
	}
	deadline := time.After(grace)
	for _, m := range tn.Members {
		select {
		case <-m.done:
		case <-deadline:
			for _, k := range tn.Members {
				_ = k.cmd.Process.Kill()
			}
			for _, k := range tn.Members {
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
