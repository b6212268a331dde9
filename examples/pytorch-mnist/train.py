#!/usr/bin/env python3
"""Train a small CNN on MNIST with PyTorch, merging through a meshtrain node.

    python3 train.py --socket DIR/trainer.sock --rank 0 --world 4 --slowdown 2
    python3 train.py --no-mesh --duration 30        # alone, no node

The trainer trains on shard ``rank`` of ``world`` (an iid split of a seeded
permutation of the 60k training images) and, unless --no-mesh, pushes its
model to the node started with ``meshtrain node --trainer external`` and
adds back what the node merged from its peers. Every --eval-every seconds
it scores the model the node reports (the moving average of the models
pushed and merged, ``Mesh.averaged``; without a node, its own model) on a
fixed subset of the 10k test images and prints a JSON line to stdout::

    {"t": 12.3, "rank": 0, "accuracy": 0.9655, "loss": 0.1123, "samples": 19200, "merges": 57}

and at the end one line with "final": true scored on the whole test set
("averaged": whether that was the node's moving average).
Diagnostics go to stderr. ddp.py and swarm.py import the pieces below.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import json
import math
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_DATA = os.path.join(REPO, "train", "mnistdata")
TRAIN_SAMPLES = 60000
EVAL_SUBSET_SEED = 1234  # the test subset is the same whatever --seed, for every script
NODE_TIMEOUT = 60.0  # seconds: a node answers at once; a silent one has hung


def read_idx(path: str) -> np.ndarray:
    """Read a gzip-compressed IDX file of unsigned bytes (the MNIST format:
    two zero bytes, type 0x08, the number of dimensions, one big-endian
    uint32 per dimension, then the bytes row-major)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] or data[1] or data[2] != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    body = np.frombuffer(data, np.uint8, offset=4 + 4 * ndim)
    if body.size != math.prod(dims):
        raise ValueError(f"{path}: {body.size} bytes of data for dimensions {dims}")
    return body.reshape(dims)


def load_mnist(folder: str) -> dict[str, torch.Tensor]:
    """The MNIST sets from ``folder``: images as normalised float32
    (N, 1, 28, 28) tensors, labels as int64 tensors."""
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz"))
        x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
        out[f"{split}_x"] = (x - 0.1307) / 0.3081
        out[f"{split}_y"] = torch.from_numpy(labels.astype(np.int64))
    return out


def shard_indices(n: int, rank: int, world: int, seed: int) -> np.ndarray:
    """Shard ``rank`` of ``world``: an iid split of a seeded permutation of
    range(n), the same on every rank for one seed."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} not in [0, {world})")
    return np.array_split(np.random.default_rng(seed).permutation(n), world)[rank]


def eval_subset(data: dict[str, torch.Tensor], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed subset of ``n`` test images and labels (all of them if n >= 10k)."""
    idx = torch.from_numpy(np.random.default_rng(EVAL_SUBSET_SEED).permutation(len(data["test_y"]))[:n])
    return data["test_x"][idx], data["test_y"][idx]


class Net(nn.Module):
    """conv 32 3x3 -> relu -> maxpool -> conv 64 3x3 -> relu -> maxpool -> fc 128 -> relu -> fc 10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(64 * 5 * 5, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def make_model(seed: int) -> Net:
    """The model with weights drawn from ``seed``: every rank starts equal."""
    torch.manual_seed(seed)
    return Net()


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    """One SGD step on a batch; return its loss."""
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 100) -> tuple[float, float]:
    """Accuracy and mean cross-entropy of ``model`` on (x, y)."""
    model.eval()
    correct, loss = 0, 0.0
    for i in range(0, len(y), batch):
        logits = model(x[i:i + batch])
        loss += F.cross_entropy(logits, y[i:i + batch], reduction="sum").item()
        correct += (logits.argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(y), loss / len(y)


class Pacer:
    """Emulated slowness, as meshtrain's Go trainer does it: with slowdown
    F > 1, every step lasts at least F x the base step time, the median of a
    few solo steps timed at the start on a throwaway copy of the model and
    optimizer. On an idle machine that is sleeping (F-1) x each step's
    compute time; when other processes slow the steps down, the sleep
    shrinks instead of growing with them, and a step already held up longer
    (a DDP rank waiting for the others) does not sleep at all."""

    CALIBRATION_STEPS = 8
    WARMUP_STEPS = 2  # the first steps also warm up the allocator: not timed

    def __init__(self, slowdown: float, model: nn.Module, optimizer: torch.optim.Optimizer,
                 x: torch.Tensor, y: torch.Tensor, batch: int, base: float = 0.0):
        self.slowdown = slowdown
        if base > 0 or slowdown <= 1:
            self.base = base if slowdown > 1 else 0.0
        else:
            self.base = self._calibrate(model, optimizer, x, y, batch)
        self.step_time = slowdown * self.base

    def _calibrate(self, model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                   batch: int) -> float:
        """The median solo step time in seconds, on copies of the model and optimizer."""
        twin = copy.deepcopy(model)
        twin_optimizer = type(optimizer)(twin.parameters(), **optimizer.defaults)
        times = []
        for i in range(self.CALIBRATION_STEPS):
            t0 = time.perf_counter()
            train_step(twin, twin_optimizer, x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch])
            times.append(time.perf_counter() - t0)
        return statistics.median(times[self.WARMUP_STEPS:])

    def wait(self, started: float) -> None:
        """Sleep until the step that began at ``started`` (time.perf_counter)
        has lasted slowdown x the base step time."""
        rest = self.step_time - (time.perf_counter() - started)
        if rest > 0:
            time.sleep(rest)


def emit(record: dict) -> None:
    """Print one JSON line to stdout, at once."""
    print(json.dumps(record), flush=True)


def score(t: float, rank: int, accuracy: float, loss: float, samples: int, merges: int) -> dict:
    """The JSON record of one evaluation."""
    return {"t": round(t, 3), "rank": rank, "accuracy": round(accuracy, 4), "loss": round(loss, 4),
            "samples": samples, "merges": merges}


class Snapshots:
    """Every ``every`` seconds, the model's weights saved to ``folder`` as
    ``rank{R}-{K}.pt`` with the time, samples and merges, for score.py to
    score after the run: a benchmark then pays no evaluations while it
    trains. A folder of None saves nothing."""

    def __init__(self, folder: str | None, every: float, rank: int):
        self.folder, self.every, self.rank, self.count = folder, every, rank, 0
        self.next = 0.0
        if folder:
            os.makedirs(folder, exist_ok=True)

    def due(self, t: float) -> bool:
        """Whether a snapshot is due at ``t`` seconds into the run."""
        return bool(self.folder) and t >= self.next

    def maybe(self, t: float, model: nn.Module, samples: int, merges: int) -> None:
        """Save a snapshot if one is due at ``t`` seconds into the run."""
        if not self.due(t):
            return
        path = os.path.join(self.folder, f"rank{self.rank}-{self.count:05d}.pt")
        torch.save({"t": t, "rank": self.rank, "samples": samples, "merges": merges,
                    "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}, path)
        self.count += 1
        self.next = t + self.every


def reported(mesh) -> contextlib.AbstractContextManager:
    """The model the node reports loaded for a block (``Mesh.averaged``),
    what it scores and saves; without a node, the model as it is."""
    return contextlib.nullcontext() if mesh is None else mesh.averaged()


def batches(rng: np.random.Generator, n: int, batch: int):
    """Index batches over the shard, epoch after epoch, each epoch in a new
    order (full batches only)."""
    while True:
        order = torch.from_numpy(rng.permutation(n))
        for i in range(0, n - batch + 1, batch):
            yield order[i:i + batch]


def connect(model: nn.Module, optimizer: torch.optim.Optimizer, args: argparse.Namespace):
    """The meshtrain.Mesh of this trainer (meshtrain from the repository's
    python/ folder when it is not installed)."""
    try:
        import meshtrain
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "python"))
        import meshtrain
    # A node started a moment ago may not have made its socket yet.
    deadline = time.monotonic() + args.wait
    while not os.path.exists(args.socket):
        if time.monotonic() > deadline:
            raise SystemExit(f"no node socket at {args.socket} after {args.wait:g} s: start "
                             "'meshtrain node --trainer external' with that data dir first")
        time.sleep(0.1)
    return meshtrain.Mesh(model, optimizer, run=args.run, train_samples=TRAIN_SAMPLES, batch=args.batch,
                          socket=args.socket, follow_schedule=args.follow_schedule, timeout=NODE_TIMEOUT)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's flags, checked."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="the node's trainer.sock (in its data directory)")
    where.add_argument("--no-mesh", action="store_true", help="train alone, without a node")
    p.add_argument("--rank", type=int, default=0, help="which shard of the training set (default 0)")
    p.add_argument("--world", type=int, default=1, help="how many shards (default 1)")
    p.add_argument("--slowdown", type=float, default=1.0,
                   help="emulate a slower machine: each step lasts F x the solo step time (default 1)")
    p.add_argument("--batch", type=int, default=64, help="samples per step (default 64)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    p.add_argument("--seed", type=int, default=1, help="seed of the weights and shards, shared by all ranks")
    p.add_argument("--duration", type=float, default=60.0,
                   help="stop after this many seconds of training (0: only when the node's run stops)")
    p.add_argument("--eval-every", type=float, default=5.0, help="seconds between evaluations (0: only at the end)")
    p.add_argument("--eval-samples", type=int, default=2000, help="test images scored by each evaluation")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--base-step", type=float, default=0.0,
                   help="the base step time in seconds that --slowdown multiplies (0: time a few solo steps at the "
                        "start; give it to compare runs whose processes would time it on a busy machine)")
    p.add_argument("--snapshot-dir", help="save the weights here every --snapshot-every s, for score.py")
    p.add_argument("--snapshot-every", type=float, default=2.0, help="seconds between snapshots (default 2)")
    p.add_argument("--shard-size", type=int, default=0,
                   help="train on only the first N samples of the shard (0: all of it)")
    p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the node's socket to appear")
    p.add_argument("--data", default=DEFAULT_DATA, help="folder of the MNIST .gz IDX files")
    p.add_argument("--run", default="mnist-cnn-v1", help="run identity registered with the node")
    p.add_argument("--follow-schedule", action="store_true",
                   help="scale the learning rate by the swarm's schedule (lr_factor)")
    args = p.parse_args(argv)
    if args.no_mesh and args.duration <= 0:
        p.error("--no-mesh needs a --duration > 0")
    if args.slowdown < 1:
        p.error("--slowdown must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Train until --duration or the node's stop; print the JSON lines."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    data = load_mnist(args.data)
    shard = torch.from_numpy(shard_indices(TRAIN_SAMPLES, args.rank, args.world, args.seed))
    if args.shard_size > 0:
        shard = shard[:args.shard_size]
    x, y = data["train_x"][shard], data["train_y"][shard]
    test_x, test_y = eval_subset(data, args.eval_samples)
    model = make_model(args.seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    pacer = Pacer(args.slowdown, model, optimizer, x, y, args.batch, args.base_step)
    mesh = None if args.no_mesh else connect(model, optimizer, args)
    print(f"rank {args.rank}: {len(y)} training samples, slowdown {args.slowdown} "
          f"(base step {pacer.base * 1e3:.1f} ms)"
          + ("" if mesh is None else f", node {mesh.peer_id}, resumed {mesh.resumed}"), file=sys.stderr)
    samples = 0
    snaps = Snapshots(args.snapshot_dir, args.snapshot_every, args.rank)
    with mesh if mesh is not None else contextlib.nullcontext():  # close: final push, bye
        start = time.monotonic()
        next_eval = start + args.eval_every
        for idx in batches(np.random.default_rng([args.seed, args.rank]), len(y), args.batch):
            t0 = time.perf_counter()
            loss = train_step(model, optimizer, x[idx], y[idx])
            pacer.wait(t0)
            samples += len(idx)
            if mesh is not None:
                mesh.step(len(idx), loss)
            now = time.monotonic()
            if snaps.due(now - start):
                with reported(mesh):
                    snaps.maybe(now - start, model, samples, mesh.merges if mesh else 0)
            if args.eval_every > 0 and now >= next_eval:
                with reported(mesh):
                    accuracy, test_loss = evaluate(model, test_x, test_y)
                if mesh is not None:
                    mesh.report_eval(accuracy, test_loss)
                emit(score(now - start, args.rank, accuracy, test_loss, samples, mesh.merges if mesh else 0))
                next_eval = time.monotonic() + args.eval_every
            if (args.duration > 0 and now - start >= args.duration) or (mesh is not None and mesh.stopped):
                break
        if mesh is not None:
            mesh.sync()  # the last steps join the node's average (unless the run has stopped)
        with reported(mesh) as averaged:
            accuracy, test_loss = evaluate(model, data["test_x"], data["test_y"])
        if mesh is not None:
            mesh.report_eval(accuracy, test_loss)
        record = score(time.monotonic() - start, args.rank, accuracy, test_loss, samples,
                       mesh.merges if mesh else 0)
        emit({"final": True, **record, "averaged": bool(averaged),
              "stop": (mesh.run.get("stop") if mesh else "") or "duration"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
