"""Predicted K-FAC phases of one iteration (no torch): factor computation, exposed factor
all-reduce, inversions, inverse broadcasts, the interference of the hidden collectives, and
preconditioning, for the naive (D-KFAC), mpd and spd (SPD-KFAC) strategies, amortized by the
factor and inverse update intervals.

What is priced is what srift's runtime (``srift.kfac``) does:

* the K-FAC blocks are the runtime's: one per Linear/Conv2d, ``groups`` per grouped convolution
  (``srift.simulate.kfac_blocks``), factors in the order ``A_0, G_0, A_1, G_1, ...``;
* the kernels' seconds come from the K-FAC kernel model (``srift.perf.kfac_kernels``: measured
  tables, or a GPU's figures derived from the compute model and documented assumptions), for the
  job's inverse method; a profile made with ``srift profile --kfac`` carries the kernels' measured
  times instead, scaled to the target by how much faster its model layers run;
* the messages, the fusion and the placement come from ``srift.kfac.schedule``, the functions the
  runtime calls, with the inputs the runtime gives them: the SPD fusion planner and the inversion
  placement take ``alpha + beta * bytes`` through the all-reduce at 4 bytes and 1 MiB
  (``Comm.calibrate_allreduce``), and the placement prices an inversion at ``d^3`` over the rate the
  runtime measures at ``d = 256`` (``srift.kfac.timing.measure_inv_flops``); the phases are then timed with the
  full kernel and communication models;
* SPD's factor all-reduces share one link with DDP's gradient buckets (``bucket_layout``, the one
  DDP bucket rule); collectives hidden behind computation (SPD's factor all-reduces, its inverse
  broadcasts behind the inversions) slow that computation by the communication model's
  ``overlap_interference`` per hidden second, scaled by the share the GPUs move
  (``gpu_side_fraction``), as the first-order prediction charges DDP's hidden all-reduce. On CPU
  workers (gloo) the collectives' threads reduce on the cores that compute: a hidden second costs
  a second of computation (interference 1), so the iteration is the serial sum, as the first-order
  CPU prediction has it, and the time shows where the runtime's timers see it (in the hooks and
  inversions, not as exposed communication).

A plan is made once per prediction, with the median communication times (as the runtime plans
with one cost model); the p90 phases time the same plan with the p90 communication times.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from srift.cluster import Cluster
from srift.errors import SriftError
from srift.job import INVERSE, MPD, NAIVE, SPD, Job
from srift.kfac import schedule
from srift.perf.compute import LayerTimes
from srift.perf.kfac_kernels import DeviceKernels, device_kernels, half_precision
from srift.profile import Profile
from srift.simulate.breakdown import (EXPOSED_FACTOR_COMM, FACTOR_COMPUTE, INVERSE_BROADCAST, INVERSION,
                                     KFAC_COMM_INTERFERENCE, PRECONDITIONING, Phase)
from srift.simulate.ddp import BucketLayout, bucket_layout, bucket_ready_s
from srift.simulate.kfac_blocks import (KfacBlock, factor_dims, kfac_blocks, kfac_layers, kfac_memory_bytes, layer_blocks,
                                       measured_scale)

# The blocks (srift.simulate.kfac_blocks) are imported from here too.
__all__ = ["KfacBlock", "KfacPhases", "KfacPlan", "factor_dims", "kfac_blocks", "kfac_layers", "kfac_memory_bytes", "layer_blocks",
           "measured_scale", "plan_kfac", "runtime_costs"]

QUANTILES = (0.5, 0.9)
# What the runtime measures its placement and fusion costs with (srift.kfac.preconditioner and
# srift.kfac.distributed): the inversion rate at one size, the all-reduce at two sizes.
PROBE_DIM = 256
PROBE_SMALL_BYTES = 4.0
PROBE_LARGE_BYTES = 4.0 * 2**18


class CommLike(Protocol):
    """What the plan needs of a communication model (``srift.perf.comm.CommModel``)."""

    def allreduce_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray: ...

    def broadcast_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray: ...


@dataclass(frozen=True)
class KfacPhases:
    """Seconds of each K-FAC phase: what K-FAC adds to the first-order iteration.

    ``kfac_comm_interference`` is what the collectives hidden behind computation (SPD's factor
    all-reduces and inverse broadcasts) cost that computation."""

    factor_compute: float
    exposed_factor_comm: float
    inversion: float
    inverse_broadcast: float
    kfac_comm_interference: float
    preconditioning: float

    def as_dict(self) -> dict[Phase, float]:
        """The phases by name, in iteration order (srift.simulate.breakdown.KFAC_PHASES)."""
        return {FACTOR_COMPUTE: self.factor_compute, EXPOSED_FACTOR_COMM: self.exposed_factor_comm, INVERSION: self.inversion,
                INVERSE_BROADCAST: self.inverse_broadcast, KFAC_COMM_INTERFERENCE: self.kfac_comm_interference,
                PRECONDITIONING: self.preconditioning}

    @property
    def total_s(self) -> float:
        return sum(self.as_dict().values())


@dataclass(frozen=True)
class _PerUpdate:
    """Unamortized seconds: factor phases per factor update, inversion phases per inverse
    update, preconditioning per iteration."""

    factor_compute: float
    exposed_factor_comm: float
    factor_interference: float
    inversion: float
    inverse_broadcast: float
    broadcast_interference: float
    preconditioning: float

    def amortized(self, factor_steps: int, inv_steps: int) -> KfacPhases:
        return KfacPhases(self.factor_compute / factor_steps, self.exposed_factor_comm / factor_steps,
                          self.inversion / inv_steps, self.inverse_broadcast / inv_steps,
                          self.factor_interference / factor_steps + self.broadcast_interference / inv_steps,
                          self.preconditioning)


@dataclass(frozen=True)
class KfacPlan:
    """Everything behind one K-FAC prediction (for the predictor, the scripts and tests).

    Attributes:
        strategy: naive, mpd or spd.
        inverse_method: inverse or eigen.
        workers: Number of workers (GPUs).
        layer_names: K-FAC blocks in execution order.
        dims: Factor dimensions, ``[A_0, G_0, A_1, G_1, ...]``.
        kernels: The kernel model used (its ``basis`` says where its figures come from).
        owners: Inversion owner per factor (``schedule.LOCAL``: every worker inverts it).
        groups_a: Fused all-reduce groups of the A factors (block indices, forward order).
        groups_g: Fused all-reduce groups of the G factors (block indices, backward order).
        measured_kernels: True when the profile's measured K-FAC kernel times were used.
        interference: Seconds charged per second of hidden K-FAC collective.
        interference_split: ``kfac_comm_interference`` per iteration: (from the hidden factor
            all-reduces, from the inverse broadcasts hidden behind the inversions).
        phases_per_update: Median seconds, unamortized (factor phases per factor update,
            inversion phases per inverse update, preconditioning per iteration).
        phases: Median seconds per iteration (amortized).
        phases_p90: The same plan timed with the p90 communication times, per iteration.
    """

    strategy: str
    inverse_method: str
    workers: int
    layer_names: list[str]
    dims: list[int]
    kernels: DeviceKernels
    owners: list[int]
    groups_a: list[list[int]]
    groups_g: list[list[int]]
    measured_kernels: bool
    interference: float
    interference_split: tuple[float, float]
    phases_per_update: KfacPhases
    phases: KfacPhases
    phases_p90: KfacPhases

    @property
    def off_rank(self) -> int:
        """Factors inverted by one worker and broadcast."""
        return sum(o != schedule.LOCAL for o in self.owners)


@dataclass(frozen=True)
class _Kernels:
    """Seconds of K-FAC's own work on the target, per block (hooks) or in total."""

    factor_a_s: list[float]  # per block, in the forward hook
    factor_g_s: list[float]  # per block, in the output-gradient hook
    step_s: float  # step()'s handling of every factor per factor update
    precondition_s: float
    invert: Callable[[int], float]
    inversion_overhead_s: float  # per inverse update: pi-damping's two traces read per block
    pack: Callable[[int], float]  # an owner packs the inverse it broadcasts (inverse method)
    unpack: Callable[[int], float]  # every other worker unpacks it

    @property
    def hooks_s(self) -> float:
        return sum(self.factor_a_s) + sum(self.factor_g_s)

    @classmethod
    def model(cls, blocks: list[KfacBlock], k: DeviceKernels, method: str, half: bool) -> "_Kernels":
        fa = [k.factor_a_s(b.rows, b.width, b.conv, b.input_elements, half, b.bias) for b in blocks]
        fg = [k.factor_g_s(b.rows, b.g_dim, b.conv, half) for b in blocks]
        step = sum(k.factor_step_s(d) for b in blocks for d in (b.a_dim, b.g_dim))
        pre = sum(k.precondition_s(b.a_dim, b.g_dim, method) for b in blocks)
        return cls(fa, fg, step, pre, functools.lru_cache(maxsize=None)(lambda d: k.invert_s(d, method)),
                   2.0 * k.sync_s * len(blocks), *cls._packing(k, method))

    @staticmethod
    def _packing(k: DeviceKernels, method: str) -> tuple[Callable[[int], float], Callable[[int], float]]:
        if method != INVERSE:  # an eigenbasis is sent and used as it is
            return (lambda d: 0.0), (lambda d: 0.0)
        return k.pack_s, k.unpack_s

    @classmethod
    def measured(cls, profile: Profile, blocks: list[KfacBlock], k: DeviceKernels, anchor: float) -> "_Kernels":
        """``srift profile --kfac``'s times (a grouped layer's summed over its groups, split evenly),
        scaled to the target; the step's handling from the model."""
        per_layer = {i: sum(1 for b in blocks if b.layer == i) for i in {b.layer for b in blocks}}
        layers = profile.layers
        fa = [(layers[b.layer].kfac_factor_a_s or 0.0) * anchor / per_layer[b.layer] for b in blocks]
        fg = [(layers[b.layer].kfac_factor_g_s or 0.0) * anchor / per_layer[b.layer] for b in blocks]
        inverse_s = {d: (s or 0.0) * anchor for b in blocks
                     for d, s in zip((b.a_dim, b.g_dim), (layers[b.layer].kfac_inverse_a_s, layers[b.layer].kfac_inverse_g_s))}
        pre = sum((layers[i].kfac_precondition_s or 0.0) * anchor for i in per_layer)
        step = sum(k.factor_step_s(d) for b in blocks for d in (b.a_dim, b.g_dim))
        return cls(fa, fg, step, pre, lambda d: inverse_s[d], 2.0 * k.sync_s * len(blocks), *cls._packing(k, "inverse"))


class _Link:
    """All-reduce and broadcast seconds at one quantile, memoized (the planner asks for the same
    few sizes many times); zero for one worker or without a communication model."""

    def __init__(self, comm: CommLike | None, workers: int, quantile: float, method: str) -> None:
        self.comm = comm if workers > 1 else None
        self.quantile = quantile
        self.method = method
        self.allreduce = functools.lru_cache(maxsize=None)(self._allreduce)
        self.broadcast = functools.lru_cache(maxsize=None)(self._broadcast)

    @property
    def distributed(self) -> bool:
        return self.comm is not None

    def _allreduce(self, nbytes: float) -> float:
        return float(self.comm.allreduce_time_s(nbytes, self.quantile)) if self.comm is not None else 0.0

    def _broadcast(self, dim: int) -> float:
        if self.comm is None:
            return 0.0
        return float(self.comm.broadcast_time_s(schedule.inverse_message_bytes(dim, self.method), self.quantile))


@dataclass(frozen=True)
class _Pipeline:
    """When SPD's factors and DDP's gradient buckets are ready in one iteration with K-FAC's hooks
    (A factors computed in forward hooks, G factors when a layer's output gradient arrives, before
    the layer's own backward), and in the first-order iteration without them."""

    ready_a: list[float]  # per block, forward order
    ready_g: list[float]  # per block, block order
    bucket_ready: np.ndarray  # per bucket, with the hooks
    bucket_sizes: np.ndarray
    compute_end: float  # with the hooks
    base_bucket_ready: np.ndarray  # per bucket, first-order
    base_compute_end: float

    @classmethod
    def of(cls, profile: Profile, compute: LayerTimes, blocks: list[KfacBlock], kernels: _Kernels,
           layout: BucketLayout) -> "_Pipeline":
        fa = np.zeros(len(profile.layers))
        fg = np.zeros(len(profile.layers))
        for b, a_s, g_s in zip(blocks, kernels.factor_a_s, kernels.factor_g_s):
            fa[b.layer] += a_s
            fg[b.layer] += g_s
        fwd = np.asarray(compute.fwd_s, dtype=float) + fa
        bwd = np.asarray(compute.bwd_s, dtype=float) + fg
        forward_end = float(fwd.sum())
        fwd_start = np.cumsum(fwd) - fwd
        # Backward visits layers in reverse: a layer's backward (its G factors first) starts at
        # forward_end + the backward seconds of every later layer.
        bwd_start = forward_end + np.cumsum(bwd[::-1])[::-1] - bwd
        ready_a: list[float] = []
        ready_g: list[float] = []
        done_a: dict[int, float] = {}
        done_g: dict[int, float] = {}
        for b, a_s, g_s in zip(blocks, kernels.factor_a_s, kernels.factor_g_s):
            # A layer's blocks are computed one after another after its forward (A) / before its backward (G).
            done_a[b.layer] = done_a.get(b.layer, fwd_start[b.layer] + compute.fwd_s[b.layer]) + a_s
            done_g[b.layer] = done_g.get(b.layer, bwd_start[b.layer]) + g_s
            ready_a.append(float(done_a[b.layer]))
            ready_g.append(float(done_g[b.layer]))
        ready, end = bucket_ready_s(forward_end, bwd, layout)
        base_ready, base_end = bucket_ready_s(compute.forward_s, np.asarray(compute.bwd_s, dtype=float), layout)
        return cls(ready_a, ready_g, ready, layout.sizes_bytes, end, base_ready, base_end)


def _gaps(ready: Sequence[float]) -> list[float]:
    return [ready[0]] + [b - a for a, b in zip(ready, ready[1:])]


def _bucket_jobs(ready: np.ndarray, sizes: np.ndarray, link: _Link) -> list[tuple[float, float]]:
    """(issue time, all-reduce seconds) of each gradient bucket: DDP issues buckets in order, so a
    bucket goes out once it and every bucket before it is ready."""
    issue = np.maximum.accumulate(ready) if len(ready) else ready
    return [(float(t), link.allreduce(float(s))) for t, s in zip(issue, sizes)]


def _device_kernels(cluster: Cluster, precision: str) -> DeviceKernels:
    """The kernel model of the cluster's slowest device for K-FAC (a mixed cluster waits for it)."""
    devices = sorted({g.gpu for g in cluster.node_groups})
    models = [device_kernels(d, precision) for d in devices]
    return max(models, key=lambda k: k.invert_s(1024) + 1e9 / k.gemm_flops_per_s)


def _interference(comm: CommLike | None, sizes_bytes: list[float]) -> float:
    """Seconds per hidden second of K-FAC collective: the communication model's
    ``overlap_interference`` times the share of the time the GPUs move the data."""
    params = getattr(comm, "params", None)
    side = getattr(comm, "gpu_side_fraction", None)
    if params is None or side is None or not sizes_bytes:
        return 0.0
    return float(params.overlap_interference) * float(side(np.asarray(sizes_bytes, dtype=float)))


def runtime_costs(kernels: DeviceKernels, method: str, link: _Link) -> tuple[Callable[[int], float], float, float]:
    """The costs the runtime plans with: ``d^3`` over the inversion rate it measures at
    ``PROBE_DIM`` on its device, and the all-reduce's ``alpha, beta`` through
    ``PROBE_SMALL_BYTES`` and ``PROBE_LARGE_BYTES``."""
    rate = PROBE_DIM**3 / kernels.invert_s(PROBE_DIM, method)
    alpha, beta = (schedule.fit_alpha_beta(link.allreduce, PROBE_SMALL_BYTES, PROBE_LARGE_BYTES)
                   if link.distributed else (0.0, 0.0))
    return (lambda d: d**3 / rate), alpha, beta


def plan_kfac(profile: Profile, cluster: Cluster, job: Job, compute: LayerTimes, comm: CommLike | None,
              layout: BucketLayout | None = None, *, kernels: DeviceKernels | None = None,
              inverse_method: str = "inverse", interference: float | None = None, local_below: int = 0) -> KfacPlan:
    """Plan one K-FAC iteration of ``job.kfac_strategy`` and predict its phases.

    Args:
        profile: The profile at the job's per-GPU batch.
        cluster: The cluster (``gpus`` workers; on CPU workers a hidden collective costs its
            time in full).
        job: The Job (``kfac_strategy``, ``kfac_factor_steps``, ``kfac_inv_steps``, ``precision``).
        compute: The compute model's times of ``profile`` on the target GPU.
        comm: Communication model of the cluster (None or unused for one worker).
        layout: The profile's DDP gradient buckets (default: ``bucket_layout(profile)``).
        kernels: The K-FAC kernel model (default: the cluster's device, ``device_kernels``).
        inverse_method: ``inverse`` (damped Cholesky inverse) or ``eigen`` (``eigh``).
        interference: Seconds per hidden second of K-FAC collective (default: from ``comm``,
            as the first-order prediction charges DDP's; 1 on CPU workers).
        local_below: ``spd``: invert factors smaller than this on every worker and place the others
            (the SPD-KFAC code's fixed threshold, ``schedule.place_inversions``); 0: the runtime's
            cost criterion.

    Raises:
        SriftError: for a profile without K-FAC factor dimensions, or an unknown inverse method.
    """
    strategy, workers = job.kfac_strategy, cluster.gpus
    if inverse_method not in schedule.INVERSE_METHODS:
        raise SriftError(f"unknown K-FAC inverse method '{inverse_method}'.", f"use one of {', '.join(schedule.INVERSE_METHODS)}.")
    blocks = kfac_blocks(profile)
    if not blocks:
        raise SriftError(
            f"profile '{profile.name}' has no K-FAC factor dimensions (no Linear/Conv2d layer with kfac_a_dim/kfac_g_dim).",
            "re-create the profile with this srift version (`srift profile`), or use --optimizer sgd.",
        )
    precision = job.precision or profile.precision
    device = kernels or _device_kernels(cluster, precision)
    # `srift profile --kfac` times the inverse method's kernels: an eigen job is priced by the model.
    anchor = measured_scale(profile, compute) if inverse_method == INVERSE else None
    work = (_Kernels.measured(profile, blocks, device, anchor) if anchor is not None
            else _Kernels.model(blocks, device, inverse_method, half_precision(precision)))
    dims = [d for b in blocks for d in (b.a_dim, b.g_dim)]
    # CPU processes (gloo) run collectives on the cores that compute: what hides behind compute
    # slows it by as much (the first-order CPU simulation, srift/simulate/plans.py, adds them).
    cpu_workers = cluster.cpu_workers
    spd = strategy == SPD
    factor_bytes = _factor_bytes

    links = {q: _Link(comm, workers, q, inverse_method) for q in QUANTILES}
    median = links[0.5]
    pipeline = _Pipeline.of(profile, compute, blocks, work, layout or bucket_layout(profile)) if spd else None
    invert_guess, alpha, beta = runtime_costs(device, inverse_method, median)

    # ---- the plan (median costs, as the runtime decides) -------------------------------------
    groups_a: list[list[int]] = []
    groups_g: list[list[int]] = []
    if pipeline is not None and median.distributed:
        groups_a, groups_g = _fusion(blocks, pipeline, factor_bytes, alpha, beta)
    if strategy == NAIVE or not median.distributed:
        owners = schedule.place_local(len(dims))
    elif strategy == MPD:
        owners = schedule.place_round_robin(len(dims), workers)
    else:
        owners = schedule.place_inversions(
            dims, workers, invert_guess, lambda d: alpha + beta * schedule.inverse_message_bytes(d, inverse_method),
            local_below)
    sizes = [factor_bytes(d) for d in dims]
    overlap = median.distributed
    if not overlap:
        k = 0.0
    elif interference is not None:
        k = interference
    else:
        k = 1.0 if cpu_workers else _interference(comm, sizes)
    plan = _Schedule(blocks, dims, sizes, owners, (groups_a, groups_g), pipeline, work, workers, spd, overlap, k,
                     cpu_workers)
    per_update = plan.phases_at(median)
    steps = (job.kfac_factor_steps, job.kfac_inv_steps)
    return KfacPlan(strategy, inverse_method, workers, [b.name for b in blocks], dims, device, owners, groups_a, groups_g,
                    measured_kernels=anchor is not None, interference=k,
                    interference_split=(per_update.factor_interference / steps[0], per_update.broadcast_interference / steps[1]),
                    phases_per_update=per_update.amortized(1, 1), phases=per_update.amortized(*steps),
                    phases_p90=plan.phases_at(links[0.9]).amortized(*steps))


@dataclass(frozen=True)
class _Schedule:
    """A K-FAC iteration as the runtime plans it (median costs): what ``phases_at`` times at a
    quantile of the collectives.

    Attributes:
        blocks, dims: The factored layers, and their factor dimensions (A and G of each, in order).
        sizes: Each factor's all-reduce message in bytes.
        owners: The worker that inverts each factor (``schedule.LOCAL``: every worker).
        groups: SPD's fused all-reduce groups of the A and of the G factors (empty otherwise).
        pipeline: SPD's pipeline of factor all-reduces beside backward (None otherwise).
        work: The K-FAC kernels' seconds.
        workers: Processes.
        spd: The SPD strategy (broadcasts overlap the inversions).
        overlap: The collectives can hide behind compute (a distributed job).
        k: Seconds per hidden second of collective.
        cpu_workers: CPU processes (gloo): collectives share the cores that compute.
    """

    blocks: list[KfacBlock]
    dims: list[int]
    sizes: list[float]
    owners: list[int]
    groups: tuple[list[list[int]], list[list[int]]]
    pipeline: _Pipeline | None
    work: _Kernels
    workers: int
    spd: bool
    overlap: bool
    k: float
    cpu_workers: bool

    def phases_at(self, link: _Link) -> _PerUpdate:
        """One update's phases with the collectives of ``link`` (a quantile)."""
        dims, owners, work, workers, sizes = self.dims, self.owners, self.work, self.workers, self.sizes
        spd, overlap, k = self.spd, self.overlap, self.k
        hidden_factor = 0.0
        if not link.distributed:
            exposed = 0.0
        elif self.pipeline is None:
            # D-KFAC / MPD: after backward every factor is enqueued at once (model order) and fused
            # by the fixed buffer, as the runtime does; nothing to overlap with.
            exposed = sum(link.allreduce(sum(sizes[i] for i in g)) for g in schedule.plan_fixed_fusion(sizes))
        else:
            exposed, total = _spd_exposed_comm(self.blocks, self.pipeline, *self.groups, _factor_bytes, link,
                                               work.hooks_s, share_link=not self.cpu_workers)
            hidden_factor = max(0.0, total - exposed)
        # The timeline walks factor indices: an owned factor costs its inversion and the packing of
        # its result before the broadcast is issued, a local one its inversion.
        timeline = schedule.inversion_timeline(
            list(range(len(dims))), owners, workers,
            lambda i: work.invert(dims[i]) + (work.pack(dims[i]) if owners[i] != schedule.LOCAL else 0.0),
            lambda i: link.broadcast(dims[i]), overlap=spd and overlap)
        moved = [d for d, o in zip(dims, owners) if o != schedule.LOCAL]
        sent = sum(link.broadcast(d) for d in moved)
        hidden_bcast = max(0.0, sent - timeline.broadcast_exposed_s) if spd and overlap else 0.0
        # Every worker unpacks the inverses it received, after the last broadcast: the one that owns
        # the least unpacks the most.
        owned = [0.0] * workers
        for d, o in zip(dims, owners):
            if o != schedule.LOCAL:
                owned[o] += work.unpack(d)
        unpack = sum(work.unpack(d) for d in moved) - min(owned) if moved else 0.0
        return _PerUpdate(work.hooks_s + work.step_s, exposed, k * hidden_factor,
                          timeline.compute_s + work.inversion_overhead_s, timeline.broadcast_exposed_s + unpack,
                          k * hidden_bcast, work.precondition_s)


def _factor_bytes(d: int) -> float:
    """A ``d x d`` factor's all-reduce message in bytes."""
    return float(schedule.factor_message_bytes(d))


def _fusion(blocks: list[KfacBlock], pipeline: _Pipeline, factor_bytes: Callable[[int], float],
            alpha: float, beta: float) -> tuple[list[list[int]], list[list[int]]]:
    """SPD's fused all-reduce groups of the A factors (forward order) and of the G factors
    (backward order), as block indices, with the runtime's linear cost model."""
    order_g = sorted(range(len(blocks)), key=lambda i: pipeline.ready_g[i])  # backward order
    sizes_a = [factor_bytes(b.a_dim) for b in blocks]
    sizes_g = [factor_bytes(blocks[i].g_dim) for i in order_g]
    groups_a = schedule.plan_fusion(sizes_a, _gaps(pipeline.ready_a), alpha, beta)
    fused_g = schedule.plan_fusion(sizes_g, _gaps([pipeline.ready_g[i] for i in order_g]), alpha, beta)
    return groups_a, [[order_g[k] for k in g] for g in fused_g]


def _spd_exposed_comm(blocks: list[KfacBlock], pipeline: _Pipeline, groups_a: list[list[int]], groups_g: list[list[int]],
                      factor_bytes: Callable[[int], float], link: _Link, hooks_s: float,
                      share_link: bool = True) -> tuple[float, float]:
    """SPD's factor all-reduces on one link shared with DDP's gradient buckets: (exposed seconds,
    seconds of factor all-reduce in all).

    Each fused group's all-reduce is queued when its last factor is ready, each gradient bucket
    when DDP issues it; the link serves them in ready order. Exposed is how much later the
    iteration ends than the first-order one (``max(forward + backward, gradient comm end)``)
    beyond the factor hooks' own compute. Without ``share_link`` (CPU workers: K-FAC's gloo group
    has threads of its own and its all-reduces are core time, not link time) the factor
    all-reduces queue only behind each other and what runs past the end of backward is exposed.
    """
    fused = [(groups_a, [factor_bytes(b.a_dim) for b in blocks], pipeline.ready_a),
             (groups_g, [factor_bytes(b.g_dim) for b in blocks], pipeline.ready_g)]
    factor_jobs = [(max(ready[i] for i in g), link.allreduce(sum(sizes[i] for i in g)))
                   for groups, sizes, ready in fused for g in groups]
    total = sum(cost for _, cost in factor_jobs)
    if not share_link:
        return max(0.0, schedule.fifo_finish_s(factor_jobs) - pipeline.compute_end), total
    base_jobs = _bucket_jobs(pipeline.base_bucket_ready, pipeline.bucket_sizes, link)
    base_end = max(pipeline.base_compute_end, schedule.fifo_finish_s(base_jobs))
    jobs = _bucket_jobs(pipeline.bucket_ready, pipeline.bucket_sizes, link) + factor_jobs
    end = max(pipeline.compute_end, schedule.fifo_finish_s(jobs))
    return max(0.0, end - base_end - hooks_s), total
