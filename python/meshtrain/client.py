"""Client of meshtrain's local trainer API, ``meshtrain-trainer/1``.

A trainer process talks to its node over a Unix socket (``trainer.sock`` in
the node's data directory) or, with a token, over TCP. Both directions use
one frame, little-endian::

    4 bytes  magic b"MTT1"
    4 bytes  uint32 header length H, 2 <= H <= 1 MiB
    8 bytes  uint64 payload length P, in bytes
    H bytes  JSON object: the header
    P bytes  float32 values, tensors end to end in registered order

The specification is the section "Local trainer API" of docs/protocol.md.
This module knows nothing of PyTorch: payloads are numpy float32 arrays (or
any C-contiguous buffer of little-endian float32 values).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

MAGIC = b"MTT1"
VERSION = 1
MAX_HEADER = 1 << 20
NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
WIRE_DTYPE = np.dtype("<f4")

_PREFIX = struct.Struct("<4sIQ")


class MeshtrainError(Exception):
    """An error reply from the node.

    ``code`` is the node's machine-readable code (``bad_request``,
    ``mismatch``, ``busy``, ...); ``str(error)`` and ``message`` are the
    node's sentence naming what was wrong.
    """

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class UnsupportedOpError(MeshtrainError):
    """The node does not serve an op: its hello reply did not list it (a
    node older than the op). Raised by the client, without a request;
    ``code`` is ``unsupported_op``."""

    def __init__(self, op: str, node: str):
        super().__init__("unsupported_op", f"the node ({node or 'unnamed'}) does not serve the {op} op: "
                                           "it is older than this client; upgrade the node")
        self.op = op


class ProtocolError(Exception):
    """A frame from the node breaks the protocol (magic, lengths, header).

    The stream can no longer be trusted: the client closes the connection.
    """


class ConnectionClosedError(ConnectionError):
    """The connection to the node is closed: the node closed it, or this
    client did after a protocol error or ``close()``."""


class TensorSpec(NamedTuple):
    """One registered tensor: its name and shape (dtype is always F32)."""

    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        """The number of float32 values the tensor holds."""
        return math.prod(self.shape)

    def to_json(self) -> dict[str, Any]:
        """The tensor's entry in a register request."""
        return {"name": self.name, "dtype": "F32", "shape": list(self.shape)}


def parse_address(address: str) -> tuple[int, Any]:
    """Split ``"tcp:HOST:PORT"`` or ``"unix:PATH"`` into a socket family and
    the address ``socket.connect`` takes; raise ValueError otherwise."""
    scheme, sep, rest = address.partition(":")
    if sep and scheme == "unix" and rest:
        return socket.AF_UNIX, rest
    if sep and scheme == "tcp":
        host, sep, port = rest.rpartition(":")
        if sep and host and port.isdigit() and 0 < int(port) < 65536:
            host = host.removeprefix("[").removesuffix("]")
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            return family, (host, int(port))
    raise ValueError(f"address {address!r} is not tcp:HOST:PORT or unix:PATH")


def encode_header(header: dict[str, Any]) -> bytes:
    """The frame prefix's JSON body for ``header``, checked against the
    header length bounds."""
    body = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    if len(body) > MAX_HEADER:
        raise ValueError(f"header of {len(body)} bytes exceeds {MAX_HEADER}")
    return body


def _wire_view(array: Any) -> memoryview:
    """A byte view of ``array`` as little-endian float32, without a copy
    when it already is one (numpy arrays, contiguous)."""
    return memoryview(np.ascontiguousarray(array, dtype=WIRE_DTYPE)).cast("B")


def send_frame(sock: socket.socket, header: dict[str, Any], payload: Iterable[Any] = ()) -> None:
    """Send one frame: ``header`` then the arrays of ``payload`` end to end.

    Each array is sent straight from its own memory (``sendall`` on a
    memoryview); only the 16-byte prefix and the JSON header are copied.
    """
    body = encode_header(header)
    views = [_wire_view(a) for a in payload]
    size = sum(v.nbytes for v in views)
    sock.sendall(_PREFIX.pack(MAGIC, len(body), size) + body)
    for view in views:
        if view.nbytes:
            sock.sendall(view)


def _recv_exact_into(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` from ``sock``; ConnectionClosedError if the stream ends."""
    got, want = 0, view.nbytes
    while got < want:
        n = sock.recv_into(view[got:], want - got)
        if n == 0:
            raise ConnectionClosedError(f"the node closed the connection ({got} of {want} bytes read)")
        got += n


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    """Read exactly ``n`` bytes."""
    buf = bytearray(n)
    _recv_exact_into(sock, memoryview(buf))
    return bytes(buf)


def recv_header(sock: socket.socket, max_payload: int) -> tuple[dict[str, Any], int]:
    """Read a frame's prefix and JSON header; return the header and the
    payload length in bytes, which the caller must then read.

    Raises ProtocolError on a bad magic, a header length outside [2, 1 MiB],
    a payload length that is not whole float32 values or exceeds
    ``max_payload`` bytes, or a header that is not a JSON object.
    """
    magic, hlen, plen = _PREFIX.unpack(_recv_exact(sock, _PREFIX.size))
    if magic != MAGIC:
        raise ProtocolError(f"bad frame magic {magic!r}, want {MAGIC!r}")
    if not 2 <= hlen <= MAX_HEADER:
        raise ProtocolError(f"frame header length {hlen} is not in [2, {MAX_HEADER}]")
    if plen % WIRE_DTYPE.itemsize:
        raise ProtocolError(f"frame payload length {plen} is not a whole number of float32 values")
    if plen > max_payload:
        raise ProtocolError(f"frame payload of {plen} bytes exceeds the {max_payload} expected")
    raw = _recv_exact(sock, hlen)
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise ProtocolError(f"frame header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"frame header is a JSON {type(header).__name__}, not an object")
    return header, plen


def recv_payload(sock: socket.socket, plen: int, buffers: Sequence[np.ndarray]) -> None:
    """Read a payload of ``plen`` bytes straight into ``buffers`` (C-contiguous
    float32 arrays, filled in order), which must hold exactly ``plen`` bytes;
    ProtocolError otherwise."""
    want = sum(b.nbytes for b in buffers)
    if plen != want:
        raise ProtocolError(f"frame payload of {plen} bytes, want {want}")
    for buf in buffers:
        if buf.dtype != WIRE_DTYPE or not buf.flags.c_contiguous:
            raise ValueError("payload buffers must be C-contiguous little-endian float32 arrays")
        if buf.nbytes:
            _recv_exact_into(sock, memoryview(buf).cast("B"))


def _discard(sock: socket.socket, n: int) -> None:
    """Read and drop ``n`` bytes."""
    chunk = memoryview(bytearray(min(n, 1 << 16)))
    while n:
        step = min(n, chunk.nbytes)
        _recv_exact_into(sock, chunk[:step])
        n -= step


class Client:
    """One connection to a node's trainer API.

    Give ``socket_path`` (the node's ``trainer.sock``) or ``address``
    (``"tcp:HOST:PORT"``, which needs ``token``, the contents of the node's
    ``trainer.token``; or ``"unix:PATH"``). ``timeout`` bounds every socket
    operation in seconds (None: block). Requests go in the protocol's order:
    ``hello``, ``register``, then ``pull``/``push``/``eval`` as needed, and
    ``bye``. An error reply raises MeshtrainError and leaves the connection
    usable unless the node closes it. ``model_size`` and ``optimizer_size``
    are the registered element counts.
    """

    def __init__(self, socket_path: str | None = None, *, address: str | None = None,
                 token: str | None = None, timeout: float | None = None):
        if (socket_path is None) == (address is None):
            raise ValueError("give exactly one of socket_path and address")
        family, target = (socket.AF_UNIX, socket_path) if address is None else parse_address(address)
        if family != socket.AF_UNIX and not token:
            raise ValueError("a TCP address needs the node's token (its data directory's trainer.token)")
        self.token = token
        self.node = ""
        self.ops: frozenset[str] | None = None  # None until hello
        self.model_size = 0
        self.optimizer_size = 0
        self._sock: socket.socket | None = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            if family != socket.AF_UNIX:
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock.connect(target)
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        """Whether the connection is closed."""
        return self._sock is None

    def close(self) -> None:
        """Close the connection (without ``bye``); idempotent."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _max_payload(self) -> int:
        """The largest payload any reply may carry: the model and optimizer."""
        return (self.model_size + self.optimizer_size) * WIRE_DTYPE.itemsize

    @contextlib.contextmanager
    def _exchange(self) -> Iterator[socket.socket]:
        """Yield the socket for one request's I/O. Any failure in the middle
        of a frame (a broken frame, a closed or reset connection, a timeout,
        an interrupt) leaves the stream out of step: close the connection.
        A reset connection is reported as ConnectionClosedError."""
        if self._sock is None:
            raise ConnectionClosedError("the connection to the node is closed")
        try:
            yield self._sock
        except (BrokenPipeError, ConnectionResetError) as e:
            self.close()
            raise ConnectionClosedError(f"the node closed the connection: {e}") from e
        except BaseException:
            self.close()
            raise

    def _request(self, header: dict[str, Any], payload: Iterable[Any] = ()) -> tuple[dict[str, Any], int]:
        """Send a request; return the ok reply's header and payload length,
        which the caller reads with ``_reply_payload``.

        An error reply raises MeshtrainError (its payload, if any, is read
        and dropped) and leaves the connection open.
        """
        with self._exchange() as sock:
            send_frame(sock, header, payload)
            reply, plen = recv_header(sock, self._max_payload())
            ok = reply.get("ok")
            if ok is True:
                return reply, plen
            if ok is not False:
                raise ProtocolError(f"reply header has no boolean \"ok\": {reply!r}")
            _discard(sock, plen)
        raise MeshtrainError(str(reply.get("code", "unknown")), str(reply.get("error", "the node refused the request")))

    def _reply_payload(self, plen: int, buffers: Sequence[np.ndarray]) -> None:
        """Read the payload of the reply ``_request`` returned into ``buffers``."""
        with self._exchange() as sock:
            recv_payload(sock, plen, buffers)

    def _no_payload(self, reply: dict[str, Any], plen: int) -> dict[str, Any]:
        """Check that a reply that carries no payload has none."""
        self._reply_payload(plen, ())
        return reply

    def hello(self) -> dict[str, Any]:
        """Open the session (protocol version 1, with the token if one was
        given); return the reply: ``version``, ``node`` and ``ops``, the ops
        the node serves (kept in ``self.ops``, None before hello; a node
        older than that list sends none, and serves the ops of version 1
        only)."""
        header: dict[str, Any] = {"op": "hello", "version": VERSION}
        if self.token:
            header["token"] = self.token
        reply = self._no_payload(*self._request(header))
        ops = reply.get("ops")
        self.ops = frozenset(o for o in ops if isinstance(o, str)) if isinstance(ops, list) else frozenset()
        self.node = str(reply.get("node", ""))
        return reply

    def supports(self, op: str) -> bool:
        """Whether the node listed ``op`` in its hello reply (False before
        ``hello``)."""
        return self.ops is not None and op in self.ops

    def register(self, run: str, tensors: Sequence[TensorSpec], optimizer: Sequence[TensorSpec] = (), *,
                 train_samples: int, batch: int, holdout: bool = False) -> dict[str, Any]:
        """Register the model layout and the optimizer state's; return the
        reply: ``fingerprint``, ``resume``, ``step``, ``samples``, ``run``.

        Names must match ``[A-Za-z0-9_.-]{1,128}`` (ValueError otherwise,
        before anything is sent). Later payloads follow this layout.
        """
        tensors = [TensorSpec(t.name, tuple(t.shape)) for t in tensors]
        optimizer = [TensorSpec(t.name, tuple(t.shape)) for t in optimizer]
        for spec in (*tensors, *optimizer):
            if not NAME_RE.fullmatch(spec.name):
                raise ValueError(f"tensor name {spec.name!r} does not match {NAME_RE.pattern}")
        reply = self._no_payload(*self._request({
            "op": "register", "run": run,
            "tensors": [t.to_json() for t in tensors],
            "optimizer": [t.to_json() for t in optimizer],
            "train_samples": int(train_samples), "batch": int(batch), "holdout": bool(holdout),
        }))
        self.model_size = sum(t.numel for t in tensors)
        self.optimizer_size = sum(t.numel for t in optimizer)
        return reply

    def pull(self) -> tuple[dict[str, Any], np.ndarray, np.ndarray | None]:
        """Fetch the node's model; return the reply header (``step``,
        ``samples``, ``optimizer``, ``run``), the flat model and, when the
        reply says ``optimizer``, the flat optimizer state (else None)."""
        reply, plen = self._request({"op": "pull"})
        model = np.empty(self.model_size, WIRE_DTYPE)
        opt = np.empty(self.optimizer_size, WIRE_DTYPE) if reply.get("optimizer") else None
        self._reply_payload(plen, [model] if opt is None else [model, opt])
        return reply, model, opt

    def average(self) -> tuple[dict[str, Any], np.ndarray]:
        """Fetch the model the node reports: the moving average of the
        models pushed and of the peers' models it merged (the node's
        ``--ema``, ``--ema-peers``), or its model when it keeps no average.
        Return the reply header (``step``, ``samples``, ``averaged``,
        ``updates``) and the flat model. Nothing on the node changes.
        Against a node that did not list the op in its hello reply (an
        older one), raise UnsupportedOpError without sending a request."""
        if self.ops is not None and "average" not in self.ops:
            raise UnsupportedOpError("average", self.node)
        reply, plen = self._request({"op": "average"})
        model = np.empty(self.model_size, WIRE_DTYPE)
        self._reply_payload(plen, [model])
        return reply, model

    def push(self, model: Any, optimizer: Any = None, *, samples: int, steps: int, loss: float | None = None,
             lr: float | None = None, out: np.ndarray | None = None) -> tuple[dict[str, Any], np.ndarray | None]:
        """Send the model as the trainer has it now (flat float32, the
        registered layout) and, unless None, the flat optimizer state.

        ``samples`` and ``steps`` are those done since the last push;
        ``loss`` and ``lr`` are sent when given and finite. Return the reply
        header (``delta``, ``merges``, ``run``) and, when ``delta``, the
        delta to add to the model, read into ``out`` when given (a float32
        array of the model's size) or a new array.
        """
        header: dict[str, Any] = {"op": "push", "samples": int(samples), "steps": int(steps),
                                  "optimizer": optimizer is not None}
        for key, value in (("loss", loss), ("lr", lr)):
            if value is not None and math.isfinite(value):
                header[key] = float(value)
        if out is not None and (out.dtype != WIRE_DTYPE or out.size != self.model_size or not out.flags.c_contiguous):
            raise ValueError(f"out must be a C-contiguous float32 array of {self.model_size} values")
        payload = [model] if optimizer is None else [model, optimizer]
        reply, plen = self._request(header, payload)
        if not reply.get("delta"):
            return self._no_payload(reply, plen), None
        delta = np.empty(self.model_size, WIRE_DTYPE) if out is None else out
        self._reply_payload(plen, [delta])
        return reply, delta

    def eval(self, accuracy: float, loss: float) -> dict[str, Any]:
        """Report the trainer's own test score of its current model."""
        return self._no_payload(*self._request({"op": "eval", "accuracy": float(accuracy), "loss": float(loss)}))

    def bye(self) -> dict[str, Any]:
        """Leave: the node keeps its model and waits for the next trainer."""
        return self._no_payload(*self._request({"op": "bye"}))
