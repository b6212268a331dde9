"""PyTorch integration: join a training loop to a meshtrain node.

``Mesh`` registers a model's trainable parameters and its optimizer's state
with the node, pushes the model as it trains and adds the merged delta the
node sends back, so the local steps taken in the meantime are kept::

    mesh = meshtrain.Mesh(model, optimizer, run="mnist-cnn-v1",
                          train_samples=60000, batch=64, socket="node0/trainer.sock")
    for x, y in loader:
        ...; loss.backward(); optimizer.step()
        mesh.step(len(x), loss.item())
        if mesh.stopped:
            break
    mesh.close()
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch

from .client import NAME_RE, WIRE_DTYPE, Client, TensorSpec


class _Entry(NamedTuple):
    """One flattened optimizer-state value: wire name, parameter index,
    state key and wire shape."""

    name: str
    index: int
    key: Any
    shape: tuple[int, ...]


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create a lazily-built optimizer state without changing the parameters.

    PyTorch optimizers make their state (momentum buffers, moment estimates)
    on the first ``step``. As hivemind does, take one step with zero
    gradients (on the parameters that require one) and every group's
    learning rate and weight decay set to 0, then restore the rates, decays
    and the gradients the parameters had (normally None).
    """
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    grads = [p.grad for p in params]
    saved = [{k: group[k] for k in ("lr", "weight_decay") if k in group} for group in optimizer.param_groups]
    try:
        for p in params:
            p.grad = torch.zeros_like(p)
        for group, keys in zip(optimizer.param_groups, saved):
            group.update(dict.fromkeys(keys, 0.0))
        optimizer.step()
    finally:
        for group, keys in zip(optimizer.param_groups, saved):
            group.update(keys)
        for p, grad in zip(params, grads):
            p.grad = grad


class OptimizerState:
    """The optimizer's state as named float32 tensors, opaque to the node.

    Entries go by parameter index (the optimizer's own order, as in its
    ``state_dict``), then by state key in sorted order: a tensor becomes
    ``opt.<index>.<key>`` with its shape (a 0-d tensor: shape [1]), a
    number (int or float) a shape-[1] tensor; anything else (None, bools,
    strings) is left out. The layout is fixed at construction, once the
    state exists.
    """

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self._params = [p for group in optimizer.param_groups for p in group["params"]]
        self.entries = self._layout()
        self.specs = [TensorSpec(e.name, e.shape) for e in self.entries]
        self.size = sum(spec.numel for spec in self.specs)

    def _layout(self) -> list[_Entry]:
        """The entries the state has now."""
        entries = []
        for index, p in enumerate(self._params):
            state = self.optimizer.state.get(p, {})
            for key in sorted(state, key=str):
                value = state[key]
                if isinstance(value, torch.Tensor):
                    shape = tuple(value.shape) or (1,)
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    shape = (1,)
                else:
                    continue
                name = f"opt.{index}.{key}"
                if not NAME_RE.fullmatch(name):
                    raise ValueError(f"optimizer state key {key!r} makes the tensor name {name!r}, "
                                     f"which does not match {NAME_RE.pattern}")
                entries.append(_Entry(name, index, key, shape))
        return entries

    def _check_layout(self) -> None:
        """Raise RuntimeError if the state no longer has the registered layout."""
        if self._layout() != self.entries:
            raise RuntimeError("the optimizer state changed its layout since it was registered")

    def flatten(self, out: np.ndarray | None = None) -> np.ndarray:
        """The state as one float32 vector, written into ``out`` when given."""
        self._check_layout()
        flat = np.empty(self.size, WIRE_DTYPE) if out is None else out
        offset = 0
        for e in self.entries:
            value = self.optimizer.state[self._params[e.index]][e.key]
            n = math.prod(e.shape)
            if isinstance(value, torch.Tensor):
                flat[offset:offset + n] = value.detach().reshape(-1).to("cpu", torch.float32).numpy()
            else:
                flat[offset] = value
            offset += n
        return flat

    def unflatten(self, flat: np.ndarray) -> None:
        """Write a vector made by ``flatten`` back into the optimizer's state,
        keeping each value's dtype, device and Python type."""
        self._check_layout()
        if flat.size != self.size:
            raise ValueError(f"optimizer state of {flat.size} values, want {self.size}")
        offset = 0
        with torch.no_grad():
            for e in self.entries:
                state = self.optimizer.state[self._params[e.index]]
                value = state[e.key]
                n = math.prod(e.shape)
                chunk = flat[offset:offset + n]
                if isinstance(value, torch.Tensor):
                    value.copy_(torch.from_numpy(chunk).view(value.shape))
                elif isinstance(value, int):
                    state[e.key] = round(float(chunk[0]))
                else:
                    state[e.key] = type(value)(chunk[0])
                offset += n


class Mesh:
    """A PyTorch model and optimizer trained in a meshtrain swarm.

    The constructor connects to the node (``socket``: the node's
    ``trainer.sock``; or ``address``: ``"tcp:HOST:PORT"`` with ``token``),
    says hello and registers ``run`` (the identity peers must share), the
    trainable parameters in ``model.named_parameters()`` order (float32
    only: TypeError before contacting the node otherwise) and the
    optimizer's state (created first if the optimizer has none yet, see
    ``init_optimizer_state``). If the node holds a model of this run it is
    pulled and loaded (``resumed``); otherwise the initial model is pushed.

    Call ``step`` after every ``optimizer.step()``. Pushes follow a timer:
    at most one every ``push_every`` seconds, with the optimizer state
    every ``optimizer_every`` seconds and on ``close``. ``follow_schedule``
    sets each parameter group's learning rate to its initial one times the
    swarm's ``lr_factor`` whenever the node sends the run (register, pull
    and every push). ``averaged()`` loads the model the node reports (its
    moving average) into the model for a block, to score it. ``clock`` is
    the time source in seconds (tests inject one); ``timeout`` bounds every
    socket operation.

    Attributes: ``resumed``; ``samples`` and ``step_count``, the node's
    counters at registration plus the samples and steps taken since;
    ``merges``, the node's merge count at the last push; ``run``, the last
    run dict; ``lr_factor``; ``peer_id`` and ``fingerprint``; ``client``
    (the Client); ``optimizer_state`` (the OptimizerState registered).
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, run: str,
                 train_samples: int, batch: int, socket: str | None = None, address: str | None = None,
                 token: str | None = None, push_every: float = 0.1, optimizer_every: float = 10.0,
                 follow_schedule: bool = False, timeout: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("the model has no trainable parameters")
        for name, p in named:
            if p.dtype != torch.float32:
                raise TypeError(f"parameter {name!r} is {p.dtype}: meshtrain exchanges float32 only "
                                "(convert the model with model.float())")
        if push_every < 0 or optimizer_every < 0:
            raise ValueError("push_every and optimizer_every must be >= 0 seconds")
        self.optimizer = optimizer
        self.params = [p for _, p in named]
        self.push_every = push_every
        self.optimizer_every = optimizer_every
        self.follow_schedule = follow_schedule
        self._clock = clock
        self._base_lrs = [group["lr"] for group in optimizer.param_groups]
        if not optimizer.state:
            init_optimizer_state(optimizer)
        self.optimizer_state = OptimizerState(optimizer)
        specs = [TensorSpec(name, tuple(p.shape)) for name, p in named]
        self._delta = np.empty(sum(s.numel for s in specs), WIRE_DTYPE)
        self._opt_buf = np.empty(self.optimizer_state.size, WIRE_DTYPE)
        self._pending_samples = self._pending_steps = 0
        self._losses: list[float] = []
        self.merges = 0
        self._in_average = False
        self._warned_average = False
        self.run: dict[str, Any] = {}
        self.lr_factor = 1.0

        self.client = Client(socket, address=address, token=token, timeout=timeout)
        try:
            self.client.hello()
            reg = self.client.register(run, specs, self.optimizer_state.specs,
                                       train_samples=train_samples, batch=batch, holdout=False)
            self.peer_id = reg.get("peer_id", "")
            self.fingerprint = reg.get("fingerprint", "")
            self.resumed = bool(reg.get("resume"))
            self._set_run(reg.get("run"))
            counters = self._pull() if self.resumed else reg
            self.samples, self.step_count = int(counters.get("samples", 0)), int(counters.get("step", 0))
            now = self._clock()
            if not self.resumed:
                self._push(optimizer=True)
            self._last_push = self._last_optimizer = now
        except BaseException:
            self.client.close()
            raise

    @property
    def stopped(self) -> bool:
        """Whether the swarm's run has ended (the run's ``stop`` is set)."""
        return bool(self.run.get("stop"))

    def _set_run(self, run: dict[str, Any] | None) -> None:
        """Take the run dict of a reply and, with follow_schedule, its rate."""
        if run is None:
            return
        self.run = run
        self.lr_factor = float(run.get("lr_factor", 1.0))
        if self.follow_schedule:
            for group, base in zip(self.optimizer.param_groups, self._base_lrs):
                group["lr"] = base * self.lr_factor

    def _pull(self) -> dict[str, Any]:
        """Load the node's model (and optimizer state, if it sends one)."""
        reply, model, opt = self.client.pull()
        self._load(model)
        if opt is not None:
            self.optimizer_state.unflatten(opt)
        self._set_run(reply.get("run"))
        return reply

    def _load(self, model: np.ndarray) -> None:
        """Copy a flat model into the parameters."""
        flat = torch.from_numpy(model)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                p.copy_(flat[offset:offset + n].view_as(p))
                offset += n

    def _push(self, optimizer: bool) -> bool:
        """Push the model (and the optimizer state) with the counters since
        the last push; add the delta if the node sends one."""
        if self._in_average:
            raise RuntimeError("push inside Mesh.averaged(): the parameters hold the node's average there, "
                               "not the trained model")
        model = torch.cat([p.detach().reshape(-1).cpu() for p in self.params]).numpy()
        opt = self.optimizer_state.flatten(self._opt_buf) if optimizer else None
        loss = sum(self._losses) / len(self._losses) if self._losses else None
        reply, delta = self.client.push(model, opt, samples=self._pending_samples, steps=self._pending_steps,
                                        loss=loss, lr=self.optimizer.param_groups[0]["lr"], out=self._delta)
        self._pending_samples = self._pending_steps = 0
        self._losses.clear()
        self.merges = int(reply.get("merges", self.merges))
        if delta is not None:
            flat = torch.from_numpy(delta)
            offset = 0
            with torch.no_grad():
                for p in self.params:
                    n = p.numel()
                    p.add_(flat[offset:offset + n].view_as(p).to(p.device))
                    offset += n
        self._set_run(reply.get("run"))
        return delta is not None

    def sync(self, optimizer: bool | None = None) -> bool:
        """Push now, whatever the timer; with the optimizer state when
        ``optimizer`` is True, or, when None, if ``optimizer_every`` has
        passed. Return True when a merged delta was applied. Once the
        swarm's run has stopped the node sends no more deltas."""
        now = self._clock()
        if optimizer is None:
            optimizer = now - self._last_optimizer >= self.optimizer_every
        applied = self._push(optimizer)
        self._last_push = now
        if optimizer:
            self._last_optimizer = now
        return applied

    def step(self, samples: int, loss: float | None = None) -> bool:
        """Count a training step of ``samples`` samples (after
        ``optimizer.step()``) and push if ``push_every`` has passed since
        the last push. ``loss`` is the step's loss; the node gets the mean
        since the last push. Return True when a merged delta was applied."""
        self._pending_samples += samples
        self._pending_steps += 1
        self.samples += samples
        self.step_count += 1
        if loss is not None:
            self._losses.append(float(loss))
        if self._clock() - self._last_push < self.push_every:
            return False
        return self.sync()

    @contextlib.contextmanager
    def averaged(self) -> Iterator[bool]:
        """Load the model the node reports into the model's parameters for
        the block, and put the trained ones back after it, also when it
        raises. That model is the moving average of the models pushed and
        of the peers' models the node merged (``--ema``, ``--ema-peers``),
        as a node with the built-in trainer reports; it is what the node
        serves at ``/v1/model`` and saves. Score it inside the block and
        ``report_eval`` the result. Yields whether the node keeps an
        average (False: its model, the last push plus merges). Only the
        registered parameters are replaced (buffers such as BatchNorm's
        running statistics stay the trained model's). ``step`` and
        ``sync`` inside the block raise RuntimeError: the model there is
        not the one being trained. A node older than the average op (its
        hello did not list it) leaves the trained parameters in the block,
        yields False and warns once."""
        supported = self.client.supports("average")
        if supported:
            reply, flat = self.client.average()
            saved = [p.detach().clone() for p in self.params]
        elif not self._warned_average:
            self._warned_average = True
            warnings.warn(f"the node ({self.client.node or 'unnamed'}) does not serve the average op: "
                          "scoring the trainer's own weights; upgrade the node to score the average",
                          RuntimeWarning, stacklevel=3)
        self._in_average = True
        try:
            if supported:
                self._load(flat)
            yield supported and bool(reply.get("averaged"))
        finally:
            self._in_average = False
            if supported:
                with torch.no_grad():
                    for p, s in zip(self.params, saved):
                        p.copy_(s)

    def report_eval(self, accuracy: float, loss: float) -> None:
        """Tell the node the trainer's test score of the model it reports
        (scored inside ``averaged``) or of its own current model."""
        self.client.eval(accuracy, loss)

    def close(self) -> None:
        """Push the final model with the optimizer state, say bye and close;
        idempotent. A connection already closed is just released."""
        if self.client.closed:
            return
        try:
            self.sync(optimizer=True)
            self.client.bye()
        finally:
            self.client.close()

    def __enter__(self) -> Mesh:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        """Close; when the block raised, errors while closing are dropped so
        they do not hide the first one."""
        if exc_type is None:
            self.close()
            return
        with contextlib.suppress(Exception):
            self.close()
