"""Sharded data parallelism: one iteration of FSDP (FULL_SHARD / FSDP2), ZeRO-2 (SHARD_GRAD_OP)
and HSDP (HYBRID_SHARD), with activation checkpointing, on one overlap engine.

The model is split into FSDP units (``LayerProfile.unit``: a transformer block; layers without a
unit form the root unit: embeddings, final norm, head). Per micro-batch, as PyTorch FSDP runs it:

- forward: the root unit's parameters are all-gathered first; each unit's all-gather is issued
  when the unit before it starts computing (prefetch one unit ahead: FSDP1's ``forward_prefetch``
  and rate limiter, FSDP2's implicit prefetch) and the unit computes when its parameters are there;
- backward (reverse order): under ``fsdp``/``hsdp`` every block unit is all-gathered again (it was
  resharded after forward), issued when the unit after it starts its backward (FSDP1's
  ``BACKWARD_PRE``); ``zero2`` keeps the parameters from forward, so no all-gather. A checkpointed
  unit recomputes (part of) its forward first. When a unit's backward ends, its gradients are
  reduce-scattered; under ``hsdp`` each shard is then all-reduced across nodes. The root's
  parameters stay gathered from forward to backward and its gradients are reduce-scattered last;
- communication runs on one stream, in the order FSDP issues it (all-gather, reduce-scatter and
  the cross-node all-reduce share the GPU's links), beside the compute stream. Compute waits only
  for the parameters it needs; the iteration's micro-batch ends when both streams are done.

Gradient accumulation (``Job.grad_accum``): without ``no_sync`` (which would keep the unsharded
gradients of the whole model), FSDP gathers and reduce-scatters on every micro-batch, so an
iteration is ``grad_accum`` identical micro-batches and one optimizer step on the local shard.

Hiding a collective behind compute is not free: NCCL kernels take SMs and memory bandwidth, so
each second of hidden communication costs ``overlap_interference`` seconds (the DDP fit of
configs/perf/comm.json, scaled across nodes by the GPUs' share of the collective, as for DDP's
all-reduce). srift does not fit a separate figure for sharded jobs: scripts/validate.py's sharded
group checks the DDP one on FSDP runs.

Activation checkpointing (of block units; the root is never checkpointed):
- ``full``: the unit's whole forward again before its backward; the unit keeps only its input;
- ``selective``: torchtitan's per-op policy (``selective_ac_option = "op"``,
  torchtitan/distributed/activation_checkpoint.py, ``_save_list``): the outputs of the attention
  kernel and of every other matmul (the 1st, 3rd, ... Linear of the block) are saved, everything
  else (norms, activations, elementwise ops and the 2nd, 4th, ... matmul) is recomputed. It is
  the policy torchtitan and torchao ship and benchmark; on a Llama block it recomputes the k, o
  and up projections and the pointwise ops (about a third of the block's forward FLOPs).

Everything here works on short Python lists (one entry per unit), so one schedule costs tens of
microseconds; the Predictor caches what does not change between configurations.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import numpy as np

from srift.cache import CACHE_ENTRIES
from srift.job import FULL_CHECKPOINTING, HSDP, NO_CHECKPOINTING
from srift.perf.comm import CommModel
from srift.perf.compute import KINDS, layer_arrays
from srift.profile import Profile

# Breakdown keys of a sharded iteration (they add up to the iteration time with data, forward,
# backward, optimizer and overhead).
EXPOSED_KEYS = ("exposed_all_gather", "exposed_reduce_scatter", "exposed_cross_node_allreduce")
_AG, _RS, _AR = 0, 1, 2
_MATMUL = KINDS.index("matmul")
_ATTENTION = KINDS.index("attention")
_ELEMENTWISE = KINDS.index("elementwise")


# ---- units --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnitLayout:
    """How a profile's layers fall into FSDP units.

    Attributes:
        units: Unit names in order of first execution; index 0 is the root unit (None), which is
            always there (it may hold no parameters).
        layer_unit: Unit index of every layer.
        run_starts: First layer of each run (maximal stretch of consecutive layers of one unit),
            in execution order.
        run_unit: Unit index of each run.
        unit_params: Trainable parameters of each unit.
        input_bytes: Activation bytes of each unit's input (the output of the layer before its
            first layer; 0 for the root and for a unit whose input is a root layer's output, which
            the root keeps anyway).
        grad_bytes: The profile's gradient bytes (all units).
    """

    units: tuple[str | None, ...]
    layer_unit: np.ndarray
    run_starts: np.ndarray
    run_unit: tuple[int, ...]
    unit_params: np.ndarray
    input_bytes: np.ndarray
    grad_bytes: float

    @property
    def params(self) -> float:
        return float(self.unit_params.sum())

    @property
    def blocks(self) -> int:
        """Units other than the root."""
        return len(self.units) - 1

    @property
    def root_params(self) -> int:
        return int(self.unit_params[0])

    @property
    def max_block_params(self) -> int:
        return int(self.unit_params[1:].max()) if self.blocks else 0


_LAYOUTS: dict[int, tuple[weakref.ref, UnitLayout]] = {}


def unit_layout(profile: Profile) -> UnitLayout:
    """The profile's ``UnitLayout`` (cached per profile object)."""
    hit = _LAYOUTS.get(id(profile))
    if hit is not None and hit[0]() is profile:
        return hit[1]
    names: list[str | None] = [None]
    index: dict[str | None, int] = {None: 0}
    layer_unit = np.empty(len(profile.layers), dtype=np.intp)
    for i, layer in enumerate(profile.layers):
        u = index.get(layer.unit)
        if u is None:
            u = index[layer.unit] = len(names)
            names.append(layer.unit)
        layer_unit[i] = u
    change = np.flatnonzero(np.diff(layer_unit)) + 1 if len(layer_unit) else np.zeros(0, dtype=np.intp)
    run_starts = np.concatenate([[0], change]).astype(np.intp) if len(layer_unit) else np.zeros(0, dtype=np.intp)
    params = np.zeros(len(names))
    np.add.at(params, layer_unit, [layer.params for layer in profile.layers])
    inputs = np.zeros(len(names))
    for start in run_starts:
        u = layer_unit[start]
        if u and start > 0 and layer_unit[start - 1] != 0 and not inputs[u]:
            inputs[u] = profile.layers[start - 1].activation_bytes
    out = UnitLayout(tuple(names), layer_unit, run_starts, tuple(int(layer_unit[s]) for s in run_starts), params, inputs,
                     float(profile.grad_bytes))
    if len(_LAYOUTS) > 256:
        for k in [k for k, (ref, _) in _LAYOUTS.items() if ref() is None]:
            del _LAYOUTS[k]
    _LAYOUTS[id(profile)] = (weakref.ref(profile), out)
    return out


# ---- activation checkpointing -------------------------------------------------------------------
@dataclass(frozen=True)
class CheckpointMasks:
    """Per layer, under one checkpointing policy: whether its forward runs again in backward, and
    whether its output is kept from forward to backward (otherwise recomputed, or not needed)."""

    recompute: np.ndarray
    keep: np.ndarray


@functools.lru_cache(maxsize=CACHE_ENTRIES)
def _masks_cached(kinds: tuple[int, ...], units: tuple[int, ...], policy: str) -> CheckpointMasks:
    n = len(kinds)
    block = np.array([u != 0 for u in units], dtype=bool)
    if policy == NO_CHECKPOINTING or not n:
        return CheckpointMasks(np.zeros(n, dtype=bool), np.ones(n, dtype=bool))
    if policy == FULL_CHECKPOINTING:
        return CheckpointMasks(block.copy(), ~block)
    # selective: torchtitan's per-op SAC saves attention outputs and every other matmul output
    # (1st, 3rd, ... of each block), recomputes the rest.
    saved = np.zeros(n, dtype=bool)
    count: dict[int, int] = {}
    for i, (k, u) in enumerate(zip(kinds, units)):
        if not u:
            continue
        if k == _ATTENTION:
            saved[i] = True
        elif k == _MATMUL:
            count[u] = count.get(u, 0) + 1
            saved[i] = count[u] % 2 == 1
    return CheckpointMasks(block & ~saved, ~block | saved)


def checkpoint_masks(profile: Profile, policy: str) -> CheckpointMasks:
    """The layers ``policy`` (``none``, ``selective``, ``full``) recomputes and keeps."""
    layout = unit_layout(profile)
    return _masks_cached(tuple(int(k) for k in layer_arrays(profile).kind_idx), tuple(int(u) for u in layout.layer_unit),
                         policy)


def gated_product_bytes(profile: Profile) -> np.ndarray:
    """Per layer, bytes autograd keeps that no leaf outputs: the product ``act(gate) * up`` of a
    gated MLP (SwiGLU), which the down projection saves for its backward. It shows as an
    activation layer (SiLU, GELU) whose next layer is a Linear of the same output size (the up
    projection, run between the activation and the product); the product has that size too and is
    counted at the activation."""
    layers = profile.layers
    kinds = layer_arrays(profile).kind_idx
    out = np.zeros(len(layers))
    for i in np.flatnonzero((kinds[:-1] == _ELEMENTWISE) & (kinds[1:] == _MATMUL)):
        a, b = layers[i], layers[i + 1]
        if a.activation_bytes > 0 and a.unit is not None and a.unit == b.unit and abs(
                b.activation_bytes - a.activation_bytes) <= 1e-6 * a.activation_bytes:
            out[i] = a.activation_bytes
    return out


# ---- the collectives of a unit ------------------------------------------------------------------
def unit_collective_s(comm: CommModel, gathered_bytes: np.ndarray, reduced_bytes: np.ndarray, parallelism: str,
                      quantile: float = 0.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per unit, the seconds of its parameter all-gather (``gathered_bytes``, the unsharded
    parameters in the compute dtype), its gradient reduce-scatter (``reduced_bytes``, in the reduce
    dtype) and, under ``hsdp``, the cross-node all-reduce of its shard, on ``comm``: the data-parallel
    group (the whole cluster, or a layout's DP x CP group). ``hsdp`` shards within a node (``comm``'s
    ranks on one node) and replicates across nodes (one rank per node, each on its share of the network)."""
    shard = comm.within_node() if parallelism == HSDP else comm
    ag = np.asarray(shard.all_gather_time_s(gathered_bytes, quantile), dtype=float)
    rs = np.asarray(shard.reduce_scatter_time_s(reduced_bytes, quantile), dtype=float)
    if parallelism == HSDP:
        ar = np.asarray(comm.across_nodes().allreduce_time_s(reduced_bytes / shard.topology.workers, quantile), dtype=float)
    else:
        ar = np.zeros_like(ag)
    return ag, rs, ar


# ---- one schedule -------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepInputs:
    """What one micro-batch's schedule needs, per run and per unit (seconds).

    Attributes:
        run_unit: Unit index of each run, forward order.
        fwd_s: Forward seconds of each run.
        bwd_s: Backward seconds of each run (recompute included).
        gather_s: All-gather seconds of each unit (0 for none).
        scatter_s: Reduce-scatter seconds of each unit.
        allreduce_s: Cross-node all-reduce seconds of each unit's shard (HSDP; else 0).
        regather: Block units are all-gathered again for backward (``fsdp``, ``hsdp``).
        serial: Collectives run on the computing cores (gloo on CPU workers): compute waits for
            each as it is issued, nothing overlaps.
    """

    run_unit: tuple[int, ...]
    fwd_s: tuple[float, ...]
    bwd_s: tuple[float, ...]
    gather_s: tuple[float, ...]
    scatter_s: tuple[float, ...]
    allreduce_s: tuple[float, ...]
    regather: bool
    serial: bool = False


@dataclass(frozen=True)
class StepTimes:
    """One micro-batch's schedule.

    Attributes:
        end_s: When both streams are done.
        compute_s: Compute-stream busy seconds (forward, recompute, backward).
        exposed_s: Seconds the compute stream waited, by what the communication stream was doing
            then: all-gather, reduce-scatter, cross-node all-reduce (EXPOSED_KEYS order).
        comm_s: Communication-stream busy seconds by the same kinds.
    """

    end_s: float
    compute_s: float
    exposed_s: tuple[float, float, float]
    comm_s: tuple[float, float, float]

    @property
    def hidden_s(self) -> float:
        """Communication seconds that ran while the compute stream was busy."""
        return max(0.0, sum(self.comm_s) - sum(self.exposed_s))


@functools.lru_cache(maxsize=CACHE_ENTRIES)
def _program(runs: tuple[int, ...], n_units: int,
             regather: bool) -> tuple[tuple[tuple[int, int, int], ...], tuple[tuple[int, int, int, int], ...]]:
    """The order of FSDP's events for a unit layout, independent of any time: per forward run
    ``(unit, gather first or -1, prefetch after start or -1)``, then per backward run
    ``(unit, gather first or -1, prefetch after start or -1, reduce after or -1)``."""
    fwd_order: list[int] = []
    for u in runs:
        if u not in fwd_order:
            fwd_order.append(u)
    issued = {0}
    fwd: list[tuple[int, int, int]] = []
    for u in runs:
        first = -1
        if u not in issued:
            first = u
            issued.add(u)
        nxt = fwd_order.index(u) + 1
        pre = -1
        if nxt < len(fwd_order) and fwd_order[nxt] not in issued:
            pre = fwd_order[nxt]
            issued.add(pre)
        fwd.append((u, first, pre))
    last_bwd: dict[int, int] = {}
    for r, u in enumerate(runs):
        last_bwd.setdefault(u, r)  # the first forward run is the last backward one
    bwd_order: list[int] = []
    for u in reversed(runs):
        if u not in bwd_order:
            bwd_order.append(u)
    gathered = {u for u in range(n_units) if not regather or u == 0}
    bwd: list[tuple[int, int, int, int]] = []
    for r in range(len(runs) - 1, -1, -1):
        u = runs[r]
        first = -1
        if u not in gathered:
            first = u
            gathered.add(u)
        pre = next((v for v in bwd_order[bwd_order.index(u) + 1:] if v not in gathered), -1)
        if pre >= 0:
            gathered.add(pre)
        bwd.append((u, first, pre, u if last_bwd[u] == r else -1))
    return tuple(fwd), tuple(bwd)


def simulate_step(x: StepInputs) -> StepTimes:
    """The schedule of one micro-batch (see the module docstring), from an idle start."""
    gather, scatter, allreduce = x.gather_s, x.scatter_s, x.allreduce_s
    fwd_prog, bwd_prog = _program(x.run_unit, len(gather), x.regather)
    serial = x.serial
    starts: list[float] = []  # the communication stream's ops, in order
    ends: list[float] = []
    kinds: list[int] = []
    busy = [0.0, 0.0, 0.0]
    exposed = [0.0, 0.0, 0.0]
    cursor = 0  # first op that may still overlap a wait window
    free = 0.0  # when the communication stream is next free

    def wait(a: float, b: float) -> None:
        """The compute stream idles over [a, b]: charge it to what the comm stream ran then."""
        nonlocal cursor
        i, n = cursor, len(ends)
        while i < n and ends[i] <= a:
            i += 1
        cursor = i
        while i < n and starts[i] < b:
            exposed[kinds[i]] += min(ends[i], b) - max(starts[i], a)
            i += 1

    def issue(dur: float, kind: int, at: float) -> float:
        """Queue a collective of ``dur`` seconds on the comm stream, no earlier than ``at``; its end."""
        nonlocal free
        t = free if free > at else at
        starts.append(t)
        free = t + dur
        ends.append(free)
        kinds.append(kind)
        busy[kind] += dur
        return free

    ready = [0.0] * len(gather)

    def gathered(u: int, first: int, pre: int, comp: float) -> float:
        """When unit ``u``'s compute can start: its own all-gather (``first``) issued if not yet,
        waited for, and the next unit's (``pre``) prefetched behind it; on CPU workers (``serial``)
        compute also waits for the prefetch, which runs on its cores."""
        if first >= 0 and gather[first] > 0.0:
            ready[first] = issue(gather[first], _AG, comp)
        start = ready[u] if ready[u] > comp else comp
        if start > comp:
            wait(comp, start)
        if pre >= 0 and gather[pre] > 0.0:
            ready[pre] = issue(gather[pre], _AG, start)
        if serial and free > start:
            wait(start, free)
            start = free
        return start

    if gather[0] > 0.0:  # the root's parameters, first
        ready[0] = issue(gather[0], _AG, 0.0)
    comp = 0.0
    fwd_s, bwd_s = x.fwd_s, x.bwd_s
    for r, (u, first, pre) in enumerate(fwd_prog):
        comp = gathered(u, first, pre, comp) + fwd_s[r]

    ready[:] = [0.0] * len(gather)  # backward's gathers (``_program``) start afresh
    n_runs = len(bwd_s)
    for i, (u, first, pre, reduce) in enumerate(bwd_prog):
        comp = gathered(u, first, pre, comp) + bwd_s[n_runs - 1 - i]
        if reduce >= 0:
            for dur, kind in ((scatter[reduce], _RS), (allreduce[reduce], _AR)):
                if dur > 0.0:
                    issue(dur, kind, comp)
            if serial and free > comp:
                wait(comp, free)
                comp = free
    end = free if free > comp else comp
    if end > comp:
        wait(comp, end)
    return StepTimes(end, sum(fwd_s) + sum(bwd_s), (exposed[0], exposed[1], exposed[2]), (busy[0], busy[1], busy[2]))
