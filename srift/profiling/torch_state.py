"""What state torch is in where a profiler hook fires: dynamo tracing or a CUDA-graph capture (where
srift's hooks stay silent: ``hooks_off``), a backward pass of the autograd engine (a leaf's forward
there is a recomputation), and the autocast the script runs under.

Why silent: a hook compiled into a ``torch.compile`` graph would time nothing and break the graph,
and nothing of the host is replayed from a captured CUDA graph. A compiled model is then timed as a
whole step (srift/profiling/hooks.py).
"""

from __future__ import annotations

import torch


def hooks_off() -> bool:
    """True where a srift hook must do nothing: inside dynamo's tracing (torch.compile) or a
    CUDA-graph capture (see module docstring)."""
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def autocast_state() -> tuple[str, torch.dtype] | None:
    """(device type, dtype) of the autocast the caller runs under, if any (torch 2.1-2.3 lack the
    per-device API: their CUDA/CPU functions are used)."""
    get_dtype = getattr(torch, "get_autocast_dtype", None)
    for dev in ("cuda", "cpu"):
        try:
            on = torch.is_autocast_enabled(dev)
        except TypeError:  # torch < 2.4
            on = torch.is_autocast_enabled() if dev == "cuda" else torch.is_autocast_cpu_enabled()
        if on:
            if get_dtype is not None:
                return dev, get_dtype(dev)
            return dev, (torch.get_autocast_gpu_dtype() if dev == "cuda" else torch.get_autocast_cpu_dtype())
    return None


def in_autograd_engine() -> bool:
    """True while the autograd engine runs a backward pass (in this thread)."""
    return torch._C._current_graph_task_id() != -1

