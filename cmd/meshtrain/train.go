package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/meshtrain/meshtrain/node"
	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
	"github.com/meshtrain/meshtrain/train"
)

// trainFlags are the model and optimizer flags shared by train and node.
type trainFlags struct {
	cfg       train.Config
	epochs    float64
	dataset   string
	dataPath  string
	seed      uint64
	orderSeed uint64
	threads   int
	baseStep  time.Duration
}

// register defines the flags with the defaults of c (node.DefaultConfig
// for a mesh node, node.OfflineConfig for meshtrain train).
func (f *trainFlags) register(fs *flag.FlagSet, c node.Config) {
	d := c.Train
	f.cfg = d
	fs.StringVar(&f.dataset, "dataset", train.DatasetMNIST, "dataset: mnist or synthetic")
	fs.StringVar(&f.dataPath, "data", "", "folder of MNIST IDX files (default: the copy built into the binary)")
	fs.StringVar(&f.cfg.Model, "model", d.Model, "model: softmax or mlp:H1,H2,...")
	fs.IntVar(&f.cfg.Batch, "batch", d.Batch, "samples per step")
	fs.Float64Var(&f.cfg.LR, "lr", d.LR, "base learning rate")
	fs.Float64Var(&f.cfg.Momentum, "momentum", d.Momentum, "SGD momentum in [0,1)")
	fs.Float64Var(&f.cfg.WeightDecay, "weight-decay", d.WeightDecay, "L2 weight decay")
	fs.Float64Var(&f.cfg.EMA, "ema", d.EMA,
		"decay per step of the moving average of the weights that is reported as the model (accuracy, /model, --save); 0: the live weights")
	fs.Float64Var(&f.cfg.EMAPeers, "ema-peers", d.EMAPeers,
		"weight in [0,1] with which the reported average (--ema) also takes in every peer's model this node merges; 0: only its own weights")
	fs.StringVar(&f.cfg.Schedule, "schedule", d.Schedule, "LR schedule: const or cosine[:warmup=SAMPLES,total=SAMPLES]")
	fs.Float64Var(&f.epochs, "epochs", c.Epochs,
		"length of the run in passes over the whole training set, counted over every node's samples; the LR schedule spans it (0: no end)")
	fs.Uint64Var(&f.seed, "seed", d.Seed, "seed of the initial model and the shard split (shared by a whole network)")
	fs.Uint64Var(&f.orderSeed, "order-seed", 0, "seed of the sample order on top of --seed")
	fs.StringVar(&f.cfg.Shard, "shard", d.Shard,
		"data shard: all, i/n (0-based), or auto[:N]: the one of N shards (default 8) the peer ID picks (the default of meshtrain node --profile public)")
	fs.Float64Var(&f.cfg.Alpha, "non-iid", 0, "Dirichlet alpha for label-skewed shards (0: iid)")
	fs.Float64Var(&f.cfg.Slowdown, "slowdown", d.Slowdown, "emulate hardware F times slower: each step lasts F x the base step time")
	fs.DurationVar(&f.baseStep, "base-step", 0, "base step time for --slowdown (0: calibrate at start when --slowdown is above 1; given, even --slowdown 1 paces every step to it)")
	fs.IntVar(&f.threads, "threads", 0, "cores to use (0: all)")
}

// config returns the trainer config and sets GOMAXPROCS; the node's
// Validate checks it with the rest (a node sets the schedule's run).
func (f *trainFlags) config() (train.Config, error) {
	c := f.cfg
	c.Seed, c.OrderSeed, c.BaseStep = f.seed, f.orderSeed, f.baseStep
	if f.threads < 0 {
		return c, fmt.Errorf("--threads %d: must be >= 0", f.threads)
	}
	if f.threads > 0 {
		runtime.GOMAXPROCS(f.threads)
	}
	c.Threads = runtime.GOMAXPROCS(0)
	return c, nil
}

// runFlags are the flags of a training run shared by train and node.
type runFlags struct {
	trainFlags
	storeFlags
	logFlags
	noStore   bool
	ckptEvery time.Duration
	fresh     bool
	until     float64
	maxSteps  int64
	duration  time.Duration
	save      string
	jsonOut   bool
}

func (f *runFlags) register(fs *flag.FlagSet, c node.Config) {
	f.trainFlags.register(fs, c)
	f.storeFlags.register(fs)
	f.registerKeep(fs)
	f.logFlags.register(fs)
	fs.BoolVar(&f.noStore, "no-data-dir", false, "run without a data dir: no checkpoints, no resume, a new identity")
	fs.DurationVar(&f.ckptEvery, "checkpoint-every", c.CheckpointEvery, "wall time between checkpoints (0: only the final one)")
	fs.BoolVar(&f.fresh, "fresh", false, "ignore existing checkpoints and start over")
	fs.Float64Var(&f.until, "until-accuracy", 0, "stop once test accuracy reaches this (0: off)")
	fs.Int64Var(&f.maxSteps, "max-steps", 0, "stop after this many steps (0: no limit)")
	fs.DurationVar(&f.duration, "duration", 0, "stop after this wall time (0: no limit)")
	fs.StringVar(&f.save, "save", "", "write the final model to this safetensors file")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object per line instead of text")
	fs.String("config", "", "YAML file of settings keyed by flag name (flags and MESHTRAIN_* variables override it)")
}

// config fills the node config's run fields from the flags.
func (f *runFlags) config(c *node.Config) error {
	tc, err := f.trainFlags.config()
	if err != nil {
		return err
	}
	c.Train, c.Dataset, c.DataPath, c.Epochs = tc, f.dataset, f.dataPath, f.epochs
	c.CheckpointEvery, c.Fresh, c.UntilAccuracy, c.MaxSteps, c.Duration = f.ckptEvery, f.fresh, f.until, f.maxSteps, f.duration
	if f.keep < 1 {
		return fmt.Errorf("--keep %d: must be >= 1", f.keep)
	}
	return nil
}

// start is what every run begins with: the logger, the config checked,
// the event printer and the store (nil with --no-data-dir). code is an
// exit code when it failed, -1 otherwise.
func (f *runFlags) start(e *env, cfg node.Config) (log *slog.Logger, printer func(node.Event), st store.Store, code int) {
	log, err := f.logger(e.stderr)
	if err != nil {
		return nil, nil, nil, usageError(e, "%v", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, nil, usageError(e, "%v", err)
	}
	if !f.noStore {
		if st, err = f.open(log); err != nil {
			return nil, nil, nil, failure(e, err)
		}
	}
	return log, eventPrinter(e.stdout, f.jsonOut), st, -1
}

// runNode builds and runs a node with the flags' store and output, and
// saves the model if asked. It returns the exit code.
func runNode(ctx context.Context, e *env, f *runFlags, cfg node.Config, before func(*node.Node)) int {
	log, printer, st, code := f.start(e, cfg)
	if st != nil {
		defer st.Close()
	}
	if code >= 0 {
		return code
	}
	n, err := node.New(ctx, cfg, st, log, printer)
	if err != nil {
		return failure(e, err)
	}
	// Loading the data left its decompression buffers and, on a shard, the
	// rest of the training set as garbage: hand those pages back now, not
	// over the scavenger's next seconds to minutes, so that many nodes on
	// one machine each keep little more than their live heap.
	debug.FreeOSMemory()
	if before != nil {
		before(n)
	}
	res, err := n.Run(ctx, printer)
	if err != nil {
		return failure(e, err)
	}
	if st != nil {
		if err := st.Close(); err != nil {
			return failure(e, err)
		}
	}
	return saveResult(e, f, res)
}

// saveResult writes the final model if --save asks for it.
func saveResult(e *env, f *runFlags, res *node.Result) int {
	if f.save != "" {
		meta := node.ModelMetadata(res.Info.Model, res.Info.Dataset, res.Info.Network, res.Info.Seed, res.Snapshot)
		if err := writeModel(f.save, res.Layout, res.Snapshot, meta); err != nil {
			return failure(e, err)
		}
		if !f.jsonOut {
			fmt.Fprintf(e.stdout, "saved model to %s\n", f.save)
		}
	}
	return exitOK
}

func runTrain(ctx context.Context, e *env, args []string) int {
	fs := newFlags(e, "[flags]")
	var f runFlags
	cfg := node.OfflineConfig()
	f.register(fs, cfg)
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	if err := applySettings(fs, os.Environ()); err != nil {
		return usageError(e, "%v", err)
	}
	if fs.NArg() > 0 {
		return usageError(e, "unexpected argument %q", fs.Arg(0))
	}
	if err := f.config(&cfg); err != nil {
		return usageError(e, "%v", err)
	}
	return runNode(ctx, e, &f, cfg, nil)
}

// writeModel writes a safetensors file atomically (temp file, then rename).
func writeModel(path string, l params.Layout, s params.Snapshot, meta map[string]string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".meshtrain-model-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := params.WriteSafetensors(tmp, l, s.Params, meta); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// eventPrinter renders run events as text lines or JSON lines.
func eventPrinter(w io.Writer, asJSON bool) func(node.Event) {
	if asJSON {
		enc := json.NewEncoder(w)
		return func(ev node.Event) { _ = enc.Encode(ev) }
	}
	return func(ev node.Event) {
		acc := ""
		if ev.TestAccuracy != nil {
			acc = fmt.Sprintf("  test accuracy %.2f%%", 100**ev.TestAccuracy)
		}
		switch ev.Event {
		case "start", "resumed":
			fmt.Fprintf(w, "%s (fingerprint %.12s)\n", ev.Message, ev.Fingerprint)
		case "listening":
			fmt.Fprintf(w, "%s\n", ev.Message)
			for _, a := range ev.Addrs {
				fmt.Fprintf(w, "  listening on %s\n", a)
			}
		case "catchup":
			fmt.Fprintf(w, "catch-up: %s\n", ev.Message)
		case "precision":
			fmt.Fprintf(w, "%s\n", ev.Message)
		case "eval":
			fmt.Fprintf(w, "eval at step %d:%s\n", ev.Step, acc)
		case "checkpoint":
			fmt.Fprintf(w, "checkpoint %d committed at step %d\n", ev.Checkpoint, ev.Step)
		case "progress", "epoch":
			eta := ""
			if ev.ETA > 0 {
				eta = "  ETA " + (time.Duration(ev.ETA) * time.Second).String()
			}
			mesh := ""
			if ev.Peers > 0 || ev.Merges > 0 {
				mesh = fmt.Sprintf("  peers %d  merges %d", ev.Peers, ev.Merges)
			}
			speed := ""
			if ev.SamplesPerSec > 0 {
				speed = fmt.Sprintf("  %7.0f samples/s", ev.SamplesPerSec)
			}
			fmt.Fprintf(w, "step %6d  epoch %d  loss %.4f%s%s%s%s\n", ev.Step, ev.Epoch, ev.Loss, speed, acc, mesh, eta)
		case "final":
			fmt.Fprintf(w, "done: step %d, %.1fs%s\n", ev.Step, ev.Elapsed, acc)
			if ev.Message != "" {
				fmt.Fprintln(w, ev.Message)
			}
		}
	}
}
