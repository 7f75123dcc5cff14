"""A decoder's blocks as work items: each block's compute seconds, saved bytes and parameters
on one GPU of a layout (``BlockParts``).

Part of the layout simulator (srift/simulate/layouts.py: the model as a whole)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from srift.hardware import gpu as gpu_spec
from srift.job import (CORE_ATTN, DEFAULT_RECOMPUTE_MODULES, HALF_PRECISIONS, MOE_ACT, MOE_LAYER, SELECTIVE, Fp8Recipe,
                       MoeDispatcher, RecomputeModule)
from srift.perf.fp8 import fp8_attention_s, fp8_saved_bytes, fp8_times, fp8_weight_cache_bytes
from srift.perf.compute import ATTENTION, NORM, layer_kind, layer_times, mma_rate_flops
from srift.simulate.finetune import LoraSpec, finetune_profile
from srift.simulate.memory import LOSS_FP32_BYTES
from srift.simulate.moe import (BALANCED_ROUTING, MoeBlockShape, MoeBlockTimes, expert_tp, local_expert_params,
                                moe_act_bytes, moe_activation_bytes, moe_block_shape, moe_block_times)
from srift.simulate.recompute import check_modules, leaf_module, module_figures
from srift.simulate.sharded import checkpoint_masks
from srift.profile import Profile
from srift.zoo.llm import EXPERTS_PREFIX, LSE_BYTES, DecoderArch, block_params, decoder_profile, dense_mlp_params
from srift.simulate.layout.plan import _SECONDS


# ---- compute on the split shapes ---------------------------------------------------------------
@dataclass(frozen=True)
class BlockMemory:
    """One block's memory figures on one GPU (``BlockParts``' fields of the same names): of a MoE
    block or a dense block of a mixture of experts whose blocks differ."""

    block_act_bytes: float
    selective_saved_bytes: float
    op_sac_saved_bytes: float
    local_block_params: float
    local_adapter_params: float
    local_expert_params: float
    fp8_weight_bytes: float


_MEMORY_FIELDS = tuple(f.name for f in dataclasses.fields(BlockMemory))


@dataclass(frozen=True)
class BlockParts:
    """Seconds and bytes of one micro-batch on one GPU, per part of the model, at a TP and CP split.

    Attributes:
        block_f_s, block_b_s: One block's forward and backward.
        attention_f_s, attention_b_s: Of which the attention core.
        first_f_s, first_b_s: The embedding (and position) layers.
        last_f_s, last_b_s: Final norm and head.
        block_act_bytes: Activations one block keeps for backward (sequence-parallel shards).
        block_input_bytes: A block's input (what full recomputation keeps).
        first_act_bytes: The embedding's output.
        last_act_bytes: Final norm, logits and the loss's fp32 copies.
        local_block_params: One block's parameters on this TP rank.
        local_embed_params, local_head_params: The embedding's and head's on this rank.
        kv_width: This rank's key/value width.
        moe_fraction: Share of the blocks that are MoE blocks (0: a dense model). A mixture of
            experts' blocks are averaged: each block stands for ``moe_fraction`` of a MoE block
            and the rest of a dense one (DeepSeek-V3's 3 dense blocks of 61 spread over the stages)
            in time; in memory each stage counts its own (``kinds``).
        local_expert_params: Routed-expert parameters of one (average) block on this rank.
        dispatch_bytes: One MoE block's all-to-all send buffer per rank (srift/simulate/moe.py).
        etp_gather_bytes: Expert tensor parallelism: one MoE block's routed rows gathered over the
            TP group (``MoeBlockShape.etp_gather_bytes``; 0 without).
        experts_f_s, experts_b_s: Of ``block_f_s``/``block_b_s``, the routed experts' grouped GEMMs.
        selective_saved_bytes: Of ``block_act_bytes``, what the ``selective`` policy's recompute
            modules drop (srift/simulate/recompute.py).
        selective_f_s: The forward seconds they run again in backward.
        fp8_weight_bytes: One block's FP8 weight copies on this rank (its GEMMs', experts' included:
            srift/perf/fp8.py ``fp8_weight_cache_bytes``; 0 without FP8).
        frozen_base: LoRA: the base weights (embedding, blocks, head, experts) are frozen; only
            ``local_adapter_params`` per block train (gradients, optimizer, data-parallel reduction).
        local_adapter_params: One block's LoRA adapter parameters on this rank (in
            ``local_block_params`` too).
        moe_recomputed: The ``selective`` policy recomputes whole MoE layers (``moe``), whose
            dispatch and combine all-to-alls run again in backward.
        logits: Logits of one micro-batch on this rank (tokens x this TP rank's vocabulary).
        op_sac_saved_bytes, op_sac_f_s: What torchtitan's per-op selective checkpointing
            (srift/simulate/sharded.py's ``selective`` policy: attention and every other matmul
            output saved, the rest recomputed) drops of ``block_act_bytes``, and the forward
            seconds it runs again in backward (``plan_layout(op_sac=True)``).
        gather_element_bytes: Bytes per element the TP all-gathers move when not the activations'
            (torchao's float8 TP under PyTorch's stack casts before it gathers: the FP8 copy;
            0: the activations' own).
        tp: The TP degree these figures are split for.
        kinds: A mixture of experts with dense blocks too (DeepSeek-V3's ``first_k_dense_replace``):
            (a MoE block's, a dense block's) memory figures, which ``on_stage`` mixes for the
            blocks a pipeline stage holds; None when every block is alike.
    """

    block_f_s: float
    block_b_s: float
    attention_f_s: float
    attention_b_s: float
    first_f_s: float
    first_b_s: float
    last_f_s: float
    last_b_s: float
    block_act_bytes: float
    block_input_bytes: float
    first_act_bytes: float
    last_act_bytes: float
    local_block_params: float
    local_embed_params: float
    local_head_params: float
    kv_width: int
    moe_fraction: float = 0.0
    local_expert_params: float = 0.0
    dispatch_bytes: float = 0.0
    etp_gather_bytes: float = 0.0
    experts_f_s: float = 0.0
    experts_b_s: float = 0.0
    selective_saved_bytes: float = 0.0
    selective_f_s: float = 0.0
    fp8_weight_bytes: float = 0.0
    frozen_base: bool = False
    local_adapter_params: float = 0.0
    moe_recomputed: bool = False
    op_sac_saved_bytes: float = 0.0
    op_sac_f_s: float = 0.0
    logits: float = 0.0
    gather_element_bytes: float = 0.0
    tp: int = 1
    kinds: tuple[BlockMemory, BlockMemory] | None = None

    def __hash__(self) -> int:
        """The fields' hash (what the dataclass would compute), computed once: the layout search's
        caches key on the parts, tens of thousands of times a catalog search."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(self.__dict__[name] for name in _FIELDS))
            object.__setattr__(self, "_hash", cached)
        return int(cached)

    def __getstate__(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def on_stage(self, moe_blocks: int, blocks: int) -> "BlockParts":
        """These figures with the memory ones (``BlockMemory``'s) of a stage of ``blocks`` blocks,
        ``moe_blocks`` of them MoE blocks: its own mix, not the model's average (a stage holding
        only dense blocks holds no experts). Seconds stay the model's average."""
        if self.kinds is None or blocks == 0:
            return self
        frac = moe_blocks / blocks
        moe, dense = self.kinds
        # A copy with the memory fields replaced (as ``dataclasses.replace``, which re-runs the
        # constructor: a layout search calls this for every stage of every candidate).
        mixed = object.__new__(BlockParts)
        mixed.__dict__.update(self.__dict__)
        mixed.__dict__.pop("_hash", None)  # not the cached hash: the figures differ
        mixed.__dict__.update({name: frac * getattr(moe, name) + (1.0 - frac) * getattr(dense, name)
                               for name in _MEMORY_FIELDS})
        return mixed

    def trainable(self, blocks: int, first: bool, last: bool) -> float:
        """Parameters that train on a stage of ``blocks`` blocks (with the embedding when ``first``,
        the head when ``last``), routed experts aside."""
        if self.frozen_base:
            return blocks * self.local_adapter_params
        return (blocks * self.local_block_params + (self.local_embed_params if first else 0.0)
                + (self.local_head_params if last else 0.0))

    @property
    def trainable_expert_params(self) -> float:
        """Routed-expert parameters per block that train (none under LoRA: the experts are frozen)."""
        return 0.0 if self.frozen_base else self.local_expert_params


_FIELDS = tuple(f.name for f in dataclasses.fields(BlockParts))


@functools.lru_cache(maxsize=4096)
def split_arch(arch: DecoderArch, tp: int) -> DecoderArch:
    """One TP rank's block: ``heads / t`` query heads, ``max(1, kv_heads / t)`` key/value heads
    (replicated when fewer than t), ``ceil(intermediate / t)`` MLP width, ``ceil(vocab / t)``
    (cached)."""
    # Megatron-Core builds q, k and v as one column-parallel GEMM (``linear_qkv``): time them fused
    # (the fused naming's one q + 2 kv wide matmul), not as a narrow k and v GEMM at TP 8.
    # torchtitan runs three (wq, wk, wv) on one input; timed fused too: under torch.compile their
    # FP8 casts of that input are one (common subexpressions), and in bf16 the narrow k and v GEMMs
    # add 4 % to a Llama 3 70B block at TP 8 by the compute model.
    naming = "mpt" if arch.naming == "hf-llama" and not arch.is_mla else arch.naming
    return dataclasses.replace(arch, n_layers=1, naming=naming, heads=arch.heads // tp, kv_heads=max(1, arch.kv_heads // tp),
                               head_dim=arch.head_dim, intermediate=-(-arch.intermediate // tp),
                               shared_intermediate=-(-arch.shared_intermediate // tp),
                               vocab=-(-arch.vocab // tp), max_seq_len=arch.max_seq_len)


# Caches hold every (GPU type x TP x CP x micro-batch) of a multi-cloud search (about 30 GPU types x
# 100 splits): a smaller LRU cache cycled through would miss on every call.
@dataclass(frozen=True)
class BlockOptions:
    """How the blocks run besides their split: ``block_parts``' settings (hashable: it is cached).

    Attributes:
        imbalance: A mixture of experts' routing imbalance (srift/simulate/moe.py).
        fp8: The blocks' GEMMs in FP8 under this Transformer Engine recipe (srift/perf/fp8.py),
            which also keeps the inputs of the GEMMs after an activation in FP8; None: bf16.
        recompute_modules: What the ``selective`` policy recomputes (srift/simulate/recompute.py).
        lora: The base frozen, LoRA adapters on the fused projections (srift/simulate/finetune.py).
        op_sac: Also torchtitan's per-op selective figures (``BlockParts.op_sac_saved_bytes``; 0
            otherwise).
        fp8_attention: With ``fp8``, the attention core in FP8 too (``fp8_attention_s``).
        dispatcher: The MoE token dispatcher (``flex``: no permutation passes around the experts,
            srift/simulate/moe.py).
        fused_fc1: A dense gated MLP's FP8 input cast once (Megatron-Core's ``linear_fc1``;
            torchtitan runs two).
        pytorch_kernels: Attention as PyTorch runs it (torchtitan: SDPA's FlashAttention-2 at the
            fitted ``mma`` rate) rather than Transformer Engine's (cuDNN attention at the full dense
            rate).
    """

    imbalance: float = BALANCED_ROUTING
    fp8: Fp8Recipe | None = None
    recompute_modules: tuple[RecomputeModule, ...] = DEFAULT_RECOMPUTE_MODULES
    lora: LoraSpec | None = None
    op_sac: bool = False
    fp8_attention: bool = False
    dispatcher: MoeDispatcher = "alltoall"
    fused_fc1: bool = True
    pytorch_kernels: bool = False


@functools.lru_cache(maxsize=32768)
def block_parts(arch: DecoderArch, tp: int, cp: int, micro_batch: int, seq_len: int, precision: str, gpu: str,
                ep: int = 1, options: BlockOptions = BlockOptions()) -> BlockParts:
    """``BlockParts`` from the compute model on the split shapes (cached), run as ``options`` say.

    A mixture of experts (``ep`` expert-parallel ranks, routing ``options.imbalance``:
    srift/simulate/moe.py) averages a dense block and a MoE block by ``moe_fraction``; the MoE
    block's routed experts are timed at the per-expert row count, not as the profile's aggregate
    GEMMs. Blocks with a sliding attention window (GPT-OSS) are averaged with the full-attention
    ones likewise."""
    options, inner = _checked_options(options)
    modules = options.recompute_modules
    fp8, imbalance, dispatcher, pytorch_kernels = options.fp8, options.imbalance, options.dispatcher, options.pytorch_kernels
    if arch.sliding_window and 0 < arch.sliding_blocks < arch.n_layers:
        share = arch.sliding_blocks / arch.n_layers
        local = block_parts(dataclasses.replace(arch, sliding_every=1), tp, cp, micro_batch, seq_len, precision, gpu,
                            ep, options)
        full = block_parts(dataclasses.replace(arch, sliding_window=0), tp, cp, micro_batch, seq_len, precision, gpu,
                           ep, options)
        return dataclasses.replace(full, **{k: share * getattr(local, k) + (1.0 - share) * getattr(full, k)
                                            for k in ("block_f_s", "block_b_s", "attention_f_s", "attention_b_s",
                                                      "selective_f_s", "op_sac_f_s")})
    if not arch.is_moe:
        dense_parts = _block_parts(arch, tp, cp, micro_batch, seq_len, precision, gpu, inner)
        return dataclasses.replace(dense_parts, fp8_weight_bytes=(dense_parts.local_block_params * fp8_weight_cache_bytes(fp8)
                                                                  if fp8 else 0.0))
    moe_arch, dense_arch, frac = _moe_and_dense(arch)
    moe = _block_parts(moe_arch, tp, cp, micro_batch, seq_len, precision, gpu, inner)
    dense = moe if dense_arch is None else _block_parts(dense_arch, tp, cp, micro_batch, seq_len, precision, gpu, inner)
    e = 2.0 if precision in HALF_PRECISIONS else 4.0
    kept_e = fp8_saved_bytes(fp8) if fp8 else e
    etp = expert_tp(tp, ep)
    shape = moe_block_shape(arch, micro_batch * seq_len // (cp * tp), ep, e, imbalance, dispatcher, etp)
    experts_local = local_expert_params(arch, ep, etp)
    xt = _expert_times(arch, shape, gpu, precision, fp8, pytorch_kernels)
    # The MoE block's non-expert parameters on this rank: its profile's, less every routed expert.
    moe_local = moe.local_block_params - arch.experts * dense_mlp_params(split_arch(arch, tp), arch.expert_intermediate)

    # Selective recompute of the MoE layer: all of it (``moe``: its kept bytes, its experts' forward;
    # _plan adds its all-to-alls) or the experts' activation (``moe_act``).
    if MOE_LAYER in modules:
        moe_saved, moe_again_s = moe_activation_bytes(arch, shape, e, kept_e), xt.experts_f_s
    elif MOE_ACT in modules:
        moe_saved, moe_again_s = moe_act_bytes(arch, shape, kept_e), xt.act_f_s
    else:
        moe_saved = moe_again_s = 0.0

    def mix(a: float, b: float) -> float:
        return frac * a + (1.0 - frac) * b

    moe_act_total = moe.block_act_bytes + moe_activation_bytes(arch, shape, e, kept_e)
    kinds = None if frac == 1.0 else (
        BlockMemory(moe_act_total, moe.selective_saved_bytes + moe_saved, moe.op_sac_saved_bytes, moe_local,
                    moe.local_adapter_params, experts_local,
                    (moe_local + experts_local) * fp8_weight_cache_bytes(fp8) if fp8 else 0.0),
        BlockMemory(dense.block_act_bytes, dense.selective_saved_bytes, dense.op_sac_saved_bytes, dense.local_block_params,
                    dense.local_adapter_params, 0.0, dense.local_block_params * fp8_weight_cache_bytes(fp8) if fp8 else 0.0))
    return dataclasses.replace(
        moe, kinds=kinds,
        block_f_s=mix(moe.block_f_s + xt.experts_f_s, dense.block_f_s),
        block_b_s=mix(moe.block_b_s + xt.experts_b_s, dense.block_b_s),
        block_act_bytes=mix(moe_act_total, dense.block_act_bytes),
        selective_saved_bytes=mix(moe.selective_saved_bytes + moe_saved, dense.selective_saved_bytes),
        selective_f_s=mix(moe.selective_f_s + moe_again_s, dense.selective_f_s),
        op_sac_saved_bytes=mix(moe.op_sac_saved_bytes, dense.op_sac_saved_bytes),
        op_sac_f_s=mix(moe.op_sac_f_s, dense.op_sac_f_s),
        local_block_params=mix(moe_local, dense.local_block_params),
        local_adapter_params=mix(moe.local_adapter_params, dense.local_adapter_params),
        moe_fraction=frac, local_expert_params=frac * experts_local, moe_recomputed=MOE_LAYER in modules,
        dispatch_bytes=shape.dispatch_bytes, etp_gather_bytes=shape.etp_gather_bytes, experts_f_s=frac * xt.experts_f_s, experts_b_s=frac * xt.experts_b_s,
        fp8_weight_bytes=((mix(moe_local, dense.local_block_params) + frac * experts_local)
                          * fp8_weight_cache_bytes(fp8) if fp8 else 0.0))


# Memos of ``block_parts``' pieces that many of its calls share (each a pure function of its key).
@functools.lru_cache(maxsize=256)
def _checked_options(options: BlockOptions) -> tuple[BlockOptions, BlockOptions]:
    """``options`` with its recompute modules checked, and what ``_block_parts`` reads of them (a
    MoE model's dense and MoE blocks are the same whatever the routing)."""
    options = dataclasses.replace(options, recompute_modules=check_modules(options.recompute_modules))
    return options, dataclasses.replace(options, imbalance=BALANCED_ROUTING, dispatcher="alltoall")


@functools.lru_cache(maxsize=256)
def _moe_and_dense(arch: DecoderArch) -> tuple[DecoderArch, DecoderArch | None, float]:
    """A mixture of experts' MoE block and its dense block as architectures of their own (None:
    every block is a MoE block), and the share of its blocks that are MoE blocks."""
    moe = dataclasses.replace(arch, dense_layers=0, moe_every=1, dense_blocks=frozenset())
    frac = arch.moe_blocks / arch.n_layers
    if frac == 1.0:
        return moe, None, frac
    return moe, dataclasses.replace(arch, experts=0, experts_per_token=0, expert_intermediate=0, shared_intermediate=0,
                                    dense_layers=0, moe_every=1, dense_blocks=frozenset(), router_bias=False,
                                    shared_gate=False), frac


@functools.lru_cache(maxsize=32768)
def _expert_times(arch: DecoderArch, shape: MoeBlockShape, gpu: str, precision: str, fp8: Fp8Recipe | None,
                  one_kernel: bool) -> MoeBlockTimes:
    """``moe_block_times`` without the all-to-all (the same for every split with the same shape)."""
    return moe_block_times(arch, shape, gpu, precision, None, fp8=fp8, one_kernel=one_kernel)


# Cached apart from ``block_parts``: a mixture of experts' dense and MoE blocks are the same for
# every expert-parallel size a search tries.
@functools.lru_cache(maxsize=32768)
def _block_parts(arch: DecoderArch, tp: int, cp: int, micro_batch: int, seq_len: int, precision: str,
                 gpu: str, options: BlockOptions) -> BlockParts:
    """``BlockParts`` of ``arch``'s first block (a MoE block's routed experts left out), run as
    ``options`` say (``recompute_modules`` checked; routing and dispatcher not read)."""
    fp8, modules, lora, op_sac = options.fp8, options.recompute_modules, options.lora, options.op_sac
    fp8_attention, pytorch_kernels = options.fp8_attention, options.pytorch_kernels
    split = split_arch(arch, tp)
    tokens = seq_len // cp
    prof, adapters = _rank_profile(arch, split, micro_batch, tokens, cp, precision, lora)
    fwd_s, bwd_s = _layer_seconds(prof, gpu, precision, options, tp, arch.hidden)
    # Transformer Engine's fused attention (cuDNN) issues the GPU's full-rate tensor-core
    # instructions (Hopper's wgmma), not Ampere's mma that the fitted FlashAttention-2 rate is
    # measured against: the same fitted efficiency, of the full dense peak. PyTorch's SDPA runs
    # FlashAttention-2 (cuDNN attention is not its first choice since PyTorch 2.5.1), at that rate.
    spec = gpu_spec(gpu)
    attention_scale = mma_rate_flops(spec, precision) / spec.peak_flops(precision) \
        if precision in HALF_PRECISIONS and not pytorch_kernels else 1.0
    e = 2.0 if precision in HALF_PRECISIONS else 4.0
    hidden_bytes = micro_batch * tokens * arch.hidden * e
    bf = bb = af = ab = ff = fb = lf = lb = 0.0
    act = first_act = last_act = 0.0
    leaves = []  # (recompute module, bytes kept, forward seconds) of the block's leaves
    seen_block = False
    op_recompute = checkpoint_masks(prof, SELECTIVE).recompute if op_sac else None
    op_bytes = op_f = 0.0
    for i, layer in enumerate(prof.layers):
        if EXPERTS_PREFIX in layer.name:  # timed per expert by block_parts
            continue
        kind = layer_kind(layer.type)
        f, b = float(fwd_s[i]), float(bwd_s[i])
        if kind == ATTENTION:
            f, b = f * attention_scale, b * attention_scale
            if fp8 and fp8_attention:
                f, b = fp8_attention_s(f, gpu), fp8_attention_s(b, gpu)
        if kind == NORM and layer.params in (arch.hidden, 2 * arch.hidden):
            # Sequence parallelism: the block's norms (and their residual) run on tokens / t.
            f, b = f / tp, b / tp
        if layer.unit is not None:
            seen_block = True
            bf, bb = bf + f, bb + b
            if kind == ATTENTION:
                af, ab = af + f, ab + b
            out = layer.activation_bytes
            # Sequence parallelism shards the hidden-width activations (norms, o and down outputs:
            # the matmuls whose output width, ``kfac_g_dim``, is the model's).
            if kind == NORM or (kind == "matmul" and layer.kfac_g_dim == arch.hidden):
                out /= tp
            if fp8 and kind == "elementwise" and not pytorch_kernels:
                # The next GEMM's FP8 copy of its input is what stays (Transformer Engine); torchao's
                # float8 linear saves its high-precision input and casts it again in backward.
                out *= fp8_saved_bytes(fp8) / e
            # Megatron's fused SwiGLU keeps the gate and up outputs and the product the down
            # projection reads (the activation's own output is recomputed): the elementwise
            # layer's output stands for the product.
            act += out
            module = leaf_module(layer.name[len(layer.unit) + 1:], kind)
            leaves.append((module, micro_batch * tokens * split.heads * LSE_BYTES if module == CORE_ATTN else out, f))
            if op_recompute is not None and op_recompute[i]:
                op_bytes, op_f = op_bytes + out, op_f + f
            if pytorch_kernels and tp > 1 and kind == NORM and layer.params in (arch.hidden, 2 * arch.hidden):
                # DTensor's autograd keeps the gathered norm output the column-parallel GEMMs read
                # (torchao's float8: its FP8 copy), where Megatron keeps the shard and gathers it
                # again in backward; per-op SAC recomputes the all-gather instead.
                gathered = layer.activation_bytes * (1.0 - 1.0 / tp) * (fp8_saved_bytes(fp8) / e if fp8 else 1.0)
                act += gathered
                op_bytes += gathered if op_recompute is not None else 0.0
        elif not seen_block:
            ff, fb = ff + f, fb + b
            first_act += layer.activation_bytes / tp if kind == "embedding" else 0.0
        else:
            lf, lb = lf + f, lb + b
            last_act += layer.activation_bytes / tp if kind == NORM else 0.0
    # Megatron's vocab-parallel cross-entropy keeps its fp32 softmax of this rank's logits; the
    # head's backward reads its input (the final norm's output), not the logits.
    last_act += micro_batch * tokens * split.vocab * LOSS_FP32_BYTES
    embed = arch.vocab * arch.hidden / tp + (arch.max_seq_len * arch.hidden if arch.position == "learned" else 0)
    head = 0.0 if arch.tied_embeddings else arch.vocab * arch.hidden / tp
    figures = module_figures(leaves)
    return BlockParts(bf, bb, af, ab, ff, fb, lf, lb, act, hidden_bytes / tp, first_act, last_act,
                      block_params(split) + adapters, embed, head + arch.hidden, split.kv_width,
                      selective_saved_bytes=sum(figures.get(m, (0.0, 0.0))[0] for m in modules),
                      selective_f_s=sum(figures.get(m, (0.0, 0.0))[1] for m in modules),
                      frozen_base=lora is not None, local_adapter_params=adapters, logits=micro_batch * tokens * split.vocab,
                      op_sac_saved_bytes=op_bytes,
                      op_sac_f_s=op_f,
                      # torchao's Float8ColwiseParallel casts the sequence shard, then gathers FP8;
                      # Float8RowwiseParallel's output gradient likewise (reduce-scatters stay bf16).
                      gather_element_bytes=fp8_saved_bytes(fp8) if pytorch_kernels and fp8 else 0.0, tp=tp)


def _rank_profile(arch: DecoderArch, split: DecoderArch, micro_batch: int, tokens: int, cp: int, precision: str,
                  lora: LoraSpec | None) -> tuple[Profile, float]:
    """The structural profile of one rank's share of a block stack (``split``: ``arch`` over TP;
    ``tokens``: the sequence over CP), and its trainable adapter parameters under ``lora`` (0 without)."""
    prof = decoder_profile(split, batch_size=micro_batch, seq_len=tokens, precision=precision)
    if cp > 1 and not arch.sample_attention_len:
        # Load-balanced ring attention: this rank does 1/c of the causal work over the whole
        # sequence, c times what a sequence of seq/c tokens would. Samples attending within
        # themselves (srift/simulate/varlen.py): seq/c tokens' work is this rank's 1/c already.
        layers = [dataclasses.replace(l, fwd_flops=l.fwd_flops * cp, bwd_flops=l.bwd_flops * cp,
                                      fwd_flops_seq2=l.fwd_flops_seq2 * cp, bwd_flops_seq2=l.bwd_flops_seq2 * cp)
                  if layer_kind(l.type) == ATTENTION else l for l in prof.layers]
        prof = dataclasses.replace(prof, layers=layers)
    if lora is None:
        return prof, 0.0
    # Frozen Linears run no weight-gradient GEMM (Transformer Engine skips it for a weight
    # without requires_grad); one adapter pair per fused projection (NeMo's LoRALinear wraps
    # linear_qkv, linear_proj, linear_fc1, linear_fc2). The block's norm ahead of its first
    # adapter runs no backward here (in the model, every block's but the first does: tens of
    # microseconds).
    prof, frozen = finetune_profile(prof, lora.job(), fused=True)
    return prof, float(frozen.trainable_params)


def _layer_seconds(prof: Profile, gpu: str, precision: str, options: BlockOptions, tp: int,
                   hidden: int) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of each layer of ``prof`` on ``gpu`` (its FP8 GEMMs under
    ``options.fp8``)."""
    times = layer_times(prof, gpu, precision)
    if not options.fp8:
        return times.fwd_s, times.bwd_s
    # torchao's float8 TP (PyTorch's stack) casts the gathered tensors on their shard, once for the
    # GEMMs sharing one (PrepareFloat8ModuleInput: q, k, v; w1, w3).
    sharded = options.pytorch_kernels and tp > 1
    return fp8_times(prof, times, gpu, options.fp8, options.fused_fc1 or sharded, tp if sharded else 1, hidden)


@functools.lru_cache(maxsize=32768)
def scaled_parts(parts: BlockParts, factor: float) -> BlockParts:
    """``parts`` with every compute second times ``factor``."""
    if factor == 1.0:
        return parts
    return dataclasses.replace(parts, **{k: getattr(parts, k) * factor for k in _SECONDS})
