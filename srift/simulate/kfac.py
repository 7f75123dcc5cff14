"""Predicted K-FAC phases of one iteration (no torch): factor computation, exposed factor
all-reduce, inversions, inverse broadcasts and preconditioning, for the naive (D-KFAC), mpd and
spd (SPD-KFAC) strategies, amortized by the factor and inverse update intervals.

The fusion plan and the inversion placement come from ``srift.kfac.schedule``, the functions the
runtime uses, and the gradient buckets SPD's factor all-reduces share the link with come from
``srift.simulate.ddp.bucket_layout``, the one DDP bucket rule. A plan is made once per prediction,
with the median communication times (as the runtime plans with one cost model); the p90 phases
time the same plan with the p90 communication times.

FLOP counts follow shared/KFAC.md 1.3:

* factor A / G of a layer: ``2 * B * S * d^2`` (the GEMM ``a^T a``; ``B`` per-GPU batch,
  ``S`` rows per sample, i.e. ``kfac_spatial``);
* inversion: ``d^3`` (Cholesky, triangular inverse and product, ``d^3/3`` each);
* preconditioning: ``2 * d_A * d_G * (d_A + d_G)`` per layer (two GEMMs), every iteration.

They run at the effective FLOP/s the compute model predicts for the model's own Linear/Conv layers
on the target GPU (forward + backward FLOPs over forward + backward seconds): the same dense GEMM
kind of work, so the same efficiency; in fp32 (see ``fp32_rate_scale``). A profile made with
``srift profile --kfac`` carries the kernels' measured times instead (im2col and Cholesky run well
below GEMM speed); those are used, scaled by ``measured_scale``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from srift.cluster import Cluster
from srift.errors import SriftError
from srift.hardware import CPU, gpu as gpu_spec
from srift.job import HALF_PRECISIONS, Job
from srift.kfac import schedule
from srift.perf.compute import LayerTimes
from srift.profile import KFAC_TIME_FIELDS, LayerProfile, Profile
from srift.simulate.ddp import BucketLayout, bucket_layout, bucket_ready_s

FP32_BYTES = 4  # factors are kept and communicated in fp32 (fp16 factor all-reduce diverges)
QUANTILES = (0.5, 0.9)


class CommLike(Protocol):
    """What the plan needs of a communication model (``srift.perf.comm.CommModel``)."""

    def allreduce_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray: ...

    def broadcast_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray: ...


@dataclass(frozen=True)
class KfacPhases:
    """Seconds of each K-FAC phase: what K-FAC adds to the first-order iteration."""

    factor_compute: float
    exposed_factor_comm: float
    inversion: float
    inverse_broadcast: float
    preconditioning: float

    def as_dict(self) -> dict[str, float]:
        """The phases by name, in iteration order (the prediction's breakdown keys)."""
        return dataclasses.asdict(self)

    @property
    def total_s(self) -> float:
        return sum(self.as_dict().values())

    def amortized(self, factor_steps: int, inv_steps: int) -> "KfacPhases":
        """Per iteration when factors are updated every ``factor_steps`` and inverses every
        ``inv_steps`` iterations (preconditioning runs every iteration)."""
        return KfacPhases(self.factor_compute / factor_steps, self.exposed_factor_comm / factor_steps,
                          self.inversion / inv_steps, self.inverse_broadcast / inv_steps, self.preconditioning)


@dataclass(frozen=True)
class KfacPlan:
    """Everything behind one K-FAC prediction (for the predictor, the bench script and tests).

    Attributes:
        strategy: naive, mpd or spd.
        workers: Number of workers (GPUs).
        layer_names: K-FAC layers in execution order.
        dims: Factor dimensions, ``[A_0, G_0, A_1, G_1, ...]``.
        flops_per_s: Effective FLOP/s used for factor compute, inversion and preconditioning.
        owners: Inversion owner per factor (``schedule.LOCAL``: every worker inverts it).
        groups_a: Fused all-reduce groups of the A factors (layer indices, forward order).
        groups_g: Fused all-reduce groups of the G factors (layer indices, backward order).
        measured_kernels: True when the profile's measured K-FAC kernel times were used.
        phases_per_update: Median seconds, unamortized: factor phases per factor update,
            inversion phases per inverse update, preconditioning per iteration.
        phases: Median seconds per iteration (amortized).
        phases_p90: The same plan timed with the p90 communication times, per iteration.
    """

    strategy: str
    workers: int
    layer_names: list[str]
    dims: list[int]
    flops_per_s: float
    owners: list[int]
    groups_a: list[list[int]]
    groups_g: list[list[int]]
    measured_kernels: bool
    phases_per_update: KfacPhases
    phases: KfacPhases
    phases_p90: KfacPhases


def kfac_layers(profile: Profile) -> list[LayerProfile]:
    """The profile's layers that carry K-FAC factor dimensions, in execution order."""
    return [l for l in profile.layers if l.kfac_a_dim and l.kfac_g_dim]


def factor_dims(layer: LayerProfile) -> tuple[int, int]:
    """(A, G) factor dimensions of a K-FAC layer (0 for a layer without them)."""
    return layer.kfac_a_dim or 0, layer.kfac_g_dim or 0


def kfac_memory_bytes(profile: Profile) -> float:
    """Bytes per GPU of the running factors and their inverses (fp32, full matrices)."""
    return 2.0 * FP32_BYTES * sum(a**2 + g**2 for a, g in map(factor_dims, kfac_layers(profile)))


def factor_flops(layer: LayerProfile, batch_size: int) -> tuple[float, float]:
    """FLOPs of computing factor A and factor G of one layer for a per-GPU batch."""
    rows = batch_size * (layer.kfac_spatial or 1)
    a, g = factor_dims(layer)
    return 2.0 * rows * a**2, 2.0 * rows * g**2


def precondition_flops(layer: LayerProfile) -> float:
    """FLOPs of ``G^-1 grad A^-1`` for one layer."""
    a, g = factor_dims(layer)
    return 2.0 * a * g * (a + g)


def effective_flops_per_s(profile: Profile, compute: LayerTimes) -> float:
    """FLOP/s the target achieves on the model's Linear/Conv (GEMM-like) layers; all layers
    when those carry no time."""
    seconds = list(zip(compute.fwd_s, compute.bwd_s))
    ks = [(l, s) for l, s in zip(profile.layers, seconds) if l.kfac_a_dim and l.kfac_g_dim]
    for pairs in (ks, list(zip(profile.layers, seconds))):
        flops = sum(l.fwd_flops + l.bwd_flops for l, _ in pairs)
        secs = sum(float(f + b) for _, (f, b) in pairs)
        if flops > 0 and secs > 0:
            return flops / secs
    raise SriftError(
        "cannot predict K-FAC: the profile has no FLOPs or the compute model no layer times.",
        "use a profile made by `srift profile`, which records both.",
    )


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


def fp32_rate_scale(cluster: Cluster, precision: str) -> float:
    """K-FAC's factors, inversions and preconditioning run in fp32 (srift.kfac disables autocast:
    fp16 factors diverge). Under ``amp`` or ``bf16`` the model's layers run on the fp16 tensor path, so the
    rate derived from them is scaled by the GPU's fp32 / amp peak ratio; 1 otherwise."""
    if precision not in HALF_PRECISIONS:
        return 1.0
    for group in cluster.node_groups:
        if group.gpu != CPU:
            spec = gpu_spec(group.gpu)
            return spec.peak_flops("fp32") / spec.peak_flops(precision)
    return 1.0


@dataclass(frozen=True)
class _Kernels:
    """Seconds of K-FAC's own kernels on the target: measured (scaled) or from FLOPs."""

    factor_a_s: list[float]
    factor_g_s: list[float]
    precondition_s: float
    invert: Callable[[int], float]

    @property
    def factor_s(self) -> float:
        return sum(self.factor_a_s) + sum(self.factor_g_s)

    @classmethod
    def of(cls, profile: Profile, layers: list[LayerProfile], rate: float, anchor: float | None) -> "_Kernels":
        if anchor is not None:
            # `srift profile --kfac` timed the real kernels on the profiling device: use them, scaled
            # to the target by how much faster its model layers run.
            # (measured_scale checked that every K-FAC layer carries its kernel times.)
            inverse_s = {d: s or 0.0 for l in layers
                         for d, s in zip(factor_dims(l), (l.kfac_inverse_a_s, l.kfac_inverse_g_s))}
            return cls([(l.kfac_factor_a_s or 0.0) * anchor for l in layers],
                       [(l.kfac_factor_g_s or 0.0) * anchor for l in layers],
                       sum(l.kfac_precondition_s or 0.0 for l in layers) * anchor,
                       lambda d: inverse_s[d] * anchor)
        b = profile.batch_size
        return cls([factor_flops(l, b)[0] / rate for l in layers], [factor_flops(l, b)[1] / rate for l in layers],
                   sum(precondition_flops(l) for l in layers) / rate, lambda d: d**3 / rate)


class _Link:
    """All-reduce and broadcast seconds at one quantile, memoized (the planner asks for the same
    few sizes many times); zero for one worker or without a communication model."""

    def __init__(self, comm: CommLike | None, workers: int, quantile: float, factor_bytes: Callable[[int], float]) -> None:
        self.comm = comm if workers > 1 else None
        self.quantile = quantile
        self.factor_bytes = factor_bytes
        self.allreduce = functools.lru_cache(maxsize=None)(self._allreduce)
        self.broadcast = functools.lru_cache(maxsize=None)(self._broadcast)

    @property
    def distributed(self) -> bool:
        return self.comm is not None

    def _allreduce(self, nbytes: float) -> float:
        return float(self.comm.allreduce_time_s(nbytes, self.quantile)) if self.comm is not None else 0.0

    def _broadcast(self, dim: int) -> float:
        return float(self.comm.broadcast_time_s(schedule.inverse_message_bytes(dim), self.quantile)) if self.comm is not None else 0.0


@dataclass(frozen=True)
class _Pipeline:
    """When SPD's factors and DDP's gradient buckets are ready in one iteration with K-FAC's hooks
    (A factors computed in forward hooks, G factors when a layer's output gradient arrives, before
    the layer's own backward), and in the first-order iteration without them."""

    ready_a: list[float]  # per K-FAC layer, forward order
    ready_g: list[float]  # per K-FAC layer, layer order
    bucket_ready: np.ndarray  # per bucket, with the hooks
    bucket_sizes: np.ndarray
    compute_end: float  # with the hooks
    base_bucket_ready: np.ndarray  # per bucket, first-order
    base_compute_end: float

    @classmethod
    def of(cls, profile: Profile, compute: LayerTimes, kernels: _Kernels, layout: BucketLayout) -> "_Pipeline":
        idx = [i for i, l in enumerate(profile.layers) if l.kfac_a_dim and l.kfac_g_dim]
        fa = np.zeros(len(profile.layers))
        fg = np.zeros(len(profile.layers))
        fa[idx], fg[idx] = kernels.factor_a_s, kernels.factor_g_s
        fwd = np.asarray(compute.fwd_s, dtype=float) + fa
        bwd = np.asarray(compute.bwd_s, dtype=float) + fg
        forward_end = float(fwd.sum())
        # Backward visits layers in reverse: a layer's backward (its G factor first) ends at
        # forward_end + the backward seconds of it and every later layer.
        bwd_end = forward_end + np.cumsum(bwd[::-1])[::-1]
        ready, end = bucket_ready_s(forward_end, bwd, layout)
        base_ready, base_end = bucket_ready_s(compute.forward_s, np.asarray(compute.bwd_s, dtype=float), layout)
        return cls([float(t) for t in np.cumsum(fwd)[idx]], [float(t) for t in (bwd_end - bwd + fg)[idx]],
                   ready, layout.sizes_bytes, end, base_ready, base_end)


def _gaps(ready: Sequence[float]) -> list[float]:
    return [ready[0]] + [b - a for a, b in zip(ready, ready[1:])]


def _bucket_jobs(ready: np.ndarray, sizes: np.ndarray, link: _Link) -> list[tuple[float, float]]:
    """(issue time, all-reduce seconds) of each gradient bucket: DDP issues buckets in order, so a
    bucket goes out once it and every bucket before it is ready."""
    issue = np.maximum.accumulate(ready) if len(ready) else ready
    return [(float(t), link.allreduce(float(s))) for t, s in zip(issue, sizes)]


def plan_kfac(profile: Profile, cluster: Cluster, job: Job, compute: LayerTimes, comm: CommLike | None,
              layout: BucketLayout | None = None) -> KfacPlan:
    """Plan one K-FAC iteration of ``job.kfac_strategy`` and predict its phases.

    Args:
        profile: The profile at the job's per-GPU batch.
        cluster: The cluster (``gpus`` workers; CPU workers overlap nothing).
        job: The Job (``kfac_strategy``, ``kfac_factor_steps``, ``kfac_inv_steps``, ``precision``).
        compute: The compute model's times of ``profile`` on the target GPU.
        comm: Communication model of the cluster (None or unused for one worker).
        layout: The profile's DDP gradient buckets (default: ``bucket_layout(profile)``).

    Raises:
        SriftError: for a profile without K-FAC factor dimensions.
    """
    strategy, workers = job.kfac_strategy, cluster.gpus
    layers = kfac_layers(profile)
    if not layers:
        raise SriftError(
            f"profile '{profile.name}' has no K-FAC factor dimensions (no Linear/Conv2d layer with kfac_a_dim/kfac_g_dim).",
            "re-create the profile with this srift version (`srift profile`), or use --optimizer sgd.",
        )
    rate = effective_flops_per_s(profile, compute) * fp32_rate_scale(cluster, job.precision or profile.precision)
    anchor = measured_scale(profile, compute)
    kernels = _Kernels.of(profile, layers, rate, anchor)
    dims = [d for l in layers for d in factor_dims(l)]
    # CPU processes (gloo) run collectives on the cores that compute: nothing overlaps there, as
    # in the first-order simulation (srift/simulate/predictor.py).
    cpu_workers = any(g.gpu == CPU for g in cluster.node_groups)
    packed = strategy == "spd"  # SPD pipelines factor all-reduces with backward; the others send after it

    # What the runtime sends (srift.kfac.schedule): packed factors and inverses, every strategy.
    def factor_bytes(d: int) -> float:
        return float(schedule.factor_message_bytes(d))

    links = {q: _Link(comm, workers, q, factor_bytes) for q in QUANTILES}
    median = links[0.5]
    pipeline = _Pipeline.of(profile, compute, kernels, layout or bucket_layout(profile)) if packed else None

    # ---- the plan (median costs) -----------------------------------------------------------
    groups_a: list[list[int]] = []
    groups_g: list[list[int]] = []
    if pipeline is not None and median.distributed:
        groups_a, groups_g = _fusion(layers, pipeline, factor_bytes, median)
    if strategy == "naive" or not median.distributed:
        owners = schedule.place_local(len(dims))
    elif strategy == "mpd":
        owners = schedule.place_round_robin(len(dims), workers)
    else:
        owners = schedule.place_inversions(dims, workers, kernels.invert, median.broadcast)

    # ---- its phases at each quantile ---------------------------------------------------------
    def phases_at(link: _Link) -> KfacPhases:
        if not link.distributed:
            exposed = 0.0
        elif pipeline is None:
            # D-KFAC / MPD: after backward every factor is enqueued at once (model order) and fused
            # by the fixed buffer, as the runtime does; nothing to overlap with.
            sizes = [factor_bytes(d) for d in dims]
            exposed = sum(link.allreduce(sum(sizes[i] for i in g)) for g in schedule.plan_fixed_fusion(sizes))
        else:
            exposed = _spd_exposed_comm(layers, pipeline, groups_a, groups_g, factor_bytes, link, kernels.factor_s, cpu_workers)
        timeline = schedule.inversion_timeline(dims, owners, workers, kernels.invert, link.broadcast,
                                               overlap=strategy == "spd" and not cpu_workers)
        return KfacPhases(kernels.factor_s, exposed, timeline.compute_s, timeline.broadcast_exposed_s, kernels.precondition_s)

    per_update = phases_at(median)
    steps = (job.kfac_factor_steps, job.kfac_inv_steps)
    return KfacPlan(strategy, workers, [l.name for l in layers], dims, rate, owners, groups_a, groups_g,
                    measured_kernels=anchor is not None,
                    phases_per_update=per_update, phases=per_update.amortized(*steps),
                    phases_p90=phases_at(links[0.9]).amortized(*steps))


def _fusion(layers: list[LayerProfile], pipeline: _Pipeline, factor_bytes: Callable[[int], float],
            link: _Link) -> tuple[list[list[int]], list[list[int]]]:
    """SPD's fused all-reduce groups of the A factors (forward order) and of the G factors
    (backward order), as layer indices, from the planner's linear cost model fitted to the
    all-reduce between the smallest and largest factor sizes."""
    order_g = sorted(range(len(layers)), key=lambda i: pipeline.ready_g[i])  # backward order
    sizes_a = [factor_bytes(factor_dims(l)[0]) for l in layers]
    sizes_g = [factor_bytes(factor_dims(layers[i])[1]) for i in order_g]
    lo, hi = min(sizes_a + sizes_g), max(sizes_a + sizes_g)
    alpha, beta = schedule.fit_alpha_beta(link.allreduce, lo, hi) if hi > lo else (link.allreduce(lo), 0.0)
    groups_a = schedule.plan_fusion(sizes_a, _gaps(pipeline.ready_a), alpha, beta)
    fused_g = schedule.plan_fusion(sizes_g, _gaps([pipeline.ready_g[i] for i in order_g]), alpha, beta)
    return groups_a, [[order_g[k] for k in g] for g in fused_g]


def _spd_exposed_comm(layers: list[LayerProfile], pipeline: _Pipeline, groups_a: list[list[int]], groups_g: list[list[int]],
                      factor_bytes: Callable[[int], float], link: _Link, factor_s: float, no_overlap: bool) -> float:
    """SPD's factor all-reduces on one link shared with DDP's gradient buckets.

    Each fused group's all-reduce is queued when its last factor is ready, each gradient bucket
    when DDP issues it; the link serves them in ready order. Exposed is how much later the
    iteration ends than the first-order one (``max(forward + backward, gradient comm end)``)
    beyond the factor compute itself. With ``no_overlap`` (CPU workers) the fused all-reduces
    are planned the same way but all exposed.
    """
    fused = [(groups_a, [factor_bytes(factor_dims(l)[0]) for l in layers], pipeline.ready_a),
             (groups_g, [factor_bytes(factor_dims(l)[1]) for l in layers], pipeline.ready_g)]
    if no_overlap:  # every fused all-reduce takes its time from the iteration
        return sum(link.allreduce(sum(sizes[i] for i in g)) for groups, sizes, _ in fused for g in groups)
    base_jobs = _bucket_jobs(pipeline.base_bucket_ready, pipeline.bucket_sizes, link)
    base_end = max(pipeline.base_compute_end, schedule.fifo_finish_s(base_jobs))
    jobs = _bucket_jobs(pipeline.bucket_ready, pipeline.bucket_sizes, link)
    for groups, sizes, ready in fused:
        jobs += [(max(ready[i] for i in g), link.allreduce(sum(sizes[i] for i in g))) for g in groups]
    end = max(pipeline.compute_end, schedule.fifo_finish_s(jobs))
    return max(0.0, end - base_end - factor_s)
