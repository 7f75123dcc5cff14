"""Checkpoints of the preconditioner (srift.kfac.preconditioner ``state_dict`` and
``load_state_dict``): the step counters, running factors and current inverses, checked before
anything changes."""

from __future__ import annotations

from typing import Any

import torch

from srift.job import EIGEN
from srift.kfac.state import PreconditionerState

STATE_VERSION = 2


def state_of(pre: PreconditionerState) -> dict[str, Any]:
    """What resuming needs to take the same steps: the step counters, the running factors and
    the current inverses (or eigendecompositions). Tensors are cloned; the result saves with
    ``torch.save`` and loads with ``torch.load(..., weights_only=True)``. Factors of a step in
    progress (passes before ``step()``) are not included: checkpoint after ``step()``."""
    def clone(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in d.items()}

    return {
        "version": STATE_VERSION,
        "inverse_method": pre.inverse_method,
        "steps": pre.steps,
        "factor_updates": pre._factor_updates,
        "skipped_factor_updates": pre.skipped_factor_updates,
        "A": clone(pre.A), "G": clone(pre.G),
        "A_inv": clone(pre.A_inv), "G_inv": clone(pre.G_inv),
    }


def load_state(pre: PreconditionerState, state: dict[str, Any]) -> None:
    """Restore ``state_dict()``'s output (onto this preconditioner's device).

    Raises:
        ValueError: when the state is not a K-FAC state, does not match this model's layers or
            inverse method, holds a negative or non-integer count, or a NaN or infinite factor
            or inverse (checked before anything changes).
    """
    if not isinstance(state, dict) or "steps" not in state or "A" not in state:
        raise ValueError("not a KFACPreconditioner state_dict (no 'steps' or 'A')")
    method = state.get("inverse_method")
    if method != pre.inverse_method:
        raise ValueError(f"state_dict was saved with inverse_method={method!r}, this preconditioner uses {pre.inverse_method!r}")
    dims = {l.name: (l.a_dim, l.g_dim) for l in pre.layers}
    for key in ("A", "G", "A_inv", "G_inv"):
        part = state.get(key, {})
        if not isinstance(part, dict):
            raise ValueError(f"state_dict['{key}'] must be a dict of tensors")
        if part and set(part) != set(dims):
            extra, missing = sorted(set(part) - set(dims)), sorted(set(dims) - set(part))
            raise ValueError(f"state_dict['{key}'] does not match this model's K-FAC layers "
                             f"(unknown: {', '.join(extra) or '-'}; missing: {', '.join(missing) or '-'})")
        for name, t in part.items():
            d = dims[name][0 if key.startswith("A") else 1]
            want = (d + 1, d) if key.endswith("_inv") and pre.inverse_method == EIGEN else (d, d)
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != want:
                raise ValueError(f"state_dict {key}['{name}'] has shape {tuple(getattr(t, 'shape', ()))}, expected {want}")
            if not t.is_floating_point() or not bool(torch.isfinite(t).all()):
                # a NaN factor or an infinite inverse would turn every preconditioned gradient NaN
                raise ValueError(f"state_dict {key}['{name}'] holds NaN or infinite values (or is not a float tensor)")
    counts = {"steps": state["steps"], "factor_updates": state.get("factor_updates", 1 if state["A"] else 0),
              "skipped_factor_updates": state.get("skipped_factor_updates", 0)}
    for key, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"state_dict['{key}'] must be a whole number of at least 0, got {value!r}")
    device = pre.layers[0].module.weight.device
    pre.steps = counts["steps"]
    pre._factor_updates = counts["factor_updates"]
    pre.skipped_factor_updates = counts["skipped_factor_updates"]
    for key in ("A", "G", "A_inv", "G_inv"):
        setattr(pre, key, {k: v.detach().to(device, torch.float32, copy=True) for k, v in state.get(key, {}).items()})
    pre._acc.clear()
