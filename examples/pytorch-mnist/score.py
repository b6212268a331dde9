#!/usr/bin/env python3
"""Score the snapshots of a run (train.py or ddp.py --snapshot-dir) after it.

    python3 score.py DIR --target 0.97

Every snapshot in DIR is scored on the eval subset (the first
--eval-samples test images, as train.py's evaluations); the result is one
JSON line: the time each rank first reached --target, the first and the
last of those ("all": null if a rank never did), and each rank's last
accuracy. Scoring after the run keeps evaluation out of the timed run.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import torch

import train as common


def main(argv: list[str] | None = None) -> int:
    """Score DIR's snapshots; print the summary line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", help="the --snapshot-dir of the run")
    p.add_argument("--target", type=float, default=0.97, help="accuracy to time (default 0.97)")
    p.add_argument("--eval-samples", type=int, default=2000, help="test images scored (default 2000)")
    p.add_argument("--data", default=common.DEFAULT_DATA, help="folder of the MNIST .gz IDX files")
    args = p.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(args.dir, "rank*-*.pt")))
    if not paths:
        print(f"score: no snapshots in {args.dir}", file=sys.stderr)
        return 1
    data = common.load_mnist(args.data)
    x, y = common.eval_subset(data, args.eval_samples)
    model = common.make_model(0)
    reached: dict[int, float | None] = {}
    last: dict[int, tuple[float, float]] = {}
    for path in paths:
        snap = torch.load(path)
        model.load_state_dict(snap["state"])
        accuracy, _ = common.evaluate(model, x, y)
        rank, t = snap["rank"], snap["t"]
        reached.setdefault(rank, None)
        if reached[rank] is None and accuracy >= args.target:
            reached[rank] = round(t, 3)
        if rank not in last or t >= last[rank][0]:
            last[rank] = (t, accuracy)
    times = [v for v in reached.values() if v is not None]
    print(json.dumps({"summary": True, "target": args.target, "snapshots": len(paths),
                      "time_to_target": {str(k): v for k, v in sorted(reached.items())},
                      "first": min(times) if times else None,
                      "all": max(times) if len(times) == len(reached) else None,
                      "last_accuracy": {str(k): round(a, 4) for k, (_, a) in sorted(last.items())}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
