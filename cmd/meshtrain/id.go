package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
)

func runID(_ context.Context, e *env, args []string) int {
	fs := newFlags(e, "[flags]")
	var d dataDirCmd
	d.register(fs)
	return d.run(e, fs, args, nil, func(st store.Store, log *slog.Logger) int {
		_, id, created, err := node.Identity(st)
		if err != nil {
			return failure(e, err)
		}
		if created {
			log.Info("created a new identity", "data_dir", d.sf.dir)
		}
		fmt.Fprintln(e.stdout, id)
		return exitOK
	})
}
