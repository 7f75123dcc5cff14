"""The preconditioner's argument checks (hyperparameters and intervals, constant or callables of
the step) and ``skip_layers`` matching (srift.kfac.preconditioner)."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Union

from torch import nn

Hyper = Union[float, Callable[[int], float]]
Interval = Union[int, Callable[[int], int]]


def check_hyper(name: str, value: Any, low: float, low_inclusive: bool, high: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number or a callable of the step, got {value!r}")
    if value < low or (value == low and not low_inclusive) or (high is not None and value >= high):
        bound = f"{'>=' if low_inclusive else '>'} {low}" + (f" and < {high}" if high is not None else "")
        raise ValueError(f"{name} must be {bound}, got {value!r}")


def check_interval(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1 or a callable of the step, got {value!r}")


# name -> (lower bound, lower bound allowed, upper bound): checked up front for constants and at
# every use for callables (a schedule can go wrong mid-training).
BOUNDS: dict[str, tuple[float, bool, float | None]] = {
    "damping": (0.0, False, None), "factor_decay": (0.0, True, 1.0), "lr": (0.0, False, None), "kl_clip": (0.0, False, None),
}


def skip_entries(skip_layers: Iterable[Any]) -> tuple[Any, ...]:
    if isinstance(skip_layers, (str, type)):
        skip_layers = (skip_layers,)
    try:
        skip = tuple(skip_layers)
    except TypeError:
        raise ValueError(f"skip_layers must be module names, class names or module types, got {skip_layers!r}") from None
    for s in skip:
        if not isinstance(s, (str, type)):
            raise ValueError(f"skip_layers entries must be module names, class names or module types, got {s!r}")
    return skip


def skip_match(name: str, module: nn.Module, skip: tuple[Any, ...]) -> int | None:
    """Index of the first ``skip_layers`` entry that matches this module, or None."""
    for i, s in enumerate(skip):
        if isinstance(s, type) and isinstance(module, s):
            return i
        if isinstance(s, str) and (s == type(module).__name__ or name == s or name.startswith(s + ".")):
            return i
    return None
