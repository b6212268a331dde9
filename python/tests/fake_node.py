"""A fake meshtrain node: serves ``meshtrain-trainer/1`` from a thread.

It stands in for ``meshtrain node --trainer external`` in the tests, and
frames with its own code (``struct``, not ``meshtrain.client``) so that the
client's framing is checked against a second reading of the spec. It keeps
the node's copy of the model and records every request; tests steer it:
``merge`` (a merge the next push returns as its delta), ``preload`` (a model
to resume), ``fail_next`` (an error reply), ``reply_raw`` (a broken frame),
``hang_up`` (close instead of replying), ``set_run`` (lr_factor, stop).

Run as ``python3 -m tests.fake_node PATH`` (from python/) it serves a Unix
socket at PATH until SIGINT or SIGTERM, to try a trainer without a Go node.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
from typing import Any, NamedTuple

import numpy as np

PREFIX = struct.Struct("<4sIQ")
NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
F32 = np.dtype("<f4")


class Request(NamedTuple):
    """One request the node received: its header and payload."""

    header: dict[str, Any]
    payload: np.ndarray


class _Hangup(Exception):
    """End the connection (the client left, or the node drops it)."""


class FakeNode:
    """A trainer API server on a Unix socket (or TCP with a token) in a
    temporary directory, one connection at a time, until ``close``."""

    def __init__(self, *, tcp: bool = False, token: str = "fake-token", path: str | None = None,
                 total: int = 10**12, keep_payloads: bool = True):
        self.token = token
        self.keep_payloads = keep_payloads
        self.tcp = tcp
        self._tmp = None if path else tempfile.mkdtemp(prefix="meshtrain-fake-")
        self.path = path or os.path.join(self._tmp, "trainer.sock")
        if tcp:
            self._listener = socket.create_server(("127.0.0.1", 0))
            self.address = "tcp:127.0.0.1:%d" % self._listener.getsockname()[1]
        else:
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._listener.bind(self.path)
            self._listener.listen()
            self.address = "unix:" + self.path
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self.evals: list[tuple[float, float]] = []
        self.connections = 0
        self.registration: dict[str, Any] | None = None
        self.model: np.ndarray | None = None
        self.optimizer: np.ndarray | None = None
        self.average: np.ndarray | None = None
        # The ops hello lists, as the node does; None: a node older than
        # the list, which lists none and does not know the average op.
        self.listed_ops: list[str] | None = ["hello", "register", "pull", "push", "average", "eval", "bye"]
        self.step = self.samples = self.merges = 0
        self.pending: np.ndarray | None = None
        self.run = {"samples": 0, "total": total, "fraction": 0.0, "lr_factor": 1.0, "stop": ""}
        self._fail: dict[str, tuple[str, str, np.ndarray]] = {}
        self._raw: dict[str, bytes] = {}
        self._hangup: set[str] = set()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="fake-node", daemon=True)
        self._thread.start()

    # Steering, from the test's thread.

    def merge(self, delta: np.ndarray) -> None:
        """Apply a merge: the node's model moves by ``delta`` and the next
        push returns the sum of the merges since the previous one."""
        with self._lock:
            delta = np.asarray(delta, F32)
            self.model = self.model + delta
            self.pending = delta.copy() if self.pending is None else self.pending + delta
            self.merges += 1

    def preload(self, model: np.ndarray, optimizer: np.ndarray | None = None, *, step: int = 0,
                samples: int = 0) -> None:
        """Hold a model of the run (a checkpoint): register answers resume."""
        with self._lock:
            self.model = np.array(model, F32)
            self.optimizer = None if optimizer is None else np.array(optimizer, F32)
            self.step, self.samples = step, samples

    def fail_next(self, op: str, code: str, message: str, payload: np.ndarray | None = None) -> None:
        """Answer the next ``op`` request with this error (and this payload,
        which the spec does not forbid an error reply to carry)."""
        with self._lock:
            self._fail[op] = (code, message, np.zeros(0, F32) if payload is None else payload)

    def reply_raw(self, op: str, data: bytes) -> None:
        """Answer the next ``op`` request with these bytes, then hang up."""
        with self._lock:
            self._raw[op] = data

    def hang_up(self, op: str) -> None:
        """Close the connection instead of answering the next ``op``."""
        with self._lock:
            self._hangup.add(op)

    def set_run(self, **fields: Any) -> None:
        """Change the run dict replies carry (``lr_factor``, ``stop``)."""
        with self._lock:
            self.run.update(fields)

    def ops(self) -> list[str]:
        """The ops received so far, in order."""
        with self._lock:
            return [r.header.get("op") for r in self.requests]

    def close(self) -> None:
        """Stop serving and re-raise anything the server thread raised."""
        self._wake_w.send(b"x")
        self._thread.join()
        for s in (self._listener, self._wake_r, self._wake_w):
            s.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
        if self.error is not None:
            raise self.error

    def __enter__(self) -> FakeNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Serving, on the node's thread.

    def _readable(self, sock: socket.socket) -> bool:
        """Wait until ``sock`` is readable; False if close() was called."""
        ready, _, _ = select.select([sock, self._wake_r], [], [])
        return self._wake_r not in ready

    def _serve(self) -> None:
        """Accept connections one at a time until close()."""
        try:
            while self._readable(self._listener):
                conn, _ = self._listener.accept()
                with self._lock:
                    self.connections += 1
                with conn:
                    self._session(conn)
        except BaseException as e:  # surfaced by close()
            self.error = e

    def _recv(self, conn: socket.socket, n: int) -> bytes:
        """Read exactly ``n`` bytes; _Hangup if the client left or close()
        was called."""
        buf = bytearray()
        while len(buf) < n:
            if not self._readable(conn):
                raise _Hangup
            chunk = conn.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise _Hangup
            buf += chunk
        return bytes(buf)

    def _send(self, conn: socket.socket, header: dict[str, Any], *payload: np.ndarray) -> None:
        """Send one frame."""
        body = json.dumps(header).encode()
        data = b"".join(np.asarray(p, F32).tobytes() for p in payload)
        conn.sendall(PREFIX.pack(b"MTT1", len(body), len(data)) + body + data)

    @staticmethod
    def _err(code: str, message: str) -> dict[str, Any]:
        """An error reply header."""
        return {"ok": False, "error": message, "code": code}

    def _sizes(self) -> tuple[int, int]:
        """Registered element counts of the model and the optimizer state."""
        if self.registration is None:
            return 0, 0
        return tuple(sum(int(np.prod(t["shape"])) for t in self.registration[key])
                     for key in ("tensors", "optimizer"))

    def _session(self, conn: socket.socket) -> None:
        """Serve one connection: read frames, answer them, until it ends."""
        session = {"hello": False, "registered": False}
        try:
            while self._readable(conn):
                magic, hlen, plen = PREFIX.unpack(self._recv(conn, PREFIX.size))
                with self._lock:
                    limit = 4 * sum(self._sizes())
                if magic != b"MTT1" or not 2 <= hlen <= 1 << 20 or plen > limit or plen % 4:
                    self._send(conn, self._err("bad_request", f"malformed frame: magic {magic!r}, "
                                                              f"header {hlen} bytes, payload {plen} bytes"))
                    return
                try:
                    header = json.loads(self._recv(conn, hlen))
                except ValueError:
                    header = None
                payload = np.frombuffer(bytearray(self._recv(conn, plen)), F32)
                if not isinstance(header, dict):
                    self._send(conn, self._err("bad_request", "malformed frame: the header is not a JSON object"))
                    return
                with self._lock:
                    reply = self._handle(session, header, payload)
                if isinstance(reply, bytes):
                    conn.sendall(reply)
                    return
                self._send(conn, *reply)
        except (_Hangup, ConnectionResetError, BrokenPipeError):
            return

    def _handle(self, session: dict[str, bool], h: dict[str, Any], payload: np.ndarray):
        """Answer one request (under the lock): a (header, *payload) tuple,
        or raw bytes to send before hanging up."""
        self.requests.append(Request(h, payload.copy() if self.keep_payloads else payload[:0]))
        op = h.get("op")
        if op in self._raw:
            return self._raw.pop(op)
        if op in self._hangup:
            self._hangup.discard(op)
            raise _Hangup
        if op in self._fail:
            code, message, extra = self._fail.pop(op)
            return self._err(code, message), extra
        if not session["hello"] and op != "hello":
            return (self._err("bad_request", f"the first request must be hello, not {op!r}"),)
        if op in ("pull", "push", "eval", "average") and not session["registered"]:
            return (self._err("not_registered", f"{op} before register"),)
        handler = getattr(self, f"_op_{op}", None) if isinstance(op, str) else None
        if handler is None or (op == "average" and self.listed_ops is None):
            return (self._err("bad_request", f"unknown op {op!r}"),)
        return handler(session, h, payload)

    def _op_hello(self, session, h, payload):
        """Check the version and, over TCP, the token."""
        if session["hello"]:
            return (self._err("bad_request", "hello twice"),)
        if h.get("version") != 1:
            return (self._err("bad_version", f"version {h.get('version')!r}, this node speaks 1"),)
        if self.tcp and h.get("token") != self.token:
            return (self._err("unauthorized", "wrong or missing token"),)
        session["hello"] = True
        reply = {"ok": True, "version": 1, "node": "meshtrain fake"}
        if self.listed_ops is not None:
            reply["ops"] = list(self.listed_ops)
        return (reply,)

    def _op_register(self, session, h, payload):
        """Check the layout; the first registration fixes the node's run."""
        for key in ("tensors", "optimizer"):
            specs = h.get(key)
            if not isinstance(specs, list):
                return (self._err("bad_request", f"{key} is not a list"),)
            for t in specs:
                if (not isinstance(t, dict) or not NAME.fullmatch(str(t.get("name"))) or t.get("dtype") != "F32"
                        or not isinstance(t.get("shape"), list)
                        or not all(isinstance(d, int) and d > 0 for d in t["shape"])):
                    return (self._err("bad_request", f"bad tensor entry {t!r}"),)
        for key in ("train_samples", "batch"):
            if not isinstance(h.get(key), int) or h[key] <= 0:
                return (self._err("bad_request", f"{key} {h.get(key)!r} is not a positive integer"),)
        if h.get("holdout") is not False:
            return (self._err("bad_request", "this fake node wants holdout false"),)
        reg = {k: h.get(k) for k in ("run", "tensors", "optimizer", "train_samples", "batch")}
        if self.registration is not None and reg != self.registration:
            return (self._err("mismatch", "the registration differs from the node's run"),)
        self.registration = reg
        model_size, _ = self._sizes()
        if self.model is not None and self.model.size != model_size:
            return (self._err("mismatch", f"the node's model has {self.model.size} values"),)
        session["registered"] = True
        return ({"ok": True, "fingerprint": "f00d" * 8, "peer_id": "12D3KooWFakeNode",
                 "resume": self.model is not None, "step": self.step, "samples": self.samples, "run": dict(self.run)},)

    def _op_pull(self, session, h, payload):
        """Send the node's model, and the optimizer state last pushed."""
        if self.model is None:
            return (self._err("bad_request", "the node has no model yet"),)
        self.pending = None
        parts = [self.model] if self.optimizer is None else [self.model, self.optimizer]
        return ({"ok": True, "step": self.step, "samples": self.samples, "optimizer": self.optimizer is not None,
                 "run": dict(self.run)}, *parts)

    def _op_average(self, session, h, payload):
        """Send ``average`` when a test set one, else the node's model."""
        if self.model is None:
            return (self._err("bad_request", "the node has no model yet"),)
        averaged = self.average is not None
        return ({"ok": True, "step": self.step, "samples": self.samples, "averaged": averaged, "updates": 0},
                self.average if averaged else self.model)

    def _op_push(self, session, h, payload):
        """Take the trainer's model; answer with the pending merges' delta."""
        model_size, opt_size = self._sizes()
        want = model_size + (opt_size if h.get("optimizer") else 0)
        if payload.size != want:
            return (self._err("bad_shape", f"payload of {payload.size} values, want {want}"),)
        if not np.isfinite(payload).all():
            return (self._err("non_finite", "the payload holds NaN or Inf"),)
        if not all(isinstance(h.get(k), int) and h[k] >= 0 for k in ("samples", "steps")):
            return (self._err("bad_request", "samples and steps must be integers >= 0"),)
        delta = None if self.run["stop"] else self.pending
        model = payload[:model_size]
        self.model = model if delta is None else model + delta
        if h.get("optimizer"):
            self.optimizer = payload[model_size:].copy()
        self.pending = None
        self.step += h["steps"]
        self.samples += h["samples"]
        self.run["samples"] += h["samples"]
        self.run["fraction"] = self.run["samples"] / self.run["total"]
        if self.run["samples"] >= self.run["total"] and not self.run["stop"]:
            self.run["stop"] = "run_complete"
        reply = {"ok": True, "delta": delta is not None, "merges": self.merges, "run": dict(self.run)}
        return (reply,) if delta is None else (reply, delta)

    def _op_eval(self, session, h, payload):
        """Record the trainer's score."""
        self.evals.append((h.get("accuracy"), h.get("loss")))
        return ({"ok": True},)

    def _op_bye(self, session, h, payload):
        """End the registration; the node keeps its model."""
        session["registered"] = False
        return ({"ok": True},)


def main(argv: list[str]) -> int:
    """Serve a Unix socket at argv[0] until SIGINT or SIGTERM."""
    if len(argv) != 1:
        print("usage: python3 -m tests.fake_node SOCKET_PATH", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    node = FakeNode(path=argv[0], keep_payloads=False)
    print(f"fake node serving {node.path}", file=sys.stderr)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        node.close()
        os.unlink(argv[0])
    print(f"{len(node.requests)} requests, the last {node.ops()[-3:]}; {node.samples} samples, "
          f"{len(node.evals)} evals", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
