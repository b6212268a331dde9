#!/usr/bin/env python3
"""How close PyTorch DDP comes to its structural pace on this machine.

    /usr/bin/python3 ddp_pace.py --world 4 --slowdowns 2,2,4,8 --base-step 0.00068 --hook fp16

The benchmark's sync mode (``meshtrain bench``) is measured against its
structural pace: the time a synchronous run would take if communication were
free, every step lasting its slowest member's step. This script measures the
same ratio for DDP's step over torch.distributed (gloo) on the same machine,
with a model of meshtrain's default size (an MLP 784-256-128-10, 235,146
parameters, 0.94 MB as fp32) and the same emulated speeds: rank i's step
lasts slowdowns[i] x --base-step before its gradients leave, as a slower
machine would spend that time computing them. The step is DDP's with one
bucket (its 25 MB cap holds the whole model), written out: the flat gradient
all-reduced and divided by the world size; ``--hook fp16`` casts it to fp16
first and back after, as DDP's fp16_compress_hook does (what meshtrain's
sync sends by default), ``--hook none`` is DDP's fp32 all-reduce. (The
padding inside a DistributedDataParallel communication hook gave the same
fp32 pace, but runs with DDP's fp16 hook at batch 1 hung in torch 1.13.)
Torch's step of this MLP on a CPU can take far longer than meshtrain's Go
step, so the default batch is 1: the gradient, and so the communication,
is the same size whatever the batch.

It prints one JSON line: the median step time of rank 0 over --steps timed
steps (after --warmup), the structural step (the largest slowdown x base
step), their ratio, and the median time of a bare all-reduce of the model's
gradient bytes among the ranks (no padding, --allreduce-iters of them).
The data is random: the pace does not depend on it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def make_mlp(seed: int) -> nn.Module:
    """meshtrain's default model, mlp:256,128."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def bare_allreduce(numel: int, dtype: torch.dtype, iters: int) -> float:
    """Median seconds of one all-reduce of numel values of dtype among the ranks."""
    t = torch.zeros(numel, dtype=dtype)  # sums of zeros stay finite
    for _ in range(10):
        dist.all_reduce(t)
    times = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def worker(rank: int, args: argparse.Namespace, init_file: str, out_file: str) -> None:
    torch.set_num_threads(1)
    # A rank that dies leaves the others in a collective: they give up
    # after a minute rather than gloo's default half hour.
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=60))
    target = args.slowdowns[rank] * args.base_step
    net = make_mlp(args.seed)
    params = list(net.parameters())
    optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed + rank)
    xs = torch.randn(16, args.batch, 784, generator=gen)
    ys = torch.randint(0, 10, (16, args.batch), generator=gen)
    dist.barrier()
    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss_fn(net(xs[i % 16]), ys[i % 16]).backward()
        # The emulated compute: the step lasts `target` before its gradients
        # leave, as on a machine that slow.
        left = t0 + target - time.perf_counter()
        if left > 0:
            time.sleep(left)
        # DDP's step with one bucket: the flat gradient all-reduced, as fp16
        # and back for fp16_compress_hook, then divided by the world size.
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        if args.hook == "fp16":
            half = flat.to(torch.float16).div_(args.world)
            dist.all_reduce(half)
            flat = half.to(torch.float32)
        else:
            dist.all_reduce(flat)
            flat.div_(args.world)
        off = 0
        for p in params:
            p.grad.copy_(flat[off:off + p.numel()].view_as(p))
            off += p.numel()
        optimizer.step()
        times.append(time.perf_counter() - t0)
    numel = sum(p.numel() for p in net.parameters())
    fp32 = bare_allreduce(numel, torch.float32, args.allreduce_iters)
    fp16 = bare_allreduce(numel, torch.float16, args.allreduce_iters)
    if rank == 0:
        step = statistics.median(times[args.warmup:])
        structural = max(args.slowdowns) * args.base_step
        result = {"world": args.world, "slowdowns": args.slowdowns, "base_step_ms": args.base_step * 1e3,
                  "hook": args.hook, "parameters": numel, "steps": args.steps,
                  "step_ms": round(step * 1e3, 3), "structural_step_ms": round(structural * 1e3, 3),
                  "ratio_to_structural": round(step / structural, 3),
                  "allreduce_fp32_ms": round(fp32 * 1e3, 3), "allreduce_fp16_ms": round(fp16 * 1e3, 3),
                  "torch": torch.__version__}
        with open(out_file, "w") as f:  # a file, not a queue: a queue's locks outlive the ranks
            json.dump(result, f)
    dist.destroy_process_group()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=4, help="ranks (default 4)")
    p.add_argument("--slowdowns", default="2,2,4,8", help="one per rank, comma-separated (default 2,2,4,8)")
    p.add_argument("--base-step", type=float, default=0.00068,
                   help="seconds the slowdowns multiply (default 0.00068, meshtrain's MLP step on this machine)")
    p.add_argument("--hook", choices=["fp16", "none"], default="fp16",
                   help="fp16: DDP's fp16_compress_hook (default); none: fp32 all-reduce")
    p.add_argument("--batch", type=int, default=1,
                   help="samples per step per rank (default 1: torch's step of this MLP must fit in the emulated one)")
    p.add_argument("--steps", type=int, default=2000, help="timed steps (default 2000)")
    p.add_argument("--warmup", type=int, default=200, help="steps before timing (default 200)")
    p.add_argument("--allreduce-iters", type=int, default=500, help="bare all-reduces timed (default 500)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    try:
        args.slowdowns = [float(s) for s in args.slowdowns.split(",")]
    except ValueError:
        p.error(f"--slowdowns {args.slowdowns!r}: want numbers separated by commas")
    if len(args.slowdowns) != args.world:
        p.error(f"--slowdowns has {len(args.slowdowns)} values for --world {args.world}")
    if min(args.slowdowns) < 1 or args.base_step <= 0 or args.steps < 1 or args.warmup < 0:
        p.error("slowdowns must be >= 1, --base-step > 0, --steps >= 1, --warmup >= 0")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        ctx = mp.get_context("spawn")
        out_file = os.path.join(tmp, "result.json")
        procs = [ctx.Process(target=worker, args=(r, args, init_file, out_file)) for r in range(args.world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            print(f"a rank failed: exit codes {[p.exitcode for p in procs]}", file=sys.stderr)
            return 1
        with open(out_file) as f:
            print(json.dumps(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
