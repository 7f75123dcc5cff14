"""K-FAC kernels timed on the profiling device (``srift profile --kfac``).

K-FAC's own work is not the model's: building factor A of a convolution unfolds its input
(im2col, memory-bound), the inversions are Cholesky factorizations (far below GEMM speed), and
both run in fp32 whatever the training precision. A prediction from the model's GEMM rate misses
that by 2-3x on a CPU, so the profiler times the real kernels once, on the real tensors of one
training step:

- factor A and factor G of every Linear/Conv2d (``srift.kfac.layers``, what the preconditioner
  runs), from the layer's input and output gradient;
- the damped Cholesky inverse of every distinct factor dimension (on the first factor that has
  it: the cost depends on the dimension only), as the preconditioner's ``inverse`` method runs it;
- preconditioning per layer: gathering the gradient, ``G^-1 grad A^-1`` and its KL-clip term.

Each is the median of ``repeats`` timed runs after one warm-up run, synchronised on CUDA. A grouped
convolution is one K-FAC block per group: its times are the sums over its groups. The model's
parameter gradients are restored afterwards.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from srift.kfac.layers import KFACLayer, damped_inverse, make_layers, supported
from srift.profiling.tensors import first_tensor

DAMPING = 1e-3  # any positive damping gives the same Cholesky cost


@dataclass
class KfacLayerTimes:
    """Measured seconds of one layer's K-FAC work (at the profiled per-step batch)."""

    factor_a_s: float
    factor_g_s: float
    inverse_a_s: float
    inverse_g_s: float
    precondition_s: float


def _timed(fn: Callable[[], Any], device: torch.device, repeats: int, calls: int = 5) -> tuple[float, Any]:
    """Median seconds of one ``fn()`` over ``repeats`` samples, and its last result. On CUDA a
    sample is CUDA events around ``calls`` back-to-back calls on ``device`` (no host round trip
    per call, which would outweigh small kernels); on a CPU one call's wall time."""
    out = fn()  # warm-up (allocations, library initialisation)
    times = []
    if device.type == "cuda":
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream(device)
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(stream)
                for _ in range(calls):
                    out = fn()
                end.record(stream)
                end.synchronize()
                times.append(start.elapsed_time(end) / 1000.0 / calls)
        return statistics.median(times), out
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def measure_kfac(model: nn.Module, step: Callable[[], torch.Tensor], repeats: int = 3) -> dict[str, KfacLayerTimes]:
    """Time K-FAC's kernels for every supported layer of ``model`` on one training step.

    Args:
        model: The model (its Linear and Conv2d layers are K-FAC layers).
        step: Runs one forward pass and returns a scalar to backpropagate.
        repeats: Timed runs per kernel (the median is kept).

    Returns:
        Times by qualified module name; layers the step did not reach are absent.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    layers = {name: make_layers(name, m) for name, m in model.named_modules() if supported(m)}
    inputs: dict[str, torch.Tensor] = {}
    grads: dict[str, torch.Tensor] = {}
    handles = []

    def hook(name: str) -> Callable[..., None]:
        def fwd(module: nn.Module, args: Any, out: Any) -> None:
            x = first_tensor(args, lambda t: t.is_floating_point())
            y = first_tensor(out, lambda t: t.requires_grad)
            if x is None or y is None:
                return
            inputs[name] = x.detach()
            y.register_hook(lambda g: grads.__setitem__(name, g.detach()))
        return fwd

    for name, layer in layers.items():
        handles.append(layer[0].module.register_forward_hook(hook(name)))
    saved = {p: p.grad for p in model.parameters()}
    try:
        for p in saved:
            p.grad = None
        with torch.enable_grad():
            step().backward()
        for h in handles:
            h.remove()
        handles = []
        inverse_s: dict[int, float] = {}
        out = {}
        for name, blocks in layers.items():
            if name in inputs and name in grads:
                per_block = [_measure_layer(b, inputs[name], grads[name], repeats, inverse_s) for b in blocks]
                out[name] = KfacLayerTimes(*(sum(getattr(t, f) for t in per_block) for f in KfacLayerTimes.__dataclass_fields__))
    finally:
        for h in handles:
            h.remove()
        for p, g in saved.items():
            p.grad = g
    return out


def _measure_layer(layer: KFACLayer, x: torch.Tensor, g: torch.Tensor, repeats: int,
                   inverse_s: dict[int, float]) -> KfacLayerTimes:
    dev = x.device
    fa_s, a = _timed(lambda: layer.factor_a(x), dev, repeats)
    fg_s, gf = _timed(lambda: layer.factor_g(g), dev, repeats)
    inverses = []
    for f, dim in ((a, layer.a_dim), (gf, layer.g_dim)):
        damp = DAMPING + float(f.diagonal().mean())
        if dim in inverse_s:  # the Cholesky cost depends on the dimension only: time it once
            inverses.append(damped_inverse(f, damp))
        else:
            inverse_s[dim], inv = _timed(lambda: damped_inverse(f, damp), dev, repeats)
            inverses.append(inv)
    a_inv, g_inv = inverses

    def precondition() -> float:
        # What the preconditioner does per layer: gather the gradient (bias as a column),
        # G^-1 grad A^-1, and the layer's term of the KL-clip sum.
        grad = layer.grad_matrix()
        grad = torch.zeros(layer.g_dim, layer.a_dim, device=a.device) if grad is None else grad.float()
        p = g_inv @ grad @ a_inv
        return float((p * grad).sum())

    p_s, _ = _timed(precondition, dev, repeats)
    return KfacLayerTimes(fa_s, fg_s, inverse_s[layer.a_dim], inverse_s[layer.g_dim], p_s)
