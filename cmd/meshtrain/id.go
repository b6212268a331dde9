package main

import (
	"context"
	"fmt"

	"github.com/meshtrain/meshtrain/node"
)

func runID(_ context.Context, e *env, args []string) int {
	fs := newFlags(e, "[flags]")
	var sf storeFlags
	var lf logFlags
	sf.register(fs)
	lf.register(fs)
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(e, "unexpected argument %q", fs.Arg(0))
	}
	log, err := lf.logger(e.stderr)
	if err != nil {
		return usageError(e, "%v", err)
	}
	st, err := sf.open(log)
	if err != nil {
		return failure(e, err)
	}
	defer st.Close()
	_, id, created, err := node.Identity(st)
	if err != nil {
		return failure(e, err)
	}
	if created {
		log.Info("created a new identity", "data_dir", sf.dir)
	}
	fmt.Fprintln(e.stdout, id)
	return exitOK
}
