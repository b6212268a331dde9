package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/train"
)

func runCheckpoints(ctx context.Context, e *env, args []string) int {
	fs := newFlags(e, "[flags]")
	var d dataDirCmd
	d.register(fs)
	jsonOut := fs.Bool("json", false, "print JSON")
	verify := fs.Bool("verify", false, "read every checkpoint and verify its checksum (slower)")
	return d.run(e, fs, args, nil, func(st store.Store, log *slog.Logger) int {
		return listCheckpoints(ctx, e, st, log, d.sf.dir, *jsonOut, *verify)
	})
}

func listCheckpoints(ctx context.Context, e *env, st store.Store, log *slog.Logger, dir string, jsonOut, verify bool) int {
	list, err := st.List()
	if err != nil {
		return failure(e, err)
	}
	if verify {
		for i, c := range list {
			if c.Corrupt {
				continue
			}
			if _, err := st.Load(ctx, c.ID); errors.Is(err, store.ErrCorrupt) {
				list[i].Corrupt = true
				log.Warn("checkpoint failed verification", "checkpoint", c.ID, "reason", err)
			} else if err != nil {
				return failure(e, err)
			}
		}
	}
	if jsonOut {
		if list == nil {
			list = []store.Info{}
		}
		_ = json.NewEncoder(e.stdout).Encode(list)
		return exitOK
	}
	if len(list) == 0 {
		fmt.Fprintf(e.stdout, "no checkpoints in %s\n", dir)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTEP\tPROGRESS\tFINGERPRINT\tCREATED\tSIZE\tSTATE")
	for _, c := range list {
		state := "ok"
		switch {
		case c.Corrupt:
			state = "CORRUPT (kept for inspection)"
			if c.Step == 0 && c.Fingerprint.IsZero() {
				fmt.Fprintf(tw, "%d\t-\t-\t-\t-\t-\t%s\n", c.ID, state)
				continue
			}
		case c.Final:
			state = "final"
		}
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%s\t%s\t%s\t%s\n", c.ID, c.Step, float64(c.Progress), c.Fingerprint.Short(),
			c.Created.Local().Format(time.DateTime), humanBytes(c.Size), state)
	}
	tw.Flush()
	return exitOK
}

func runExport(ctx context.Context, e *env, args []string) int {
	fs := newFlags(e, "--out FILE [flags]")
	var d dataDirCmd
	d.register(fs)
	out := fs.String("out", "", "safetensors file to write (required)")
	id := fs.Uint64("id", 0, "checkpoint ID (default: the newest one that verifies)")
	check := func() string {
		if *out == "" {
			return "--out is required"
		}
		return ""
	}
	return d.run(e, fs, args, check, func(st store.Store, log *slog.Logger) int {
		return export(ctx, e, st, log, *id, *out)
	})
}

func export(ctx context.Context, e *env, st store.Store, log *slog.Logger, id uint64, out string) int {
	cp, err := pickCheckpoint(ctx, st, id, func(skipped uint64, why error) {
		log.Warn("checkpoint skipped", "checkpoint", skipped, "reason", why)
	})
	if err != nil {
		return failure(e, err)
	}
	l, err := layoutOf(cp)
	if err != nil {
		return failure(e, err)
	}
	snap := node.CheckpointModel(cp)
	seed, _ := strconv.ParseUint(cp.Meta[node.MetaSeed], 10, 64)
	meta := node.ModelMetadata(cp.Meta[node.MetaModel], cp.Meta[node.MetaDataset], cp.Meta[node.MetaNetwork], seed, snap)
	if err := writeModel(out, l, snap, meta); err != nil {
		return failure(e, err)
	}
	fmt.Fprintf(e.stdout, "exported checkpoint %d (step %d, %s) to %s\n", cp.ID, cp.Step, cp.Meta[node.MetaModel], out)
	return exitOK
}

// pickCheckpoint loads checkpoint id, or with id 0 the newest that verifies.
func pickCheckpoint(ctx context.Context, st store.Store, id uint64, skipped func(uint64, error)) (*store.Checkpoint, error) {
	if id != 0 {
		return st.Load(ctx, id)
	}
	list, err := st.List()
	if err != nil {
		return nil, err
	}
	for _, c := range list {
		cp, err := st.Load(ctx, c.ID)
		if err == nil {
			return cp, nil
		}
		if !errors.Is(err, store.ErrCorrupt) {
			return nil, err
		}
		skipped(c.ID, err)
	}
	return nil, fmt.Errorf("no checkpoint that verifies (%d listed)", len(list))
}

// layoutOf rebuilds the parameter layout from the model spec in the metadata.
func layoutOf(cp *store.Checkpoint) (params.Layout, error) {
	return train.LayoutFor(cp.Meta[node.MetaModel], cp.Meta[node.MetaDataset], len(cp.Params))
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
