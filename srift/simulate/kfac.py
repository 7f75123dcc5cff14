"""Predicted K-FAC phases of one iteration (no torch): factor computation, exposed factor
all-reduce, inversions, inverse broadcasts and preconditioning, for the naive (D-KFAC), mpd and
spd (SPD-KFAC) strategies, amortized by the factor and inverse update intervals.

The fusion plan and the inversion placement come from ``srift.kfac.schedule``, the functions the
runtime uses. FLOP counts follow shared/KFAC.md 1.3:

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

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from srift.errors import SriftError
from srift.kfac import schedule
from srift.profile import LayerProfile, Profile

FP32_BYTES = 4  # factors are kept and communicated in fp32 (fp16 factor all-reduce diverges)
PHASE_KEYS = ("factor_compute", "exposed_factor_comm", "inversion", "inverse_broadcast", "preconditioning")


class CommLike(Protocol):
    def allreduce_time_s(self, size_bytes: float, quantile: float = 0.5) -> float: ...

    def broadcast_time_s(self, size_bytes: float, quantile: float = 0.5) -> float: ...


@dataclass
class KfacPlan:
    """Everything behind one K-FAC prediction (for reports, the bench script and tests).

    Attributes:
        strategy: naive, mpd or spd.
        workers: Number of workers (GPUs).
        layer_names: K-FAC layers in execution order.
        dims: Factor dimensions, ``[A_0, G_0, A_1, G_1, ...]``.
        flops_per_s: Effective FLOP/s used for factor compute, inversion and preconditioning.
        owners: Inversion owner per factor (``-1``: every worker inverts it).
        groups_a: Fused all-reduce groups of the A factors (layer indices, forward order).
        groups_g: Fused all-reduce groups of the G factors (layer indices, backward order).
        phases_per_update: Unamortized seconds: factor phases per factor update, inversion phases
            per inverse update, preconditioning per iteration.
        phases: Seconds per iteration after amortization (``kfac_phases``' result).
        measured_kernels: True when the profile's measured K-FAC kernel times were used.
    """

    strategy: str
    workers: int
    layer_names: list[str]
    dims: list[int]
    flops_per_s: float
    owners: list[int]
    groups_a: list[list[int]] = field(default_factory=list)
    groups_g: list[list[int]] = field(default_factory=list)
    phases_per_update: dict[str, float] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    measured_kernels: bool = False


def kfac_layers(profile: Profile) -> list[LayerProfile]:
    """The profile's layers that carry K-FAC factor dimensions, in execution order."""
    return [l for l in profile.layers if l.kfac_a_dim and l.kfac_g_dim]


def kfac_memory_bytes(profile: Profile) -> float:
    """Bytes per GPU of the running factors and their inverses (fp32, full matrices)."""
    return 2.0 * FP32_BYTES * sum(l.kfac_a_dim**2 + l.kfac_g_dim**2 for l in kfac_layers(profile))  # type: ignore[operator]


def factor_flops(layer: LayerProfile, batch_size: int) -> tuple[float, float]:
    """FLOPs of computing factor A and factor G of one layer for a per-GPU batch."""
    rows = batch_size * (layer.kfac_spatial or 1)
    return 2.0 * rows * layer.kfac_a_dim**2, 2.0 * rows * layer.kfac_g_dim**2  # type: ignore[operator]


def precondition_flops(layer: LayerProfile) -> float:
    """FLOPs of ``G^-1 grad A^-1`` for one layer."""
    a, g = layer.kfac_a_dim, layer.kfac_g_dim
    return 2.0 * a * g * (a + g)  # type: ignore[operator]


def _is_array(x: Any) -> bool:
    """A list, tuple or numpy array (not a string or mapping)."""
    return hasattr(x, "__len__") and hasattr(x, "__getitem__") and not isinstance(x, (str, bytes, Mapping))


def _layer_seconds(compute: Any, profile: Profile) -> list[tuple[float, float]]:
    """(forward s, backward s) per profile layer from the compute model's LayerTimes.

    Accepts the shapes a LayerTimes may take: sequences ``fwd_s``/``bwd_s`` aligned with the
    profile's layers, mappings by layer name, or a ``layers`` sequence of objects with
    ``fwd_s``/``bwd_s``; falls back to the profile's own measured times.
    """
    n = len(profile.layers)
    fwd = getattr(compute, "fwd_s", None)
    bwd = getattr(compute, "bwd_s", None)
    if isinstance(fwd, Mapping) and isinstance(bwd, Mapping):
        return [(float(fwd.get(l.name, 0.0)), float(bwd.get(l.name, 0.0))) for l in profile.layers]
    if _is_array(fwd) and _is_array(bwd) and len(fwd) == n == len(bwd):  # srift.perf.compute.LayerTimes
        return [(float(f), float(b)) for f, b in zip(fwd, bwd)]
    items = getattr(compute, "layers", None)
    if isinstance(items, Sequence) and len(items) == n:
        return [(float(getattr(i, "fwd_s", 0.0) or 0.0), float(getattr(i, "bwd_s", 0.0) or 0.0)) for i in items]
    if isinstance(compute, Mapping):
        return [(float(getattr(compute.get(l.name), "fwd_s", 0.0) or 0.0),
                 float(getattr(compute.get(l.name), "bwd_s", 0.0) or 0.0)) for l in profile.layers]
    if profile.measured:
        return [(l.fwd_s or 0.0, l.bwd_s or 0.0) for l in profile.layers]
    raise SriftError("the compute model gave no per-layer forward/backward times for K-FAC.", "use a profile with FLOPs or measured layer times.")


def effective_flops_per_s(profile: Profile, seconds: list[tuple[float, float]]) -> float:
    """FLOP/s the target achieves on the model's Linear/Conv (GEMM-like) layers; all layers
    when those carry no time."""
    ks = [(l, s) for l, s in zip(profile.layers, seconds) if l.kfac_a_dim and l.kfac_g_dim]
    for pairs in (ks, list(zip(profile.layers, seconds))):
        flops = sum(l.fwd_flops + l.bwd_flops for l, _ in pairs)
        secs = sum(f + b for _, (f, b) in pairs)
        if flops > 0 and secs > 0:
            return flops / secs
    raise SriftError(
        "cannot predict K-FAC: the profile has no FLOPs or the compute model no layer times.",
        "use a profile made by `srift profile`, which records both.",
    )


def measured_scale(profile: Profile, layers: list[LayerProfile], seconds: list[tuple[float, float]]) -> float | None:
    """Factor from the measured K-FAC kernel times (``srift profile --kfac``) to the target: the
    target's forward + backward seconds of the K-FAC layers over the measured ones (1 on the
    profiling device itself). None when some K-FAC layer lacks a measured kernel time."""
    from srift.profile import KFAC_TIME_FIELDS

    if not all(getattr(l, f) is not None for l in layers for f in KFAC_TIME_FIELDS):
        return None
    by_id = {id(l): s for l, s in zip(profile.layers, seconds)}
    target = sum(sum(by_id[id(l)]) for l in layers)
    measured = sum((l.fwd_s or 0.0) + (l.bwd_s or 0.0) for l in layers)
    return target / measured if target > 0 and measured > 0 else 1.0


def fp32_rate_scale(cluster: Any, precision: str) -> float:
    """K-FAC's factors, inversions and preconditioning run in fp32 (srift.kfac disables autocast:
    fp16 factors diverge). Under ``amp`` the model's layers run on the fp16 tensor path, so the
    rate derived from them is scaled by the GPU's fp32 / amp peak ratio; 1 otherwise."""
    if precision != "amp":
        return 1.0
    from srift.hardware import CPU, gpu

    for group in getattr(cluster, "node_groups", ()):
        if group.gpu != CPU:
            spec = gpu(group.gpu)
            return spec.peak_flops("fp32") / spec.peak_flops("amp")
    return 1.0


def plan_kfac(profile: Profile, cluster: Any, job: Any, compute: Any, comm: CommLike | None, quantile: float = 0.5) -> KfacPlan:
    """Predict one K-FAC iteration of ``job.kfac_strategy`` and return the plan behind it.

    Args:
        profile: The profile at the job's per-GPU batch.
        cluster: The cluster (``.gpus`` workers).
        job: The Job (``kfac_strategy``, ``kfac_factor_steps``, ``kfac_inv_steps``).
        compute: LayerTimes of the target GPU (per-layer forward/backward seconds).
        comm: CommModel of the cluster (None or unused for one worker).
        quantile: Quantile of the communication times (0.5 median, 0.9 for p90).
    """
    strategy = job.kfac_strategy
    workers = int(getattr(cluster, "gpus", 1) or 1)
    layers = kfac_layers(profile)
    if not layers:
        raise SriftError(
            f"profile '{profile.name}' has no K-FAC factor dimensions (no Linear/Conv2d layer with kfac_a_dim/kfac_g_dim).",
            "re-create the profile with this srift version (`srift profile`), or use --optimizer sgd.",
        )
    seconds = _layer_seconds(compute, profile)
    rate = effective_flops_per_s(profile, seconds) * fp32_rate_scale(cluster, getattr(job, "precision", None) or profile.precision)
    dims = [d for l in layers for d in (l.kfac_a_dim, l.kfac_g_dim)]  # type: ignore[misc]
    b = profile.batch_size
    distributed = workers > 1 and comm is not None
    # CPU processes (gloo) run collectives on the cores that compute: nothing overlaps there, as
    # in the first-order simulation (srift/simulate/predictor.py).
    cpu_workers = any(getattr(g, "gpu", None) == "cpu" for g in getattr(cluster, "node_groups", ()))

    # Cost models are called for the same few sizes many times (placement, timelines): memoize.
    @functools.lru_cache(maxsize=None)
    def allreduce(nbytes: float) -> float:
        return float(comm.allreduce_time_s(nbytes, quantile)) if distributed else 0.0  # type: ignore[union-attr]

    # Only where the layer times themselves come from measurements (a CPU profile says nothing
    # about a GPU's kernels, and the compute model treats it as structural there).
    anchor = measured_scale(profile, layers, seconds) if getattr(compute, "anchored", False) else None
    if anchor is not None:
        # `srift profile --kfac` timed the real kernels on the profiling device: use them, scaled
        # to the target by how much faster its model layers run.
        inverse_s = {d: s for l in layers for d, s in ((l.kfac_a_dim, l.kfac_inverse_a_s), (l.kfac_g_dim, l.kfac_inverse_g_s))}

        def invert(d: int) -> float:
            return inverse_s[d] * anchor  # type: ignore[operator]
    else:
        def invert(d: int) -> float:
            return d**3 / rate

    # What the runtime sends (srift.kfac.schedule): packed factors and inverses, every strategy.
    def factor_bytes(d: int) -> float:
        return float(schedule.factor_message_bytes(d))

    @functools.lru_cache(maxsize=None)
    def broadcast(d: int) -> float:
        return float(comm.broadcast_time_s(schedule.inverse_message_bytes(d), quantile)) if distributed else 0.0  # type: ignore[union-attr]

    if anchor is not None:
        fa = [l.kfac_factor_a_s * anchor for l in layers]  # type: ignore[operator]
        fg = [l.kfac_factor_g_s * anchor for l in layers]  # type: ignore[operator]
    else:
        fa = [factor_flops(l, b)[0] / rate for l in layers]
        fg = [factor_flops(l, b)[1] / rate for l in layers]
    factor_compute = sum(fa) + sum(fg)
    plan = KfacPlan(strategy, workers, [l.name for l in layers], dims, rate, schedule.place_local(len(dims)),
                    measured_kernels=anchor is not None)

    # ---- factor communication --------------------------------------------------------------
    if not distributed:
        exposed_comm = 0.0
    elif strategy != "spd":
        # D-KFAC / MPD: after backward every factor is enqueued at once (model order) and fused by
        # the fixed buffer; nothing to overlap with.
        sizes = [factor_bytes(d) for d in dims]
        exposed_comm = sum(allreduce(sum(sizes[i] for i in g)) for g in schedule.plan_fixed_fusion(sizes))
    else:
        exposed_comm = _spd_exposed_comm(profile, layers, seconds, fa, fg, factor_bytes, allreduce, plan, cpu_workers)

    # ---- inversions and broadcasts ---------------------------------------------------------
    if strategy == "naive" or not distributed:
        owners = schedule.place_local(len(dims))
    elif strategy == "mpd":
        owners = schedule.place_round_robin(len(dims), workers)
    else:
        owners = schedule.place_inversions(dims, workers, invert, broadcast)
    plan.owners = owners
    timeline = schedule.inversion_timeline(dims, owners, workers, invert, broadcast, overlap=strategy == "spd" and not cpu_workers)

    if anchor is not None:
        precond = sum(l.kfac_precondition_s for l in layers) * anchor  # type: ignore[misc]
    else:
        precond = sum(precondition_flops(l) for l in layers) / rate
    plan.phases_per_update = {
        "factor_compute": factor_compute,
        "exposed_factor_comm": exposed_comm,
        "inversion": timeline.compute_s,
        "inverse_broadcast": timeline.broadcast_exposed_s,
        "preconditioning": precond,
    }
    f_steps, i_steps = job.kfac_factor_steps, job.kfac_inv_steps
    plan.phases = {
        "factor_compute": factor_compute / f_steps,
        "exposed_factor_comm": exposed_comm / f_steps,
        "inversion": timeline.compute_s / i_steps,
        "inverse_broadcast": timeline.broadcast_exposed_s / i_steps,
        "preconditioning": precond,
    }
    return plan


DDP_FIRST_BUCKET_BYTES = 1 << 20  # torch.distributed's first gradient bucket (1 MiB)
DDP_BUCKET_BYTES = 25 << 20  # DDP's default bucket_cap_mb = 25


def _spd_exposed_comm(profile, layers, seconds, fa, fg, factor_bytes, allreduce, plan, no_overlap: bool = False) -> float:
    """SPD pipeline on one link shared with DDP's gradient buckets.

    A factors are computed in the forward hooks, G factors when the gradient of a layer's output
    arrives (before that layer's own backward); each fused group's all-reduce is queued when its
    last factor is ready, gradient buckets when their last gradient is; the link serves them in
    ready order. Exposed is how much later the iteration ends than the first-order one
    (``max(forward + backward, gradient comm end)``) beyond the factor compute itself. With
    ``no_overlap`` (CPU workers) the fused all-reduces are planned the same way but all exposed.
    """
    index = {id(l): i for i, l in enumerate(layers)}

    def walk(hooks: bool) -> tuple[list[float], dict[int, float], list[tuple[float, float]], float]:
        t, ready_a, ready_g = 0.0, [], {}
        for layer, (f, _) in zip(profile.layers, seconds):
            t += f
            if hooks and id(layer) in index:
                t += fa[index[id(layer)]]
                ready_a.append(t)
        buckets, filled, cap = [], 0.0, DDP_FIRST_BUCKET_BYTES
        for layer, (_, bw) in zip(reversed(profile.layers), reversed(seconds)):
            if hooks and id(layer) in index:
                t += fg[index[id(layer)]]
                ready_g[index[id(layer)]] = t
            t += bw
            if layer.grad_bytes:
                filled += layer.grad_bytes
                if filled >= cap:
                    buckets.append((t, filled))
                    filled, cap = 0.0, DDP_BUCKET_BYTES
        if filled:
            buckets.append((t, filled))
        return ready_a, ready_g, buckets, t

    _, _, base_buckets, base_compute = walk(hooks=False)
    base_end = max(base_compute, schedule.fifo_finish_s([(r, allreduce(b)) for r, b in base_buckets]))
    ready_a, ready_g_by_layer, buckets, compute_end = walk(hooks=True)

    order_g = sorted(ready_g_by_layer, key=ready_g_by_layer.get)  # backward order
    ready_g = [ready_g_by_layer[i] for i in order_g]
    sizes_a = [factor_bytes(l.kfac_a_dim) for l in layers]
    sizes_g = [factor_bytes(layers[i].kfac_g_dim) for i in order_g]
    # The planner's linear cost model, fitted to the cluster's all-reduce between the smallest and
    # largest factor sizes.
    lo, hi = min(sizes_a + sizes_g), max(sizes_a + sizes_g)
    alpha, beta = schedule.fit_alpha_beta(allreduce, lo, hi) if hi > lo else (allreduce(lo), 0.0)

    def gaps(ready: list[float]) -> list[float]:
        return [ready[0]] + [b - a for a, b in zip(ready, ready[1:])]

    plan.groups_a = schedule.plan_fusion(sizes_a, gaps(ready_a), alpha, beta)
    groups_g = schedule.plan_fusion(sizes_g, gaps(ready_g), alpha, beta)
    plan.groups_g = [[order_g[k] for k in g] for g in groups_g]
    fused = [(groups, sizes, ready) for groups, sizes, ready in ((plan.groups_a, sizes_a, ready_a), (groups_g, sizes_g, ready_g))]
    if no_overlap:  # every fused all-reduce takes its time from the iteration
        return sum(allreduce(sum(sizes[i] for i in g)) for groups, sizes, _ in fused for g in groups)
    jobs = [(r, allreduce(b)) for r, b in buckets]
    for groups, sizes, ready in fused:
        jobs += [(max(ready[i] for i in g), allreduce(sum(sizes[i] for i in g))) for g in groups]
    end = max(compute_end, schedule.fifo_finish_s(jobs))
    factor_compute = sum(fa) + sum(fg)
    return max(0.0, end - base_end - factor_compute)


def kfac_phases(profile: Profile, cluster: Any, job: Any, compute: Any, comm: CommLike | None, quantile: float = 0.5) -> dict[str, float]:
    """Seconds per iteration of each K-FAC phase, amortized by the update intervals.

    Returns:
        ``factor_compute``, ``exposed_factor_comm``, ``inversion``, ``inverse_broadcast`` and
        ``preconditioning``; they add to what K-FAC puts on top of the first-order iteration.
    """
    return plan_kfac(profile, cluster, job, compute, comm, quantile).phases
