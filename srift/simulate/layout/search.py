"""The layout search: every layout of a cluster that divides, pruned by memory and a lower
bound on its time (``search_layouts``).

Part of the layout simulator (srift/simulate/layouts.py: the model as a whole)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from srift.cluster import Cluster
from srift.hardware import gpu as gpu_spec
from srift.perf.comm import CommModel
from srift.job import FULL_CHECKPOINTING, HALF_PRECISIONS, Fp8Recipe, LayoutRequest, MoeDispatcher
from srift.simulate.finetune import LoraSpec
from srift.simulate.memory import MASTER_BYTES, USABLE_FRACTION, sure_fit_bytes
from srift.simulate.moe import BALANCED_ROUTING, check_ep, expert_shard_of
from srift.zoo.llm import DecoderArch, params_count
from srift.simulate.layout.plan import (ADAM_STATE_BYTES, GRAD_BYTES, PARAM_BYTES, SEARCH_CONTEXT, SEARCH_EXPERT,
                                        SEARCH_MICRO_BATCHES, SEARCH_VIRTUAL_STAGES, Layout,
                                        LayoutPlan, compute_factor_of, default_tp_overlap,
                                        pytorch_stack, state_shard)
from srift.simulate.layout.pipeline import pipeline_blocks, stage_layers
from srift.simulate.layout_rules import cp_efficient, megatron_split, runnable
from srift.simulate.layout.blocks import BlockOptions, BlockParts, block_parts, scaled_parts
from srift.simulate.layout.slots import SlotBounds, SlotContext
from srift.simulate.layout.memory import _peak_memory_of, memory_signature, peak_memory
from srift.simulate.layout.step import PlanSettings, _plan, _step


_params_count = functools.lru_cache(maxsize=256)(params_count)  # asked of every cluster a catalog search simulates


# ---- the search ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayoutSearch:
    """The outcome of searching layouts on one cluster.

    Attributes:
        best: The fastest plan that fits, or None when none does.
        smallest: The plan with the least memory per GPU (what comes closest when none fits).
        candidates: Layouts that divide the model and the cluster.
        rejected_memory: Of those examined (in order of the lower bound), how many did not fit.
        simulated: Plans simulated in full (the rest were shown unable to win by a lower bound).
    """

    best: LayoutPlan | None
    smallest: LayoutPlan | None
    candidates: int
    rejected_memory: int
    simulated: int


@functools.lru_cache(maxsize=65536)
def _divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n``, ascending (pairs up to its square root: a 16,384-GPU search asks of
    every count)."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return tuple(small + [n // k for k in reversed(small) if k * k != n])


Degrees = tuple[int, int, int, int, int, int, int, int]


@functools.lru_cache(maxsize=65536)
def _expert_degrees(arch: DecoderArch, request: LayoutRequest, tcd: int) -> tuple[int, ...]:
    """Expert-parallel sizes to try over ``tcd`` = TP x CP x DP ranks: the requested one, or (a
    mixture of experts under search) each of SEARCH_EXPERT that divides the experts and ``tcd``
    (cached: every count asks it again)."""
    if request.ep is not None:
        return (request.ep,) if check_ep(arch, request.ep, tcd) is None else ()
    if not arch.is_moe:
        return (1,)
    return tuple(e for e in SEARCH_EXPERT if e <= tcd and check_ep(arch, e, tcd) is None)


def _degrees(arch: DecoderArch, gpus: int, gpus_per_node: int, seq_len: int, global_batch: int,
             request: LayoutRequest, micro_batches: tuple[int, ...]) -> list[Degrees]:
    """Every ``(tp, pp, cp, dp, micro_batch, grad_accum, vp, ep)`` that divides ``arch`` and
    ``gpus`` (``check_layout``'s rules, applied per degree; vp 1 is 1F1B, more is interleaved)."""
    out = []
    tps = [request.tp] if request.tp is not None else [t for t in _divisors(gpus_per_node) if t <= gpus]
    cps = [request.cp] if request.cp is not None else list(SEARCH_CONTEXT)
    for t in tps:
        if (t > gpus_per_node and t % gpus_per_node) or arch.heads % t or (arch.kv_heads % t and t % arch.kv_heads):
            continue
        for c in cps:
            if gpus % (t * c) or (c > 1 and seq_len % (2 * c)):
                continue
            pps = [request.pp] if request.pp is not None else _divisors(gpus // (t * c))
            for p in pps:
                if gpus % (t * c * p) or p > arch.n_layers:
                    continue
                d = gpus // (t * c * p)
                batches = [(mb, global_batch // (mb * d)) for mb in micro_batches if global_batch % (mb * d) == 0]
                vs = [v for v in SEARCH_VIRTUAL_STAGES[1:] if p * v <= arch.n_layers + 2] if p > 1 else []
                for ep in _expert_degrees(arch, request, t * c * d):
                    for mb, m in batches:
                        out.append((t, p, c, d, mb, m, 1, ep))
                        if vs and m % p == 0:
                            out.extend([(t, p, c, d, mb, m, v, ep) for v in vs])
    return out


@functools.lru_cache(maxsize=65536)
def has_layout(arch: DecoderArch, gpus: int, gpus_per_node: int, seq_len: int, global_batch: int) -> bool:
    """Whether any layout of ``_degrees``'s rules divides ``arch`` and ``gpus`` at ``global_batch``
    sequences a step (micro-batch 1; a search's cheap test of a GPU count, cached)."""
    for t in _divisors(gpus_per_node):
        if t > gpus or arch.heads % t or (arch.kv_heads % t and t % arch.kv_heads):
            continue
        for c in SEARCH_CONTEXT:
            if gpus % (t * c) or (c > 1 and seq_len % (2 * c)) or not cp_efficient(seq_len, c):
                continue
            for p in _divisors(gpus // (t * c)):
                if p <= arch.n_layers and global_batch % (gpus // (t * c * p)) == 0 and megatron_split(arch.n_layers, p, stage_layers) and \
                        (not arch.is_moe or _expert_degrees(arch, LayoutRequest(), gpus // p)):
                    return True
    return False


def candidate_layouts(arch: DecoderArch, gpus: int, gpus_per_node: int, seq_len: int, global_batch: int,
                      request: LayoutRequest = LayoutRequest(),
                      micro_batches: tuple[int, ...] = SEARCH_MICRO_BATCHES) -> list[Layout]:
    """Every layout that divides ``arch`` and ``gpus`` and trains ``global_batch`` sequences a step
    (TP within a node and dividing the heads, CP splitting the sequence in 2 x CP chunks, PP at most
    the layers, micro-batches dividing the batch; the interleaved schedule with each virtual-stage
    count in SEARCH_VIRTUAL_STAGES that fits; a mixture of experts' EP sizes of SEARCH_EXPERT)."""
    return [Layout(t, p, c, d, v, mb, m, "interleaved" if v > 1 else "1f1b", ep)
            for t, p, c, d, mb, m, v, ep in _degrees(arch, gpus, gpus_per_node, seq_len, global_batch, request,
                                                     micro_batches)]


@functools.lru_cache(maxsize=4096)
def searched_degrees(arch: DecoderArch, gpus: int, gpus_per_node: int, seq_len: int, global_batch: int,
                     request: LayoutRequest, dp_flavour: str) -> tuple[Degrees, ...]:
    """The degrees ``search_layouts`` examines on ``gpus`` GPUs: those of ``_degrees`` that the
    stack runs (srift/simulate/layout_rules.py). Cached: a catalog search asks it of every GPU type with the same count."""
    degrees = _degrees(arch, gpus, gpus_per_node, seq_len, global_batch, request, SEARCH_MICRO_BATCHES)
    return tuple(runnable(arch, degrees, seq_len, pytorch_stack(dp_flavour), stage_layers))


def search_layouts(arch: DecoderArch, cluster: Cluster, seq_len: int, global_batch: int,
                   settings: PlanSettings = PlanSettings(), request: LayoutRequest = LayoutRequest(),
                   checkpointing: tuple[str, ...] = ("none", "full"), comm: CommModel | None = None) -> LayoutSearch:
    """The fastest layout of ``arch`` on ``cluster`` that fits (``request`` fixes any degree).

    Every candidate gets a lower bound on its time (the slowest stage's compute, recomputation
    included, over ``M + (p - 1) / V`` slots); in order of it, each one's memory is checked (each
    checkpointing policy in turn: the least recompute that fits) and those that fit are
    simulated, until the bound passes the best time found. When none fits, the one with the least
    memory comes back as ``smallest``. ``settings``: what every candidate is priced under
    (``plan_layout``'s), its ``checkpointing`` replaced by each of ``checkpointing`` in turn; the
    search prices the median step with Megatron-Core's default recompute modules, whole-block
    pipeline stages and no per-op selective policy or FP8 attention.
    """
    precision, dp_flavour, lora, reduce_dtype = settings.precision, settings.dp_flavour, settings.lora, settings.reduce_dtype
    dispatcher, ep_overlap, mtp_layers = settings.dispatcher, settings.ep_overlap, settings.mtp_layers
    comm = comm or CommModel.for_cluster(cluster)
    g = comm.topology.gpus_per_node
    gpu = cluster.node_groups[0].gpu
    factor = compute_factor_of(dp_flavour, settings.compute_factor)
    tp_overlap = default_tp_overlap(dp_flavour) if settings.tp_overlap is None else settings.tp_overlap
    pytorch = pytorch_stack(dp_flavour)
    options = _search_options(settings)
    cap = min(gr.gpu_memory_gib if gr.gpu_memory_gib is not None else gpu_spec(gr.gpu).memory_gib
              for gr in cluster.node_groups) * 2**30 * USABLE_FRACTION
    degrees = searched_degrees(arch, cluster.gpus, g, seq_len, global_batch, request, dp_flavour)
    # Whatever the layout, each parameter's 16 bytes (bf16 weight and gradient, fp32 master and
    # Adam moments) are spread over at most all the GPUs: below that nothing fits.
    # (LoRA: the frozen weights' 2 bytes.)
    per_param = PARAM_BYTES if lora is not None else PARAM_BYTES + GRAD_BYTES + MASTER_BYTES + ADAM_STATE_BYTES
    hopeless = _params_count(arch) * per_param / cluster.gpus > cap
    if hopeless or not degrees:
        return LayoutSearch(None, _most_sharded(arch, cluster, degrees, seq_len, _step_settings(settings, checkpointing[-1]),
                                                comm, factor, tp_overlap),
                            len(degrees), len(degrees), 0)
    parts_of: dict[tuple[int, int, int, int], BlockParts] = {}
    slot_of: dict[tuple[int, int, int, int], tuple[float, float]] = {}
    slots = SlotBounds(arch, SlotContext(comm, gpu, seq_len, PARAM_BYTES if precision in HALF_PRECISIONS else 4.0, tp_overlap,
                                         pytorch, precision, dispatcher, ep_overlap))
    ranked = []
    blocks = pipeline_blocks(arch, mtp_layers)
    slowest: dict[int, int] = {}  # per PP, the most blocks a stage holds
    for t, p, c, d, mb, m, v, ep in degrees:
        key = (t, c, mb, ep)
        parts = parts_of.get(key)
        if parts is None:
            parts = parts_of[key] = scaled_parts(block_parts(arch, t, c, mb, seq_len, precision, gpu, ep, options), factor)
            slot_of[key] = slots.slot(t, c, mb, ep, parts)
        blk, hidden = slot_of[key]
        n = slowest.get(p)
        if n is None:
            n = slowest[p] = max(stage_layers(blocks, p, not pytorch))
        ranked.append(((m + (p - 1) / v) * n * blk + m * n * hidden, t, p, c, d, mb, m, v, ep))
    ranked.sort()
    best: LayoutPlan | None = None
    simulated = rejected = 0
    # The one fit rule (srift.simulate.memory.fit_state): layouts that fit for sure first; those
    # that may not fit (within the memory's typical error) when none does.
    signature: dict[tuple[int, int, int, int], int] = {}

    def peak(i: int, k: str) -> float:
        _, t, p, c, d, mb, m, v, ep = ranked[i]
        key = (t, c, mb, ep)
        if key not in signature:
            signature[key] = memory_signature(arch, parts_of[key])
        shard = state_shard(dp_flavour, g, t, c, p, d)
        return peak_memory(signature[key], arch, p, v, m, shard, parts_of[key], k, dp_flavour,
                           expert_shard_of(shard, t, ep), reduce_dtype, mtp_layers)

    # The candidates' steps are priced (``_step``); the winner's plan, memory included, once.
    fastest: tuple[float, Layout, PlanSettings, BlockParts] | None = None
    for limit in (sure_fit_bytes(cap), cap):
        rejected = 0
        for i, (bound, t, p, c, d, mb, m, v, ep) in enumerate(ranked):
            if fastest is not None and bound >= fastest[0]:
                break
            parts = parts_of[(t, c, mb, ep)]
            chosen = next((k for k in checkpointing if peak(i, k) <= limit), None)
            if chosen is None:
                rejected += 1
                continue
            lay = Layout(t, p, c, d, v, mb, m, "interleaved" if v > 1 else "1f1b", ep)
            if chosen == FULL_CHECKPOINTING and fastest is not None and \
                    bound * (1.0 + parts.block_f_s / (parts.block_f_s + parts.block_b_s)) >= fastest[0]:
                continue
            step_settings = _step_settings(settings, chosen)
            iteration_s = _step(arch, lay, seq_len, step_settings, comm, gpu, parts, tp_overlap)[0].total_s
            simulated += 1
            if fastest is None or iteration_s < fastest[0]:
                fastest = (iteration_s, lay, step_settings, parts)
        if fastest is not None:
            best = _plan(arch, cluster, fastest[1], seq_len, fastest[2], comm, gpu, fastest[3], tp_overlap)
            break
    smallest = None if best is not None else _most_sharded(arch, cluster, degrees, seq_len,
                                                            _step_settings(settings, checkpointing[-1]), comm, factor,
                                                            tp_overlap)
    return LayoutSearch(best, smallest, len(degrees), rejected, simulated)


def _search_options(settings: PlanSettings) -> BlockOptions:
    """The blocks' options a search prices every candidate under (``search_layouts``)."""
    pytorch = pytorch_stack(settings.dp_flavour)
    return BlockOptions(settings.imbalance, settings.fp8, lora=settings.lora, dispatcher=settings.dispatcher,
                        fused_fc1=not pytorch, pytorch_kernels=pytorch)


def _step_settings(settings: PlanSettings, checkpointing: str) -> PlanSettings:
    """What a search prices a candidate's step and plan under (``_step``, ``_plan``) at ``checkpointing``."""
    return PlanSettings(precision=settings.precision, checkpointing=checkpointing, dp_flavour=settings.dp_flavour,
                        dispatcher=settings.dispatcher, ep_overlap=settings.ep_overlap,
                        reduce_dtype=settings.reduce_dtype, mtp_layers=settings.mtp_layers,
                        grad_overlap=settings.grad_overlap, grad_accum_bytes=settings.grad_accum_bytes)


def _most_sharded(arch: DecoderArch, cluster: Cluster, degrees: tuple[Degrees, ...], seq_len: int,
                  settings: PlanSettings, comm: CommModel, factor: float, tp_overlap: bool) -> LayoutPlan | None:
    """When nothing fits: the plan that needs the least memory among the most model-parallel
    layouts of the smallest micro-batch (what comes closest, for the error), at ``settings``
    (``_step_settings``'; its blocks ``_search_options``')."""
    if not degrees:
        return None
    precision, checkpointing, dp_flavour = settings.precision, settings.checkpointing, settings.dp_flavour
    gpu = cluster.node_groups[0].gpu
    options = _search_options(settings)
    top = max(t * p * c for t, p, c, *_ in degrees)
    mb_min = min(r[4] for r in degrees if r[0] * r[1] * r[2] == top)
    best: tuple[float, Degrees, BlockParts] | None = None
    for r in degrees:
        t, p, c, d, mb, m, v, ep = r
        if t * p * c != top or mb != mb_min:
            continue
        parts = scaled_parts(block_parts(arch, t, c, mb, seq_len, precision, gpu, ep, options), factor)
        shard = state_shard(dp_flavour, comm.topology.gpus_per_node, t, c, p, d)
        mem = _peak_memory_of(arch, p, v, m, shard, parts, checkpointing, dp_flavour, expert_shard_of(shard, t, ep),
                              settings.reduce_dtype, settings.mtp_layers)
        if best is None or mem < best[0]:
            best = (mem, r, parts)
    assert best is not None
    t, p, c, d, mb, m, v, ep = best[1]
    return _plan(arch, cluster, Layout(t, p, c, d, v, mb, m, "interleaved" if v > 1 else "1f1b", ep), seq_len,
                 settings, comm, gpu, best[2], tp_overlap)
