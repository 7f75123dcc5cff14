"""Distributed K-FAC preconditioner with the SPD-KFAC optimizations (torch; see docs/kfac.md).

``from srift.kfac import KFACPreconditioner`` imports torch; ``srift.kfac.schedule`` does not
(the simulator uses it), which is why the preconditioner is loaded lazily here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KFACPreconditioner", "KFACStrategy", "STRATEGIES"]

from srift.job import KFAC_STRATEGIES as STRATEGIES  # the vocabulary is defined with the Job
from srift.kfac.strategy import KFACStrategy  # no torch: a plain dataclass


def __getattr__(name: str) -> Any:
    if name == "KFACPreconditioner":
        from srift.kfac.preconditioner import KFACPreconditioner

        return KFACPreconditioner
    raise AttributeError(f"module 'srift.kfac' has no attribute {name!r}")
