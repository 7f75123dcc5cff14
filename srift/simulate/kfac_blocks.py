"""The runtime's K-FAC blocks of a profile (no torch): one per Linear/Conv2d, ``groups`` per grouped
convolution, with their factor dimensions and rows (batch x positions: a Linear with a sequence
dimension has a row per token), the factors' memory, and the scale from measured K-FAC kernel
times to a target (``srift.simulate.kfac`` prices them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from srift.perf.compute import LayerTimes
from srift.perf.kfac_kernels import half_precision
from srift.profile import KFAC_TIME_FIELDS, LayerProfile, Profile

FP32_BYTES = 4  # factors are kept and communicated in fp32 (fp16 factor all-reduce diverges)


@dataclass(frozen=True)
class KfacBlock:
    """One K-FAC block as the runtime builds it (a Linear, a Conv2d, or one group of a grouped one).

    Attributes:
        layer: Index of the layer in the profile.
        name: The layer name (``[j]`` appended for group ``j``).
        a_dim, g_dim: Factor dimensions (A with the bias column).
        rows: Factor rows per step: per-GPU batch x positions per sample.
        width: Columns of the input rows (``a_dim`` without the bias column).
        conv: A convolution (its input is unfolded, its output gradient copied to rows).
        input_elements: Elements of the block's input (what the unfold reads).
    """

    layer: int
    name: str
    a_dim: int
    g_dim: int
    rows: float
    width: int
    conv: bool
    input_elements: float

    @property
    def bias(self) -> bool:
        return self.a_dim > self.width


def kfac_layers(profile: Profile) -> list[LayerProfile]:
    """The profile's layers that carry K-FAC factor dimensions, in execution order."""
    return [l for l in profile.layers if l.kfac_a_dim and l.kfac_g_dim]


def factor_dims(layer: LayerProfile) -> tuple[int, int]:
    """(A, G) factor dimensions of one K-FAC block of a layer (0 for a layer without them)."""
    return layer.kfac_a_dim or 0, layer.kfac_g_dim or 0


def layer_blocks(layer: LayerProfile) -> int:
    """K-FAC blocks of a layer: ``groups`` for a grouped convolution (its ``params`` are
    ``groups x kfac_g_dim x kfac_a_dim``), 1 otherwise (and for a layer without parameters)."""
    a, g = factor_dims(layer)
    if not (a and g):
        return 0
    return max(1, round(layer.params / (a * g)))


def kfac_blocks(profile: Profile) -> list[KfacBlock]:
    """The runtime's K-FAC blocks of a profile, in execution order, at the profile's batch."""
    out = []
    for i, layer in enumerate(profile.layers):
        n = layer_blocks(layer)
        if not n:
            continue
        a, g = factor_dims(layer)
        rows = float(profile.batch_size * (layer.kfac_spatial or 1))
        # The bias column: what the layer's FLOPs (2 x rows x C_out x width) leave of a_dim.
        width = round(layer.fwd_flops / (2.0 * rows * g * n)) if layer.fwd_flops > 0 else a
        width = width if a - 1 <= width <= a else a
        elem = 2.0 if half_precision(profile.precision) else 4.0
        inputs = max(layer.fwd_bytes - layer.activation_bytes - layer.grad_bytes, 0.0) / elem / n
        conv = layer.type.lower().startswith("conv")
        for j in range(n):
            out.append(KfacBlock(i, f"{layer.name}[{j}]" if n > 1 else layer.name, a, g, rows, width, conv, inputs))
    return out


def kfac_memory_bytes(profile: Profile) -> float:
    """Bytes per GPU of the running factors and their inverses (fp32, full matrices)."""
    return 2.0 * FP32_BYTES * sum(b.a_dim**2 + b.g_dim**2 for b in kfac_blocks(profile))


def measured_scale(profile: Profile, compute: LayerTimes) -> float | None:
    """Factor from the measured K-FAC kernel times (``srift profile --kfac``) to the target: the
    target's forward + backward seconds of the K-FAC layers over the measured ones (1 on the
    profiling device itself). None when the compute times are not anchored on measurements (a
    CPU profile says nothing about a GPU's kernels) or some K-FAC layer lacks a kernel time."""
    layers = kfac_layers(profile)
    if not compute.anchored or not all(getattr(l, f) is not None for l in layers for f in KFAC_TIME_FIELDS):
        return None
    is_kfac = np.array([bool(l.kfac_a_dim and l.kfac_g_dim) for l in profile.layers])
    target = float((compute.fwd_s + compute.bwd_s)[is_kfac].sum())
    measured = sum((l.fwd_s or 0.0) + (l.bwd_s or 0.0) for l in layers)
    return target / measured if target > 0 and measured > 0 else 1.0
