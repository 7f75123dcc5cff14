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
from srift.simulate.layout.search import searched_degrees
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
# remembered under a small key (the architecture by identity, kept alive here) instead of hashing
# block_parts' arguments and scaled_parts' BlockParts on every call.
_PARTS: dict[tuple[object, ...], tuple[DecoderArch, BlockParts]] = {}
MAX_MEMO = 1 << 16


def _scaled_parts(arch: DecoderArch, sh: _Shape, st: BoundSettings, split: tuple[int, int, int, int],
                  factor: float) -> BlockParts:
    t, c, mb, ep = split
    pytorch = pytorch_stack(st.dp_flavour)
    key = (id(arch), sh.gpu, sh.seq_len, sh.precision, split, st.imbalance, st.fp8, st.lora, st.dispatcher, pytorch, factor)
    hit = _PARTS.get(key)
    if hit is not None and hit[0] is arch:
        return hit[1]
    if len(_PARTS) >= MAX_MEMO:
        _PARTS.clear()
    parts = scaled_parts(block_parts(arch, t, c, mb, sh.seq_len, sh.precision, sh.gpu, ep,
                                     BlockOptions(st.imbalance, st.fp8, lora=st.lora, dispatcher=st.dispatcher,
                                                  fused_fc1=not pytorch, pytorch_kernels=pytorch)), factor)
    _PARTS[key] = (arch, parts)
    return parts


def _least_step(arch: DecoderArch, sh: _Shape, st: BoundSettings,
                slot: Callable[[int, int, int, int, BlockParts], tuple[float, float]] | None) -> float | None:
    """``step_lower_bound``'s loop; ``slot`` None: a slot is its block's compute alone."""
    degrees = searched_degrees(arch, sh.gpus, sh.gpus_per_node, sh.seq_len, sh.global_batch, st.request, st.dp_flavour)
    if not degrees:
        return None
    pytorch = pytorch_stack(st.dp_flavour)
    factor = compute_factor_of(st.dp_flavour)
    stages = functools.partial(stage_layers, pipeline_blocks(arch, st.mtp_layers), megatron=not pytorch)
    any_layout = fitting = float("inf")
    parts_of: dict[tuple[int, int, int, int], tuple[BlockParts, float, float]] = {}
    for t, p, c, d, mb, m, v, ep in degrees:
        key = (t, c, mb, ep)
        if key not in parts_of:
            parts = _scaled_parts(arch, sh, st, (t, c, mb, ep), factor)
            parts_of[key] = (parts, *(slot(t, c, mb, ep, parts) if slot is not None
                                      else (parts.block_f_s + parts.block_b_s, 0.0)))
        parts, blk, hidden = parts_of[key]
        n = max(stages(p))
        bound = (m + (p - 1) / v) * n * blk + m * n * hidden
        any_layout = min(any_layout, bound)
        if bound >= fitting:
            continue
        shard = state_shard(st.dp_flavour, sh.gpus_per_node, t, c, p, d)
        sig = memory_signature(arch, parts)
        for k in st.checkpointing:
            if peak_memory(sig, arch, p, v, m, shard, parts, k, st.dp_flavour, expert_shard_of(shard, t, ep),
                           st.reduce_dtype, st.mtp_layers) <= sh.memory:
                recompute = 1.0 + parts.block_f_s / (parts.block_f_s + parts.block_b_s) if k == FULL_CHECKPOINTING else 1.0
                fitting = min(fitting, bound * recompute)
                break
    return fitting if fitting < float("inf") else any_layout


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
