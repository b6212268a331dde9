package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/meshtrain/meshtrain/averaging"
	"github.com/meshtrain/meshtrain/merge"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/reputation"
	"github.com/meshtrain/meshtrain/train"
)

// ErrDiverged is returned when a node's loss stops being finite.
var ErrDiverged = errors.New("sim: training diverged")

// Point is the swarm at one moment of virtual time. Counters are
// cumulative since the start.
type Point struct {
	// T is the virtual time, in seconds.
	T float64 `json:"t_s"`
	// Live is the number of nodes online.
	Live int `json:"live"`
	// ConsensusDistance is the mean over live nodes of the squared L2
	// distance of their model to the live nodes' average model.
	ConsensusDistance float64 `json:"consensus_distance"`
	// AverageAccuracy is the test accuracy of the live nodes' average
	// model (on the fixed test subset).
	AverageAccuracy float64 `json:"average_accuracy"`
	// NodeAccuracy* summarise the test accuracy of NodesScored random live
	// nodes' own models (0 when none were scored).
	NodeAccuracyMean float64 `json:"node_accuracy_mean"`
	NodeAccuracyMin  float64 `json:"node_accuracy_min"`
	NodeAccuracyMax  float64 `json:"node_accuracy_max"`
	NodesScored      int     `json:"nodes_scored"`
	// Scored is those nodes one by one, in id order: per-node figures
	// such as each node's first time at a target (Result.TimesToTarget).
	Scored []NodeScore `json:"scored,omitempty"`
	// BytesPerNodeS is the model bytes sent since the previous point per
	// second of live node time (bytes / (mean live nodes * seconds)).
	BytesPerNodeS float64 `json:"bytes_per_node_s"`
	// Samples is every node's trained samples added up: the run clock.
	Samples int64 `json:"samples"`
	// LostSamples: see Result.LostSamples.
	LostSamples int64 `json:"lost_samples"`
	// MeanProgress is the live models' mean progress (samples embodied).
	MeanProgress float64 `json:"mean_progress"`
	// LR is the learning rate at the run clock.
	LR float64 `json:"lr"`
	// Merges counts merges in either direction; CatchUps whole-model
	// pulls; Exchanges the exchanges started; Failed those cut by a
	// partner leaving.
	Merges    int64 `json:"merges"`
	CatchUps  int64 `json:"catchups"`
	Exchanges int64 `json:"exchanges"`
	Failed    int64 `json:"failed_exchanges"`
}

// NodeScore is one node's own model scored at a point. Node is its id:
// node i has Slowdowns[i mod len] and trains shard i mod Shards, as node i
// of a testnet has the i-th slowdown and --shard i/n.
type NodeScore struct {
	Node     int     `json:"node"`
	Accuracy float64 `json:"accuracy"`
}

// Result is a whole simulated run.
type Result struct {
	Points []Point `json:"points"`
	// EndS is the virtual time the run ended at; RunComplete says the run
	// clock reached Epochs passes before Duration.
	EndS        float64 `json:"end_s"`
	RunComplete bool    `json:"run_complete"`
	// ModelValues and ModelBytes: the model's size, and a model on the
	// wire.
	ModelValues int `json:"model_values"`
	ModelBytes  int `json:"model_bytes"`
	// Shards is how many shards the training set was cut into.
	Shards int `json:"shards"`
	// Nodes is how many distinct nodes were ever online; Joins counts
	// sessions begun (the starting population included), Returns those of
	// a node coming back with its checkpoint, Newcomers those of a node
	// never seen before after the start, Leaves sessions ended before the
	// end, Gone the leavers that never returned.
	Nodes     int `json:"nodes"`
	Joins     int `json:"joins"`
	Returns   int `json:"returns"`
	Newcomers int `json:"newcomers"`
	Leaves    int `json:"leaves"`
	Gone      int `json:"gone"`
	// Steps and Samples are every node's local steps and samples.
	Steps   int64 `json:"steps"`
	Samples int64 `json:"samples"`
	// LostSamples counts samples lost to churn: when a node leaves and
	// never returns, the samples it trained after the last snapshot of its
	// model that a peer merged (or pulled whole), since no other model
	// holds anything of them. A snapshot counts once it lands in the peer's
	// model, whatever its merge weight; a snapshot still in flight when its
	// sender leaves is cut and does not count. Samples a node threw away
	// itself (its model replaced by a catch-up pull) are not counted.
	LostSamples int64 `json:"lost_samples"`
	// OfflineSamples counts the same for nodes offline at the end that
	// will return: held only in their checkpoints.
	OfflineSamples int64 `json:"offline_samples"`
	// Merges, CatchUps, Exchanges, Failed and Refused: as in Point;
	// Refused counts models the merge core declined.
	Merges    int64 `json:"merges"`
	CatchUps  int64 `json:"catchups"`
	Exchanges int64 `json:"exchanges"`
	Failed    int64 `json:"failed_exchanges"`
	Refused   int64 `json:"refused"`
	// BytesSent is every model byte sent.
	BytesSent float64 `json:"bytes_sent"`
	// Events is how many events the simulation processed.
	Events int64 `json:"events"`
}

// Final is the last point (the zero Point when there is none).
func (r *Result) Final() Point {
	if len(r.Points) == 0 {
		return Point{}
	}
	return r.Points[len(r.Points)-1]
}

// TimesToTarget is each node's first time at target, in seconds of
// virtual time, by node id: the first point at which its own model scored
// target or more, as a benchmark reads a real node's snapshots. A node
// never scored at target is absent. Nodes are scored only at points, so
// a time is at most ReportEvery late, and only those Config.EvalNodes
// picks are scored: with EvalNodes >= the population, every node at
// every point.
func (r *Result) TimesToTarget(target float64) map[int]float64 {
	out := map[int]float64{}
	for _, p := range r.Points {
		for _, s := range p.Scored {
			if _, ok := out[s.Node]; !ok && s.Accuracy >= target {
				out[s.Node] = p.T
			}
		}
	}
	return out
}

// node is one simulated node: its model, optimizer state, merge core and
// pace. A node that leaves and will return keeps all of it (its last
// checkpoint); one that never returns gives its buffers back.
type node struct {
	id      int
	name    string // the peer name the merge core and partner choice see
	session int
	live    bool

	w, mom []float32
	// avg is the moving average of w the node reports (Config.EMA; nil
	// when 0), avgN its updates since it was last reset.
	avg      []float32
	avgN     int64
	progress params.Progress
	// slow is the node's slow momentum (nil with Config.OuterEvery 0).
	slow  *averaging.SlowMomentum
	steps int64
	// merges counts the merges the node made; rate follows its steps per
	// merge and lrScale is the factor it set at the last tick (scaleAt,
	// every lrScaleEvery of virtual time), as the node's --lr-scaling
	// merges does (Config.LRScaling).
	merges  int64
	rate    merge.MergeRate
	lrScale float64
	scaleAt time.Duration
	// samples is what the node trained in all its sessions; shared the
	// samples it had trained when the latest snapshot of its model that a
	// peer merged was taken.
	samples, shared int64
	// info is the virtual time the model's information dates from (the
	// node's modelAge: now - info).
	info time.Duration

	core *merge.Core
	pace merge.Pace
	last string // previous partner
	// judgedCatchUp: a model to catch up with was judged in this session
	// (pulled, or brought by an exchange while starting: takeWhole), as
	// the node's averager records it.
	judgedCatchUp bool

	stepTime time.Duration
	// measured: a step of the node has ended, so its pace knows its step
	// time. A node measures it (samples over busy time, 0 before its first
	// step ends), and its checkpoint keeps the count: a returner knows it.
	measured bool
	perm     []int32
	at       int // position in perm

	// returns: this node comes back after it leaves (decided at the
	// departure with the lifetime model; from the trace otherwise).
	returns bool
	// trace is the node's sessions (trace mode), next the next to begin.
	trace []Session
	next  int
}

// snap is a snapshot in flight, with what the accounting needs.
type snap struct {
	s       params.Snapshot
	taken   time.Duration // when it was taken
	samples int64         // the sender's samples then
}

// exchange is one exchange (or catch-up pull) between initiator a and
// partner b, begun at start in their sessions aSess and bSess.
type exchange struct {
	a, b         *node
	aSess, bSess int
	start        time.Duration
	pull         bool
	failed       bool
	aSnap, bSnap snap
}

// simulation is a run's state. One goroutine (Run's) owns all of it.
type simulation struct {
	cfg      Config
	model    *train.Model
	trainSet *train.Dataset
	testSub  *train.Dataset
	shards   [][]int
	sched    train.Schedule
	runTotal float64
	opt      train.SGD
	fp       params.Fingerprint
	init     []float32

	rng     *rand.Rand // every draw that shapes the run, in event order
	evalRng *rand.Rand // which nodes are scored: kept apart so scoring never changes the run
	q       queue
	now     time.Duration
	end     time.Duration

	nodes []*node
	// live is the online nodes ordered by id, as an announce table lists
	// peers: partner choice reads it in order without sorting.
	live []*node
	pool []*node // offline nodes that will return (lifetime model)

	ws    *train.Workspace
	grad  []float32
	xb    []float32
	yb    []uint8
	free  [][]float32 // model-sized buffers to reuse
	cands []merge.Candidate
	pick  []int

	modelBytes float64
	transfer   time.Duration // one model across a link

	res Result
	// liveTime is the integral of the live count over virtual time since
	// the last point (node-seconds); liveAt when it was last brought up to
	// date; bytesAt the bytes sent at the last point.
	liveTime    float64
	liveAt      time.Duration
	bytesAt     float64
	done        bool
	arrivalRate float64 // per second (lifetime model)
	progress    func(Point)
	lastPoint   time.Duration
	hasPoint    bool
	// started: the starting population has joined (its sessions are in
	// progress, later ones fresh).
	started bool
}

// Run simulates cfg on the named dataset (loaded with train.LoadData) and
// calls progress, if not nil, with every report point as it is made.
func Run(ctx context.Context, cfg Config, progress func(Point)) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	trainSet, testSet, err := train.LoadData(cfg.Dataset, "", cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return RunOn(ctx, cfg, trainSet, testSet, progress)
}

// RunOn is Run on datasets the caller holds: every node reads the one
// training set, none copies it.
func RunOn(ctx context.Context, cfg Config, trainSet, testSet *train.Dataset, progress func(Point)) (*Result, error) {
	s, err := newSimulation(cfg, trainSet, testSet, progress)
	if err != nil {
		return nil, err
	}
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	return &s.res, nil
}

func newSimulation(cfg Config, trainSet, testSet *train.Dataset, progress func(Point)) (*simulation, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.EvalSamples > testSet.N {
		return nil, fmt.Errorf("%w: eval samples %d exceed the test set's %d", ErrBadConfig, cfg.EvalSamples, testSet.N)
	}
	m, err := train.ParseModel(cfg.Model, trainSet.Dim, trainSet.Classes)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s := &simulation{
		cfg: cfg, model: m, trainSet: trainSet, progress: progress,
		opt:     train.SGD{Momentum: cfg.Momentum, WeightDecay: cfg.WeightDecay},
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x73696d)),
		evalRng: rand.New(rand.NewPCG(cfg.Seed, 0x6576616c)),
		end:     cfg.Duration,
		ws:      m.NewWorkspace(cfg.Batch),
		grad:    make([]float32, m.Size()),
		xb:      make([]float32, cfg.Batch*trainSet.Dim),
		yb:      make([]uint8, cfg.Batch),
		fp:      params.NewFingerprint(m.Layout(), cfg.Dataset, "sim"),
		init:    make([]float32, m.Size()),
	}
	// Every node starts from the same model, as peers sharing a seed do.
	if err := m.Init(s.init, cfg.Seed); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s.runTotal = cfg.Epochs * float64(trainSet.N)
	sc, err := train.ParseSchedule(cfg.Schedule)
	if err == nil {
		sc, err = sc.Resolve(s.runTotal)
	}
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s.sched = sc
	s.modelBytes = float64(m.Size() * cfg.WireBytes)
	s.transfer = time.Duration(s.modelBytes / cfg.Bandwidth * float64(time.Second))
	s.res.ModelValues, s.res.ModelBytes = m.Size(), int(s.modelBytes)

	// The test subset is fixed for the whole run: every point scores on
	// the same images.
	idx := rand.New(rand.NewPCG(cfg.Seed, 0x74657374)).Perm(testSet.N)[:cfg.EvalSamples]
	slices.Sort(idx)
	if s.testSub, err = testSet.Subset(idx); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}

	population := cfg.Nodes
	if cfg.Trace != nil {
		population = s.traceNodes()
	}
	shards := cfg.Shards
	if shards == 0 {
		// One per node, but never so many that a shard holds less than a
		// batch: MNIST cut in 1,000 would leave 60 samples each, and
		// every step would be a short one.
		shards = max(1, min(population, trainSet.N/cfg.Batch))
	}
	s.res.Shards = min(shards, trainSet.N)
	if s.shards, err = train.IIDSplit(trainSet.N, s.res.Shards, cfg.Seed); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return s, nil
}

// traceNodes creates a node per distinct trace name, in order of first
// appearance, and returns how many.
func (s *simulation) traceNodes() int {
	byName := map[string]*node{}
	for _, se := range s.cfg.Trace {
		n := byName[se.Node]
		if n == nil {
			n = s.newNode()
			byName[se.Node] = n
		}
		n.trace = append(n.trace, se)
	}
	for _, n := range s.nodes {
		slices.SortStableFunc(n.trace, func(a, b Session) int { return cmp.Compare(a.Join, b.Join) })
	}
	return len(s.nodes)
}

// newNode makes the next node, with its speed. Its buffers are allocated
// when it first joins.
func (s *simulation) newNode() *node {
	id := len(s.nodes)
	n := &node{id: id, name: strconv.Itoa(id)}
	step := float64(s.cfg.StepMedian)
	if len(s.cfg.Slowdowns) > 0 {
		step *= s.cfg.Slowdowns[id%len(s.cfg.Slowdowns)]
	} else if s.cfg.StepSpread > 0 {
		// Drawn from the node's own stream: its speed depends on its id
		// and the seed only, not on what happened before it arrived.
		r := rand.New(rand.NewPCG(s.cfg.Seed^0x7370656564, uint64(id)))
		step *= math.Exp(s.cfg.StepSpread * r.NormFloat64())
	}
	n.stepTime = max(time.Duration(step), time.Microsecond)
	s.nodes = append(s.nodes, n)
	return n
}

func (s *simulation) schedule(at time.Duration, k kind, n *node, x *exchange) {
	e := event{at: at, kind: k, n: n, x: x}
	if n != nil {
		e.session = n.session
	}
	s.q.push(e)
}

func (s *simulation) run(ctx context.Context) error {
	cfg := s.cfg
	// The first point is the swarm before anything happened.
	s.schedule(0, evReport, nil, nil)
	if cfg.Trace != nil {
		for _, n := range s.nodes {
			s.schedule(n.trace[0].Join, evTraceJoin, n, nil)
		}
	} else {
		if mean := cfg.Churn.Mean(); mean > 0 {
			s.arrivalRate = float64(cfg.Nodes) / mean
		}
		for range cfg.Nodes {
			s.join(s.newNode())
		}
		s.started = true
		if s.arrivalRate > 0 {
			s.schedule(s.expDelay(s.arrivalRate), evJoin, nil, nil)
		}
	}
	for !s.done {
		if s.res.Events&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("sim: stopped at %v of virtual time: %w", s.now, err)
			}
		}
		e, ok := s.q.pop()
		if !ok || e.at >= s.end {
			s.now = s.end
			break
		}
		s.now = e.at
		s.res.Events++
		if err := s.handle(e); err != nil {
			return err
		}
	}
	if !s.hasPoint || s.lastPoint != s.now {
		if err := s.report(); err != nil {
			return err
		}
	}
	s.res.EndS = s.now.Seconds()
	s.res.Nodes = 0
	for _, n := range s.nodes {
		if n.session > 0 {
			s.res.Nodes++
		}
		if !n.live && n.returns && n.session > 0 {
			s.res.OfflineSamples += n.samples - n.shared
		}
	}
	return nil
}

// current reports whether an event scheduled for n in session sess still
// applies: n is online in that session.
func current(n *node, sess int) bool { return n.live && n.session == sess }

func (s *simulation) handle(e event) error {
	switch e.kind {
	case evStep:
		if !current(e.n, e.session) {
			return nil
		}
		// The step before this one, if any, has just ended.
		e.n.measured = e.n.measured || e.n.steps > 0
		if err := s.step(e.n); err != nil {
			return err
		}
		if s.runTotal > 0 && float64(s.res.Samples) >= s.runTotal {
			s.res.RunComplete, s.done = true, true
			return nil
		}
		s.schedule(s.now+e.n.stepTime, evStep, e.n, nil)
	case evRound:
		if current(e.n, e.session) {
			s.round(e.n)
		}
	case evServe:
		s.serve(e.x)
	case evDeliverB:
		x := e.x
		if current(x.a, x.aSess) && current(x.b, x.bSess) {
			s.merge(x.b, x.a, &x.aSnap)
		}
		s.release(&x.aSnap)
	case evDeliverA:
		s.deliverA(e.x)
	case evLeave:
		if current(e.n, e.session) {
			s.leave(e.n)
		}
	case evJoin:
		s.arrive()
	case evTraceJoin:
		s.join(e.n)
	case evReport:
		if err := s.report(); err != nil {
			return err
		}
		s.schedule(s.now+s.cfg.ReportEvery, evReport, nil, nil)
	}
	return nil
}

// step is one local step of n, as the trainer takes it: the next batch of
// its shard (reshuffled every pass; shorter at the end of a pass), the
// gradient at its model, and an SGD update at the learning rate of the run
// clock.
func (s *simulation) step(n *node) error {
	if n.at == 0 {
		for i := len(n.perm) - 1; i > 0; i-- {
			j := s.rng.IntN(i + 1)
			n.perm[i], n.perm[j] = n.perm[j], n.perm[i]
		}
	}
	d := s.trainSet
	b := min(s.cfg.Batch, len(n.perm)-n.at)
	for r, i := range n.perm[n.at : n.at+b] {
		d.RowTo(s.xb[r*d.Dim:(r+1)*d.Dim], int(i))
		s.yb[r] = d.Y[i]
	}
	loss, err := s.model.Grad(s.ws, n.w, s.xb[:b*d.Dim], s.yb[:b], s.grad)
	if err == nil && (math.IsNaN(loss) || math.IsInf(loss, 0)) {
		err = fmt.Errorf("%w: node %d at %v, loss %v", ErrDiverged, n.id, s.now, loss)
	}
	if err != nil {
		return fmt.Errorf("sim: step of node %d: %w", n.id, err)
	}
	lr := s.cfg.LR * s.sched.Factor(params.Progress(s.res.Samples+int64(b))) * s.lrScale(n)
	if n.avg != nil && n.steps%train.AverageEvery == 0 {
		_ = averaging.Mix(n.avg, n.w, 1-train.AverageDecay(s.cfg.EMA, n.avgN)) // same length, weight in [0, 1]
		n.avgN++
	}
	s.opt.Update(n.w, n.mom, s.grad, lr)
	n.progress = n.progress.Step(b)
	n.steps++
	if err := s.slowMomentum(n, lr); err != nil {
		return fmt.Errorf("sim: slow momentum of node %d: %w", n.id, err)
	}
	n.samples += int64(b)
	s.res.Steps++
	s.res.Samples += int64(b)
	if n.at += b; n.at >= len(n.perm) {
		n.at = 0
	}
	return nil
}

// lrScaleEvery is the node's watcher tick, at which it sets its
// learning-rate factor; a simulated node ticks at its first step after
// each (with steps longer than a tick, at every step).
const lrScaleEvery = 500 * time.Millisecond

// lrScale is n's learning-rate factor for its next step: with
// LRScalingMerges, the one merge.MergeRate gave at its latest tick.
func (s *simulation) lrScale(n *node) float64 {
	if s.cfg.LRScaling != LRScalingMerges {
		return 1
	}
	if s.now >= n.scaleAt {
		n.lrScale = n.rate.Observe(n.steps, n.merges)
		n.scaleAt = s.now + lrScaleEvery
	}
	return max(n.lrScale, 1)
}

// slowMomentum takes the node's outer step every OuterEvery steps at the
// step's learning rate lr, as its train loop does.
func (s *simulation) slowMomentum(n *node, lr float64) error {
	if s.cfg.OuterEvery <= 0 {
		return nil
	}
	if n.slow == nil {
		n.slow = averaging.NewSlowMomentum(s.cfg.OuterEvery, s.cfg.OuterLR, s.cfg.OuterMomentum)
	}
	if !n.slow.Due() {
		return nil
	}
	return n.slow.Step(n.w, lr)
}

// nextRound schedules n's next round: merge.Pace's wait after the round
// that ended now, as the node's averager resets its timer. Until n's
// first step has ended the pace does not know its step time: a newcomer's
// rounds are Pace.Floor apart during its first step, as a node's are.
func (s *simulation) nextRound(n *node) {
	var step time.Duration
	if n.measured {
		step = n.stepTime
	}
	s.schedule(s.now+n.pace.Wait(step, s.rng.Float64()), evRound, n, nil)
}

// round is one averaging round of n: the partner merge.ChoosePartner
// picks among the live nodes n knows, then an exchange with it or a
// catch-up pull.
func (s *simulation) round(n *node) {
	cands := s.candidates(n)
	c := merge.ChoosePartner(cands, nil, float64(n.progress), n.last, s.cfg.CatchUp, !n.judgedCatchUp, s.rng.IntN)
	if c.Peer == "" {
		s.nextRound(n)
		return
	}
	id, _ := strconv.Atoi(c.Peer)
	p := s.nodes[id]
	n.last = c.Peer
	x := &exchange{a: n, b: p, aSess: n.session, bSess: p.session, start: s.now, pull: c.CatchUp}
	if !x.pull {
		x.aSnap = s.snapshot(n)
		s.res.Exchanges++
	}
	s.schedule(s.now+s.cfg.Latency, evServe, nil, x)
}

// candidates are the live nodes n knows (all, or a fresh sample of Peers),
// ordered by id as an announce table orders them, with their progress now.
func (s *simulation) candidates(n *node) []merge.Candidate {
	s.cands = s.cands[:0]
	if k := s.cfg.Peers; k == 0 || k >= len(s.live)-1 {
		for _, p := range s.live {
			if p != n {
				s.cands = append(s.cands, merge.Candidate{Peer: p.name, Progress: float64(p.progress)})
			}
		}
		return s.cands
	}
	// A partial Fisher-Yates shuffle of the live positions but n's.
	s.pick = s.pick[:0]
	for i, p := range s.live {
		if p != n {
			s.pick = append(s.pick, i)
		}
	}
	for i := range s.cfg.Peers {
		j := i + s.rng.IntN(len(s.pick)-i)
		s.pick[i], s.pick[j] = s.pick[j], s.pick[i]
	}
	picked := s.pick[:s.cfg.Peers]
	slices.Sort(picked) // live is in id order
	for _, i := range picked {
		p := s.live[i]
		s.cands = append(s.cands, merge.Candidate{Peer: p.name, Progress: float64(p.progress)})
	}
	return s.cands
}

// serve: the request reaches the partner, which sends its model (taken
// now) back while the initiator's crosses to it, as the gossip service
// serves an exchange. A partner gone by now fails the exchange.
func (s *simulation) serve(x *exchange) {
	if !current(x.b, x.bSess) {
		x.failed = true
		s.release(&x.aSnap)
	} else {
		x.bSnap = s.snapshot(x.b)
		if !x.pull {
			s.schedule(s.now+s.transfer, evDeliverB, nil, x)
		}
	}
	s.schedule(x.start+2*s.cfg.Latency+s.transfer, evDeliverA, nil, x)
}

// deliverA ends an exchange at the initiator: it merges the partner's
// model (or takes it whole after a catch-up pull) and schedules its next
// round, as the node's averager does after round returns.
func (s *simulation) deliverA(x *exchange) {
	a := x.a
	defer s.release(&x.bSnap)
	if !current(a, x.aSess) {
		return
	}
	if x.failed || !current(x.b, x.bSess) {
		s.res.Failed++
		s.nextRound(a)
		return
	}
	if x.pull {
		s.catchUp(a, x.b, &x.bSnap)
	} else {
		// Only exchanges pace the next: the node's catch-up leaves its
		// pace alone.
		a.pace.Exchanged(s.now-x.start, 2*s.cfg.Latency)
		s.merge(a, x.b, &x.bSnap)
	}
	s.nextRound(a)
}

// snapshot copies n's model into a model-sized buffer and counts the
// bytes it will take on the wire.
func (s *simulation) snapshot(n *node) snap {
	w := s.alloc()
	copy(w, n.w)
	s.res.BytesSent += s.modelBytes
	return snap{
		s:     params.Snapshot{Fingerprint: s.fp, Step: n.steps, Progress: n.progress, Age: s.now - n.info, Params: w},
		taken: s.now, samples: n.samples,
	}
}

// input is what the merge core judges: our model now (its parameters are
// read for their length only with the trust checks off, so the live
// vector is passed instead of a copy), and the remote snapshot aged by its
// time on the wire.
func (s *simulation) input(r, from *node, sn *snap) merge.Input {
	sn.s.Age += s.now - sn.taken
	sn.taken = s.now
	return merge.Input{
		Peer: from.name, Standing: reputation.OK,
		Local:  params.Snapshot{Fingerprint: s.fp, Step: r.steps, Progress: r.progress, Age: s.now - r.info, Params: r.w},
		Remote: &sn.s, Now: time.Time{}.Add(s.now),
	}
}

// merge mixes from's snapshot into r's model as the node's averager does:
// the core decides the weight once, Merger.MergeAt applies it (momentum
// per the merge rule), and the core hears that it landed.
func (s *simulation) merge(r, from *node, sn *snap) {
	if s.takeWhole(r, sn.s.Progress) {
		s.catchUp(r, from, sn)
		return
	}
	in := s.input(r, from, sn)
	d := r.core.Decide(in)
	if !d.Merge {
		s.res.Refused++
		return
	}
	_, err := s.cfg.Merger.MergeAt(averaging.Local{Fingerprint: s.fp, Params: r.w, Momentum: r.mom, Progress: &r.progress,
		Batch: s.cfg.Batch}, sn.s, nil, d.Weight)
	if err != nil {
		s.res.Refused++
		return
	}
	r.tookIn(s.now, sn.s.Age, false)
	if r.avg != nil {
		if w := train.AverageInWeight(s.cfg.EMA, s.cfg.EMAPeers, r.avgN, d.Weight/s.cfg.Merger.Alpha); w > 0 {
			_ = averaging.Mix(r.avg, sn.s.Params, w) // same length, weight in [0, 1]
			r.avgN++
		}
	}
	r.core.Applied(from.name, d)
	r.merges++
	s.res.Merges++
	from.shared = max(from.shared, sn.samples)
}

// takeWhole is the node's rule for a model at progress p that an exchange
// brings r while it is starting (merge.TakeWhole), against every live node
// (the node's averager asks the peers it has heard of).
func (s *simulation) takeWhole(r *node, p params.Progress) bool {
	if r.judgedCatchUp {
		return false
	}
	known := func(yield func(float64) bool) {
		for _, q := range s.live {
			if q != r && !yield(float64(q.progress)) {
				return
			}
		}
	}
	return merge.TakeWhole(float64(p), float64(r.progress), s.cfg.CatchUp, known)
}

// catchUp replaces a's model with b's whole, as the node's catch-up does:
// the momentum belonged to the model dropped, and the progress credited is
// merge.Credit's (against every live node but the two).
func (s *simulation) catchUp(a, b *node, sn *snap) {
	d := a.core.DecideCatchUp(s.input(a, b, sn))
	a.judgedCatchUp = true
	if !d.Merge {
		s.res.Refused++
		return
	}
	copy(a.w, sn.s.Params)
	clear(a.mom)
	a.resetAverage()
	if a.slow != nil {
		a.slow.Reset() // the slow momentum belonged to it too
	}
	others := func(yield func(float64) bool) {
		for _, q := range s.live {
			if q != a && q != b && !yield(float64(q.progress)) {
				return
			}
		}
	}
	a.progress = params.Progress(merge.Credit(float64(sn.s.Progress), float64(a.progress), s.cfg.CatchUp, others))
	a.tookIn(s.now, sn.s.Age, true)
	s.res.CatchUps++
	b.shared = max(b.shared, sn.samples)
}

// resetAverage restarts n's reported average at its parameters, as the
// trainer's ResetAverage does after a catch-up.
func (n *node) resetAverage() {
	if n.avg != nil {
		copy(n.avg, n.w)
		n.avgN = 0
	}
}

// reported is the model n reports: its average, or its parameters.
func (n *node) reported() []float32 {
	if n.avg != nil {
		return n.avg
	}
	return n.w
}

// tookIn: the model's information is now as fresh as a model of age age
// taken in at now, if that is fresher (always, when replace).
func (n *node) tookIn(now, age time.Duration, replace bool) {
	t := now - max(0, age)
	if replace || t > n.info {
		n.info = t
	}
}

func (s *simulation) alloc() []float32 {
	if k := len(s.free); k > 0 {
		w := s.free[k-1]
		s.free = s.free[:k-1]
		return w
	}
	return make([]float32, s.model.Size())
}

func (s *simulation) release(sn *snap) {
	if sn.s.Params != nil {
		s.free = append(s.free, sn.s.Params)
		sn.s.Params = nil
	}
}

// join brings n online: a newcomer starts from the shared initial model
// with no progress, a returner with the model, momentum and progress it
// left with. Like a restarted node process, it gets a fresh merge core
// and pace.
func (s *simulation) join(n *node) {
	s.tally()
	first := n.session == 0
	n.session++
	n.live = true
	n.judgedCatchUp = false
	n.slow = nil // a new process: its slow momentum starts over
	i, _ := slices.BinarySearchFunc(s.live, n.id, func(p *node, id int) int { return cmp.Compare(p.id, id) })
	s.live = slices.Insert(s.live, i, n)
	s.res.Joins++
	if first {
		n.w, n.mom = s.alloc(), s.alloc()
		copy(n.w, s.init)
		clear(n.mom)
		if s.cfg.EMA > 0 {
			n.avg = s.alloc()
			n.resetAverage()
		}
		n.info = s.now
		shard := s.shards[n.id%len(s.shards)]
		n.perm = make([]int32, len(shard))
		for i, v := range shard {
			n.perm[i] = int32(v)
		}
		if s.now > 0 {
			s.res.Newcomers++
		}
	} else {
		s.res.Returns++
	}
	core, err := merge.New(merge.Config{Merger: s.cfg.Merger, Batch: s.cfg.Batch, CatchUp: s.cfg.CatchUp, Seed: s.cfg.Seed ^ uint64(n.id)})
	if err != nil {
		// Validate checked every field merge.New checks.
		panic(fmt.Sprintf("sim: merge core: %v", err))
	}
	n.core, n.pace, n.last = core, merge.Pace{Floor: s.cfg.AvgInterval}, ""
	s.schedule(s.now, evStep, n, nil)
	s.nextRound(n)
	if s.cfg.Trace != nil {
		se := n.trace[n.next]
		n.next++
		n.returns = n.next < len(n.trace)
		if se.Leave < s.end {
			s.schedule(se.Leave, evLeave, n, nil)
		}
		return
	}
	if s.arrivalRate > 0 {
		l := s.lifetime()
		if !s.started {
			l = s.residual()
		}
		if l < s.end-s.now {
			s.schedule(s.now+l, evLeave, n, nil)
		}
	}
}

// leave takes n offline. A node that will return keeps its state (its
// checkpoint); one that never returns loses what no peer merged.
func (s *simulation) leave(n *node) {
	s.tally()
	if i, ok := slices.BinarySearchFunc(s.live, n.id, func(p *node, id int) int { return cmp.Compare(p.id, id) }); ok {
		s.live = slices.Delete(s.live, i, i+1)
	}
	n.live = false
	n.core = nil
	s.res.Leaves++
	if s.cfg.Trace != nil {
		if n.returns {
			s.schedule(n.trace[n.next].Join, evTraceJoin, n, nil)
			return
		}
	} else if s.rng.Float64() >= s.cfg.Churn.NeverReturn {
		n.returns = true
		s.pool = append(s.pool, n)
		return
	}
	n.returns = false
	s.res.Gone++
	s.res.LostSamples += n.samples - n.shared
	s.free = append(s.free, n.w, n.mom)
	if n.avg != nil {
		s.free = append(s.free, n.avg)
	}
	n.w, n.mom, n.avg, n.perm, n.slow = nil, nil, nil, nil, nil
}

// arrive is one arrival of the lifetime model: a node from the offline
// pool when there is one (picked at random), else a newcomer; then the
// next arrival.
func (s *simulation) arrive() {
	if k := len(s.pool); k > 0 {
		i := s.rng.IntN(k)
		n := s.pool[i]
		s.pool[i] = s.pool[k-1]
		s.pool = s.pool[:k-1]
		s.join(n)
	} else {
		s.join(s.newNode())
	}
	s.schedule(s.now+s.expDelay(s.arrivalRate), evJoin, nil, nil)
}

// lifetime draws a session length.
func (s *simulation) lifetime() time.Duration {
	c := s.cfg.Churn
	u := 1 - s.rng.Float64() // in (0, 1]
	var sec float64
	switch c.Lifetime {
	case LifetimeWeibull:
		sec = c.Scale * math.Pow(-math.Log(u), 1/c.Shape)
	case LifetimePareto:
		sec = c.Scale * math.Pow(u, -1/c.Shape)
	default:
		return Open
	}
	return secondsToDuration(sec)
}

// residual draws what is left of a session in progress when the
// simulation starts, as if the swarm had been running for ever: the
// session is drawn length-biased (a node online at a given moment is more
// likely to be in a long session) and the moment falls uniformly in it.
// Starting every node on a fresh session instead would make the
// population sag for about a mean session, since heavy-tailed lifetimes
// end most fresh sessions early, before arrivals make up for them.
func (s *simulation) residual() time.Duration {
	c := s.cfg.Churn
	var l float64
	switch c.Lifetime {
	case LifetimeWeibull:
		// Length-biased Weibull(k, scale): scale * G^(1/k), G ~ Gamma(1+1/k).
		l = c.Scale * math.Pow(train.GammaSample(s.rng, 1+1/c.Shape), 1/c.Shape)
	case LifetimePareto:
		// Length-biased Pareto(a, scale) is Pareto(a-1, scale).
		l = c.Scale * math.Pow(1-s.rng.Float64(), -1/(c.Shape-1))
	default:
		return Open
	}
	return secondsToDuration(s.rng.Float64() * l)
}

// expDelay draws the wait to the next event of a Poisson process.
func (s *simulation) expDelay(rate float64) time.Duration {
	return secondsToDuration(s.rng.ExpFloat64() / rate)
}

func secondsToDuration(sec float64) time.Duration {
	if !(sec < float64(Open/time.Second)) {
		return Open
	}
	return time.Duration(sec * float64(time.Second))
}

// tally brings the live node-seconds up to now, before the live count
// changes.
func (s *simulation) tally() {
	s.liveTime += float64(len(s.live)) * (s.now - s.liveAt).Seconds()
	s.liveAt = s.now
}
