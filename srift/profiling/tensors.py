"""Walking the nested arguments and outputs of modules (tuples, lists, dicts, HF ModelOutputs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``obj``, depth first."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from iter_tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from iter_tensors(o)
    elif hasattr(obj, "to_tuple"):  # transformers ModelOutput
        yield from iter_tensors(obj.to_tuple())


def first_tensor(obj: Any, where: Callable[[torch.Tensor], bool] = lambda t: True) -> torch.Tensor | None:
    """The first tensor in ``obj`` (depth first) for which ``where`` holds, or None."""
    return next((t for t in iter_tensors(obj) if where(t)), None)


def tensor_bytes(obj: Any) -> float:
    """Bytes of all tensors in ``obj``."""
    return float(sum(t.numel() * t.element_size() for t in iter_tensors(obj)))
