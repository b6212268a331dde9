package testnet

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ChurnConfig is how a local testnet replaces its nodes while it trains
// (Testnet.StartChurn). The zero value is no churn.
type ChurnConfig struct {
	// Rate is the share of the live nodes replaced per minute, in [0,10]
	// (0.2: with 100 nodes, 20 a minute); 0 is no churn. Events come as a
	// Poisson process of Rate x live nodes per minute; each stops one live
	// node and starts one.
	Rate float64
	// NeverReturn is the share of leavers that never come back, in [0,1].
	// The others join the return pool: a later event may start one again
	// on its data dir (identity, checkpoint, progress).
	NeverReturn float64
	// Seed makes the draws reproducible. It fixes the events' times and
	// which leavers may return and which joiners return (when the pool has
	// one) on its own; who leaves, returns and is bootstrapped through also
	// depends on which nodes are live at each event, which depends on how
	// fast the nodes start and stop.
	Seed uint64
	// Grace is how long a leaver has, after SIGTERM, to write its final
	// checkpoint and exit before it gets SIGKILL (0: DefaultChurnGrace).
	Grace time.Duration
}

// DefaultChurnGrace is ChurnConfig.Grace's default: enough for a node to
// finish its step and write a checkpoint of the default model.
const DefaultChurnGrace = 10 * time.Second

// MaxChurnRate bounds ChurnConfig.Rate: ten times the swarm a minute.
const MaxChurnRate = 10

// returnChance is the chance that a joiner comes back from the return
// pool rather than being a newcomer, when the pool is not empty.
const returnChance = 0.5

// bootstrapPeers is how many live nodes a joiner bootstraps through, as a
// volunteer is given a list of several bootstrap nodes: enough that all
// of them leaving before it has reached one is unlikely. Three were not:
// at 20% churn a minute a node leaves within 100 s with a chance of 28%,
// a start takes 30 s and more on a saturated machine, and the DHT and
// the announcements need a live peer for some seconds after that; twice
// in five 100-node runs a newcomer lost all three before it had joined
// the swarm and trained alone (28% to the 8th power, were the eight
// independent: about 4 in 100,000).
const bootstrapPeers = 8

// Validate reports every bad field at once.
func (c ChurnConfig) Validate() error {
	var errs []error
	if !(c.Rate >= 0 && c.Rate <= MaxChurnRate) {
		errs = append(errs, fmt.Errorf("testnet: churn rate %v not in [0,%d] (a share of the nodes per minute)", c.Rate, MaxChurnRate))
	}
	if !(c.NeverReturn >= 0 && c.NeverReturn <= 1) {
		errs = append(errs, fmt.Errorf("testnet: never-return share %v not in [0,1]", c.NeverReturn))
	}
	if c.Grace < 0 {
		errs = append(errs, fmt.Errorf("testnet: churn grace %v: must be >= 0", c.Grace))
	}
	return errors.Join(errs...)
}

// ParseShare reads a share as a number or a percentage: "0.2" or "20%".
func ParseShare(s string) (float64, error) {
	t := strings.TrimSpace(s)
	pct := strings.HasSuffix(t, "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(t, "%")), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("testnet: %q: want a number (0.2) or a percentage (20%%)", s)
	}
	if pct {
		v /= 100
	}
	return v, nil
}

// churnEvent is one draw of the schedule: who leaves, who joins.
type churnEvent struct {
	// Leave is the index of the node that leaves; Returns whether it may
	// come back (it joins the pool once it has exited: churnPlan.back).
	Leave   int
	Returns bool
	// Join is the index of the node that joins: a newcomer (a new index)
	// or, with Returning, a node from the return pool.
	Join      int
	Returning bool
	// Bootstrap are the live nodes, not the leaver, Join bootstraps through.
	Bootstrap []int
}

// churnPlan draws the churn schedule. It is pure: no clock, no processes;
// the caller passes the live nodes. One goroutine owns it.
//
// Each kind of draw has a stream of its own, so that how many nodes are
// live (which varies with start-up times) shifts no other kind: the times
// (when) and the fates (fate: never return, come back) follow from the
// seed alone.
type churnPlan struct {
	cfg                   ChurnConfig
	when, who, fate, boot *rand.Rand
	next                  int   // the next newcomer's index
	pool                  []int // leavers that have exited and may come back, in that order
}

// newChurnPlan plans the churn of a testnet that started nodes 0..nodes-1.
func newChurnPlan(cfg ChurnConfig, nodes int) *churnPlan {
	stream := func(k uint64) *rand.Rand { return rand.New(rand.NewPCG(cfg.Seed, 0x636875726e00+k)) }
	return &churnPlan{cfg: cfg, when: stream(1), who: stream(2), fate: stream(3), boot: stream(4), next: nodes}
}

// gap draws the time to the next event with live nodes in the swarm: an
// exponential gap of mean one minute / (Rate x live). With no churn or no
// node it is a minute, after which the caller asks again.
func (p *churnPlan) gap(live int) time.Duration {
	if p.cfg.Rate <= 0 || live <= 0 {
		return time.Minute
	}
	return time.Duration(p.when.ExpFloat64() / (p.cfg.Rate * float64(live)) * float64(time.Minute))
}

// event draws one event among the live nodes (indices, at least two: one
// leaves, at least one stays to bootstrap through). The joiner comes from
// the pool, which holds only nodes that have already exited, so never from
// the live nodes.
func (p *churnPlan) event(live []int) (churnEvent, bool) {
	if len(live) < 2 {
		return churnEvent{}, false
	}
	live = slices.Sorted(slices.Values(live)) // draws must not hang on the caller's order
	k := p.who.IntN(len(live))
	ev := churnEvent{Leave: live[k], Returns: p.fate.Float64() >= p.cfg.NeverReturn}
	stay := slices.Delete(live, k, k+1)
	if back := p.fate.Float64() < returnChance; back && len(p.pool) > 0 { // drawn even with no pool: fate stays in step
		j := p.who.IntN(len(p.pool))
		ev.Join, ev.Returning = p.pool[j], true
		p.pool = slices.Delete(p.pool, j, j+1)
	} else {
		ev.Join = p.next
		p.next++
	}
	p.boot.Shuffle(len(stay), func(i, j int) { stay[i], stay[j] = stay[j], stay[i] })
	ev.Bootstrap = stay[:min(bootstrapPeers, len(stay))]
	return ev, true
}

// back puts a leaver that has exited into the return pool.
func (p *churnPlan) back(i int) { p.pool = append(p.pool, i) }
