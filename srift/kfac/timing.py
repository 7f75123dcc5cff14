"""Timing helpers of the preconditioner: when a factor is ready (SPD's fusion planner) and the
inversion rate its placement measures."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from srift.job import EIGEN
from srift.kfac.layers import damped_inverse, eigen_decomposition


def ready_mark(device: torch.device) -> Any:
    """When a factor is ready (review item M15): on CUDA an event on the current stream (the GPU's
    time line: the host runs ahead of the kernels, so its clock would plan SPD's fusion on launch
    gaps), else ``perf_counter`` seconds."""
    if device.type == "cuda":
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))
        return event
    return time.perf_counter()


def ready_gaps_s(marks: list[Any]) -> list[float]:
    """Seconds from each ``ready_mark`` to the next, 0 first. CUDA events are read once the last has
    run (SPD reads them after the step's all-reduces, which follow every factor)."""
    if not marks:
        return []
    if isinstance(marks[0], float):
        return [0.0] + [b - a for a, b in zip(marks, marks[1:])]
    marks[-1].synchronize()
    return [0.0] + [a.elapsed_time(b) / 1000.0 for a, b in zip(marks, marks[1:])]


def measure_inv_flops(method: str, device: torch.device | None = None, dim: int = 256, repeats: int = 5) -> float:
    """d^3 per second of the inverse method's kernel on ``device`` (the factors'; the median call:
    a typical cost, as the prediction prices inversions)."""
    device = device or torch.device("cpu")
    m = torch.randn(dim, dim, device=device)
    m = m @ m.t() / dim + torch.eye(dim, device=device)
    fn = eigen_decomposition if method == EIGEN else (lambda f: damped_inverse(f, 1e-3))

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn(m)  # warm-up
    samples = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn(m)
        sync()
        samples.append(time.perf_counter() - t0)
    return dim**3 / max(statistics.median(samples), 1e-9)
