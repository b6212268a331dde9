"""Helpers shared by the PyTorch tests: a settable clock and small models."""

import torch


class FakeClock:
    """A clock the test moves by hand: ``Mesh(clock=clock)``, ``clock.t = 5``."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def small_model(seed: int = 0) -> torch.nn.Module:
    """A two-layer MLP with seeded weights: 4 -> 3 -> 2 (23 parameters)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> float:
    """One optimizer step on a seeded random batch of 8; return the loss."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """The trainable parameters end to end, as one detached copy."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad]).clone()
