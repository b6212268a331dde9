#!/usr/bin/env python3
"""The synchronous baseline: train.py's model and shards under PyTorch DDP.

    python3 ddp.py --world 4 --slowdowns 2,2,4,8 --duration 60 --eval-every 2

One command starts ``--world`` processes (multiprocessing spawn) that train
with torch.distributed (gloo, DistributedDataParallel): rank i trains on
shard i with train.py's batch per rank, and every step averages the
gradients of all ranks, so the swarm moves at the pace of its slowest
member. Rank 0 prints train.py's JSON lines, and a final line with the full
test set's score and ``time_to_target``, the first evaluation time at which
the eval subset reached --target (null if never).

Emulated slowness is train.py's (``Pacer``): each rank times a few solo
steps at the start, then makes every step last F x that time; a rank held
up longer by waiting for the others does not sleep.

Rank 0 scores and snapshots the moving average of the weights (``--ema``,
0.98 per step, taken in every 4th step, faster while it is young: the rule
a meshtrain node uses for the model it reports), so both sides of a
comparison score the same kind of model; ``--ema 0`` scores the weights.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import multiprocessing as mp
import multiprocessing.connection
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import train as common


AVERAGE_EVERY = 4  # steps between updates of the average, as a node's


class Average:
    """The moving average of a model's weights at ``ema`` per step, updated
    every AVERAGE_EVERY steps at ema**AVERAGE_EVERY, but at most (1+n)/(10+n)
    for the n-th update, as a meshtrain node's (train.Average). ``model``
    is the averaged copy, to score and save."""

    def __init__(self, net: torch.nn.Module, ema: float):
        self.ema, self.n, self.steps = ema, 0, 0
        self.net = net
        self.model = copy.deepcopy(net)

    @torch.no_grad()
    def step(self) -> None:
        """Count a step; take the weights in every AVERAGE_EVERY steps."""
        self.steps += 1
        if self.steps % AVERAGE_EVERY:
            return
        d = min(self.ema ** AVERAGE_EVERY, (1 + self.n) / (10 + self.n))
        self.n += 1
        for a, p in zip(self.model.parameters(), self.net.parameters()):
            a.mul_(d).add_(p, alpha=1 - d)
        for a, b in zip(self.model.buffers(), self.net.buffers()):
            a.copy_(b)


def worker(rank: int, args: argparse.Namespace, init_file: str) -> None:
    """One DDP rank: train until rank 0 says stop; rank 0 evaluates and prints."""
    torch.set_num_threads(args.threads)
    # A rank that dies mid-collective ends the others' wait within a minute
    # instead of never (the parent then stops them all).
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=60))
    data = common.load_mnist(args.data)
    shard = torch.from_numpy(common.shard_indices(common.TRAIN_SAMPLES, rank, args.world, args.seed))
    x, y = data["train_x"][shard], data["train_y"][shard]
    test_x, test_y = common.eval_subset(data, args.eval_samples)
    net = common.make_model(args.seed)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    pacer = common.Pacer(args.slowdowns[rank], net, optimizer, x, y, args.batch, args.base_step)  # before DDP hooks the model
    model = DistributedDataParallel(net)
    stop = torch.zeros(1)
    samples, reached = 0, None
    snaps = common.Snapshots(args.snapshot_dir if rank == 0 else None, args.snapshot_every, rank)
    average = Average(net, args.ema) if rank == 0 and args.ema > 0 else None
    scored = average.model if average else net  # what rank 0 scores and saves
    dist.barrier()
    start = time.monotonic()
    next_eval = start + args.eval_every
    for idx in common.batches(np.random.default_rng([args.seed, rank]), len(y), args.batch):
        t0 = time.perf_counter()
        common.train_step(model, optimizer, x[idx], y[idx])
        pacer.wait(t0)
        samples += len(idx)
        if average:
            average.step()
        now = time.monotonic()
        snaps.maybe(now - start, scored, samples, 0)
        if rank == 0:
            if args.eval_every > 0 and now >= next_eval:
                accuracy, loss = common.evaluate(scored, test_x, test_y)
                common.emit(common.score(now - start, rank, accuracy, loss, samples, 0))
                if reached is None and accuracy >= args.target:
                    reached = round(now - start, 3)
                next_eval = time.monotonic() + args.eval_every
            stop.fill_(float(now - start >= args.duration))
        dist.broadcast(stop, src=0)  # every rank must leave at the same step
        if stop.item():
            break
    if rank == 0:
        accuracy, loss = common.evaluate(scored, data["test_x"], data["test_y"])
        record = common.score(time.monotonic() - start, rank, accuracy, loss, samples, 0)
        common.emit({"final": True, **record, "averaged": average is not None, "stop": "duration",
                     "target": args.target, "time_to_target": reached})
    dist.destroy_process_group()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's flags, checked."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=4, help="number of ranks (default 4)")
    p.add_argument("--slowdowns", default="1",
                   help="comma-separated slowdown per rank, or one for all (default 1)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of training (default 60)")
    p.add_argument("--eval-every", type=float, default=5.0, help="seconds between evaluations (0: only at the end)")
    p.add_argument("--target", type=float, default=0.97, help="accuracy on the eval subset to time (default 0.97)")
    p.add_argument("--batch", type=int, default=64, help="samples per step and rank (default 64)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    p.add_argument("--ema", type=float, default=0.98,
                   help="decay per step of the moving average rank 0 scores and saves (default 0.98, "
                        "a meshtrain node's; 0: the weights)")
    p.add_argument("--seed", type=int, default=1, help="seed of the weights and shards (default 1)")
    p.add_argument("--eval-samples", type=int, default=2000, help="test images scored by each evaluation")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--base-step", type=float, default=0.0,
                   help="the base step time in seconds that the slowdowns multiply (0: each rank times its own)")
    p.add_argument("--snapshot-dir", help="rank 0 saves the weights here every --snapshot-every s, for score.py")
    p.add_argument("--snapshot-every", type=float, default=2.0, help="seconds between snapshots (default 2)")
    p.add_argument("--data", default=common.DEFAULT_DATA, help="folder of the MNIST .gz IDX files")
    args = p.parse_args(argv)
    args.slowdowns = [float(s) for s in args.slowdowns.split(",")]
    if len(args.slowdowns) == 1:
        args.slowdowns *= args.world
    if len(args.slowdowns) != args.world or min(args.slowdowns) < 1:
        p.error(f"--slowdowns needs {args.world} values >= 1 (or one)")
    if args.duration <= 0:
        p.error("--duration must be > 0")
    if not 0 <= args.ema < 1:
        p.error("--ema must be in [0, 1)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the ranks; exit status 1 if one failed."""
    args = parse_args(argv)
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="meshtrain-ddp-") as tmp:
        procs = [ctx.Process(target=worker, args=(rank, args, os.path.join(tmp, "init")), name=f"rank{rank}")
                 for rank in range(args.world)]
        for proc in procs:
            proc.start()
        running = list(procs)
        while running:
            for sentinel in mp.connection.wait([p.sentinel for p in running]):
                proc = next(p for p in running if p.sentinel == sentinel)
                proc.join()
                running.remove(proc)
                if proc.exitcode != 0:  # the others would wait for it forever
                    print(f"ddp: {proc.name} exited with {proc.exitcode}; stopping the others", file=sys.stderr)
                    for other in running:
                        other.terminate()
    failed = [p.name for p in procs if p.exitcode != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
