"""A layout's memory: each pipeline stage's bytes per GPU at its peak (weights, gradients,
optimizer states, activations in flight), and the most loaded stage.

Part of the layout simulator (srift/simulate/layouts.py: the model as a whole)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from srift.job import FSDP, FULL_CHECKPOINTING, INTERLEAVED, SELECTIVE, ZERO1
from srift.simulate.memory import LOSS_FP32_BYTES, MASTER_BYTES, allocator_bytes, sharded_state_bytes, with_allocator
from srift.simulate.moe import expert_memory_bytes, expert_shard_of
from srift.zoo.llm import DecoderArch, block_params
from srift.simulate.layout.plan import (ADAM_STATE_BYTES, GRAD_BYTES, PARAM_BYTES, SHARDED_FLAVOURS, _SECONDS, Layout,
                                        pytorch_stack, state_shard)
from srift.simulate.layout.pipeline import pipeline_blocks, stage_layers, stage_moe_blocks
from srift.simulate.layout.blocks import BlockParts
from srift.simulate.layout.collectives import fsdp_unit_params


# ---- memory of one stage ------------------------------------------------------------------------
@dataclass(frozen=True)
class StageStates:
    """The parameters one GPU of a pipeline stage holds, and how their states are sharded.

    Attributes:
        params: Parameters this GPU holds (its stage's, on its TP rank).
        shard: Ranks the optimizer states are sharded over (``state_shard``: CP x DP under
            ``zero1`` and ``fsdp``, the DP ranks of a node under ``hsdp``, 1 under ``ddp``).
        expert_params: Routed-expert parameters this GPU holds (its ``experts / ep`` of its
            stage's MoE blocks), counted in the weights, gradients and optimizer states.
        expert_shard: Ranks their optimizer states (under ``fsdp``/``hsdp`` also their weights and
            gradients) are sharded over (srift/simulate/moe.py ``expert_shard_of``).
        weight_copy_bytes: FP8 copies of the stage's weights (srift/perf/fp8.py), in ``weights`` (not under
            ``fsdp``/``hsdp``: cast per use from the gathered unit).
        trainable_params: Of ``params``, those that train (LoRA: the adapters; the routed
            experts frozen too); None: every one.
        root_params: ``fsdp``/``hsdp``: the root unit's parameters (embedding, head).
        block_params: ``fsdp``/``hsdp``: the largest unit's (a block's).
    """

    params: float
    shard: int
    expert_params: float = 0.0
    expert_shard: int = 1
    weight_copy_bytes: float = 0.0
    trainable_params: float | None = None
    root_params: float = 0.0
    block_params: float = 0.0


def stage_memory_bytes(states: StageStates, act_per_microbatch_bytes: float, in_flight: float,
                       extra_act_bytes: float = 0.0, dp_flavour: str = "zero1", reduce_dtype: str = "fp32",
                       resharded: bool = True) -> dict[str, float]:
    """Bytes per GPU of one pipeline stage, by kind.

    Args:
        states: The parameters this GPU holds and their sharding.
        act_per_microbatch_bytes: Activations one micro-batch leaves on this stage for backward.
        in_flight: Micro-batches whose activations the stage holds at its peak.
        extra_act_bytes: Activations held once (the loss's fp32 logits on the last stage, the
            block recomputing under full checkpointing).
        dp_flavour: One of DP_FLAVOURS. ``fsdp``/``hsdp`` shard the parameters and gradients too
            (srift/simulate/memory.py's ``sharded_state_bytes``, of ``states.root_params``
            (embedding, head), the largest unit ``states.block_params``, ``reduce_dtype`` and
            ``resharded``).

    Returns:
        ``weights`` (bf16), ``gradients`` (GRAD_BYTES buffers), ``optimizer_state`` (fp32
        master weights and Adam's two moments), ``activations`` and ``allocator`` (what the
        caching allocator reserves beyond them: srift/simulate/memory.py's ``with_allocator``, as
        everywhere in srift). They add up to the peak reserved memory.
    """
    stage_params, shard, expert_params, expert_shard = states.params, states.shard, states.expert_params, states.expert_shard
    trainable_params = states.trainable_params
    acts = act_per_microbatch_bytes * in_flight + extra_act_bytes
    if dp_flavour in SHARDED_FLAVOURS:
        # FP8 weights are cast per use from the gathered unit (torchao's float8 under FSDP2), not
        # kept for the step as Transformer Engine keeps its weight workspace: no ``weight_copy_bytes``.
        held = fsdp_state_bytes(stage_params, expert_params, states.root_params, states.block_params, dp_flavour, shard,
                                expert_shard, reduce_dtype, resharded)
        return with_allocator({**held, "activations": acts})
    n = float(shard) if dp_flavour == ZERO1 else 1.0
    experts = expert_memory_bytes(expert_params, expert_shard, PARAM_BYTES, GRAD_BYTES, MASTER_BYTES + ADAM_STATE_BYTES,
                                  dp_flavour == ZERO1)
    trains = stage_params if trainable_params is None else trainable_params
    if trainable_params is not None:  # frozen experts: weights only
        experts = {"weights": experts["weights"], "gradients": 0.0, "optimizer_state": 0.0}
    return with_allocator({
        "weights": stage_params * PARAM_BYTES + experts["weights"] + states.weight_copy_bytes,
        "gradients": trains * GRAD_BYTES + experts["gradients"],
        "optimizer_state": trains * (MASTER_BYTES + ADAM_STATE_BYTES) / n + experts["optimizer_state"],
        "activations": acts,
    })


def fsdp_state_bytes(params: float, expert_params: float, root_params: float, block_params: float, dp_flavour: str,
                     shard: int, expert_shard: int, reduce_dtype: str = "fp32", resharded: bool = True) -> dict[str, float]:
    """Bytes per GPU of FSDP2's states of a stage (srift/simulate/memory.py ``sharded_state_bytes``):
    ``params`` (the dense parts on this TP rank) sharded over ``shard`` ranks, ``expert_params`` (its
    routed experts) over ``expert_shard`` (torchtitan's two meshes: srift/simulate/moe.py
    ``expert_shard_of``). The gathered units (``root_params``, the largest block ``block_params``, the
    experts of each in it) are counted once, with the dense parts; under a pipeline every
    parameter stays gathered and every unsharded gradient accumulated, the experts' too."""
    dense = sharded_state_bytes(params, root_params, block_params, PARAM_BYTES, ADAM_STATE_BYTES, dp_flavour,
                                float(shard), reduce_dtype, resharded)
    if expert_params <= 0.0:
        return dense
    experts = sharded_state_bytes(expert_params, 0.0, 0.0, PARAM_BYTES, ADAM_STATE_BYTES, dp_flavour,
                                  float(expert_shard), reduce_dtype, resharded)
    return {k: dense[k] + experts[k] for k in dense}


def memory_stages(pp: int, blocks_differ: bool = False) -> list[int]:
    """The stages that can be the most loaded of ``stage_layers``' even split: the first, second
    and last (every middle stage holds at most the second's blocks and fewer micro-batches in
    flight), or every stage when the blocks differ (one holding dense blocks holds no experts)."""
    return list(range(pp)) if blocks_differ else sorted({0, min(1, pp - 1), pp - 1})


def peak_stages(layers: tuple[int, ...], moe_blocks: tuple[int, ...] | None) -> list[int]:
    """The stages of ``layers[i]`` blocks (``moe_blocks[i]`` of them MoE blocks) that can be the
    most loaded: the first, the last and the first middle stage of each mix of blocks (a later
    middle stage of the same mix holds the same states and no more micro-batches in flight)."""
    p = len(layers)
    out, seen = [], set()
    for i in range(p):
        key = (layers[i], moe_blocks[i] if moe_blocks is not None else 0)
        if 0 < i < p - 1:
            if key in seen:
                continue
            seen.add(key)
        out.append(i)
    return out


def _peak_memory(arch: DecoderArch, layout: Layout, parts: BlockParts, checkpointing: str, dp_flavour: str,
                 gpus_per_node: int = 8, reduce_dtype: str = "fp32") -> float:
    """The most loaded stage's bytes per GPU (the same count as ``_plan``'s, without the times).

    Only stages 0, 1 and the last can be it: every middle stage holds at most stage 1's blocks
    (``stage_layers``) and fewer micro-batches in flight."""
    return _peak_memory_of(arch, layout.pp, layout.vp if layout.schedule == INTERLEAVED else 1, layout.grad_accum,
                           state_shard(dp_flavour, gpus_per_node, layout.tp, layout.cp, layout.pp, layout.dp), parts,
                           checkpointing, dp_flavour,
                           expert_shard_of(state_shard(dp_flavour, gpus_per_node, layout.tp, layout.cp, layout.pp, layout.dp),
                                        layout.tp, layout.ep), reduce_dtype)


def _peak_memory_of(arch: DecoderArch, p: int, v: int, m: int, shard: int, parts: BlockParts, checkpointing: str,
                    dp_flavour: str, expert_shard: int = 1, reduce_dtype: str = "fp32", mtp_layers: int = 0) -> float:
    """``_peak_memory`` of ``p`` stages, ``v`` virtual stages (1: 1F1B), ``m`` micro-batches and
    optimizer states over ``shard`` ranks (``state_shard``; routed experts': ``expert_shard``) with
    ``mtp_layers`` multi-token prediction layers (``_stage_memories``)."""
    per_param = GRAD_BYTES + (MASTER_BYTES + ADAM_STATE_BYTES) / shard  # per trained one (ddp: shard 1)
    per_expert = PARAM_BYTES + (0.0 if parts.frozen_base else
                                GRAD_BYTES + (MASTER_BYTES + ADAM_STATE_BYTES) / (expert_shard if dp_flavour == ZERO1 else 1))
    layers = stage_layers(pipeline_blocks(arch, mtp_layers), p, not pytorch_stack(dp_flavour))
    moe_blocks = stage_moe_blocks(arch, layers, v, mtp_layers) if parts.kinds is not None else None
    every = parts
    peak = 0.0
    # the arithmetic of _stage_memories, without the dicts
    for i in memory_stages(p) if moe_blocks is None else peak_stages(layers, moe_blocks):
        n = layers[i]
        parts = every if moe_blocks is None else every.on_stage(moe_blocks[i], n)
        per_mb = n * _kept_block_bytes(parts, checkpointing) + (parts.first_act_bytes if i == 0 else 0.0)
        flight = min(float(m), p - i + (p - 1 - i) / v) if v > 1 and p > 1 else float(min(m, p - i))
        acts = per_mb * flight + _rebuilt_block_bytes(parts, checkpointing) + (
            (1 + mtp_layers) * parts.last_act_bytes + eager_loss_bytes(parts, dp_flavour) if i == p - 1 else 0.0)
        params_i = (n * parts.local_block_params + (parts.local_embed_params if i == 0 else 0.0)
                    + (parts.local_head_params if i == p - 1 else 0.0))
        if dp_flavour in SHARDED_FLAVOURS:
            root, block = fsdp_unit_params(parts, i == 0, i == p - 1)
            allocated = sum(fsdp_state_bytes(params_i, n * parts.local_expert_params, root, block, dp_flavour, shard,
                                             expert_shard, reduce_dtype, p == 1).values())
            allocated += acts  # no FP8 weight workspace (stage_memory_bytes)
        else:
            allocated = (params_i * PARAM_BYTES + parts.trainable(n, i == 0, i == p - 1) * per_param
                         + n * (parts.local_expert_params * per_expert + parts.fp8_weight_bytes) + acts)
        peak = max(peak, allocated + allocator_bytes(allocated))
    return peak


# ---- the same peak on many clusters ------------------------------------------------------------
# A catalog search asks the peak of the same layouts on every GPU type and count: the bytes depend
# on the blocks' figures other than their seconds (what a GPU's speed changes), which a signature
# names, so that equal signatures share one computation.
_MEMORY_FIELDS = tuple(f.name for f in dataclasses.fields(BlockParts) if f.name not in _SECONDS)
_SIGNATURES: dict[tuple[object, ...], int] = {}
_PEAKS: dict[tuple[object, ...], float] = {}
_NUMBERS = itertools.count()  # never reused: a number kept across a clear of the memo names no other blocks
_BY_PARTS: dict[tuple[int, int], tuple[DecoderArch, BlockParts, int]] = {}  # the same parts asked again
MAX_MEMO = 1 << 18  # entries kept (a few tens of MB); the memo starts again beyond
MAX_PARTS = 1 << 14  # parts remembered by identity (each kept alive: about a kilobyte)


def memory_signature(arch: DecoderArch, parts: BlockParts) -> int:
    """A number for ``arch``'s blocks as ``parts`` hold them in memory: equal for parts whose
    every figure but the seconds is equal (``peak_memory``), and never given to other figures (a
    caller may keep it for as long as it keeps ``parts``)."""
    known = _BY_PARTS.get((id(arch), id(parts)))
    if known is not None and known[0] is arch and known[1] is parts:
        return known[2]
    sig = (arch, *(getattr(parts, name) for name in _MEMORY_FIELDS))
    if sig not in _SIGNATURES:
        if len(_SIGNATURES) >= MAX_MEMO:
            _SIGNATURES.clear()
            _PEAKS.clear()
        _SIGNATURES[sig] = next(_NUMBERS)
    if len(_BY_PARTS) >= MAX_PARTS:
        _BY_PARTS.clear()
    _BY_PARTS[(id(arch), id(parts))] = (arch, parts, _SIGNATURES[sig])  # the references keep the ids from being reused
    return _SIGNATURES[sig]


def peak_memory(signature: int, arch: DecoderArch, p: int, v: int, m: int, shard: int, parts: BlockParts,
                checkpointing: str, dp_flavour: str, expert_shard: int = 1, reduce_dtype: str = "fp32",
                mtp_layers: int = 0) -> float:
    """``_peak_memory_of``, remembered by ``signature`` (``memory_signature(arch, parts)``)."""
    key = (signature, p, v, m, shard, checkpointing, dp_flavour, expert_shard, reduce_dtype, mtp_layers)
    found = _PEAKS.get(key)
    if found is None:
        if len(_PEAKS) >= MAX_MEMO:
            _PEAKS.clear()
        found = _PEAKS[key] = _peak_memory_of(arch, p, v, m, shard, parts, checkpointing, dp_flavour, expert_shard,
                                              reduce_dtype, mtp_layers)
    return found


def eager_loss_bytes(parts: BlockParts, dp_flavour: str) -> float:
    """What PyTorch's cross-entropy holds at its peak beyond Megatron's fused vocab-parallel one
    (whose fp32 softmax ``last_act_bytes`` counts), under ``fsdp``/``hsdp`` (torchtitan), in fp32
    tensors of the logits' shape (``LOSS_FP32_BYTES`` each):

    - TP 1: the fused ``log_softmax`` kernels' backward holds the saved log-probabilities
      (``last_act_bytes``), the gradient arriving from the loss and the one it writes: 2 more
      (torchtitan frees the bf16 logits before backward; the forward holds less: bf16 logits, their
      fp32 upcast and the log-probabilities, 2 + 4 + 4 bytes);
    - TP > 1, loss parallelism (DTensor's ``_log_softmax`` over the vocabulary shards, composed of
      element-wise ops): its backward ``grad - exp(out) x sum(grad)`` holds the saved output, the
      gradient arriving, ``exp(out)`` and the product (then the result in place of ``exp``): 3 more.

    (srift/simulate/memory.py ``loss_bytes``, the data-parallel path's, counts the forward's.)"""
    if dp_flavour not in SHARDED_FLAVOURS:
        return 0.0
    return parts.logits * (3.0 if parts.tp > 1 else 2.0) * LOSS_FP32_BYTES


def _kept_block_bytes(parts: BlockParts, checkpointing: str) -> float:
    """What one block keeps per micro-batch for backward under ``checkpointing``: its input (full),
    its activations less the selective modules' (selective), or all of them."""
    if checkpointing == FULL_CHECKPOINTING:
        return parts.block_input_bytes
    return parts.block_act_bytes - (parts.selective_saved_bytes if checkpointing == SELECTIVE else 0.0)


def _rebuilt_block_bytes(parts: BlockParts, checkpointing: str) -> float:
    """What backward's recompute holds once at the peak: one block's activations rebuilt (full) or
    one block's recomputed modules' (selective)."""
    if checkpointing == FULL_CHECKPOINTING:
        return parts.block_act_bytes
    return parts.selective_saved_bytes if checkpointing == SELECTIVE else 0.0


def _stage_memories(arch: DecoderArch, layout: Layout, parts: BlockParts, checkpointing: str,
                    dp_flavour: str, stages: list[int] | None = None, shard: int | None = None,
                    reduce_dtype: str = "fp32", mtp_layers: int = 0,
                    stage_blocks: tuple[int, ...] | None = None) -> list[dict[str, float]]:
    """Bytes per GPU by kind of every stage (or of ``stages``); optimizer states over ``shard``
    ranks (``state_shard``; None: CP x DP under ``zero1`` and ``fsdp``, else 1); ``mtp_layers``:
    multi-token prediction layers (``pipeline_blocks``; the last stage keeps each one's logits);
    ``stage_blocks``: the blocks of each stage (default ``stage_layers``' split). A mixture of
    experts whose blocks differ counts each stage's own dense and MoE blocks
    (``stage_moe_blocks``, ``BlockParts.on_stage``)."""
    p, v, m = layout.pp, layout.vp, layout.grad_accum
    if shard is None:
        shard = layout.cp * layout.dp if dp_flavour in (ZERO1, FSDP) else 1
    out = []
    layers = stage_blocks or stage_layers(pipeline_blocks(arch, mtp_layers), p, not pytorch_stack(dp_flavour))
    moe_blocks = stage_moe_blocks(arch, layers, v if layout.schedule == INTERLEAVED else 1, mtp_layers) \
        if parts.kinds is not None else None
    every = parts
    for i in (range(p) if stages is None else stages):
        n = layers[i]
        parts = every if moe_blocks is None else every.on_stage(moe_blocks[i], n)  # the blocks this stage holds
        per_mb = n * _kept_block_bytes(parts, checkpointing)
        once = _rebuilt_block_bytes(parts, checkpointing)
        if i == 0:
            per_mb += parts.first_act_bytes
        if layout.schedule == INTERLEAVED and p > 1 and v > 1:
            flight = min(float(m), p - i + (p - 1 - i) / v)
        else:
            flight = float(min(m, p - i))
        extra = once + ((1 + mtp_layers) * parts.last_act_bytes + eager_loss_bytes(parts, dp_flavour) if i == p - 1 else 0.0)
        params_i = (n * parts.local_block_params + (parts.local_embed_params if i == 0 else 0.0)
                    + (parts.local_head_params if i == p - 1 else 0.0))
        root, block = fsdp_unit_params(parts, i == 0, i == p - 1)
        states = StageStates(params_i, shard, n * parts.local_expert_params, expert_shard_of(shard, layout.tp, layout.ep),
                             n * parts.fp8_weight_bytes,
                             parts.trainable(n, i == 0, i == p - 1) if parts.frozen_base else None, root, block)
        out.append(stage_memory_bytes(states, per_mb, flight, extra, dp_flavour, reduce_dtype, p == 1))
    return out
