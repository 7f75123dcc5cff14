"""K-FAC communication and inversion schedules: pure functions, no torch.

The same functions decide what the runtime (``srift.kfac``) does and what the simulator
(``srift.simulate.kfac``) predicts, so what is predicted is what runs:

* ``factor_message_bytes`` / ``inverse_message_bytes``: what one factor's all-reduce and one
  inverse's broadcast carry (fp32; symmetric matrices packed as their upper triangle).
* ``plan_fixed_fusion``: D-KFAC's fusion (Horovod's fusion buffer: consecutive tensors packed
  into buffers of at most ``FUSION_BUFFER_BYTES``), used by the ``naive`` and ``mpd`` strategies.
* ``plan_fusion``: SPD-KFAC's dynamic tensor fusion of factor all-reduces (the MG-WFBP merge
  rule applied to factors ready one after another, cost model ``alpha + beta * bytes``).
* ``pipeline_finish_s`` / ``fifo_finish_s``: when the last all-reduce on one link ends.
* ``place_inversions`` (SPD load balancing with the "invert locally when cheaper than
  broadcasting" criterion), ``place_round_robin`` (MPD) and ``place_local`` (naive D-KFAC).
* ``inversion_timeline``: makespan of the inversion phase and end of the inverse broadcasts.

Sizes are in bytes, times in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from srift.job import EIGEN, INVERSE, KFAC_INVERSE_METHODS

LOCAL = -1  # owner value: every worker inverts this factor itself (no broadcast)
FP32_BYTES = 4  # factors and inverses are kept and sent in fp32 (fp16 factor all-reduce diverges)
# Horovod's default fusion threshold (HOROVOD_FUSION_THRESHOLD, 64 MiB): the buffer the SPD-KFAC
# paper's D-KFAC baseline had its per-factor asynchronous all-reduces fused into.
FUSION_BUFFER_BYTES = 64 * 2**20
INVERSE_METHODS = KFAC_INVERSE_METHODS  # the vocabulary lives in srift.job


def packed_elements(dim: int) -> int:
    """Elements of the upper triangle (diagonal included) of a ``dim x dim`` symmetric matrix."""
    return dim * (dim + 1) // 2


def factor_message_bytes(dim: int) -> int:
    """Bytes one ``dim x dim`` factor adds to an all-reduce: its upper triangle in fp32 (every
    strategy packs; the factor is symmetric, so nothing is lost)."""
    if dim < 1:
        raise ValueError(f"factor dimension must be at least 1, got {dim}")
    return FP32_BYTES * packed_elements(dim)


def inverse_message_bytes(dim: int, method: str = "inverse") -> int:
    """Bytes of one broadcast of a factor's second-order result: the packed upper triangle of the
    damped inverse (``inverse``), or the ``dim x dim`` eigenvectors plus ``dim`` eigenvalues
    (``eigen``: the eigenbasis is not symmetric)."""
    if dim < 1:
        raise ValueError(f"factor dimension must be at least 1, got {dim}")
    if method == INVERSE:
        return FP32_BYTES * packed_elements(dim)
    if method == EIGEN:
        return FP32_BYTES * (dim + 1) * dim
    raise ValueError(f"method must be one of {', '.join(INVERSE_METHODS)}, got {method!r}")


def plan_fixed_fusion(sizes_bytes: Sequence[float], buffer_bytes: float = FUSION_BUFFER_BYTES) -> list[list[int]]:
    """Horovod's tensor fusion of tensors enqueued together (D-KFAC's factor all-reduces).

    Walking the tensors in the order they were enqueued, each joins the current buffer while the
    buffer's total stays at most ``buffer_bytes``; otherwise the buffer is sent and a new one
    starts. A tensor larger than the buffer is sent alone. (Horovod looks ahead past a tensor that
    does not fit only for tensors of another dtype or device; factors are all fp32 on one device,
    so the rule is this greedy, order-preserving one.)

    Args:
        sizes_bytes: Message size of each tensor, in enqueue order.
        buffer_bytes: Fusion buffer size.

    Returns:
        Groups of consecutive tensor indices; every index appears once.

    Raises:
        ValueError: for a non-positive buffer or a negative size.
    """
    if buffer_bytes <= 0:
        raise ValueError(f"buffer_bytes must be positive, got {buffer_bytes}")
    if any(s < 0 for s in sizes_bytes):
        raise ValueError("sizes_bytes must be non-negative")
    groups: list[list[int]] = []
    current: list[int] = []
    filled = 0.0
    for i, size in enumerate(sizes_bytes):
        if current and filled + size > buffer_bytes:
            groups.append(current)
            current, filled = [], 0.0
        current.append(i)
        filled += size
    if current:
        groups.append(current)
    return groups


def _ready_times(gaps_s: Sequence[float]) -> list[float]:
    """Cumulative ready time of each tensor from the compute gap before it."""
    out, t = [], 0.0
    for g in gaps_s:
        t += float(g)
        out.append(t)
    return out


def plan_fusion(
    sizes_bytes: Sequence[float],
    gaps_s: Sequence[float],
    alpha_s: float,
    beta_s_per_byte: float,
) -> list[list[int]]:
    """Group consecutive tensors whose all-reduces should be fused (SPD-KFAC, "SP w/ OTF").

    Tensor ``l`` becomes ready ``gaps_s[l]`` seconds after tensor ``l-1`` (``gaps_s[0]`` after
    the start). All-reduces run one at a time on one link, in order, each costing
    ``alpha_s + beta_s_per_byte * size``. Walking the tensors in order, ``l`` is merged into
    ``l+1`` when ``l+1`` is ready before ``l``'s all-reduce would end and either ``l``'s
    all-reduce has not started yet when ``l+1`` is ready (merging is free) or waiting for
    ``l+1`` costs less than one start-up latency ``alpha_s``.

    Args:
        sizes_bytes: Size of each tensor, in ready order.
        gaps_s: Compute time before each tensor is ready (same length).
        alpha_s: All-reduce start-up latency.
        beta_s_per_byte: All-reduce seconds per byte.

    Returns:
        Groups of tensor indices, in order; every index appears once.

    Raises:
        ValueError: for mismatched lengths or negative inputs.
    """
    n = len(sizes_bytes)
    if len(gaps_s) != n:
        raise ValueError(f"sizes_bytes has {n} entries but gaps_s has {len(gaps_s)}")
    if alpha_s < 0 or beta_s_per_byte < 0 or any(s < 0 for s in sizes_bytes) or any(g < 0 for g in gaps_s):
        raise ValueError("sizes, gaps, alpha and beta must be non-negative")
    if n == 0:
        return []
    ready = _ready_times(gaps_s)
    p = [float(s) for s in sizes_bytes]
    t_c = [alpha_s + beta_s_per_byte * s for s in p]
    # tau: when tensor l's all-reduce starts (one link, in order). Merging l into l+1 changes only
    # the start times after l, so it is carried forward instead of recomputed.
    tau = ready[0]
    groups: list[list[int]] = []
    current = [0]
    for l in range(n - 1):
        nxt = ready[l + 1]
        merge = nxt < tau + t_c[l] and (tau > nxt or nxt - tau < alpha_s)
        if merge:
            p[l + 1] += p[l]
            p[l] = 0.0
            t_c[l] = 0.0
            t_c[l + 1] = alpha_s + beta_s_per_byte * p[l + 1]
            current.append(l + 1)
        else:
            groups.append(current)
            current = [l + 1]
        tau = max(tau + t_c[l], nxt)
    groups.append(current)
    return groups


def pipeline_finish_s(
    groups: Sequence[Sequence[int]],
    sizes_bytes: Sequence[float],
    ready_s: Sequence[float],
    allreduce_time_s: Callable[[float], float],
    link_free_s: float = 0.0,
) -> float:
    """Time the last group's all-reduce ends: a group starts when its last tensor is ready and
    the link is free (one all-reduce at a time, in order).

    Args:
        groups: Fused groups (``plan_fusion``'s output, or one tensor per group).
        sizes_bytes: Tensor sizes.
        ready_s: Absolute ready time of each tensor.
        allreduce_time_s: Cost of an all-reduce of a given number of bytes.
        link_free_s: When the link becomes free for the first group.
    """
    t = link_free_s
    for group in groups:
        if not group:
            continue
        start = max(t, max(ready_s[i] for i in group))
        t = start + allreduce_time_s(sum(sizes_bytes[i] for i in group))
    return t


def fifo_finish_s(jobs: Sequence[tuple[float, float]], link_free_s: float = 0.0) -> float:
    """End of the last of ``(ready_s, cost_s)`` jobs served one at a time in ready order (ties:
    listed order) on one link."""
    t = link_free_s
    for ready, cost in sorted(jobs, key=lambda j: j[0]):
        t = max(t, ready) + cost
    return t


def fit_alpha_beta(cost_s: Callable[[float], float], small_bytes: float, large_bytes: float) -> tuple[float, float]:
    """Linear ``alpha + beta * bytes`` through a cost model's values at two sizes (alpha, beta >= 0)."""
    if large_bytes <= small_bytes:
        raise ValueError("large_bytes must exceed small_bytes")
    t0, t1 = cost_s(small_bytes), cost_s(large_bytes)
    beta = max((t1 - t0) / (large_bytes - small_bytes), 0.0)
    alpha = max(t0 - beta * small_bytes, 0.0)
    return alpha, beta


def place_local(num_factors: int) -> list[int]:
    """Naive D-KFAC: every worker inverts every factor."""
    return [LOCAL] * num_factors


def place_round_robin(num_factors: int, num_workers: int) -> list[int]:
    """MPD-KFAC: factor ``i`` is inverted by worker ``i mod P`` and its inverse broadcast."""
    if num_workers < 1:
        raise ValueError("num_workers must be at least 1")
    if num_workers == 1:
        return place_local(num_factors)
    return [i % num_workers for i in range(num_factors)]


def place_inversions(
    dims: Sequence[int],
    num_workers: int,
    invert_time_s: Callable[[int], float],
    broadcast_time_s: Callable[[int], float],
    local_below: int = 0,
) -> list[int]:
    """SPD-KFAC load-balanced placement of factor inversions.

    Factors are taken largest first (ties: lower index first). A factor whose inversion is
    cheaper than broadcasting its inverse (``invert_time_s(d) <= broadcast_time_s(d)``) is
    inverted by every worker (``LOCAL``); otherwise it goes to the worker with the least
    assigned inversion time so far (lowest rank on ties), and its inverse is broadcast. With
    ``local_below`` the SPD-KFAC code's fixed threshold replaces that criterion: factors smaller
    than it are ``LOCAL``, every other is placed (``D_TH`` of shyhuai/kfac_pytorch's
    ``_generate_eigen_ranks_uniform``: 1400 at the paper's submission commit 1233119, 1024 in its
    December 2020 code; it sizes the load by ``d``, this by the predicted inversion time).

    Args:
        dims: Dimension of each factor (model order).
        num_workers: Number of workers.
        invert_time_s: Predicted seconds to invert a ``d x d`` factor.
        broadcast_time_s: Predicted seconds to broadcast the (packed) inverse of a ``d x d`` factor.
        local_below: The fixed threshold (0: the cost criterion).

    Returns:
        Owner per factor: a rank, or ``LOCAL`` (-1).
    """
    if num_workers < 1:
        raise ValueError("num_workers must be at least 1")
    owners = place_local(len(dims))
    if num_workers == 1:
        return owners
    loads = [0.0] * num_workers
    for i in sorted(range(len(dims)), key=lambda k: (-dims[k], k)):
        cost = invert_time_s(dims[i])
        if (dims[i] < local_below) if local_below else cost <= broadcast_time_s(dims[i]):
            continue
        r = min(range(num_workers), key=lambda w: (loads[w], w))
        owners[i] = r
        loads[r] += cost
    return owners


@dataclass(frozen=True)
class InversionTimeline:
    """Result of ``inversion_timeline``.

    Attributes:
        compute_s: Slowest worker's total inversion time (makespan).
        end_s: When the last inverse is available everywhere (inversions and broadcasts).
        broadcast_exposed_s: ``end_s - compute_s``: broadcast time not hidden by inversions.
        per_worker_s: Inversion time of each worker.
    """

    compute_s: float
    end_s: float
    broadcast_exposed_s: float
    per_worker_s: list[float]


def inversion_timeline(
    dims: Sequence[int],
    owners: Sequence[int],
    num_workers: int,
    invert_time_s: Callable[[int], float],
    broadcast_time_s: Callable[[int], float],
    overlap: bool = True,
) -> InversionTimeline:
    """Timeline of one inversion phase.

    Every worker walks the factors in model order and inverts those it owns plus the ``LOCAL``
    ones. With ``overlap`` (SPD) the inverse of an owned factor is broadcast as soon as it is
    computed, one broadcast at a time on the network, while workers go on inverting; without
    it (MPD) all broadcasts run one after another after the last inversion.
    """
    if len(dims) != len(owners):
        raise ValueError("dims and owners differ in length")
    local_s = 0.0  # time every worker spends on LOCAL factors so far
    owned_s = [0.0] * num_workers  # time each worker spends on the factors it owns so far
    done: list[tuple[float, int]] = []  # (ready time, factor) of each owned factor
    for i, (d, owner) in enumerate(zip(dims, owners)):
        if owner == LOCAL:
            local_s += invert_time_s(d)
        else:
            if not 0 <= owner < num_workers:
                raise ValueError(f"owner {owner} of factor {i} is not a worker")
            owned_s[owner] += invert_time_s(d)
            done.append((local_s + owned_s[owner], i))
    clock = [local_s + o for o in owned_s]
    compute = max(clock) if clock else 0.0
    # Broadcasts are issued in model order by every rank (collective order must agree).
    net = 0.0 if overlap else compute
    for ready, i in sorted(done, key=lambda x: x[1]):
        start = max(net, ready) if overlap else net
        net = start + broadcast_time_s(dims[i])
    end = max(compute, net)
    return InversionTimeline(compute, end, end - compute, clock)
