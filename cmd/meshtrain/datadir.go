package main

import (
	"flag"
	"log/slog"

	"github.com/meshtrain/meshtrain/store"
)

// storeFlags are the flags of every command that opens a data dir.
type storeFlags struct {
	dir  string
	keep int
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.dir, "data-dir", "./meshtrain-data", "folder holding identity, checkpoints and history")
}

func (s *storeFlags) registerKeep(fs *flag.FlagSet) {
	fs.IntVar(&s.keep, "keep", store.DefaultKeep, "how many verified checkpoints to keep (>= 1)")
}

func (s *storeFlags) open(log *slog.Logger) (store.Store, error) {
	opts := store.Options{Keep: s.keep, Logger: log}
	armStoreHooks(&opts, log)
	return store.Open(s.dir, opts)
}

// dataDirCmd is the frame of a command that works on a data dir: flags,
// logger, the store opened (and locked) for the body, closed after it.
type dataDirCmd struct {
	sf storeFlags
	lf logFlags
}

func (d *dataDirCmd) register(fs *flag.FlagSet) {
	d.sf.register(fs)
	d.lf.register(fs)
}

// run parses args (no positional arguments), checks the command's own flags
// with check (a non-empty message is a usage error), opens the store and
// returns body's exit code.
func (d *dataDirCmd) run(e *env, fs *flag.FlagSet, args []string, check func() string,
	body func(st store.Store, log *slog.Logger) int) int {
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(e, "unexpected argument %q", fs.Arg(0))
	}
	if check != nil {
		if msg := check(); msg != "" {
			return usageError(e, "%s", msg)
		}
	}
	log, err := d.lf.logger(e.stderr)
	if err != nil {
		return usageError(e, "%v", err)
	}
	st, err := d.sf.open(log)
	if err != nil {
		return failure(e, err)
	}
	defer st.Close()
	return body(st, log)
}
