"""A cheap upper bound on a layout search's throughput on one cluster, before simulating it.

``search_layouts`` (srift/simulate/layout/search.py) ranks every layout of a cluster by a lower
bound on its step: the slowest stage's blocks over ``M + (p - 1) / V`` slots, each slot at least
its block's forward and backward compute (the communication, interference and recompute it adds
on top are never negative). The least of those bounds over every layout the search examines is a
lower bound on the step of whichever layout it picks, so the global batch over it bounds the
cluster's throughput. It needs neither the network nor a plan: the blocks depend on the GPU type,
not on the count, and are shared across counts and instance types (``block_parts`` is cached);
a catalog search (srift/search/bounded.py) skips the counts this bound shows cannot matter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from srift.cluster import Cluster
from srift.job import FULL_CHECKPOINTING, HALF_PRECISIONS, Fp8Recipe, LayoutRequest, MoeDispatcher
from srift.perf.comm import CommModel
from srift.simulate.finetune import LoraSpec
from srift.hardware import gpu as gpu_spec
from srift.simulate.layout.blocks import BlockOptions, BlockParts, block_parts, scaled_parts
from srift.simulate.layout.memory import memory_signature, peak_memory
from srift.simulate.memory import USABLE_FRACTION
from srift.simulate.moe import expert_shard_of
from srift.simulate.layout.pipeline import pipeline_blocks, stage_layers
from srift.simulate.layout.plan import PARAM_BYTES, compute_factor_of, default_tp_overlap, pytorch_stack, state_shard
from srift.simulate.layout.slots import SlotBounds, SlotContext
from srift.simulate.layout.search import Degrees, searched_degrees
from srift.zoo.llm import DecoderArch

if TYPE_CHECKING:
    from srift.simulate.layout_prediction import LayoutSettings


@dataclass(frozen=True)
class BoundSettings:
    """What of the job's layout settings the bound reads (``LayoutSettings``'s fields, and the
    checkpointing policies ``plan_for`` lets the search choose from)."""

    request: LayoutRequest
    dp_flavour: str
    imbalance: float
    lora: LoraSpec | None
    fp8: Fp8Recipe | None
    dispatcher: MoeDispatcher
    mtp_layers: int
    reduce_dtype: str
    checkpointing: tuple[str, ...]
    tp_overlap: bool | None
    ep_overlap: bool


def step_lower_bound(arch: DecoderArch, cluster: Cluster, global_batch: int, seq_len: int, precision: str,
                     settings: BoundSettings, with_comm: bool = True) -> float | None:
    """The least step ``search_layouts`` can find on ``cluster`` (seconds): the least of its
    layouts' bounds (``SlotBounds``) among those that fit under some checkpointing policy (one that
    fits only with full recompute runs its forward again, as the search bounds it), or of all of
    them when none fits; None when it examines no layout there. ``with_comm=False``: the blocks'
    compute alone, looser but shared by every instance type of a GPU (cached)."""
    g = max(gr.domain_gpus for gr in cluster.node_groups)  # CommModel.for_cluster's GPUs per node
    gpu = cluster.node_groups[0].gpu
    memory = min(gr.gpu_memory_gib if gr.gpu_memory_gib is not None else gpu_spec(gr.gpu).memory_gib
                 for gr in cluster.node_groups) * 2**30 * USABLE_FRACTION  # search_layouts' cap
    if not with_comm:
        return _compute_bound(arch, gpu, memory, cluster.gpus, g, seq_len, global_batch, precision, settings)
    comm = CommModel.for_cluster(cluster)
    slots = SlotBounds(arch, SlotContext(comm, gpu, seq_len, PARAM_BYTES if precision in HALF_PRECISIONS else 4.0,
                                         default_tp_overlap(settings.dp_flavour) if settings.tp_overlap is None
                                         else settings.tp_overlap, pytorch_stack(settings.dp_flavour), precision,
                                         settings.dispatcher, settings.ep_overlap))
    return _least_step(arch, _Shape(gpu, memory, cluster.gpus, comm.topology.gpus_per_node, seq_len, global_batch,
                                    precision), settings, slots.slot)


@dataclass(frozen=True)
class _Shape:
    gpu: str
    memory: float
    gpus: int
    gpus_per_node: int
    seq_len: int
    global_batch: int
    precision: str


@functools.lru_cache(maxsize=65536)
def _compute_bound(arch: DecoderArch, gpu: str, memory: float, gpus: int, gpus_per_node: int, seq_len: int,
                   global_batch: int, precision: str, settings: BoundSettings) -> float | None:
    return _least_step(arch, _Shape(gpu, memory, gpus, gpus_per_node, seq_len, global_batch, precision), settings, None)


# The blocks of one GPU type and split, asked by every count of every instance type with that GPU:
# one table per (architecture, GPU type, job settings), the architecture by identity (kept alive
# in the table), so that a count looks its splits up under the split alone.
MAX_MEMO = 1 << 16


class _Blocks:
    """The scaled ``BlockParts`` of one GPU type per (TP, CP, micro-batch, EP) split, computed when
    first asked, and which of a count's layouts fit (``fits``)."""

    def __init__(self, arch: DecoderArch, sh: _Shape, st: BoundSettings) -> None:
        pytorch = pytorch_stack(st.dp_flavour)
        self.arch, self.gpu, self.seq_len, self.precision = arch, sh.gpu, sh.seq_len, sh.precision
        self.factor = compute_factor_of(st.dp_flavour)
        self.options = BlockOptions(st.imbalance, st.fp8, lora=st.lora, dispatcher=st.dispatcher,
                                    fused_fc1=not pytorch, pytorch_kernels=pytorch)
        self.parts: dict[tuple[int, int, int, int], BlockParts] = {}
        self.signatures: dict[tuple[int, int, int, int], int] = {}
        self._fits: dict[tuple[int, float], tuple[tuple[Degrees, ...], dict[int, float]]] = {}

    def of(self, split: tuple[int, int, int, int]) -> BlockParts:
        parts = self.parts.get(split)
        if parts is None:
            t, c, mb, ep = split
            parts = self.parts[split] = scaled_parts(block_parts(self.arch, t, c, mb, self.seq_len, self.precision,
                                                                 self.gpu, ep, self.options), self.factor)
        return parts

    def signature(self, split: tuple[int, int, int, int]) -> int:
        """``memory_signature`` of the split's parts (kept with them: its numbers are never reused)."""
        sig = self.signatures.get(split)
        if sig is None:
            sig = self.signatures[split] = memory_signature(self.arch, self.of(split))
        return sig

    def fits(self, degrees: tuple[Degrees, ...], memory: float) -> dict[int, float]:
        """Per layout of ``degrees`` (by index) visited so far under ``memory`` bytes a GPU: the
        recompute factor of the least checkpointing that fits, 0.0 when none does (the same for the
        compute-alone and the communication bound of a count, and for its every instance type)."""
        hit = self._fits.get((id(degrees), memory))
        if hit is None or hit[0] is not degrees:
            if len(self._fits) >= MAX_MEMO:
                self._fits.clear()
            hit = self._fits[(id(degrees), memory)] = (degrees, {})
        return hit[1]


_BLOCKS: dict[tuple[object, ...], _Blocks] = {}


def _blocks(arch: DecoderArch, sh: _Shape, st: BoundSettings) -> _Blocks:
    key = (id(arch), sh.gpu, sh.seq_len, sh.precision, st)
    hit = _BLOCKS.get(key)
    if hit is not None and hit.arch is arch:
        return hit
    if len(_BLOCKS) >= MAX_MEMO:
        _BLOCKS.clear()
    hit = _BLOCKS[key] = _Blocks(arch, sh, st)
    return hit


@dataclass(frozen=True)
class _Degrees:
    """``searched_degrees``' tuple as columns: each degree's (TP, CP, micro-batch, EP) split (an
    index into ``splits``), its PP (an index into ``pps``) and ``M + (p - 1) / V`` and ``M``."""

    splits: tuple[tuple[int, int, int, int], ...]
    split: np.ndarray
    pps: tuple[int, ...]
    pp: np.ndarray
    slots: np.ndarray
    m: np.ndarray


_COLUMNS: dict[int, tuple[tuple[Degrees, ...], _Degrees]] = {}


def _columns(degrees: tuple[Degrees, ...]) -> _Degrees:
    """``_Degrees`` of ``degrees`` (remembered by identity: ``searched_degrees`` is cached)."""
    hit = _COLUMNS.get(id(degrees))
    if hit is not None and hit[0] is degrees:
        return hit[1]
    if len(_COLUMNS) >= MAX_MEMO:
        _COLUMNS.clear()
    splits: dict[tuple[int, int, int, int], int] = {}
    pps: dict[int, int] = {}
    split = np.array([splits.setdefault((t, c, mb, ep), len(splits)) for t, _p, c, _d, mb, _m, _v, ep in degrees])
    pp = np.array([pps.setdefault(d[1], len(pps)) for d in degrees])
    p, m, v = (np.array([d[i] for d in degrees]) for i in (1, 5, 6))
    cols = _Degrees(tuple(splits), split, tuple(pps), pp, m + (p - 1) / v, m)
    _COLUMNS[id(degrees)] = (degrees, cols)
    return cols


def _least_step(arch: DecoderArch, sh: _Shape, st: BoundSettings,
                slot: Callable[[int, int, int, int, BlockParts], tuple[float, float]] | None) -> float | None:
    """``step_lower_bound``'s minimum; ``slot`` None: a slot is its block's compute alone.

    A layout's bound is ``(M + (p - 1) / V) * n * slot + M * n * hidden`` (n: its slowest stage's
    blocks), at least its compute-alone bound (a slot is its compute and communication, ``hidden``
    is not negative: ``SlotBounds.slot``). The layouts are visited in order of that compute-alone bound, and the visit
    stops at the first whose compute alone reaches the least fitting bound found: no later one can
    lower it. A split's slot is computed when a layout of it is first visited."""
    degrees = searched_degrees(arch, sh.gpus, sh.gpus_per_node, sh.seq_len, sh.global_batch, st.request, st.dp_flavour)
    if not degrees:
        return None
    cols = _columns(degrees)
    pytorch = pytorch_stack(st.dp_flavour)
    blocks = pipeline_blocks(arch, st.mtp_layers)
    n = np.array([max(stage_layers(blocks, p, megatron=not pytorch)) for p in cols.pps])[cols.pp]
    table = _blocks(arch, sh, st)
    parts = [table.of(split) for split in cols.splits]
    scale = cols.slots * n
    compute = np.array([pp.block_f_s + pp.block_b_s for pp in parts])
    loose = scale * compute[cols.split]
    slots: dict[int, tuple[float, float]] = {}

    def bound_of(i: int) -> float:
        k = int(cols.split[i])
        if slot is None:
            return float(loose[i])
        if k not in slots:
            slots[k] = slot(*cols.splits[k], parts[k])
        blk, hidden = slots[k]
        return float(scale[i]) * blk + int(cols.m[i] * n[i]) * hidden

    found = _Visit(arch, sh, st, degrees, cols, table).least(loose, bound_of)
    return min(bound_of(i) for i in range(len(degrees))) if found is None else found


class _Visit:
    """``_least_step``'s visit of one cluster's layouts."""

    def __init__(self, arch: DecoderArch, sh: _Shape, st: BoundSettings, degrees: tuple[Degrees, ...],
                 cols: _Degrees, blocks: _Blocks) -> None:
        self.arch, self.sh, self.st, self.degrees, self.cols, self.blocks = arch, sh, st, degrees, cols, blocks
        self.fits = blocks.fits(degrees, sh.memory)

    def least(self, order: np.ndarray, bound_of: Callable[[int], float]) -> float | None:
        """The least fitting bound (None: none fits), visiting in ``order``'s order, where
        ``order[i]`` is at most layout i's bound."""
        fitting = float("inf")
        for i in np.argsort(order, kind="stable").tolist():
            if order[i] >= fitting:
                break
            bound = bound_of(i)
            if bound >= fitting:
                continue
            recompute = self.fits.get(i)
            if recompute is None:
                recompute = self.fits[i] = self._recompute(i)
            if recompute:
                fitting = min(fitting, bound * recompute)
        return fitting if fitting < float("inf") else None

    def _recompute(self, i: int) -> float:
        """Layout i's recompute factor under the least checkpointing that fits (0.0: none fits)."""
        st, arch = self.st, self.arch
        split = self.cols.splits[int(self.cols.split[i])]
        parts = self.blocks.of(split)
        t, p, c, d, mb, m, v, ep = self.degrees[i]
        shard = state_shard(st.dp_flavour, self.sh.gpus_per_node, t, c, p, d)
        signature = self.blocks.signature(split)
        for policy in st.checkpointing:
            if peak_memory(signature, arch, p, v, m, shard, parts, policy, st.dp_flavour,
                           expert_shard_of(shard, t, ep), st.reduce_dtype, st.mtp_layers) <= self.sh.memory:
                return 1.0 + parts.block_f_s / (parts.block_f_s + parts.block_b_s) if policy == FULL_CHECKPOINTING else 1.0
        return 0.0


def throughput_bound(arch: DecoderArch, cluster: Cluster, global_batch: int, seq_len: int, precision: str,
                     settings: BoundSettings, with_comm: bool = True) -> float | None:
    """Sequences per second no layout of ``arch`` on ``cluster`` exceeds (None: no bound)."""
    step = step_lower_bound(arch, cluster, global_batch, seq_len, precision, settings, with_comm)
    if step is None or step <= 0.0:
        return None
    return global_batch / step


def layout_throughput_bound(arch: DecoderArch, cluster: Cluster, settings: LayoutSettings, seq_len: int,
                            precision: str, with_comm: bool = True) -> float | None:
    """``throughput_bound`` of ``--layout auto`` on a cluster of one node type (what ``plan_for``
    searches); None for a fixed layout or a mixed cluster (one plan each: nothing to bound)."""
    if not settings.request.auto or len(cluster.node_groups) != 1:
        return None
    gb = settings.global_batch or cluster.gpus * (settings.micro_batch or 1) * settings.grad_accum
    bound = BoundSettings(settings.request, settings.dp_flavour, settings.routing_imbalance, settings.lora, settings.fp8,
                          settings.dispatcher, settings.mtp_layers, settings.reduce_dtype,
                          (settings.checkpointing,) if settings.checkpointing else ("none", "full"),
                          settings.tp_overlap, settings.ep_overlap)
    return throughput_bound(arch, cluster, gb, seq_len, precision, bound, with_comm)
