package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshtrain/meshtrain/api"
	"github.com/meshtrain/meshtrain/node"
)

// clientFlags are the flags of the commands that ask a running node.
type clientFlags struct {
	addr    string
	jsonOut bool
	timeout time.Duration
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "api", api.DefaultAddr, "the node's API: host:port or http(s)://host:port")
	fs.BoolVar(&c.jsonOut, "json", false, "print the node's JSON answer instead of a table")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "give up on the node after this long")
}

// client parses the flags (exit code and ok=false on a bad one) and
// returns a client for the node.
func (c *clientFlags) client(e *env, fs *flag.FlagSet, args []string) (*api.Client, int, bool) {
	if code, ok := parse(e, fs, args); !ok {
		return nil, code, false
	}
	if fs.NArg() > 0 {
		return nil, usageError(e, "unexpected argument %q", fs.Arg(0)), false
	}
	if err := applySettings(fs, os.Environ()); err != nil {
		return nil, usageError(e, "%v", err), false
	}
	if c.timeout <= 0 {
		return nil, usageError(e, "--timeout %v: must be > 0", c.timeout), false
	}
	cl, err := api.NewClient(c.addr, &http.Client{Timeout: c.timeout})
	if err != nil {
		return nil, usageError(e, "--api: %v", err), false
	}
	return cl, 0, true
}

// unreachable prints a failed request as one line, with a hint when no
// node answered at all.
func unreachable(e *env, err error) int {
	if errors.Is(err, api.ErrUnreachable) {
		fmt.Fprintf(e.stderr, "%s: %v (is 'meshtrain node' running? point --api at its API address)\n", e.name, err)
		return exitFailure
	}
	return failure(e, err)
}

// printRaw copies the node's JSON answer to stdout unchanged.
func printRaw(ctx context.Context, e *env, c *api.Client, path string) int {
	b, err := c.Raw(ctx, path)
	if err != nil {
		return unreachable(e, err)
	}
	if !json.Valid(b) {
		return failure(e, fmt.Errorf("%w: %s%s is not JSON", api.ErrResponse, c.Base(), path))
	}
	_, _ = e.stdout.Write(b)
	return exitOK
}

func runStatus(ctx context.Context, e *env, args []string) int {
	fs := newFlags(e, "[--api HOST:PORT|URL] [--json]")
	var f clientFlags
	f.register(fs)
	c, code, ok := f.client(e, fs, args)
	if !ok {
		return code
	}
	if f.jsonOut {
		return printRaw(ctx, e, c, "/v1/status")
	}
	st, err := c.Status(ctx)
	if err != nil {
		return unreachable(e, err)
	}
	printStatus(e.stdout, st, time.Now())
	return exitOK
}

func runPeers(ctx context.Context, e *env, args []string) int {
	fs := newFlags(e, "[--api HOST:PORT|URL] [--json] [--wide]")
	var f clientFlags
	f.register(fs)
	wide := fs.Bool("wide", false, "print full peer IDs and addresses")
	c, code, ok := f.client(e, fs, args)
	if !ok {
		return code
	}
	if f.jsonOut {
		return printRaw(ctx, e, c, "/v1/peers")
	}
	peers, err := c.Peers(ctx)
	if err != nil {
		return unreachable(e, err)
	}
	printPeers(e.stdout, peers, *wide)
	return exitOK
}

func printStatus(w io.Writer, st api.StatusResponse, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, a...)) }
	peerID := st.PeerID
	if peerID == "" {
		peerID = "(offline)"
	}
	row("peer", "%s", peerID)
	mode := st.Mode
	if st.Profile != "" {
		mode += ", profile " + st.Profile
	}
	row("network", "%s (mode %s)", st.Network, mode)
	row("version", "%s", st.Version)
	row("fingerprint", "%.12s", st.Fingerprint)
	if a := st.Alone; a != nil {
		row("ALONE", "%s (for %s)", a.Message, secs(a.SinceS))
	}
	if r := st.Run; r.TotalSamples > 0 {
		row("run", "%.1f%% of %g epochs (%s of %s samples, %s of them ours), lr %.4g", 100*r.Fraction, r.Epochs,
			count(r.Samples), count(r.TotalSamples), count(r.OwnSamples), r.LR)
	} else {
		row("run", "no end (%s samples, %s of them ours), lr %.4g", count(r.Samples), count(r.OwnSamples), r.LR)
	}
	row("step", "%s (epoch %d)", count(float64(st.Step)), st.Epoch)
	row("progress", "%s samples", count(st.Progress))
	row("loss", "%s", decimal(st.Loss, 4))
	if st.TestAccuracy > 0 {
		row("test accuracy", "%.2f%%", 100*st.TestAccuracy)
	} else {
		row("test accuracy", "not evaluated yet")
	}
	row("speed", "%s samples/s, busy %.1f%%, network wait %s", count(st.SamplesPerSec), 100*st.BusyFraction, secs(st.NetworkWaitS))
	row("uptime", "%s", secs(st.UptimeS))
	row("peers", "%d (%s merges, %d catch-ups)", st.Peers, count(float64(st.Merges)), st.CatchUps)
	g := st.Gossip
	row("exchanges", "%d started, %d served, %d failed (%d timed out; %.0f%% of the latest 100), %d inbound dropped",
		st.ExchangesStarted, g.ExchangesServed, st.ExchangesFailed, st.ExchangeTimeouts, 100*st.ExchangeFailedShare, st.InboundDropped)
	if r := st.Reachability; r != nil {
		printReachability(row, r)
	}
	row("traffic", "%s sent, %s received", size(float64(g.BytesSent)), size(float64(g.BytesReceived)))
	row("rejected", "%s", rejected(g.Rejected))
	if m := st.LastMerge; m != nil {
		dir := "with"
		if m.Inbound {
			dir = "from"
		}
		row("last merge", "%s %s, staleness %.2f, weight %.3f, %s ago", dir, short(m.Partner), m.Staleness, m.Weight,
			secs(now.Sub(m.Time).Seconds()))
	}
	if c := st.LastCheckpoint; c != nil {
		row("checkpoint", "#%d at step %s, %s, %s ago", c.ID, count(float64(c.Step)), size(float64(c.SizeBytes)), secs(now.Sub(c.Created).Seconds()))
	}
	for i, a := range st.Addrs {
		k := ""
		if i == 0 {
			k = "listening"
		}
		row(k, "%s", a)
	}
	_ = tw.Flush()
}

// printReachability says whether peers can dial the node, how it can be
// reached otherwise, and how it reaches the peers it could merge with.
func printReachability(row func(k, format string, a ...any), r *api.Reachability) {
	how := "AutoNAT"
	switch {
	case r.Forced && r.Status == "public":
		how = "set by --dht-server"
	case r.Forced:
		how = "set by the profile"
	}
	var reach string
	switch {
	case r.Status == "public":
		reach = fmt.Sprintf("public (%s): peers can dial this node", how)
	case r.Status == "private" && len(r.RelayAddrs) > 0:
		reach = fmt.Sprintf("private (%s): peers reach this node through %d relay address(es), then by hole punching", how, len(r.RelayAddrs))
	case r.Status == "private" && !r.Forced:
		reach = fmt.Sprintf("private (%s): behind a NAT or firewall, no relay slot yet", how)
	case r.Status == "private":
		reach = fmt.Sprintf("private (%s)", how)
	default:
		reach = "unknown (AutoNAT has not found out yet)"
	}
	if len(r.ReachableAddrs) > 0 {
		reach += fmt.Sprintf("; dialable at %s", strings.Join(r.ReachableAddrs, " "))
	}
	row("reachability", "%s", reach)
	if r.HolePunches > 0 {
		row("hole punches", "%d of %d succeeded", r.HolePunchesOK, r.HolePunches)
	}
	paths := fmt.Sprintf("%d direct, %d relayed, %d not connected", r.PeersDirect, r.PeersRelayed, r.PeersNotConn)
	if r.PeersRelayed > 0 {
		paths += " (no models go over a relay: relayed peers are skipped)"
	}
	if r.BackingOff > 0 {
		paths += fmt.Sprintf("; %d backing off after failures", r.BackingOff)
	}
	row("paths to peers", "%s", paths)
	if s := r.RelayService; s != nil {
		row("relay service", "%d slot(s) held, %d relayed connection(s) open (%d in all), %s relayed; each cut after %s or %s",
			s.Reservations, s.Circuits, s.CircuitsTotal, size(float64(s.BytesRelayed)), secs(s.LimitS), size(float64(s.LimitBytes)))
	}
}

func printPeers(w io.Writer, peers []api.PeerStatus, wide bool) {
	if len(peers) == 0 {
		fmt.Fprintln(w, "no fresh peers")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tMODE\tSTEP\tPROGRESS\tSTALENESS\tLOSS\tACCURACY\tSAMPLES/S\tRTT\tLAST SEEN\tMERGES\tREPUTATION\tPATH")
	for _, p := range peers {
		id := short(p.PeerID)
		if wide {
			id = p.PeerID
		}
		rep := "-"
		if p.Reputation != nil {
			rep = decimal(*p.Reputation, 2)
			if p.ReputationState != "" && p.ReputationState != "ok" {
				rep += " " + p.ReputationState
			}
		}
		acc := "-"
		if p.Accuracy > 0 {
			acc = fmt.Sprintf("%.2f%%", 100*p.Accuracy)
		}
		rtt := "-"
		if p.RTTS > 0 {
			rtt = secs(p.RTTS)
		}
		conn := peerPath(p)
		if p.Mode == "" {
			// Listed for its reputation only (a banned peer no longer
			// announces): there are no figures to show.
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%d\t%s\t%s\n", id, p.Merges, rep, conn)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s ago\t%d\t%s\t%s\n", id, p.Mode, count(float64(p.Step)),
			count(p.Progress), decimal(p.Staleness, 1), decimal(p.Loss, 4), acc, count(p.SamplesPerSec), rtt,
			secs(p.LastSeenS), p.Merges, rep, conn)
	}
	_ = tw.Flush()
	if wide {
		for _, p := range peers {
			fmt.Fprintf(w, "%s  %s\n", p.PeerID, strings.Join(p.Addrs, " "))
		}
	}
}

// short keeps the tail of a peer ID: IDs of one key type share their head.
func short(id string) string {
	if len(id) <= 14 {
		return id
	}
	return "…" + id[len(id)-10:]
}

// count prints a whole number with thousands separators.
func count(v float64) string {
	if v != v || v > 1e18 || v < -1e18 {
		return fmt.Sprint(v)
	}
	n := int64(v + 0.5)
	if v < 0 {
		n = int64(v - 0.5)
	}
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func decimal(v float64, places int) string { return fmt.Sprintf("%.*f", places, v) }

func secs(s float64) string {
	switch {
	case s != s:
		return "?"
	case s == 0:
		return "0 s"
	case s < 0.001:
		return fmt.Sprintf("%.0f µs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.1f ms", s*1e3)
	case s < 60:
		return fmt.Sprintf("%.1f s", s)
	case s < 48*3600:
		return (time.Duration(s) * time.Second).String()
	}
	return fmt.Sprintf("%dd%dh", int64(s)/86400, int64(s)%86400/3600)
}

func size(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", b)
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}

func rejected(m map[string]uint64) string {
	var total uint64
	var parts []string
	for r, n := range m {
		if n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%s %d", r, n))
		}
	}
	if total == 0 {
		return "none"
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// nodeAPI is the REST API of `meshtrain node`: bound before the node
// starts, so a taken port is reported before any training, served once the
// node exists, and shut down after it stops.
type nodeAPI struct {
	e       *env
	jsonOut bool
	l       net.Listener
	srv     *api.Server
	done    chan error
}

// checkAPIFlag validates --api for the node command's usage errors.
func checkAPIFlag(addr string) error {
	if addr == "" {
		return nil
	}
	if _, err := api.CheckAddr(addr); err != nil {
		return fmt.Errorf("--api: %w", err)
	}
	return nil
}

// listenNodeAPI binds --api (nothing when addr is empty). An address the
// user chose must be free; when the default is taken (another node on this
// machine), the API moves to a free port and says so.
func listenNodeAPI(e *env, fs *flag.FlagSet, addr string, jsonOut bool) (*nodeAPI, error) {
	a := &nodeAPI{e: e, jsonOut: jsonOut}
	if addr == "" {
		return a, nil
	}
	if loopback, _ := api.CheckAddr(addr); !loopback {
		fmt.Fprintf(e.stderr, "%s: warning: --api %s is reachable from other machines; the API has no authentication and serves the model\n",
			e.name, addr)
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "api" })
	l, err := api.Listen(addr)
	if err != nil && !explicit {
		host, _, _ := net.SplitHostPort(addr)
		if l, err = api.Listen(net.JoinHostPort(host, "0")); err == nil {
			fmt.Fprintf(e.stderr, "%s: warning: %s is in use; serving the API on %s instead\n", e.name, addr, l.Addr())
		}
	}
	if err != nil {
		return nil, err
	}
	a.l = l
	return a, nil
}

// start serves n; called once the node exists, before it runs.
func (a *nodeAPI) start(n *node.Node, log *slog.Logger) error {
	if a.l == nil {
		return nil
	}
	cfg := api.DefaultConfig()
	cfg.Logger = log
	srv, err := api.New(n, cfg)
	if err != nil {
		return err
	}
	a.srv, a.done = srv, make(chan error, 1)
	go func() { a.done <- srv.Serve(a.l) }()
	url := "http://" + a.l.Addr().String()
	if a.jsonOut {
		_ = json.NewEncoder(a.e.stdout).Encode(map[string]string{"event": "api", "url": url,
			"message": "dashboard, REST API and /metrics at " + url})
	} else {
		fmt.Fprintf(a.e.stdout, "dashboard, REST API and /metrics at %s\n", url)
	}
	return nil
}

// stop shuts the server down (or releases the unused listener), giving
// requests in flight a few seconds.
func (a *nodeAPI) stop() {
	if a == nil || a.l == nil {
		return
	}
	if a.srv == nil {
		_ = a.l.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		fmt.Fprintf(a.e.stderr, "%s: %v\n", a.e.name, err)
	}
	if err := <-a.done; err != nil {
		fmt.Fprintf(a.e.stderr, "%s: %v\n", a.e.name, err)
	}
}

// peerPath is the PATH column: how this node reaches the peer now.
func peerPath(p api.PeerStatus) string {
	switch {
	case p.Path == "direct" && p.HolePunched:
		return "hole-punched"
	case p.Path == "direct" || p.Path == "relayed":
		return p.Path
	case p.Path == "" && p.Connected:
		return "connected" // a node that does not say how
	}
	return "-"
}
