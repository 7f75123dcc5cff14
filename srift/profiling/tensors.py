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


def _takes_part(t: torch.Tensor) -> bool:
    return t.requires_grad and t.grad_fn is not None


def grad_tensor(obj: Any) -> torch.Tensor | None:
    """The first floating tensor in ``obj`` that takes part in autograd."""
    if isinstance(obj, torch.Tensor):  # the common case, without walking (this runs per leaf call)
        return obj if _takes_part(obj) else None
    return first_tensor(obj, _takes_part)


def detached_clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, tuple):
        return tuple(detached_clone(o) for o in obj)
    if isinstance(obj, list):
        return [detached_clone(o) for o in obj]
    if isinstance(obj, dict):
        return {k: detached_clone(v) for k, v in obj.items()}
    return obj
