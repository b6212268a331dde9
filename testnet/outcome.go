package testnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshtrain/meshtrain/api"
)

// Release lets a gated testnet train: it waits until every node lists
// every other as a peer (or until timeout), then writes the start file.
// It returns, per node, how many peers it saw when released.
func (tn *Testnet) Release(ctx context.Context, timeout time.Duration) ([]int, error) {
	if !tn.cfg.Gate {
		return nil, errors.New("testnet: not gated")
	}
	seen := make([]int, len(tn.Members))
	clients := make([]*api.Client, len(tn.Members))
	for i, m := range tn.Members {
		c, err := api.NewClient(m.API, nil)
		if err != nil {
			return nil, err
		}
		clients[i] = c
	}
	want := len(tn.Members) - 1
	deadline := time.Now().Add(timeout)
	for {
		all := true
		for i, c := range clients {
			if seen[i] >= want {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			peers, err := c.Peers(rctx)
			cancel()
			if err == nil {
				seen[i] = len(peers)
			}
			all = all && seen[i] >= want
		}
		if all || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-tn.Done():
			return seen, fmt.Errorf("testnet: a node exited before training started; see the logs in %s", tn.cfg.Dir)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := ctx.Err(); err != nil {
		return seen, err
	}
	if err := os.WriteFile(filepath.Join(tn.cfg.Dir, GateFile), nil, 0o644); err != nil {
		return seen, err
	}
	tn.mu.Lock()
	tn.t0 = time.Now() // the sessions' clock starts with training
	tn.mu.Unlock()
	return seen, nil
}

// Outcome is how one node of a testnet ended.
type Outcome struct {
	Index int
	// Exit is the process's exit error (nil: exit code 0).
	Exit error
	// Final is the node's final event (nil if it printed none).
	Final *FinalEvent
	// Problem says why the node did not end well ("" if it did).
	Problem string
}

// OK reports whether the node ended well.
func (o Outcome) OK() bool { return o.Problem == "" }

// Outcomes reports how every node ended; call it after Done. A node ended
// well when it exited with code 0 after a final event of a finished run
// and, in a gossip swarm of more than one node, merged at least once.
// interrupted accepts a run stopped by Stop (Ctrl-C) as finished. The
// sessions the churn ended are not among them (see Sessions).
func (tn *Testnet) Outcomes(interrupted bool) []Outcome {
	ms := tn.members()
	out := make([]Outcome, 0, len(ms))
	for _, m := range ms {
		m.mu.Lock()
		o := Outcome{Index: m.Index, Exit: m.exit, Final: m.final}
		left := m.stopping == endLeft
		m.mu.Unlock()
		if left {
			continue
		}
		switch f := o.Final; {
		case o.Exit != nil:
			o.Problem = fmt.Sprintf("exited with %v; see %s", o.Exit, m.Log)
		case f == nil:
			o.Problem = "exited without a final event; see " + m.Log
		case strings.HasPrefix(f.Message, "interrupted") && !interrupted:
			o.Problem = "interrupted before the run ended"
		case f.Status.Mode == "gossip" && len(ms) > 1 && f.Merges == 0:
			o.Problem = "never merged: it trained alone"
			if a := f.Status.Alone; a != nil {
				o.Problem += " (" + a.Message + ")"
			}
		}
		out = append(out, o)
	}
	return out
}

// WriteOutcomes prints one line per node: final accuracy, merges, busy
// fraction, and what went wrong.
func WriteOutcomes(w io.Writer, outs []Outcome) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tFINAL ACC\tMERGES\tBUSY\tSTEP\tRESULT")
	for _, o := range outs {
		acc, merges, busy, step := "-", "-", "-", "-"
		if f := o.Final; f != nil {
			if f.TestAccuracy != nil {
				acc = fmt.Sprintf("%.2f%%", 100**f.TestAccuracy)
			}
			merges = fmt.Sprint(f.Merges)
			busy = fmt.Sprintf("%.3f", f.Status.BusyFraction)
			step = fmt.Sprint(f.Step)
		}
		result := "ok"
		if !o.OK() {
			result = "FAILED: " + o.Problem
		} else if o.Final != nil && o.Final.Message != "" {
			result = "ok: " + o.Final.Message
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", o.Index, acc, merges, busy, step, result)
	}
	tw.Flush()
}

// RunningDetached reports whether dir holds a detached testnet whose nodes
// still run.
func RunningDetached(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return false
	}
	tn, err := readState(b)
	if err != nil {
		return false
	}
	for _, m := range tn.Members {
		if alive(m) {
			return true
		}
	}
	return false
}
