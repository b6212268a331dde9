package testnet

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Why the testnet signalled a member (Member.stopping).
const (
	endLeft    = "left"    // the churn stopped it
	endStopped = "stopped" // Stop stopped it
)

// ChurnStats counts what the churn did.
type ChurnStats struct {
	// Events that stopped a node and started one; Skipped events found
	// fewer than two live nodes (one to leave, one to bootstrap through).
	Events  int `json:"events"`
	Skipped int `json:"skipped"`
	// Newcomers and Returns are the joiners the events started; Killed the
	// leavers that got SIGKILL after the grace; FailedStarts the joiners
	// that did not report their addresses; Unfinished those still starting
	// when the churn ended (the testnet stopped them: no session).
	Newcomers    int `json:"newcomers"`
	Returns      int `json:"returns"`
	Killed       int `json:"killed"`
	FailedStarts int `json:"failed_starts"`
	Unfinished   int `json:"unfinished"`
}

// StartChurn replaces nodes as Config.Churn says, on a goroutine of its
// own, until ctx ends, Stop is called, or no node is left to bootstrap
// through. Call it once, after Release (or Up); without churn it does
// nothing. Each event stops one random live node (SIGTERM, then SIGKILL
// after Churn.Grace) and starts one: from the return pool with chance 1/2
// when the pool is not empty (on its data dir: it resumes), else a
// newcomer (a new index, a fresh run), bootstrapping through up to eight
// random live nodes other than the leaver.
func (tn *Testnet) StartChurn(ctx context.Context) {
	if tn.cfg.Churn.Rate <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	tn.mu.Lock()
	if tn.churnDone != nil {
		tn.mu.Unlock()
		cancel()
		return
	}
	tn.churnStop, tn.churnDone = cancel, done
	tn.mu.Unlock()
	c := &churner{tn: tn, plan: newChurnPlan(tn.cfg.Churn, tn.cfg.Nodes), grace: tn.cfg.Churn.Grace,
		start: tn.start, stop: tn.leave}
	if c.grace == 0 {
		c.grace = DefaultChurnGrace
	}
	go func() {
		defer close(done)
		c.run(ctx)
	}()
}

// stopChurn ends the churn and waits for its goroutine: no session starts
// or stops on the churn's behalf after it returns. Safe to call twice.
func (tn *Testnet) stopChurn() {
	tn.mu.Lock()
	stop, done := tn.churnStop, tn.churnDone
	tn.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Churn reports what the churn has done so far.
func (tn *Testnet) Churn() ChurnStats {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.churnStats
}

// leave stops a member for the churn: SIGTERM (the node finishes its step
// and writes a final checkpoint, as on Ctrl-C), then SIGKILL if it has not
// exited after grace. It returns once the process has exited.
func (tn *Testnet) leave(m *Member, grace time.Duration) {
	m.mu.Lock()
	if !m.exited() {
		m.stopping = endLeft
	}
	m.mu.Unlock()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-m.done:
	case <-t.C:
		m.mu.Lock()
		m.killed = true
		m.mu.Unlock()
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// churner is the churn's goroutine: it owns the plan and the set of live
// members, and starts a goroutine per leaver and per joiner, which report
// back to it. start and stop are the testnet's (tests fake them).
type churner struct {
	tn    *Testnet
	plan  *churnPlan
	grace time.Duration
	start func(ctx context.Context, l launch) (*Member, error)
	stop  func(m *Member, grace time.Duration)
}

// churnResult is what a leaver's or a joiner's goroutine reports.
type churnResult struct {
	ev     churnEvent
	joined *Member // the joiner, once listening (nil: a leaver's report, or a failed start)
	left   bool    // the leaver has exited
}

func (c *churner) run(ctx context.Context) {
	tn := c.tn
	results := make(chan churnResult)
	exits := make(chan *Member)
	var wg sync.WaitGroup
	defer wg.Wait()
	// watch reports a live member's exit, so one that exits on its own (a
	// finished run, a crash) is neither stopped nor bootstrapped through.
	watch := func(m *Member) {
		wg.Go(func() {
			select {
			case <-m.done:
				select {
				case exits <- m:
				case <-ctx.Done():
				}
			case <-ctx.Done():
			}
		})
	}
	live := map[int]*Member{}
	for _, m := range tn.members() {
		if !m.exited() {
			live[m.Index] = m
			watch(m)
		}
	}
	joining, leaving := 0, 0
	timer := time.NewTimer(c.plan.gap(len(live)))
	defer timer.Stop()
	for len(live) > 0 || joining+leaving > 0 {
		select {
		case <-ctx.Done():
			return
		case m := <-exits:
			if live[m.Index] == m {
				delete(live, m.Index)
			}
		case r := <-results:
			switch {
			case r.left:
				leaving--
				if r.ev.Returns {
					c.plan.back(r.ev.Leave) // only now: its data dir is free
				}
			default:
				joining--
				if r.joined != nil {
					live[r.joined.Index] = r.joined
					watch(r.joined)
				}
			}
		case <-timer.C:
			ev, ok := c.plan.event(slices.Collect(maps.Keys(live)))
			tn.mu.Lock()
			if !ok {
				tn.churnStats.Skipped++
			} else {
				tn.churnStats.Events++
				if ev.Returning {
					tn.churnStats.Returns++
				} else {
					tn.churnStats.Newcomers++
				}
			}
			tn.mu.Unlock()
			if ok {
				leaver := live[ev.Leave]
				delete(live, ev.Leave)
				var boot []string
				for _, b := range ev.Bootstrap {
					if a := tn.bootAddr(live[b]); a != "" {
						boot = append(boot, a)
					}
				}
				joining, leaving = joining+1, leaving+1
				wg.Go(func() { c.leave(ctx, leaver, ev, results) })
				wg.Go(func() { c.join(ctx, ev, boot, results) })
			}
			timer.Reset(c.plan.gap(len(live) + joining))
		}
	}
}

// leave stops the event's leaver and reports it.
func (c *churner) leave(ctx context.Context, m *Member, ev churnEvent, results chan<- churnResult) {
	c.stop(m, c.grace)
	m.mu.Lock()
	killed := m.killed
	m.mu.Unlock()
	if killed {
		c.tn.mu.Lock()
		c.tn.churnStats.Killed++
		c.tn.mu.Unlock()
	}
	select {
	case results <- churnResult{ev: ev, left: true}:
	case <-ctx.Done():
	}
}

// join starts the event's joiner, records its session (also a failed
// start, but not one that ctx cancelled) and reports it.
func (c *churner) join(ctx context.Context, ev churnEvent, boot []string, results chan<- churnResult) {
	m, err := c.start(ctx, launch{index: ev.Join, bootstrap: boot, fresh: !ev.Returning, returning: ev.Returning})
	c.tn.mu.Lock()
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		c.tn.churnStats.Unfinished++
	case m != nil:
		m.startErr = err
		c.tn.Members = append(c.tn.Members, m)
		if err != nil {
			c.tn.churnStats.FailedStarts++
		}
	}
	c.tn.mu.Unlock()
	r := churnResult{ev: ev}
	if err == nil {
		r.joined = m
	}
	select {
	case results <- r:
	case <-ctx.Done():
	}
}
