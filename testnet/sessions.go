package testnet

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// SessionsFile is the sessions record of a testnet, in its Dir.
const SessionsFile = "sessions.json"

// How a session ended (Session.End).
const (
	SessionLeft    = endLeft    // the churn stopped it
	SessionStopped = endStopped // the testnet stopped it (--duration, Ctrl-C)
	SessionExited  = "exited"   // it exited on its own with code 0 (its run ended)
	SessionFailed  = "failed"   // it exited with an error, not one the testnet's SIGKILL caused
	SessionNoStart = "no start" // the churn started it, but it never reported its addresses
	SessionRunning = "running"  // it has not ended yet
)

// Session is one process of a node, from its start to its exit. Times are
// seconds since training started (the release of a gated testnet).
type Session struct {
	// Session is its place in start order; Index the node's.
	Session int    `json:"session"`
	Index   int    `json:"index"`
	PeerID  string `json:"peer_id"`
	// Returning: the churn started the node again on its data dir.
	Returning bool    `json:"returning"`
	StartS    float64 `json:"start_s"`
	EndS      float64 `json:"end_s"`
	End       string  `json:"end"`
	// Killed: the testnet sent it SIGKILL after the grace.
	Killed bool `json:"killed,omitempty"`
	// StartEvent is its first event: start (a fresh run or none to resume)
	// or resumed; StartStep and StartRunSamples are the step and the run
	// clock it resumed at (0 for a fresh start).
	StartEvent      string  `json:"start_event"`
	StartStep       int64   `json:"start_step"`
	StartRunSamples float64 `json:"start_run_samples"`
	// ToTargetS is the time from its start to its first test-set
	// evaluation at or above the target (nil: none).
	ToTargetS    *float64 `json:"to_target_s"`
	BestAccuracy float64  `json:"best_accuracy"`
	// Problem says what went wrong when End is failed or no start.
	Problem string `json:"problem,omitempty"`
	Log     string `json:"log"`
}

// Lasted is how long the session ran, in seconds.
func (s Session) Lasted() float64 { return s.EndS - s.StartS }

// Sessions reports every session so far, in start order.
func (tn *Testnet) Sessions() []Session {
	tn.mu.Lock()
	t0 := tn.t0
	ms := tn.Members
	tn.mu.Unlock()
	since := func(t time.Time) float64 { return max(0, t.Sub(t0).Seconds()) }
	out := make([]Session, 0, len(ms))
	for k, m := range ms {
		s := Session{Session: k, Index: m.Index, PeerID: m.PeerID, Returning: m.Returning, Log: m.Log,
			StartS: since(m.started)}
		exited := m.exited()
		m.mu.Lock()
		s.Killed, s.BestAccuracy = m.killed, m.best
		s.StartEvent, s.StartStep, s.StartRunSamples = m.first.kind, m.first.step, m.first.clock
		if !m.reached.IsZero() {
			d := max(0, since(m.reached)-s.StartS)
			s.ToTargetS = &d
		}
		stopping := m.stopping
		m.mu.Unlock()
		if !exited {
			s.End, s.EndS = SessionRunning, since(time.Now())
			out = append(out, s)
			continue
		}
		s.EndS = since(m.ended)
		switch {
		case m.startErr != nil:
			s.End, s.Problem = SessionNoStart, m.startErr.Error()
		case m.exit != nil && !s.Killed:
			s.End, s.Problem = SessionFailed, fmt.Sprintf("exited with %v", m.exit)
			if stopping != "" {
				s.Problem += " after a stop signal"
			}
		case stopping != "":
			s.End = stopping
		default:
			s.End = SessionExited
		}
		out = append(out, s)
	}
	return out
}

// SessionsReport is the sessions record a churned testnet writes
// (SessionsFile) and its verdict: every session that lasted at least
// MinSessionS reached the target, and none failed.
type SessionsReport struct {
	Target      float64     `json:"target"`
	MinSessionS float64     `json:"min_session_s"`
	Churn       *ChurnStats `json:"churn,omitempty"`
	Sessions    []Session   `json:"sessions"`
	// Long counts the sessions that lasted MinSessionS or more, Reached
	// those of them that reached Target; Missed lists (by Session) the
	// others, Failed the sessions that failed or never started.
	Long    int   `json:"long"`
	Reached int   `json:"reached"`
	Missed  []int `json:"missed"`
	Failed  []int `json:"failed"`
}

// Summarize judges sessions: which lasted minSession or more, which of
// those reached target, which failed.
func Summarize(sessions []Session, target float64, minSession time.Duration) SessionsReport {
	r := SessionsReport{Target: target, MinSessionS: minSession.Seconds(), Sessions: sessions,
		Missed: []int{}, Failed: []int{}}
	for _, s := range sessions {
		if s.End == SessionFailed || s.End == SessionNoStart {
			r.Failed = append(r.Failed, s.Session)
		}
		if s.End == SessionNoStart || s.Lasted() < r.MinSessionS {
			continue
		}
		r.Long++
		if s.ToTargetS != nil {
			r.Reached++
		} else {
			r.Missed = append(r.Missed, s.Session)
		}
	}
	return r
}

// OK reports whether every long session reached the target and none failed.
func (r SessionsReport) OK() bool { return len(r.Missed) == 0 && len(r.Failed) == 0 }

// Verdict is the report's closing line: "sessions that lasted >= 2m0s:
// 40; reached 90%: 39 (not: session 12 (node 7, 131 s))".
func (r SessionsReport) Verdict() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sessions that lasted >= %v: %d; reached %s: %d", time.Duration(r.MinSessionS*float64(time.Second)),
		r.Long, percent(r.Target), r.Reached)
	name := func(ids []int) string {
		var out []string
		for _, s := range r.Sessions {
			if slices.Contains(ids, s.Session) {
				out = append(out, fmt.Sprintf("session %d (node %d, %.0f s)", s.Session, s.Index, s.Lasted()))
			}
		}
		return strings.Join(out, ", ")
	}
	if len(r.Missed) > 0 {
		fmt.Fprintf(&b, " (not: %s)", name(r.Missed))
	}
	if len(r.Failed) > 0 {
		fmt.Fprintf(&b, "; failed: %s", name(r.Failed))
	}
	return b.String()
}

// percent formats a share: 0.9 as 90%, 0.975 as 97.5%.
func percent(v float64) string { return strings.TrimSuffix(fmt.Sprintf("%.1f", 100*v), ".0") + "%" }

// WriteSessions prints one line per session, then the churn's counts and
// the verdict.
func WriteSessions(w io.Writer, r SessionsReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SESSION\tNODE\tPEER\tJOINED\tSTART S\tEND S\tEND\tRESUMED AT STEP\tTO %s S\tBEST ACC\n", percent(r.Target))
	for _, s := range r.Sessions {
		joined := "new"
		if s.Returning {
			joined = "returning"
		}
		peer := s.PeerID
		if len(peer) > 12 {
			peer = "…" + peer[len(peer)-8:]
		}
		end := s.End
		if s.Killed {
			end += " (SIGKILL)"
		}
		at, to, best := "-", "-", "-"
		if s.BestAccuracy > 0 {
			best = percent(s.BestAccuracy)
		}
		if s.StartEvent == "resumed" {
			at = fmt.Sprint(s.StartStep)
		}
		if s.ToTargetS != nil {
			to = fmt.Sprintf("%.0f", *s.ToTargetS)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\n", s.Session, s.Index, peer, joined, s.StartS, s.EndS, end,
			at, to, best)
	}
	tw.Flush()
	if c := r.Churn; c != nil {
		fmt.Fprintf(w, "churn: %d events (%d newcomers, %d returns), %d skipped, %d leavers killed after the grace, "+
			"%d joiners failed to start, %d still starting at the end\n",
			c.Events, c.Newcomers, c.Returns, c.Skipped, c.Killed, c.FailedStarts, c.Unfinished)
	}
	fmt.Fprintln(w, r.Verdict())
}

// WriteSessionsFile writes the report to dir/SessionsFile.
func WriteSessionsFile(dir string, r SessionsReport) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, SessionsFile), append(b, '\n'), 0o644)
}
