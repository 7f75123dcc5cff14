"""What the preconditioner's second-order work and checkpoints read and write of it
(``srift.kfac.second_order``, ``srift.kfac.checkpoint``): a Protocol, so those modules need not
import the preconditioner that calls them."""

from __future__ import annotations

from typing import Protocol

import torch

from srift.job import KfacInverseMethod, KfacStrategy
from srift.kfac.arguments import Hyper
from srift.kfac.distributed import Comm
from srift.kfac.layers import KFACLayer


class PreconditionerState(Protocol):
    """The ``KFACPreconditioner`` attributes those modules use (see its docstring)."""

    strategy: KfacStrategy
    inverse_method: KfacInverseMethod
    kl_clip: Hyper | None
    layers: list[KFACLayer]
    owners: list[int]
    comm: Comm
    steps: int
    skipped_factor_updates: int
    _factor_updates: int
    A: dict[str, torch.Tensor]
    G: dict[str, torch.Tensor]
    A_inv: dict[str, torch.Tensor]
    G_inv: dict[str, torch.Tensor]
    _acc: dict[str, tuple[torch.Tensor, int]]
    timings: dict[str, float]

    def _value(self, name: str) -> float: ...
