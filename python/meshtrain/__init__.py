"""meshtrain's Python client: train with PyTorch, merge through a meshtrain node.

``Mesh`` (from ``meshtrain.pytorch``, imported on first use so that the
numpy-only ``Client`` works without torch) joins a PyTorch training loop to
a node started with ``meshtrain node --trainer external``. ``Client`` speaks
the wire protocol, ``meshtrain-trainer/1`` (docs/protocol.md, "Local
trainer API"), for any other framework.
"""

from typing import Any

from .client import (VERSION, Client, ConnectionClosedError, MeshtrainError, ProtocolError, TensorSpec,
                     UnsupportedOpError, parse_address)

__all__ = ["VERSION", "Client", "ConnectionClosedError", "MeshtrainError", "Mesh", "OptimizerState",
           "ProtocolError", "TensorSpec", "UnsupportedOpError", "init_optimizer_state", "parse_address"]
__version__ = "0.1.0"

_TORCH_NAMES = ("Mesh", "OptimizerState", "init_optimizer_state")


def __getattr__(name: str) -> Any:
    """Import the PyTorch integration when one of its names is first used."""
    if name in _TORCH_NAMES:
        from . import pytorch
        return getattr(pytorch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
