"""Shared pieces of the K-FAC tests: a small CNN and data that are identical in every process."""

from __future__ import annotations

from datetime import timedelta

import torch
from torch import nn

# Bounded, and generous against the seconds a loaded 2-core machine takes to start the workers
# (spawn imports torch in each: about 8 s at load 6) and to run a few small steps.
GLOO_TIMEOUT = timedelta(seconds=300)


def init_gloo(rank: int, world: int, rendezvous_file: str) -> None:
    """Join a ``world``-process gloo group through a file in the test's own directory.

    Not through a TCP port picked free beforehand: between picking it and rank 0 binding it (the
    workers' start-up, seconds under load) any process on the host may take it, and the test fails
    with EADDRINUSE. Gloo's own sockets bind port 0, which the kernel hands out atomically.
    """
    torch.distributed.init_process_group("gloo", init_method=f"file://{rendezvous_file}", rank=rank,
                                         world_size=world, timeout=GLOO_TIMEOUT)


def small_cnn(seed: int = 0) -> nn.Module:
    """8x8 single-channel images -> 10 classes; Conv2d with and without bias, and a Linear."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, stride=2, bias=False),
        nn.Tanh(),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def batches(steps: int, batch: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 1, 8, 8, generator=g), torch.randint(0, 10, (batch,), generator=g)) for _ in range(steps)]


def run_steps(model: nn.Module, pre, data, lr: float = 0.1) -> list[dict[str, torch.Tensor]]:
    """Train a few steps; return the preconditioned gradients of every step."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    out = []
    for x, y in data:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        pre.step()
        out.append({n.removeprefix("module."): p.grad.detach().clone() for n, p in model.named_parameters()})
        opt.step()
    return out
