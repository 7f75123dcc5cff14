"""A layout's collectives: tensor-parallel (sequence-parallel) and context-parallel
communication of a block, FSDP2's per-block gathers and reduce-scatters, and what hidden
communication costs the compute beside it (interference).

Part of the layout simulator (srift/simulate/layouts.py: the model as a whole)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from srift.hardware import gpu as gpu_spec
from srift.perf.comm import CommModel
from srift.job import FLEX, REDUCE_BYTES_PER_ELEMENT, MoeDispatcher
from srift.perf.compute import kernel_rates
from srift.simulate.sharded import StepInputs, simulate_step, unit_collective_s
from srift.zoo.llm import DecoderArch
from srift.simulate.layout.plan import (FLEX_DISPATCH_SMS, NCCL_MAX_P2P_CHANNELS, P2P_CHANNELS, PARAM_BYTES,
                                        UB_PIPELINE_COLLECTIVES, UB_PIPELINE_SMS, UB_RING_EXCHANGE_COLLECTIVES,
                                        UB_RING_EXCHANGE_SMS, _group_ranks_per_node,
                                        tp_ranks_per_node)
from srift.simulate.layout.blocks import BlockParts


@dataclass(frozen=True)
class TpBlockComm:
    """One block's tensor-parallel collectives per micro-batch under sequence parallelism.

    Attributes:
        size_bytes: Each collective's gathered size (``tokens x hidden x element bytes``).
        forward: Collectives in forward (2 all-gathers, 2 reduce-scatters).
        backward: Collectives in backward (2 gradient all-gathers, 2 input re-gathers, 2 reduce-scatters).
        bytes_per_gpu: What each GPU sends over the block: ``(t - 1) / t`` of each collective.
    """

    size_bytes: float
    forward: int
    backward: int
    bytes_per_gpu: float


def tp_block_comm(tokens: int, hidden: int, tp: int, element_bytes: float = PARAM_BYTES) -> TpBlockComm:
    """``TpBlockComm`` of ``tokens`` (this CP rank's, of the micro-batch) of a ``hidden``-wide
    model split ``tp`` ways."""
    size = float(tokens * hidden * element_bytes)
    forward, backward = 4, 6
    return TpBlockComm(size, forward, backward, (forward + backward) * (tp - 1) / tp * size if tp > 1 else 0.0)


def cp_ring_step_bytes(micro_batch: int, seq_len: int, cp: int, kv_width: int, element_bytes: float = PARAM_BYTES) -> float:
    """Bytes one ring-attention step sends forward: this rank's keys and values
    (``2 x micro_batch x seq / c x kv_width``, ``kv_width`` this TP rank's key/value heads x head_dim)."""
    return 2.0 * micro_batch * (seq_len / cp) * kv_width * element_bytes


def cp_ring_exposed_s(step_s: float, attention_s: float, cp: int) -> float:
    """Exposed seconds of a ring of ``cp`` ranks: ``c - 1`` steps of ``step_s``, each beside the
    attention on one block (``attention_s / c``)."""
    if cp <= 1:
        return 0.0
    return (cp - 1) * max(0.0, step_s - attention_s / cp)


def tp_overlap_share(sm_count: int) -> float:
    """Seconds a hidden userbuffers TP collective costs the GEMM beside it, per second it runs: the
    mean share of the GPU's ``sm_count`` SMs a block's collectives hold (the constants above)."""
    sms = (UB_RING_EXCHANGE_COLLECTIVES * UB_RING_EXCHANGE_SMS + UB_PIPELINE_COLLECTIVES * UB_PIPELINE_SMS) / \
        (UB_RING_EXCHANGE_COLLECTIVES + UB_PIPELINE_COLLECTIVES)
    return sms / sm_count


def p2p_interference(gpu: str) -> float:
    """Seconds per hidden point-to-point second (CP ring steps, pipeline sends): P2P_CHANNELS SMs
    of the GPU's."""
    return P2P_CHANNELS / gpu_spec(gpu).sm_count


def ep_interference(gpu: str, dispatcher: MoeDispatcher, ep: int) -> float:
    """Seconds per hidden EP all-to-all second: the share of the GPU's SMs its kernels hold
    (FLEX_DISPATCH_SMS, or P2P_CHANNELS per other rank up to NCCL_MAX_P2P_CHANNELS)."""
    sms = FLEX_DISPATCH_SMS if dispatcher == FLEX else min(P2P_CHANNELS * (ep - 1), NCCL_MAX_P2P_CHANNELS)
    return sms / gpu_spec(gpu).sm_count


def tp_interference(comm: CommModel, gpu: str, tp_overlap: bool, dtensor: bool = False) -> float:
    """Seconds per hidden TP second: ``tp_overlap_share`` under userbuffers, else NCCL's
    ``overlap_interference``; none under PyTorch's async TP (``dtensor``), whose symmetric-memory
    transfers run on the copy engines."""
    if dtensor:
        return 0.0
    return tp_overlap_share(gpu_spec(gpu).sm_count) if tp_overlap else comm.params.overlap_interference


def dtensor_rate(gpu: str, precision: str, dtensor: bool) -> float:
    """The memory rate DTensor's copies run at (``block_comm``'s ``dtensor_bytes_per_s``): the
    compute model's streaming rate under PyTorch's stack (``dtensor``), else 0 (Megatron-Core)."""
    return kernel_rates(gpu, precision).memory_bytes_per_s if dtensor else 0.0


@dataclass(frozen=True)
class BlockComm:
    """One block's tensor- and context-parallel communication per micro-batch (seconds).

    Attributes:
        tp_f_s, tp_b_s: TP collectives the forward and backward wait for.
        tp_hidden_s: TP collectives that run beside the GEMMs.
        tp_end_s: The embedding's or the head's collectives (forward and backward), once per stage end.
        cp_f_s, cp_b_s: Ring steps the attention waits for, forward and backward.
        cp_hidden_s: Ring steps hidden behind the attention.
        cp_step_f_s, cp_step_b_s: One ring step, forward (K, V) and backward (K, V and their gradients).
        tp_sac_s: DTensor TP (``dtensor``): what torchtitan's per-op selective recompute waits
            for again (the forward's all-gathers, which its policy does not save).
    """

    tp_f_s: float = 0.0
    tp_b_s: float = 0.0
    tp_hidden_s: float = 0.0
    tp_end_s: float = 0.0
    cp_f_s: float = 0.0
    cp_b_s: float = 0.0
    cp_hidden_s: float = 0.0
    cp_step_f_s: float = 0.0
    cp_step_b_s: float = 0.0
    tp_sac_s: float = 0.0


def dtensor_tp_block_s(ag_s: float, rs_s: float, ag_copy_s: float, rs_copy_s: float, reduce_s: float, gemm_f_s: float,
                       gemm_b_s: float, async_tp: bool) -> tuple[float, float, float, float]:
    """(forward waits, backward waits, hidden, per-op-SAC recompute waits) seconds of one block's
    sequence-parallel collectives under PyTorch's DTensor (torchtitan), per micro-batch.

    torchtitan's plan gathers the norms' outputs (``Shard(1)`` -> ``Replicate``) before
    ``wq``/``wk``/``wv`` and ``w1``/``w3`` and reduce-scatters ``wo``'s and ``w2``'s outputs: forward 2
    all-gathers (``ag_s``) and 2 reduce-scatters (``rs_s``); their autograd backward 2 reduce-scatters
    and 2 all-gathers (autograd keeps the gathered inputs: no re-gather). A collective along the
    sequence (dimension 1) copies the gathered tensor once more (functional collectives'
    chunk-and-cat: ``ag_copy_s``, ``rs_copy_s``). Vanilla TP waits for each one (nothing runs
    beside it).
    ``async_tp`` (torch.compile's micro-pipelined TP over symmetric memory): forward's
    all-gather-matmuls and matmul-reduce-scatters run chunk by chunk beside their GEMMs (only what
    outlasts the block's forward GEMMs ``gemm_f_s`` waits; each reduce-scatter ends with a local sum
    of the chunks, ``reduce_s``), as do backward's gradient all-gathers beside the input-gradient
    GEMMs (half of ``gemm_b_s``); backward's reduce-scatters, whose input is the sum of several
    GEMMs' outputs (q, k, v; w1, w3), stay vanilla."""
    gather, scatter = ag_s + ag_copy_s, rs_s + rs_copy_s
    if not async_tp:
        return 2.0 * (gather + scatter), 2.0 * (gather + scatter), 0.0, 2.0 * gather
    fused_f, fused_b = 2.0 * (ag_s + rs_s), 2.0 * ag_s
    wait_f = max(0.0, fused_f - gemm_f_s)
    wait_b = max(0.0, fused_b - 0.5 * gemm_b_s)
    return (wait_f + 2.0 * reduce_s, wait_b + 2.0 * scatter, fused_f - wait_f + fused_b - wait_b, 2.0 * gather)


def block_comm(arch: DecoderArch, comm: CommModel, t: int, c: int, micro_batch: int, seq_len: int, element_bytes: float,
               parts: BlockParts, quantile: float = 0.5, tp_overlap: bool = True,
               dtensor_bytes_per_s: float = 0.0) -> BlockComm:
    """``BlockComm`` of a block split ``t`` ways by TP and ``c`` ways by CP (module docstring).
    ``dtensor_bytes_per_s``: the TP collectives are PyTorch DTensor's (torchtitan:
    ``dtensor_tp_block_s``), their copies at this memory rate; 0: Megatron-Core's."""
    g = comm.topology.gpus_per_node
    tp_comm = comm.subgroup(t, tp_ranks_per_node(g, t)) if t > 1 else None
    pair = None
    if c > 1:
        crossing = _group_ranks_per_node(g, t, c) < c
        # A send between nodes leaves through its own GPU's NICs (a rail: one g-th of the node's
        # network), however few of the node's GPUs cross at once.
        pair = comm.subgroup(2, 1 if crossing else 2, net_share=(1.0 / g) if crossing else None)
    return _block_comm(arch, tp_comm, pair, t, c, micro_batch, seq_len, element_bytes, parts, quantile, tp_overlap,
                       dtensor_bytes_per_s)


@functools.lru_cache(maxsize=65536)
def _block_comm(arch: DecoderArch, tp_comm: CommModel | None, pair: CommModel | None, t: int, c: int, micro_batch: int,
                seq_len: int, element_bytes: float, parts: BlockParts, quantile: float, tp_overlap: bool,
                dtensor_bytes_per_s: float = 0.0) -> BlockComm:
    """``block_comm`` on the TP group's and the CP ring's own models (cached: every cluster of one
    node type shares them)."""
    tokens = micro_batch * seq_len // c
    tp_f = tp_b = tp_hidden = tp_end = tp_sac = 0.0
    if tp_comm is not None:
        size = tp_block_comm(tokens, arch.hidden, t, element_bytes).size_bytes
        ag = float(tp_comm.all_gather_time_s(size, quantile))
        rs = float(tp_comm.reduce_scatter_time_s(size, quantile))
        if dtensor_bytes_per_s > 0.0:
            # A copy reads and writes the gathered tensor; the fused reduce-scatter's local sum
            # reads t chunks of size / t and writes one.
            gathered = size * parts.gather_element_bytes / element_bytes if parts.gather_element_bytes else size
            ag = float(tp_comm.all_gather_time_s(gathered, quantile))
            tp_f, tp_b, tp_hidden, tp_sac = dtensor_tp_block_s(
                ag, rs, 2.0 * gathered / dtensor_bytes_per_s, 2.0 * size / dtensor_bytes_per_s,
                size * (1.0 + 1.0 / t) / dtensor_bytes_per_s,
                parts.block_f_s - parts.attention_f_s, parts.block_b_s - parts.attention_b_s, tp_overlap)
        elif tp_overlap:
            # Userbuffers pipeline each collective with the GEMM it feeds or follows: only what
            # outlasts the block's GEMMs waits.
            total_f, total_b = 2.0 * ag + 2.0 * rs, 4.0 * ag + 2.0 * rs
            tp_f = max(0.0, total_f - (parts.block_f_s - parts.attention_f_s))
            tp_b = max(0.0, total_b - (parts.block_b_s - parts.attention_b_s))
            tp_hidden = total_f - tp_f + total_b - tp_b
        else:
            tp_f, tp_b, tp_hidden = 2.0 * ag + 2.0 * rs, 2.0 * ag, 2.0 * ag + 2.0 * rs
        tp_end = ag + rs  # the embedding's reduce-scatter / the head's all-gather, and back
        if parts.etp_gather_bytes > 0.0:
            # Expert TP (srift/simulate/moe.py): the dispatcher's all-gather of the routed rows and
            # the combine's reduce-scatter, in place of the MLP's own, outside the GEMMs' overlap;
            # backward the same collectives the other way round.
            x_ag = float(tp_comm.all_gather_time_s(parts.etp_gather_bytes, quantile))
            x_rs = float(tp_comm.reduce_scatter_time_s(parts.etp_gather_bytes, quantile))
            extra = parts.moe_fraction * max(0.0, x_ag + x_rs - ag - rs)
            tp_f, tp_b = tp_f + extra, tp_b + extra
    if pair is None:
        return BlockComm(tp_f, tp_b, tp_hidden, tp_end, tp_sac_s=tp_sac)
    step_bytes = cp_ring_step_bytes(micro_batch, seq_len, c, parts.kv_width, element_bytes)
    step_f = float(pair.broadcast_time_s(step_bytes, quantile))
    step_b = float(pair.broadcast_time_s(2.0 * step_bytes, quantile))
    cp_f = cp_ring_exposed_s(step_f, parts.attention_f_s, c)
    cp_b = cp_ring_exposed_s(step_b, parts.attention_b_s, c)
    return BlockComm(tp_f, tp_b, tp_hidden, tp_end, cp_f, cp_b, (c - 1) * (step_f + step_b) - cp_f - cp_b, step_f, step_b,
                     tp_sac)


def fsdp_unit_params(parts: BlockParts, first: bool, last: bool, experts: bool = True) -> tuple[float, float]:
    """(root, block) parameters of a stage's FSDP units on this TP rank: the root holds the
    embedding on the first stage and the final norm and head on the last; each block is a unit,
    its routed experts (its ``experts / ep``) with it unless ``experts`` is False (what is gathered
    over the CP x DP group when they are gathered over the expert group: ``fsdp_stage_comm``)."""
    root = (parts.local_embed_params if first else 0.0) + (parts.local_head_params if last else 0.0)
    return root, parts.local_block_params + (parts.local_expert_params if experts else 0.0)


def fsdp_unit_bytes(parts: BlockParts, blocks: int, first: bool, last: bool,
                    reduce_dtype: str = "fp32", experts: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Per FSDP unit of a stage of ``blocks`` blocks (the root first, then each block): the bytes
    its all-gather assembles (this TP rank's parameters in bf16) and its reduce-scatter reduces
    (their gradients in ``reduce_dtype``), each over the CP x DP group (``experts``: as
    ``fsdp_unit_params``)."""
    root, block = fsdp_unit_params(parts, first, last, experts)
    params = np.array([root] + [block] * blocks)
    return params * PARAM_BYTES, params * float(REDUCE_BYTES_PER_ELEMENT[reduce_dtype])  # type: ignore[index]


def fsdp_unit_collective_s(parts: BlockParts, blocks: int, first: bool, last: bool, dcomm: CommModel | None,
                           ecomm: CommModel | None, dp_flavour: str, reduce_dtype: str,
                           quantile: float = 0.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per FSDP unit (``fsdp_unit_bytes``' order), the seconds of its all-gathers, reduce-scatters
    and (``hsdp``) cross-node all-reduces: over the CP x DP group ``dcomm`` (None: one rank, no
    collective) and, with expert parallelism, the block's routed experts over the expert
    data-parallel group ``ecomm`` (torchtitan 0.3.0 ``apply_fsdp_to_decoder``: one ``fully_shard`` per
    block whose ``shard_placement_fn`` puts the experts on the ``efsdp`` mesh, so FSDP2 runs one
    collective per mesh, one after the other on its all-gather and reduce-scatter streams; None:
    the experts are gathered with the rest over ``dcomm``)."""
    gathered, reduced = fsdp_unit_bytes(parts, blocks, first, last, reduce_dtype, experts=ecomm is None)
    if dcomm is not None:
        ag, rs, ar = unit_collective_s(dcomm, gathered, reduced, dp_flavour, quantile)
    else:
        ag, rs, ar = np.zeros_like(gathered), np.zeros_like(gathered), np.zeros_like(gathered)
    if ecomm is not None and parts.local_expert_params > 0.0:
        e = np.array([parts.local_expert_params])
        e_ag, e_rs, e_ar = unit_collective_s(ecomm, e * PARAM_BYTES,
                                             e * float(REDUCE_BYTES_PER_ELEMENT[reduce_dtype]),  # type: ignore[index]
                                             dp_flavour, quantile)
        ag[1:], rs[1:], ar[1:] = ag[1:] + e_ag[0], rs[1:] + e_rs[0], ar[1:] + e_ar[0]
    return ag, rs, ar


@dataclass(frozen=True)
class FsdpStage:
    """A pipeline stage's work that its FSDP2 collectives are scheduled beside (``fsdp_stage_comm``).

    Attributes:
        parts: The blocks' work on one GPU.
        blocks: Blocks the stage holds.
        first, last: The stage holds the embedding (first) or the head (last).
        block_s: One block's forward and backward seconds on a micro-batch (TP, CP waits and
            recompute in them).
        end_s: The embedding's or head's TP collectives.
    """

    parts: BlockParts
    blocks: int
    first: bool
    last: bool
    block_s: tuple[float, float]
    end_s: float


def fsdp_stage_comm(stage: FsdpStage, dcomm: CommModel | None, dp_flavour: str, reduce_dtype: str, pp: int,
                    micro_batches: int, quantile: float = 0.5,
                    ecomm: CommModel | None = None) -> tuple[float, float, float]:
    """(exposed, hidden, total) seconds a step of a stage's FSDP2 collectives over its CP x DP
    group ``dcomm``, scheduled beside the stage's compute by srift/simulate/sharded.py's
    ``simulate_step`` (the data-parallel path's schedule: a unit's all-gather waited for, the
    next one prefetched behind it, each unit's reduce-scatter (and, ``hsdp``, cross-node
    all-reduce) issued after its backward).

    ``stage``: its blocks, ends and their seconds (``FsdpStage``). Parameters are
    gathered in bf16, gradients reduced in ``reduce_dtype``; ``ecomm``: the expert data-parallel
    group under expert parallelism (``fsdp_unit_collective_s``).

    Without a pipeline every micro-batch gathers each block in forward, re-gathers it in backward
    (``reshard_after_forward``) and reduce-scatters its gradients (no ``no_sync``, as the
    data-parallel path). Under a pipeline (torchtitan: ``reshard_after_forward=False`` when PP is
    on, and the pipeline schedule defers gradient sync to the last micro-batch) a stage gathers
    its blocks once, on its first micro-batch's forward, and reduce-scatters them all after its
    last backward: the gathers' waits lie on the warm-up's path through every stage (``pp`` of
    them), the reduce-scatters wait at the end of the flush on the first stage, which ends last.
    """
    parts, blocks, first, last, end_s = stage.parts, stage.blocks, stage.first, stage.last, stage.end_s
    ag, rs, ar = fsdp_unit_collective_s(parts, blocks, first, last, dcomm, ecomm, dp_flavour, reduce_dtype, quantile)
    f, b = stage.block_s
    runs = ((0,) if first else ()) + tuple(range(1, blocks + 1)) + ((0,) if last else ())
    fwd = tuple((parts.first_f_s if first and i == 0 else parts.last_f_s) + end_s if u == 0 else f
                for i, u in enumerate(runs))
    bwd = tuple((parts.first_b_s if first and i == 0 else parts.last_b_s) + end_s if u == 0 else b
                for i, u in enumerate(runs))
    if pp == 1:
        st = simulate_step(StepInputs(runs, fwd, bwd, tuple(ag.tolist()), tuple(rs.tolist()), tuple(ar.tolist()),
                                      regather=True))
        return micro_batches * sum(st.exposed_s), micro_batches * st.hidden_s, micro_batches * sum(st.comm_s)
    zeros = (0.0,) * len(ag)
    st = simulate_step(StepInputs(runs, fwd, bwd, tuple(ag.tolist()), zeros, zeros, regather=False))
    reduce_s = float(rs.sum() + ar.sum())
    gather_s = float(ag.sum())
    waited = sum(st.exposed_s)
    return pp * waited + reduce_s, max(0.0, gather_s - waited), gather_s + reduce_s
