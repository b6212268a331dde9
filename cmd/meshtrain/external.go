package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/trainerapi"
)

// Trainer kinds of --trainer.
const (
	trainerBuiltin  = "builtin"
	trainerExternal = "external"
)

// trainerSocket is the Unix socket an external trainer connects to, in
// the data dir.
const trainerSocket = "trainer.sock"

// externalListen is --trainer-listen's value, defaulted to the socket in
// the data dir.
func externalListen(flagValue, dataDir string, noStore bool) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if noStore {
		return "", errors.New("--trainer external with --no-data-dir needs --trainer-listen (the socket lives in the data dir)")
	}
	return "unix:" + filepath.Join(dataDir, trainerSocket), nil
}

// runExternal runs a node around an external trainer: it listens on the
// trainer API, builds the node at the first registration (resuming the
// trainer's checkpoint), waits for the trainer's model, then runs the node
// as usual. The trainer is told when the run ends.
func runExternal(ctx context.Context, e *env, f *runFlags, cfg node.Config, listen string, before func(*node.Node)) int {
	log, printer, st, code := f.start(e, cfg)
	if st != nil {
		defer st.Close()
	}
	if code >= 0 {
		return code
	}
	var (
		mu    sync.Mutex
		ext   *trainerapi.External
		n     *node.Node
		built = make(chan struct{})
		fatal = make(chan error, 1)
	)
	attach := func(actx context.Context, spec trainerapi.Spec) (*trainerapi.External, error) {
		mu.Lock()
		defer mu.Unlock()
		if ext != nil {
			if !trainerapi.SameRun(ext.Spec(), spec) {
				return nil, fmt.Errorf("this node runs %s; the trainer registered %s: restart the node (with --fresh, or a new --data-dir) to change the model or run",
					trainerapi.Describe(ext.Spec()), trainerapi.Describe(spec))
			}
			return ext, nil
		}
		x, err := trainerapi.NewExternal(spec, trainerapi.RunConfig{Network: cfg.Train.Network, Epochs: cfg.Epochs,
			Schedule: cfg.Train.Schedule, EMA: cfg.Train.EMA, EMAPeers: cfg.Train.EMAPeers})
		if err != nil {
			return nil, err
		}
		c := cfg
		c.Train.Batch = spec.Batch // staleness counts the trainer's steps
		nn, err := node.NewWith(ctx, c, x, st, log, printer)
		if err != nil {
			if errors.Is(err, node.ErrFinished) || errors.Is(err, store.ErrLocked) {
				select {
				case fatal <- err:
				default:
				}
			}
			return nil, err
		}
		x.SetPeerID(nn.ID().String())
		ext, n = x, nn
		close(built)
		return x, nil
	}
	tokenFile := ""
	if !f.noStore {
		tokenFile = filepath.Join(f.dir, "trainer.token")
	}
	srv, err := trainerapi.Listen(trainerapi.Config{Listen: listen, TokenFile: tokenFile, Attach: attach, Logger: log})
	if err != nil {
		return failure(e, err)
	}
	defer srv.Close()
	if !f.jsonOut {
		fmt.Fprintf(e.stdout, "waiting for a trainer on %s\n", srv.Addr())
	}
	log.Info("trainer API listening", "component", "trainerapi", "addr", srv.Addr())
	select {
	case <-ctx.Done():
		return exitOK
	case err := <-fatal:
		return failure(e, err)
	case <-built:
	}
	if before != nil {
		before(n)
	}
	for !ext.Ready() {
		select {
		case <-ctx.Done():
			n.Close()
			return exitOK
		case <-time.After(20 * time.Millisecond):
		}
	}
	res, err := n.Run(ctx, printer)
	if err != nil {
		return failure(e, err)
	}
	ext.Stop(res.StopReason)
	// The trainer learns of the end at its next push; give it a moment to
	// hear it and leave before the socket goes.
	for deadline := time.Now().Add(10 * time.Second); srv.Connected() && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(50 * time.Millisecond)
	}
	if st != nil {
		if err := st.Close(); err != nil {
			return failure(e, err)
		}
	}
	return saveResult(e, f, res)
}
