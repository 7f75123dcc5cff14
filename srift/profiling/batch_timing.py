"""Time srift's analysed step at the profiled micro-batch and at half of it (review item M6).

A layer's time is not proportional to its batch: part of it is paid once per call whatever the
batch (kernel launches and framework dispatch, reading and packing the weights, writing the weight
gradient) and the rest grows with the samples. ``Profile.rescale`` takes the share of the first
from these two timings: with ``t(b) = a + c * b``, ``t(B/2) / t(B) = (1 + f) / 2`` where
``f = a / t(B)`` is the fixed share at the profiled batch, so ``f = 2 * t(B/2) / t(B) - 1``.

Both steps run forward and backward (no optimizer) under the script's autocast, alternating,
``REPEATS`` times each after one untimed call each. Other work on the machine slows calls
unevenly, so the ratio comes from each half-batch call over the full-batch call right after it
(the two see much the same load), the median of those; the full batch's time is its fastest call.
On CUDA the device is synchronised around each call (the run is over; this is srift's own step).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

REPEATS = 5  # timed calls per batch size, alternating; the fastest is kept


def sub_batch(obj: Any, batch: int, n: int, dim: int = 0) -> Any:
    """``obj`` (a captured call's args/kwargs) with every tensor whose dimension ``dim`` (the
    batch's: 1 for sequence-first inputs, srift/profiling/layout.py) is ``batch`` cut to its first
    ``n`` rows. With ``dim`` 1, a tensor of batch ``batch`` in its dimension 1 is cut there (an
    LSTM's hidden state ``(layers, batch, hidden)`` too); one with ``batch`` only in dimension 0 (the
    flattened targets) is left as it is."""
    if isinstance(obj, torch.Tensor):
        return obj.narrow(dim, 0, n) if obj.dim() > dim and obj.shape[dim] == batch else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(sub_batch(o, batch, n, dim) for o in obj)
    if isinstance(obj, dict):
        return {k: sub_batch(v, batch, n, dim) for k, v in obj.items()}
    return obj


def time_full_and_half(model: torch.nn.Module, full: Callable[[], Any], half: Callable[[], Any],
                       device: torch.device, repeats: int = REPEATS,
                       now: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """Seconds of one forward+backward of ``full`` (the fastest of ``repeats`` calls) and of ``half``
    (that times the median ratio of a half call to the full call after it); each step returns the
    scalar to backpropagate. The calls alternate, after one untimed call each. ``now``: the clock
    (on CPU the profiler's, which leaves out the waits for a core: ``hooks.WallClock.mark``).

    Raises:
        ValueError: for ``repeats`` below 1.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    cuda = device.type == "cuda"

    def once(step: Callable[[], Any]) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = now()
        with torch.enable_grad():
            out = step()
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.backward()
        if cuda:
            torch.cuda.synchronize(device)
        elapsed = now() - t0
        for p in model.parameters():
            p.grad = None
        return elapsed

    once(full)
    once(half)
    fulls, ratios = [], []
    for _ in range(repeats):
        half_s = once(half)
        fulls.append(once(full))
        ratios.append(half_s / max(fulls[-1], 1e-12))
    return min(fulls), min(fulls) * statistics.median(ratios)
