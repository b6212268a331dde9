// Command meshtrain trains one model on a swarm of mismatched machines: each
// peer trains at its own pace and gossip-averages parameters with others.
// This package is wiring only; the logic lives in the library packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// exit codes
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// command is one subcommand. run returns the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) int
}

// env is what every subcommand gets: its streams and the program name.
type env struct {
	stdout, stderr io.Writer
	name           string // "meshtrain train"
}

func commands() map[string]command {
	return map[string]command{
		"train":       {"train a model in this process, no network", runTrain},
		"node":        {"join a mesh: train, announce, serve and gossip-average models", runNodeCmd},
		"eval":        {"report the test accuracy of a saved model", runEval},
		"checkpoints": {"list the checkpoints in a data dir", runCheckpoints},
		"export":      {"write a checkpoint as safetensors", runExport},
		"id":          {"print this node's peer ID (creating the key if needed)", runID},
		"keygen":      {"make a private network key (--psk FILE) or a node identity (--data-dir DIR)", runKeygen},
		"status":      {"show what a running node is doing (via its API)", runStatus},
		"peers":       {"list the peers a running node sees (via its API)", runPeers},
		"version":     {"print the version", runVersion},
		"testnet":     {"run a local swarm of nodes on 127.0.0.1 (up, down)", runTestnet},
		"bench":       {"benchmark gossip against sync, local and the ideal on a local swarm", runBench},
		"sim":         {"simulate a swarm of thousands of nodes with churn on virtual time (no network)", runSim},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || isHelp(args[0]) || args[0] == "help" {
		usage(stdout, cmds)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "meshtrain: unknown command %q (see 'meshtrain --help')\n", args[0])
		return exitUsage
	}
	return c.run(ctx, &env{stdout: stdout, stderr: stderr, name: "meshtrain " + args[0]}, args[1:])
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "meshtrain: decentralized gossip training for mixed hardware")
	fmt.Fprintln(w, "\nUsage: meshtrain <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'meshtrain <command> --help' for a command's flags.")
}

// newFlags makes a flag set whose errors come back to parse as values, so
// the caller prints one line and exits 2 instead of dumping usage.
func newFlags(e *env, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(e.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The flag package calls Usage on every error too; we print it only for
	// --help (see parse), so a bad flag costs one line.
	fs.Usage = func() {}
	synopses[fs] = synopsis
	return fs
}

// synopses holds each flag set's synopsis line for --help.
var synopses = map[*flag.FlagSet]string{}

func printUsage(e *env, fs *flag.FlagSet) {
	fmt.Fprintf(e.stdout, "Usage: %s %s\n\nFlags:\n", e.name, synopses[fs])
	fs.SetOutput(e.stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parse parses args; ok=false means the caller returns code at once
// (0 after --help, 2 after a bad flag, printed as one line).
func parse(e *env, fs *flag.FlagSet, args []string) (code int, ok bool) {
	err := parseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(e, fs)
		return exitOK, false
	case err != nil:
		return usageError(e, "%v", err), false
	}
	return 0, true
}

// parseInterspersed lets flags follow positional arguments
// ("meshtrain eval model.safetensors --json"); "--" ends flag parsing.
// The positional arguments are left in fs.Args().
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	// Parsing an explicit "--" leaves only the positionals in fs.Args().
	return fs.Parse(append([]string{"--"}, pos...))
}

// usageError prints a one-line usage error and returns exit code 2.
func usageError(e *env, format string, a ...any) int {
	msg := strings.ReplaceAll(fmt.Sprintf(format, a...), "\n", "; ")
	fmt.Fprintf(e.stderr, "%s: %s (see '%s --help')\n", e.name, msg, e.name)
	return exitUsage
}

// failure prints a runtime error and returns exit code 1.
func failure(e *env, err error) int {
	fmt.Fprintf(e.stderr, "%s: %v\n", e.name, err)
	return exitFailure
}

// logFlags are the logging flags every long-running command takes.
type logFlags struct{ level, format string }

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
}

// logger builds the slog logger on stderr.
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("invalid --log-format %q: want text or json", l.format)
}
