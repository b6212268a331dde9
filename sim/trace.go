package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrBadTrace is wrapped by every trace error.
var ErrBadTrace = errors.New("sim: bad trace")

// Session is one stay of a node in the swarm: it joins at Join and leaves
// at Leave (virtual time since the start). A node with several sessions
// returns between them with the state it left with.
type Session struct {
	Node        string
	Join, Leave time.Duration
}

// Open is the Leave of a session that lasts to the end of the simulation.
const Open = time.Duration(math.MaxInt64)

// ReadTraceFile reads a trace file (see ReadTrace).
func ReadTraceFile(path string) ([]Session, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sim: trace: %w", err)
	}
	defer f.Close()
	s, err := ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ReadTrace reads sessions as CSV lines node_id,join_s,leave_s: a node
// name (any text without a comma), and the times it joins and leaves in
// seconds since the start (decimals allowed); an empty leave_s or "inf"
// means it stays to the end. A first line node_id,join_s,leave_s is a
// header; empty lines and lines starting with # are skipped. A node may
// have several sessions, which must not overlap. Every bad line is
// reported with its number.
func ReadTrace(r io.Reader) ([]Session, error) {
	sc := bufio.NewScanner(r)
	var out []Session
	var errs []error
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Split(text, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if line == 1 && len(f) == 3 && f[0] == "node_id" && f[1] == "join_s" && f[2] == "leave_s" {
			continue
		}
		s, err := parseSession(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: line %d: %v", ErrBadTrace, line, err))
			continue
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: line %d: %v", ErrBadTrace, line+1, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := checkSessions(out); err != nil {
		return nil, err
	}
	return out, nil
}

func parseSession(f []string) (Session, error) {
	if len(f) != 3 {
		return Session{}, fmt.Errorf("%d fields, want 3 (node_id,join_s,leave_s)", len(f))
	}
	if f[0] == "" {
		return Session{}, errors.New("empty node_id")
	}
	join, err := seconds(f[1], false)
	if err != nil {
		return Session{}, fmt.Errorf("join_s %q: %v", f[1], err)
	}
	leave, err := seconds(f[2], true)
	if err != nil {
		return Session{}, fmt.Errorf("leave_s %q: %v", f[2], err)
	}
	if leave <= join {
		return Session{}, fmt.Errorf("leave_s %s is not after join_s %s", f[2], f[1])
	}
	return Session{Node: f[0], Join: join, Leave: leave}, nil
}

// maxTraceSeconds bounds a time so that it fits a Duration.
const maxTraceSeconds = 1e9

func seconds(s string, open bool) (time.Duration, error) {
	if open && (s == "" || s == "inf") {
		return Open, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, errors.New("not a number of seconds")
	}
	if !(v >= 0 && v <= maxTraceSeconds) {
		return 0, fmt.Errorf("not in [0,%g] seconds", float64(maxTraceSeconds))
	}
	return time.Duration(v * float64(time.Second)), nil
}

// checkSessions reports sessions that cannot be simulated: none at all,
// bad times, and overlapping sessions of one node.
func checkSessions(ss []Session) error {
	if len(ss) == 0 {
		return fmt.Errorf("%w: no sessions", ErrBadTrace)
	}
	var errs []error
	byNode := map[string][]Session{}
	var names []string
	for _, s := range ss {
		if s.Node == "" || s.Join < 0 || s.Leave <= s.Join {
			errs = append(errs, fmt.Errorf("%w: node %q: session [%v, %v) is empty or negative", ErrBadTrace, s.Node, s.Join, s.Leave))
			continue
		}
		if _, ok := byNode[s.Node]; !ok {
			names = append(names, s.Node)
		}
		byNode[s.Node] = append(byNode[s.Node], s)
	}
	for _, n := range names {
		l := byNode[n]
		sort.SliceStable(l, func(i, j int) bool { return l[i].Join < l[j].Join })
		for i := 1; i < len(l); i++ {
			if l[i].Join < l[i-1].Leave {
				errs = append(errs, fmt.Errorf("%w: node %q: session joining at %v overlaps the one leaving at %v", ErrBadTrace,
					n, l[i].Join, l[i-1].Leave))
			}
		}
	}
	return errors.Join(errs...)
}
