#!/usr/bin/env python3
"""One command for the gossip example: a meshtrain node and a train.py per rank.

    python3 swarm.py --bin ../../bin/meshtrain --slowdowns 2,2,4,8 --duration 60
    python3 swarm.py --no-mesh --slowdowns 2,2,4,8 --duration 60   # the same trainers, no merging

For each slowdown s_i, starts ``meshtrain node --trainer external`` with its
own data directory under --workdir (the first node is every other node's
bootstrap peer), waits for the node's trainer.sock, then starts
``train.py --socket DIR_i/trainer.sock --rank i --world n --slowdown s_i``.
The trainers' JSON lines are relayed to stdout as they come; at the end one
more line summarises the time each rank's eval subset first reached
--target: ``{"summary": true, "target": 0.97, "time_to_target": {"0": 8.1,
...}, "first": 8.1, "all": 12.4, ...}`` ("all": when the last rank got
there; null if one never did). Then the nodes get SIGINT (SIGKILL after
10 s). Arguments after ``--`` go to every train.py. Node logs and trainer
stderr are written to the workdir. The exit status is non-zero if a node
or trainer failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "train.py")
DEFAULT_BIN = os.path.normpath(os.path.join(HERE, "..", "..", "bin", "meshtrain"))
STOP_GRACE = 10.0


def node_command(binary: str, data_dir: str, port: int, api_port: int, epochs: float,
                 bootstrap: str | None) -> list[str]:
    """The command line of one node: the one place that knows the node's
    flags (they may still change)."""
    cmd = [binary, "node", "--trainer", "external", "--data-dir", data_dir, "--profile", "local",
           "--listen", f"/ip4/127.0.0.1/tcp/{port}", "--api", f"127.0.0.1:{api_port}", "--epochs", f"{epochs:g}"]
    if bootstrap:
        cmd += ["--bootstrap", bootstrap]
    return cmd


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 right now (bound to port 0
    together, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path: str, lines: int = 20) -> str:
    """The last lines of a log file, to show why a process failed."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


class Swarm:
    """The nodes and trainers of one run, and what their output says."""

    def __init__(self, args: argparse.Namespace, train_args: list[str]):
        self.args = args
        self.train_args = train_args
        self.n = len(args.slowdowns)
        self.workdir = args.workdir or tempfile.mkdtemp(prefix="meshtrain-swarm-")
        os.makedirs(self.workdir, exist_ok=True)
        self.nodes: list[subprocess.Popen] = []
        self.trainers: list[subprocess.Popen] = []
        self.reached: dict[int, float] = {}
        self.failed: list[str] = []
        self._lock = threading.Lock()

    def path(self, name: str) -> str:
        """A file or folder in the workdir."""
        return os.path.join(self.workdir, name)

    def start_nodes(self) -> list[str]:
        """Start one node per rank; return their trainer sockets once all exist."""
        ports = free_ports(2 * self.n)
        dirs = [self.path(f"node{i}") for i in range(self.n)]
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        ident = subprocess.run([self.args.bin, "id", "--data-dir", dirs[0]], capture_output=True, text=True)
        if ident.returncode != 0 or not ident.stdout.split():
            raise RuntimeError(f"{self.args.bin} id failed ({ident.returncode}): {ident.stderr.strip()}")
        peer0 = ident.stdout.split()[-1]
        for i, d in enumerate(dirs):
            bootstrap = f"/ip4/127.0.0.1/tcp/{ports[0]}/p2p/{peer0}" if i else None
            cmd = node_command(self.args.bin, d, ports[2 * i], ports[2 * i + 1], self.args.epochs, bootstrap)
            with open(self.path(f"node{i}.log"), "wb") as log:
                self.nodes.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                                   stderr=subprocess.STDOUT))
        sockets = [os.path.join(d, "trainer.sock") for d in dirs]
        deadline = time.monotonic() + self.args.start_timeout
        for i, (node, sock) in enumerate(zip(self.nodes, sockets)):
            while not os.path.exists(sock):
                if node.poll() is not None:
                    raise RuntimeError(f"node {i} exited with {node.returncode} before serving {sock}:\n"
                                       + tail(self.path(f"node{i}.log")))
                if time.monotonic() > deadline:
                    raise RuntimeError(f"node {i} has not made {sock} after {self.args.start_timeout} s")
                time.sleep(0.1)
        return sockets

    def start_trainers(self, sockets: list[str] | None) -> list[threading.Thread]:
        """Start one train.py per rank and a thread relaying each one's stdout."""
        common = ["--world", str(self.n), "--duration", str(self.args.duration),
                  "--eval-every", str(self.args.eval_every), *self.train_args]
        relays = []
        for i, slowdown in enumerate(self.args.slowdowns):
            where = ["--no-mesh"] if sockets is None else ["--socket", sockets[i]]
            cmd = [sys.executable, TRAIN, *where, "--rank", str(i), "--slowdown", str(slowdown), *common]
            with open(self.path(f"trainer{i}.log"), "wb") as log:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                        text=True, bufsize=1)
            self.trainers.append(proc)
            relay = threading.Thread(target=self.relay, args=(proc,), daemon=True)
            relay.start()
            relays.append(relay)
        return relays

    def relay(self, proc: subprocess.Popen) -> None:
        """Copy a trainer's JSON lines to stdout, noting when it reached the target."""
        for line in proc.stdout:
            with self._lock:
                sys.stdout.write(line)
                sys.stdout.flush()
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if (isinstance(record, dict) and not record.get("final") and "accuracy" in record
                        and record["accuracy"] >= self.args.target):
                    self.reached.setdefault(record["rank"], record["t"])

    def wait_trainers(self, relays: list[threading.Thread]) -> None:
        """Wait for every trainer; note those that failed, with their log."""
        for i, proc in enumerate(self.trainers):
            if proc.wait() != 0:
                self.failed.append(f"trainer {i}")
                print(f"swarm: trainer {i} exited with {proc.returncode}:\n{tail(self.path(f'trainer{i}.log'))}",
                      file=sys.stderr)
        for relay in relays:
            relay.join()

    def stop(self) -> None:
        """Stop whatever still runs: trainers get SIGTERM, nodes SIGINT and,
        after STOP_GRACE s, SIGKILL. A node that exits non-zero (now or
        earlier) or has to be killed counts as failed."""
        for proc in self.trainers:
            if proc.poll() is None:
                proc.terminate()
        for node in self.nodes:
            if node.poll() is None:
                node.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE
        for i, node in enumerate(self.nodes):
            try:
                rc = node.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.kill()
                node.wait()
                self.failed.append(f"node {i} (did not stop in {STOP_GRACE:g} s)")
                continue
            if rc != 0:
                self.failed.append(f"node {i} (exited with {rc})")
                print(f"swarm: node {i} exited with {rc}:\n{tail(self.path(f'node{i}.log'))}", file=sys.stderr)
        for proc in self.trainers:
            proc.wait()

    def summary(self) -> dict:
        """The closing JSON record: time to target per rank and overall."""
        times = [self.reached.get(i) for i in range(self.n)]
        done = [t for t in times if t is not None]
        return {"summary": True, "mesh": not self.args.no_mesh, "target": self.args.target,
                "slowdowns": self.args.slowdowns, "time_to_target": {str(i): t for i, t in enumerate(times)},
                "first": min(done) if done else None, "all": max(done) if len(done) == self.n else None,
                "failed": self.failed, "workdir": self.workdir}


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The swarm's arguments, and those after ``--`` for train.py."""
    train_args = []
    if "--" in argv:
        at = argv.index("--")
        argv, train_args = argv[:at], argv[at + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Arguments after -- go to every train.py, e.g. -- --lr 0.02 --threads 2.")
    p.add_argument("--bin", default=DEFAULT_BIN, help="the meshtrain binary (default: the repository's bin/)")
    p.add_argument("--slowdowns", default="2,2,4,8", help="one slowdown per trainer (default 2,2,4,8)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds each trainer trains (default 60)")
    p.add_argument("--eval-every", type=float, default=2.0, help="seconds between evaluations (default 2)")
    p.add_argument("--target", type=float, default=0.97, help="accuracy on the eval subset to time (default 0.97)")
    p.add_argument("--epochs", type=float, default=10.0,
                   help="the nodes' run length in epochs over every node's samples (default 10)")
    p.add_argument("--workdir", help="folder for the node data directories and logs (default: a new temp dir)")
    p.add_argument("--no-mesh", action="store_true", help="run the trainers alone, without nodes")
    p.add_argument("--start-timeout", type=float, default=60.0, help="seconds to wait for the nodes' sockets")
    args = p.parse_args(argv)
    args.slowdowns = [float(s) for s in args.slowdowns.split(",")]
    if min(args.slowdowns) < 1:
        p.error("slowdowns must be >= 1")
    return args, train_args


def main(argv: list[str] | None = None) -> int:
    """Run the swarm; exit status 1 if a node or trainer failed."""
    args, train_args = parse_args(sys.argv[1:] if argv is None else argv)
    swarm = Swarm(args, train_args)
    print(f"swarm: workdir {swarm.workdir}", file=sys.stderr)
    try:
        sockets = None if args.no_mesh else swarm.start_nodes()
        swarm.wait_trainers(swarm.start_trainers(sockets))
    except (RuntimeError, OSError) as e:
        swarm.failed.append(f"start: {e}")
        print(f"swarm: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        swarm.failed.append("interrupted")
    finally:
        swarm.stop()
    print(json.dumps(swarm.summary()), flush=True)
    return 1 if swarm.failed else 0


if __name__ == "__main__":
    sys.exit(main())
