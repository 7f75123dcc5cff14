"""Tensor, pipeline, context and data parallelism: one iteration of a decoder LLM laid out as
TP x PP x CP x DP, its memory per GPU, and the search over layouts (no torch).

The layout is Megatron-LM's (NeMo, Megatron-Core; torchtitan places its meshes the same way):

- **placement**: ranks are numbered TP innermost, then CP, PP and DP outward, so a tensor-parallel
  group sits inside one node (on its NVLink/NVSwitch) and the data-parallel groups span nodes;
- **tensor parallelism** (TP = t): attention heads, key/value heads and the MLP width are split
  t ways (column-parallel q/k/v and up/gate, row-parallel o and down; the embedding and the head
  split the vocabulary). Sequence parallelism shards what lies between them (norms, residual) along
  the sequence, so each block's forward runs 2 all-gathers (before attention and the MLP) and
  2 reduce-scatters (after them) of the ``micro_batch x tokens x hidden`` activation, and its
  backward 2 all-gathers of the output gradients, 2 all-gathers of the inputs again (sequence
  parallelism keeps them sharded) and 2 reduce-scatters of the input gradients: ``tp_block_comm``.
  Forward's four and backward's gradient all-gathers wait for the GEMM they feed; backward's
  input all-gathers and reduce-scatters run beside the weight- and input-gradient GEMMs
  (Megatron's asynchronous TP communication) and cost only their interference. The GEMMs are the
  compute model's (srift/perf/compute.py) on the split shapes: the same profile builder on a block
  of ``heads / t`` heads and ``intermediate / t`` MLP width, so efficiency falls as the matrices
  shrink;
- **context parallelism** (CP = c): each rank holds ``seq / c`` tokens (in Megatron's load-balanced
  order: chunks ``i`` and ``2c - 1 - i`` of ``2c``, so every rank does ``1 / c`` of the causal
  attention work). Ring attention passes the key/value block around the c ranks in ``c - 1`` steps,
  each overlapped with the attention on the block already there (``cp_ring_step``); backward
  passes the keys/values and their gradients. The gradients are reduced over CP x DP;
- **pipeline parallelism** (PP = p, V virtual stages under ``interleaved``): layers as evenly as
  possible over the stages, the embedding on the first and the final norm, head and loss on the
  last (they take a layer's place: the stages that hold them get the fewer layers). 1F1B runs
  ``M`` micro-batches in ``(M + p - 1)`` slots of one forward and one backward of the slowest
  stage, a bubble of ``(p - 1) / (M + p - 1)`` of the pipeline; the interleaved schedule in
  ``M + (p - 1) / V`` (``bubble_fraction``). Every slot sends an activation to the next stage and a
  gradient back (``micro_batch x seq / c x hidden / t``: sequence parallelism keeps it sharded),
  over the node's link or the network; 1F1B waits for them, the interleaved schedule overlaps
  them (Megatron's ``overlap_p2p_comm``) except on the bubble's path. The first stage holds
  ``min(p, M)`` micro-batches of activations (interleaved: ``p + (p - 1) / V``);
- **data parallelism** (DP = d) over the rest, after the pipeline flush: ``zero1`` (Megatron's
  distributed optimizer: gradients reduce-scattered, the optimizer step on a ``1 / (c d)`` shard,
  the parameters all-gathered) or ``ddp`` (all-reduce). The reduce-scatter overlaps the stage's
  last backward and the all-gather the next iteration's first forward (``overlap_grad_reduce``,
  ``overlap_param_gather``); what does not fit behind them is exposed.

Collectives are srift/perf/comm.py's on each group (``CommModel.subgroup``: its ranks per node and
its share of the node's network). Hidden TP communication under Transformer Engine's userbuffers
(``tp_overlap``, Megatron's ``--tp-comm-overlap``) costs the GEMM beside it the share of SMs its
kernels hold (``tp_overlap_share``: copy-engine ring exchanges and 16-SM pipelined/bulk
collectives); a hidden NCCL send/receive (CP ring steps, pipeline sends) the P2P_CHANNELS SMs it
holds (``p2p_interference``); a hidden EP all-to-all the SMs its dispatcher's kernels hold
(``ep_interference``); other hidden communication (NCCL's collectives: DP, TP without
userbuffers) costs ``overlap_interference`` of its time, as everywhere in srift.

Under ``fsdp``/``hsdp`` the layout runs PyTorch's stack as torchtitan does (``pytorch_stack``): FSDP2
per block over CP x DP, DTensor's TP collectives (``dtensor_tp_block_s``: vanilla, every one waited
for, or async TP's micro-pipelined ones), the compute model unscaled and SDPA's FlashAttention-2
(``compute_factor_of``, ``block_parts(pytorch_kernels=True)``). Memory (``stage_memory_bytes``) is per stage: bf16 weights, bf16 gradient
buffers (``GRAD_BYTES``), fp32 master weights and Adam states (sharded over CP x DP under ``zero1``), activations
of the micro-batches in flight (a block's input under ``full`` recompute; under ``selective``, less what
Megatron-Core's recompute modules drop: srift/simulate/recompute.py; and once, what backward rebuilds of one
block: all of it under ``full``, its recomputed modules under ``selective``), the loss's fp32 logits on the last
stage, and the caching allocator's reserve of srift/simulate/memory.py (``with_allocator``), so a layout
fits where the rest of srift says it does.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from srift.cluster import Cluster
from srift.bounds import require
from srift.errors import SriftError
from srift.files import configs_dir, read_json
from srift.hardware import gpu as gpu_spec
from srift.perf.comm import CommModel
from srift.job import (
    CORE_ATTN, DDP, DEFAULT_RECOMPUTE_MODULES, FLEX, FSDP, FULL_CHECKPOINTING, HALF_PRECISIONS, HSDP, INTERLEAVED,
    LAYOUT_PARALLELISMS, MOE_ACT, MOE_LAYER, PIPELINE_SCHEDULES, REDUCE_BYTES_PER_ELEMENT, SELECTIVE, ZERO1,
    Fp8Recipe, LayoutRequest, MoeDispatcher, RecomputeModule,
)
from srift.perf.fp8 import fp8_attention_s, fp8_saved_bytes, fp8_times, fp8_weight_cache_bytes
from srift.perf.compute import (
    ATTENTION, NORM, kernel_rates, layer_kind, layer_times, load_params as load_compute_params, mma_rate_flops,
)
from srift.simulate.breakdown import (BACKWARD, BUBBLE, COMM_INTERFERENCE, EXPOSED_CP, EXPOSED_DP, EXPOSED_EP, EXPOSED_PP,
                                     EXPOSED_TP, FORWARD, LAYOUT_PHASES, OPTIMIZER, OVERHEAD, RECOMPUTE, Breakdown, Phase)
from srift.simulate.finetune import LoraSpec, finetune_profile
from srift.simulate.memory import (LOSS_FP32_BYTES, MASTER_BYTES, USABLE_FRACTION, allocator_bytes, fit_state, fits,
                                   sharded_state_bytes, sure_fit_bytes, with_allocator)
from srift.simulate.moe import (BALANCED_ROUTING, check_ep, ep_exchange_s, expert_memory_bytes, local_expert_params,
                                moe_act_bytes, moe_activation_bytes, moe_block_shape, moe_block_times)
from srift.simulate.recompute import check_modules, leaf_module, module_figures
from srift.simulate.sharded import StepInputs, checkpoint_masks, simulate_step, unit_collective_s
from srift.zoo.llm import (EXPERTS_PREFIX, LSE_BYTES, DecoderArch, block_params, decoder_profile, dense_mlp_params,
                           params_count)

SCHEDULES = PIPELINE_SCHEDULES
DP_FLAVOURS = LAYOUT_PARALLELISMS
SHARDED_FLAVOURS = (FSDP, HSDP)  # parameters sharded per block (FSDP2 under TP/PP/CP: torchtitan)
LAYOUT_CHECKPOINTING = ("none", "selective", "full")
ADAM_STATE_BYTES = 8.0  # two fp32 moments per parameter
PARAM_BYTES = 2.0  # bf16 weights as computed
# Gradient buffers and their data-parallel reduction in bf16: NeMo's performance recipes set
# ``grad_reduce_in_fp32 = False`` (Megatron-Core's DDP then keeps the grads in the param dtype).
GRAD_BYTES = 2.0
# Layout search: micro-batch sizes and virtual stages tried (Megatron's recipes use 1-4 and 1-12).
SEARCH_MICRO_BATCHES = (1, 2, 4, 8)
SEARCH_VIRTUAL_STAGES = (1, 2, 3, 4, 6, 8, 12)
SEARCH_CONTEXT = (1, 2, 4, 8, 16, 32)
SEARCH_EXPERT = (1, 2, 4, 8, 16, 32, 64)  # Megatron-Bridge's MoE recipes run EP 8 to 64
# Transformer Engine's userbuffers (Megatron's --tp-comm-overlap, NeMo's tp_comm_overlap) overlap
# each of a block's 10 sequence-parallel collectives with a GEMM. TE's ``initialize_ub`` defaults
# (transformer_engine 2.8.0, pytorch/module/base.py: num_sm 1 for ring_exchange, 16 otherwise):
# the 4 ring-exchange ones (forward's 2 all-gathers, backward's 2 gradient all-gathers) move data
# with the copy engines and hold UB_RING_EXCHANGE_SMS; the 6 pipelined or bulk ones (forward's
# reduce-scatters, backward's input re-gathers and reduce-scatters) hold UB_PIPELINE_SMS, the GEMM
# beside them running on the other SMs (``set_sm_margin``). A compute-bound GEMM loses the SMs'
# share of its rate while the collective runs: a hidden TP second costs ``tp_overlap_share`` of a
# second, not the NCCL all-reduce interference (``overlap_interference``, fitted on eager DDP runs).
UB_RING_EXCHANGE_SMS = 1
UB_PIPELINE_SMS = 16
UB_RING_EXCHANGE_COLLECTIVES, UB_PIPELINE_COLLECTIVES = 4, 6
# NCCL runs a send/receive with one peer on NCCL_NCHANNELS_PER_NET_PEER channels (default 2), one
# CTA, so one SM, each: a hidden ring-attention step or pipeline send holds that share of the SMs
# (assumed the same for peers on NVLink), not the all-reduce interference.
P2P_CHANNELS = 2
# A hidden EP all-to-all (``ep_overlap``) holds the SMs its kernels run on: the ``alltoall``
# dispatcher's NCCL all-to-all is a send and a receive with each other rank of the EP group,
# P2P_CHANNELS channels each, at most NCCL_MAX_P2P_CHANNELS (NCCL_MAX_P2P_NCHANNELS' default,
# NCCL's 32 channels); the ``flex`` dispatcher's HybridEP kernels FLEX_DISPATCH_SMS
# (Megatron-Bridge's ``moe_hybridep_num_sms``, which its benchmark recipes set to 32).
NCCL_MAX_P2P_CHANNELS = 32
FLEX_DISPATCH_SMS = 32


# ---- the layout ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """How a job is split over its GPUs.

    Attributes:
        tp: Tensor-parallel ranks (inside a node).
        pp: Pipeline stages.
        cp: Context-parallel ranks (the sequence split ``cp`` ways).
        dp: Data-parallel replicas (the GPUs left).
        vp: Virtual stages per pipeline rank (``interleaved``; 1 otherwise).
        micro_batch: Sequences per micro-batch.
        grad_accum: Micro-batches per optimizer step per pipeline (``M``).
        schedule: One of SCHEDULES.
        ep: Expert-parallel ranks of a mixture of experts (within ``tp x cp x dp``; 1: none).
    """

    tp: int
    pp: int
    cp: int
    dp: int
    vp: int = 1
    micro_batch: int = 1
    grad_accum: int = 1
    schedule: str = "1f1b"
    ep: int = 1

    def __post_init__(self) -> None:
        for key in ("tp", "pp", "cp", "dp", "vp", "micro_batch", "grad_accum", "ep"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"layout {key} must be a positive integer, got {v!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.vp > 1 and self.schedule != INTERLEAVED:
            raise ValueError("virtual stages need the interleaved schedule")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.dp

    @property
    def label(self) -> str:
        """``tp8 pp8 cp2 dp4 vp8 mb1x64``."""
        vp = f" vp{self.vp}" if self.vp > 1 else ""
        ep = f" ep{self.ep}" if self.ep > 1 else ""
        return f"tp{self.tp} pp{self.pp} cp{self.cp} dp{self.dp}{ep}{vp} mb{self.micro_batch}x{self.grad_accum}"

    def to_dict(self) -> dict[str, int | str]:
        return {"tp": self.tp, "pp": self.pp, "cp": self.cp, "dp": self.dp, "vp": self.vp,
                "micro_batch": self.micro_batch, "grad_accum": self.grad_accum, "schedule": self.schedule,
                "ep": self.ep}


def bubble_fraction(pp: int, micro_batches: int, vp: int = 1) -> float:
    """Share of the pipeline's time its stages idle: ``(p - 1) / V`` slots of ``M + (p - 1) / V``
    (1F1B: ``V = 1``, ``(p - 1) / (M + p - 1)``)."""
    idle = (pp - 1) / vp
    return idle / (micro_batches + idle)


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


def pytorch_stack(dp_flavour: str) -> bool:
    """Whether a layout under ``dp_flavour`` runs PyTorch's stack, as torchtitan does (``fsdp``,
    ``hsdp``: FSDP2, DTensor TP, compiled PyTorch kernels), rather than Megatron-Core's."""
    return dp_flavour in SHARDED_FLAVOURS


def compute_factor_of(dp_flavour: str, compute_factor: float | None = None) -> float:
    """The factor on the compute model's seconds: ``compute_factor`` when given, else the fitted
    ``megatron_compute_factor`` for Megatron-Core's kernels and 1 for PyTorch's (the compute model
    is fitted on PyTorch FSDP runs: srift/perf/compute.py)."""
    if compute_factor is not None:
        return compute_factor
    return 1.0 if pytorch_stack(dp_flavour) else load_layout_params().megatron_compute_factor


def default_tp_overlap(dp_flavour: str) -> bool:
    """The framework's default: Megatron-Core's performance recipes overlap TP communication
    (``tp_comm_overlap``); torchtitan's async TP is off unless asked
    (``enable_async_tensor_parallel``)."""
    return not pytorch_stack(dp_flavour)


def pipeline_blocks(arch: DecoderArch, mtp_layers: int = 0) -> int:
    """Blocks the pipeline holds: the model's and ``mtp_layers`` multi-token prediction layers
    (Megatron-Core's ``mtp_num_layers``; DeepSeek-V3's ``num_nextn_predict_layers``, which
    Megatron-Bridge's DeepSeek-V3 bridge maps to it).

    An MTP layer (megatron-core 0.16.1 ``transformer/multi_token_prediction.py``) runs, on the
    last stage beside the loss, one more block of the model's last kind (a MoE block for
    DeepSeek-V3) on the hidden states and the embeddings of the tokens shifted by one, then the
    final norm, the shared output head and its own cross-entropy: srift counts it as one more
    block of the pipeline (stages as ``stage_layers`` splits them, which stands for the layouts
    that give the last stage fewer decoder blocks) and runs the last stage's head and loss once more
    per MTP layer, keeping its logits for backward. Its input norms and the ``2 x hidden ->
    hidden`` projection of the concatenated inputs (``eh_proj``) are not timed: about a fifth of a
    DeepSeek-V3 MoE block's active FLOPs.
    """
    return arch.n_layers + mtp_layers


# Megatron-Core's pipeline layout strings (``pipeline_model_parallel_layout``, megatron-core 0.16.1
# ``transformer/pipeline_parallel_layer_layout.py``): a virtual stage per ``|``-separated part, of
# ``E`` (embedding), ``t`` (a decoder block), ``m`` (a multi-token prediction layer), ``L`` (the
# loss); ``x*N`` and ``(...)*N`` repeat.
_LAYOUT_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_LAYOUT_REPEAT = re.compile(r"([EtmL])\*(\d+)")


def megatron_stage_blocks(layout: str, pp: int, vp: int = 1) -> tuple[int, ...]:
    """Blocks (decoder and multi-token prediction layers) each of ``pp`` pipeline stages holds
    under Megatron-Core's pipeline ``layout`` of ``pp x vp`` virtual stages (rank ``r`` runs the
    virtual stages ``r``, ``r + pp``, ``r + 2 pp``, ...: the interleaved schedule's placement).

    Raises:
        ValueError: for a string that is not such a layout, or one of another number of stages.
    """
    text = layout.replace(" ", "")
    while _LAYOUT_GROUP.search(text):
        text = _LAYOUT_GROUP.sub(lambda g: g.group(1) * int(g.group(2)), text)
    text = _LAYOUT_REPEAT.sub(lambda g: g.group(1) * int(g.group(2)), text)
    parts = text.split("|")
    if set(text) - set("EtmL|") or len(parts) != pp * vp:
        raise ValueError(f"pipeline layout {layout!r} is not {pp * vp} virtual stages of E, t, m and L")
    return tuple(sum(parts[c * pp + r].count("t") + parts[c * pp + r].count("m") for c in range(vp)) for r in range(pp))


@functools.lru_cache(maxsize=4096)
def stage_layers(n_layers: int, pp: int, megatron: bool = False) -> tuple[int, ...]:
    """Blocks per stage: as even as possible, with the embedding and the head counted as a block
    each, so the first and last stages get the fewer blocks (Megatron's ``account_for_embedding``
    and ``account_for_loss``, NeMo's 405B recipe; torchtitan's default split, which weighs the
    embedding and the output as a layer each).

    ``megatron``: Megatron-Core's rule where it differs. It accepts those two flags only when
    ``n_layers + 2`` divides by ``pp`` (megatron-core 0.16 ``TransformerConfig``: "must be
    divisible by pipeline_model_parallel_size"); otherwise a recipe without a pipeline layout or
    first/last-stage counts runs ``n_layers / pp`` blocks on every stage (Megatron-Bridge's
    GPT-OSS-120B recipe: 36 blocks over PP 4, ``account_for_*_in_pipeline_split = False``)."""
    if pp == 1:
        return (n_layers,)
    if megatron and (n_layers + 2) % pp and n_layers % pp == 0:
        return (n_layers // pp,) * pp
    total = n_layers + 2
    base, extra = divmod(total, pp)
    slots = [base + (1 if i < extra else 0) for i in range(pp)]
    # Give the extra slots to the middle stages: the ends carry the embedding and the head.
    slots.sort()
    slots = [slots[0]] + sorted(slots[1:-1], reverse=True) + [slots[-1]] if pp > 2 else slots
    out = list(slots)
    out[0] -= 1
    out[-1] -= 1
    # A stage never holds fewer than zero blocks (very deep pipelines of shallow models).
    while min(out) < 0:
        i = out.index(min(out))
        j = out.index(max(out))
        out[i] += 1
        out[j] -= 1
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def stage_moe_blocks(arch: DecoderArch, layers: tuple[int, ...], vp: int = 1, mtp_layers: int = 0) -> tuple[int, ...]:
    """MoE blocks among the ``layers[r]`` blocks of each pipeline rank ``r``.

    The pipeline's blocks in order are the model's (``DecoderArch.is_moe_block``), then its
    ``mtp_layers``, each of the last block's kind (``pipeline_blocks``). With ``vp`` virtual stages
    a rank's blocks are split into ``vp`` chunks as evenly as possible (the first the larger), and
    chunk ``c`` of rank ``r`` is virtual stage ``c x pp + r`` (the interleaved schedule's
    placement): DeepSeek-V3's 3 dense blocks then lie on the first virtual stages.
    """
    kinds = [arch.is_moe_block(i) for i in range(arch.n_layers)] + [arch.is_moe_block(arch.n_layers - 1)] * mtp_layers
    if sum(layers) != len(kinds):
        raise ValueError(f"stages of {layers} blocks do not place the {len(kinds)} blocks of {arch.name}")
    counts = [0] * len(layers)
    start = 0
    for c in range(vp):
        for r, n in enumerate(layers):
            size = n // vp + (1 if c < n % vp else 0)
            counts[r] += sum(kinds[start:start + size])
            start += size
    return tuple(counts)


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

    def on_stage(self, moe_blocks: int, blocks: int) -> "BlockParts":
        """These figures with the memory ones (``BlockMemory``'s) of a stage of ``blocks`` blocks,
        ``moe_blocks`` of them MoE blocks: its own mix, not the model's average (a stage holding
        only dense blocks holds no experts). Seconds stay the model's average."""
        if self.kinds is None or blocks == 0:
            return self
        frac = moe_blocks / blocks
        moe, dense = self.kinds
        return dataclasses.replace(self, **{
            f.name: frac * getattr(moe, f.name) + (1.0 - frac) * getattr(dense, f.name) for f in dataclasses.fields(BlockMemory)})

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


def split_arch(arch: DecoderArch, tp: int) -> DecoderArch:
    """One TP rank's block: ``heads / t`` query heads, ``max(1, kv_heads / t)`` key/value heads
    (replicated when fewer than t), ``ceil(intermediate / t)`` MLP width, ``ceil(vocab / t)``."""
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
@functools.lru_cache(maxsize=32768)
def block_parts(arch: DecoderArch, tp: int, cp: int, micro_batch: int, seq_len: int, precision: str, gpu: str,
                ep: int = 1, imbalance: float = BALANCED_ROUTING, fp8: Fp8Recipe | None = None,
                recompute_modules: tuple[RecomputeModule, ...] = DEFAULT_RECOMPUTE_MODULES,
                lora: LoraSpec | None = None, op_sac: bool = False, fp8_attention: bool = False,
                dispatcher: MoeDispatcher = "alltoall", fused_fc1: bool = True,
                pytorch_kernels: bool = False) -> BlockParts:
    """``BlockParts`` from the compute model on the split shapes (cached).

    A mixture of experts (``ep`` expert-parallel ranks, routing ``imbalance``: srift/simulate/moe.py)
    averages a dense block and a MoE block by ``moe_fraction``; the MoE block's routed experts are
    timed at the per-expert row count, not as the profile's aggregate GEMMs. Blocks with a
    sliding attention window (GPT-OSS) are averaged with the full-attention ones likewise. ``fp8``:
    the blocks' GEMMs in FP8 under that Transformer Engine recipe (srift/perf/fp8.py), which also
    keeps the inputs of the GEMMs after an activation in FP8; ``recompute_modules``: what the
    ``selective`` policy recomputes (srift/simulate/recompute.py); ``lora``: the base
    frozen, LoRA adapters on the fused projections (srift/simulate/finetune.py); ``op_sac``: also
    torchtitan's per-op selective figures (``BlockParts.op_sac_saved_bytes``; 0 otherwise);
    ``fp8_attention``: the attention core in FP8 too; ``dispatcher``: the MoE token dispatcher
    (``flex``: no permutation passes around the experts, srift/simulate/moe.py); ``fused_fc1``: a
    dense gated MLP's FP8 input cast once (Megatron-Core's ``linear_fc1``; torchtitan runs two);
    ``pytorch_kernels``: attention as PyTorch runs it (torchtitan: SDPA's FlashAttention-2 at the
    fitted ``mma`` rate) rather than Transformer Engine's (cuDNN attention at the full dense rate)."""
    modules = check_modules(recompute_modules)
    if arch.sliding_window and 0 < arch.sliding_blocks < arch.n_layers:
        share = arch.sliding_blocks / arch.n_layers
        local = block_parts(dataclasses.replace(arch, sliding_every=1), tp, cp, micro_batch, seq_len, precision, gpu,
                            ep, imbalance, fp8, modules, lora, op_sac, fp8_attention, dispatcher, fused_fc1,
                            pytorch_kernels)
        full = block_parts(dataclasses.replace(arch, sliding_window=0), tp, cp, micro_batch, seq_len, precision, gpu,
                           ep, imbalance, fp8, modules, lora, op_sac, fp8_attention, dispatcher, fused_fc1,
                           pytorch_kernels)
        return dataclasses.replace(full, **{k: share * getattr(local, k) + (1.0 - share) * getattr(full, k)
                                            for k in ("block_f_s", "block_b_s", "attention_f_s", "attention_b_s",
                                                      "selective_f_s", "op_sac_f_s")})
    if not arch.is_moe:
        dense_parts = _block_parts(arch, tp, cp, micro_batch, seq_len, precision, gpu, fp8, modules, lora, op_sac,
                                   fp8_attention, fused_fc1, pytorch_kernels)
        return dataclasses.replace(dense_parts, fp8_weight_bytes=(dense_parts.local_block_params * fp8_weight_cache_bytes(fp8)
                                                                  if fp8 else 0.0))
    frac = arch.moe_blocks / arch.n_layers
    moe_arch = dataclasses.replace(arch, dense_layers=0, moe_every=1)
    moe = _block_parts(moe_arch, tp, cp, micro_batch, seq_len, precision, gpu, fp8, modules, lora, op_sac, fp8_attention,
                       fused_fc1, pytorch_kernels)
    dense = moe if frac == 1.0 else _block_parts(
        dataclasses.replace(arch, experts=0, experts_per_token=0, expert_intermediate=0, shared_intermediate=0,
                            dense_layers=0, moe_every=1, router_bias=False, shared_gate=False),
        tp, cp, micro_batch, seq_len, precision, gpu, fp8, modules, lora, op_sac, fp8_attention, fused_fc1,
        pytorch_kernels)
    e = 2.0 if precision in HALF_PRECISIONS else 4.0
    kept_e = fp8_saved_bytes(fp8) if fp8 else e
    shape = moe_block_shape(arch, micro_batch * seq_len // (cp * tp), ep, e, imbalance, dispatcher)
    xt = moe_block_times(arch, shape, gpu, precision, None, fp8=fp8)
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
                    moe.local_adapter_params, local_expert_params(arch, ep),
                    (moe_local + local_expert_params(arch, ep)) * fp8_weight_cache_bytes(fp8) if fp8 else 0.0),
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
        moe_fraction=frac, local_expert_params=frac * local_expert_params(arch, ep), moe_recomputed=MOE_LAYER in modules,
        dispatch_bytes=shape.dispatch_bytes, experts_f_s=frac * xt.experts_f_s, experts_b_s=frac * xt.experts_b_s,
        fp8_weight_bytes=((mix(moe_local, dense.local_block_params) + frac * local_expert_params(arch, ep))
                          * fp8_weight_cache_bytes(fp8) if fp8 else 0.0))


def _block_parts(arch: DecoderArch, tp: int, cp: int, micro_batch: int, seq_len: int, precision: str,
                 gpu: str, fp8: Fp8Recipe | None = None,
                 modules: tuple[RecomputeModule, ...] = DEFAULT_RECOMPUTE_MODULES,
                 lora: LoraSpec | None = None, op_sac: bool = False, fp8_attention: bool = False,
                 fused_fc1: bool = True, pytorch_kernels: bool = False) -> BlockParts:
    """``BlockParts`` of ``arch``'s first block (a MoE block's routed experts left out);
    ``fp8_attention``: with ``fp8``, the attention core's GEMMs in FP8 too (``fp8_attention_s``)."""
    split = split_arch(arch, tp)
    tokens = seq_len // cp
    prof = decoder_profile(split, batch_size=micro_batch, seq_len=tokens, precision=precision)
    if cp > 1:
        # Load-balanced ring attention: this rank does 1/c of the causal work over the whole
        # sequence, c times what a sequence of seq/c tokens would.
        layers = [dataclasses.replace(l, fwd_flops=l.fwd_flops * cp, bwd_flops=l.bwd_flops * cp,
                                      fwd_flops_seq2=l.fwd_flops_seq2 * cp, bwd_flops_seq2=l.bwd_flops_seq2 * cp)
                  if layer_kind(l.type) == ATTENTION else l for l in prof.layers]
        prof = dataclasses.replace(prof, layers=layers)
    adapters = 0.0
    if lora is not None:
        # Frozen Linears run no weight-gradient GEMM (Transformer Engine skips it for a weight
        # without requires_grad); one adapter pair per fused projection (NeMo's LoRALinear wraps
        # linear_qkv, linear_proj, linear_fc1, linear_fc2). The block's norm ahead of its first
        # adapter runs no backward here (in the model, every block's but the first does: tens of
        # microseconds).
        prof, frozen = finetune_profile(prof, lora.job(), fused=True)
        adapters = float(frozen.trainable_params)
    times = layer_times(prof, gpu, precision)
    # torchao's float8 TP (PyTorch's stack) casts the gathered tensors on their shard, once for the
    # GEMMs sharing one (PrepareFloat8ModuleInput: q, k, v; w1, w3).
    sharded = pytorch_kernels and tp > 1
    fwd_s, bwd_s = fp8_times(prof, times, gpu, fp8, fused_fc1 or sharded, tp if sharded else 1, arch.hidden) if fp8 \
        else (times.fwd_s, times.bwd_s)
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


@functools.lru_cache(maxsize=32768)
def scaled_parts(parts: BlockParts, factor: float) -> BlockParts:
    """``parts`` with every compute second times ``factor``."""
    if factor == 1.0:
        return parts
    return dataclasses.replace(parts, **{k: getattr(parts, k) * factor for k in _SECONDS})


_SECONDS = ("block_f_s", "block_b_s", "attention_f_s", "attention_b_s", "first_f_s", "first_b_s", "last_f_s", "last_b_s",
            "experts_f_s", "experts_b_s", "selective_f_s", "op_sac_f_s")


@dataclass(frozen=True)
class LayoutParams:
    """Fitted figures of the layout model (configs/perf/layouts.json).

    Attributes:
        megatron_compute_factor: Megatron-Core / Transformer Engine compute seconds over the
            compute model's (fitted on eager PyTorch FSDP runs): one figure for every GPU kernel
            of a block, fitted by srift/fitting/layouts.py on data/llm-parallel-layouts.
        meta: Provenance.
    """

    megatron_compute_factor: float
    meta: dict[str, object] = field(default_factory=dict, compare=False, hash=False)


LAYOUT_PARAMS_SCHEMA = "srift.perf.layouts/v1"


@functools.lru_cache(maxsize=2)
def load_layout_params(path: str | None = None) -> LayoutParams:
    """The shipped layout parameters (or those in ``path``).

    Raises:
        SriftError: for a missing or malformed file.
    """
    p = Path(path) if path else configs_dir() / "perf" / "layouts.json"
    data = read_json(p, "layout parameters", "reinstall srift-planner, or re-run scripts/validate.py --fit-layouts.")
    if not isinstance(data, dict) or data.get("schema") != LAYOUT_PARAMS_SCHEMA:
        raise SriftError(f"{p} is not a '{LAYOUT_PARAMS_SCHEMA}' file.", "reinstall srift-planner.")
    factor = float(require(data.get("megatron_compute_factor"), f"{p}: megatron_compute_factor", 0.2, 5.0,
                           hint="reinstall srift-planner."))
    return LayoutParams(factor, {k: v for k, v in data.items() if k not in ("schema", "megatron_compute_factor")})


# ---- memory of one stage ------------------------------------------------------------------------
def stage_memory_bytes(stage_params: float, shard: int, act_per_microbatch_bytes: float, in_flight: float,
                       extra_act_bytes: float = 0.0, dp_flavour: str = "zero1", expert_params: float = 0.0,
                       expert_shard: int = 1, weight_copy_bytes: float = 0.0,
                       trainable_params: float | None = None, root_params: float = 0.0, block_params: float = 0.0,
                       reduce_dtype: str = "fp32", resharded: bool = True) -> dict[str, float]:
    """Bytes per GPU of one pipeline stage, by kind.

    Args:
        stage_params: Parameters this GPU holds (its stage's, on its TP rank).
        shard: Ranks the optimizer states are sharded over (``state_shard``: CP x DP under
            ``zero1`` and ``fsdp``, the DP ranks of a node under ``hsdp``, 1 under ``ddp``).
        act_per_microbatch_bytes: Activations one micro-batch leaves on this stage for backward.
        in_flight: Micro-batches whose activations the stage holds at its peak.
        extra_act_bytes: Activations held once (the loss's fp32 logits on the last stage, the
            block recomputing under full checkpointing).
        dp_flavour: One of DP_FLAVOURS. ``fsdp``/``hsdp`` shard the parameters and gradients too
            (srift/simulate/memory.py's ``sharded_state_bytes``, of ``root_params`` (embedding,
            head), the largest unit ``block_params``, ``reduce_dtype`` and ``resharded``).
        expert_params: Routed-expert parameters this GPU holds (its ``experts / ep`` of its
            stage's MoE blocks), counted in the weights, gradients and optimizer states.
        expert_shard: Ranks their optimizer states are sharded over (``tp x cp x dp / ep``).
        weight_copy_bytes: FP8 copies of the stage's weights (srift/perf/fp8.py), in ``weights`` (not under
            ``fsdp``/``hsdp``: cast per use from the gathered unit).
        trainable_params: Of ``stage_params``, those that train (LoRA: the adapters; the routed
            experts frozen too); None: every one.

    Returns:
        ``weights`` (bf16), ``gradients`` (GRAD_BYTES buffers), ``optimizer_state`` (fp32
        master weights and Adam's two moments), ``activations`` and ``allocator`` (what the
        caching allocator reserves beyond them: srift/simulate/memory.py's ``with_allocator``, as
        everywhere in srift). They add up to the peak reserved memory.
    """
    acts = act_per_microbatch_bytes * in_flight + extra_act_bytes
    if dp_flavour in SHARDED_FLAVOURS:
        # FP8 weights are cast per use from the gathered unit (torchao's float8 under FSDP2), not
        # kept for the step as Transformer Engine keeps its weight workspace: no ``weight_copy_bytes``.
        states = sharded_state_bytes(stage_params + expert_params, root_params, block_params, PARAM_BYTES,
                                     ADAM_STATE_BYTES, dp_flavour, float(shard), reduce_dtype, resharded)
        return with_allocator({**states, "activations": acts})
    n = float(shard) if dp_flavour == ZERO1 else 1.0
    experts = expert_memory_bytes(expert_params, expert_shard, PARAM_BYTES, GRAD_BYTES, MASTER_BYTES + ADAM_STATE_BYTES,
                                  dp_flavour == ZERO1)
    trains = stage_params if trainable_params is None else trainable_params
    if trainable_params is not None:  # frozen experts: weights only
        experts = {"weights": experts["weights"], "gradients": 0.0, "optimizer_state": 0.0}
    return with_allocator({
        "weights": stage_params * PARAM_BYTES + experts["weights"] + weight_copy_bytes,
        "gradients": trains * GRAD_BYTES + experts["gradients"],
        "optimizer_state": trains * (MASTER_BYTES + ADAM_STATE_BYTES) / n + experts["optimizer_state"],
        "activations": acts,
    })


# ---- one layout's iteration ---------------------------------------------------------------------
@dataclass(frozen=True)
class LayoutPlan:
    """One layout's iteration on one cluster.

    Attributes:
        layout: The layout.
        iteration_s: Seconds per optimizer step.
        breakdown: Seconds by phase (srift.simulate.breakdown.LAYOUT_PHASES; they add up to
            ``iteration_s``), and the communication in all (``comm_s`` added up).
        comm_s: Communication seconds per iteration by group (``tp``, ``cp``, ``ep``, ``pp``, ``dp``),
            hidden or not.
        memory_per_gpu_bytes: The most loaded stage's bytes per GPU.
        memory_breakdown_bytes: That stage's bytes by kind.
        memory_stage: Which stage that is (0-based).
        fits: Whether it fits in the GPU's memory.
        tokens_per_s: Tokens per second of the whole job.
        checkpointing: Activation checkpointing policy.
        recompute_modules: What ``selective`` recomputes (srift/simulate/recompute.py; empty otherwise).
        dp_flavour: ``zero1`` or ``ddp``.
        memory_state: ``fits``, ``may not fit`` or ``does not fit`` (srift.simulate.memory.fit_state,
            the one fit rule; ``fits`` above holds for the first two).
    """

    layout: Layout
    iteration_s: float
    breakdown: Breakdown
    comm_s: dict[str, float]
    memory_per_gpu_bytes: float
    memory_breakdown_bytes: dict[str, float]
    memory_stage: int
    fits: bool
    tokens_per_s: float
    checkpointing: str = "none"
    dp_flavour: str = "zero1"
    notes: tuple[str, ...] = field(default=())
    recompute_modules: tuple[RecomputeModule, ...] = ()
    memory_state: str = "fits"  # srift.simulate.memory.fit_state: the data-parallel path's rule


def check_sharded(dp_flavour: str, ep: int, lora: LoraSpec | None) -> str | None:
    """Why ``fsdp``/``hsdp`` under a layout is not modelled with expert parallelism or LoRA, or None."""
    if dp_flavour not in SHARDED_FLAVOURS:
        return None
    if ep > 1:
        return f"--parallelism {dp_flavour} is modelled without expert parallelism (ep=1); use zero1 with ep={ep}"
    if lora is not None:
        return f"--parallelism {dp_flavour} is modelled for pre-training and full fine-tuning; use zero1 with LoRA"
    return None


def check_layout(arch: DecoderArch, layout: Layout, seq_len: int, gpus_per_node: int) -> str | None:
    """Why ``layout`` cannot run ``arch`` at ``seq_len`` on nodes of ``gpus_per_node``, or None."""
    if layout.tp > gpus_per_node:
        return (f"tp={layout.tp} is more than the {gpus_per_node} GPUs of a node or its NVLink domain "
                "(tensor parallelism stays on NVLink)")
    if arch.heads % layout.tp:
        return f"tp={layout.tp} does not divide the {arch.heads} attention heads"
    if arch.kv_heads % layout.tp and layout.tp % arch.kv_heads:
        return f"tp={layout.tp} and the {arch.kv_heads} key/value heads do not divide one another"
    if layout.pp > arch.n_layers:
        return f"pp={layout.pp} is more stages than the {arch.n_layers} layers"
    if layout.pp * layout.vp > arch.n_layers + 2:
        return f"pp={layout.pp} x {layout.vp} virtual stages is more than the {arch.n_layers} layers"
    why_ep = check_ep(arch, layout.ep, layout.tp * layout.cp * layout.dp)
    if why_ep:
        return why_ep
    if layout.cp > 1 and seq_len % (2 * layout.cp):
        return f"cp={layout.cp} needs a sequence length divisible by {2 * layout.cp} (2 chunks per rank)"
    if layout.schedule == INTERLEAVED and layout.pp > 1 and layout.grad_accum % layout.pp:
        return (f"the interleaved schedule needs the micro-batches per step ({layout.grad_accum}) "
                f"divisible by pp={layout.pp}")
    return None


def dp_ranks_per_node(gpus_per_node: int, tp: int, cp: int, pp: int, dp: int) -> int:
    """Ranks of a CP x DP group on each node it spans, evenly (``_even_ranks_per_node``: a pipeline
    depth that does not divide the node spreads a group 3, 3, 2 of 8)."""
    return _even_ranks_per_node(_group_ranks_per_node(gpus_per_node, tp, cp, tp * cp * pp, dp), cp * dp)


def state_shard(dp_flavour: str, gpus_per_node: int, tp: int, cp: int, pp: int, dp: int) -> int:
    """Ranks a stage's optimizer states are sharded over: the CP x DP group under ``zero1`` and
    ``fsdp``, its ranks on one node under ``hsdp`` (sharded within a node, replicated across
    nodes), none under ``ddp``."""
    if dp_flavour == DDP:
        return 1
    if dp_flavour == HSDP:
        return dp_ranks_per_node(gpus_per_node, tp, cp, pp, dp)
    return cp * dp


def _group_ranks_per_node(gpus_per_node: int, stride: int, size: int, outer_stride: int = 0, outer: int = 1) -> int:
    """Members of a group (``size`` ranks ``stride`` apart, times ``outer`` copies ``outer_stride``
    apart) that share rank 0's node."""
    count = 0
    for j in range(outer):
        base = j * outer_stride
        if base >= gpus_per_node:
            break
        for c in range(size):
            if base + c * stride < gpus_per_node:
                count += 1
    return max(1, count)


def _even_ranks_per_node(members: int, size: int) -> int:
    """Ranks per node of a group of ``size`` whose rank 0 shares its node with ``members`` of them
    (``_group_ranks_per_node``), cut to the most that divides the group: a group spread unevenly
    (3, 3, 2 of 8) is counted at an even share on each node, since the network carries the most
    when the fewest share a node."""
    per_node = min(members, size)
    return max(k for k in range(1, per_node + 1) if size % k == 0)


def ep_ranks_per_node(ep: int, gpus_per_node: int) -> int:
    """Ranks of an expert-parallel group (``ep`` consecutive ranks) on one node (an NVLink domain,
    srift/perf/comm.py ``topology``) for the worst-placed group: ``gcd(ep, g)``, ``min(ep, g)``
    when one divides the other (a 16-rank group in 72-GPU domains straddles two, 8 and 8)."""
    return math.gcd(ep, gpus_per_node)


def plan_layout(arch: DecoderArch, cluster: Cluster, layout: Layout, seq_len: int, precision: str = "bf16",
                checkpointing: str = "none", dp_flavour: str = "zero1", comm: CommModel | None = None,
                quantile: float = 0.5, tp_overlap: bool | None = None, compute_factor: float | None = None,
                imbalance: float = BALANCED_ROUTING, fp8: Fp8Recipe | None = None,
                recompute_modules: tuple[RecomputeModule, ...] = DEFAULT_RECOMPUTE_MODULES,
                dispatcher: MoeDispatcher = "alltoall", ep_overlap: bool = False,
                lora: LoraSpec | None = None, reduce_dtype: str = "fp32", op_sac: bool = False,
                fp8_attention: bool = False, mtp_layers: int = 0,
                stage_blocks: tuple[int, ...] | None = None) -> LayoutPlan:
    """Predict one iteration of ``arch`` laid out as ``layout`` on ``cluster`` (module docstring).

    ``compute_factor`` scales the compute model's seconds (default ``compute_factor_of``: the fitted
    ``megatron_compute_factor`` of configs/perf/layouts.json, 1 under ``fsdp``/``hsdp``, which run
    PyTorch's kernels as torchtitan does: ``pytorch_stack``); ``tp_overlap`` overlaps the
    tensor-parallel collectives with the GEMMs (NeMo's performance recipes: ``tp_comm_overlap``;
    under ``fsdp``/``hsdp`` PyTorch's async TP, ``dtensor_tp_block_s``; None: the framework's
    default, ``default_tp_overlap``);
    ``imbalance`` is a mixture of experts' routing imbalance (srift/simulate/moe.py); ``fp8`` runs
    the blocks' GEMMs in FP8 under that recipe (srift/perf/fp8.py; ``precision`` stays bf16);
    ``recompute_modules``: what ``selective`` checkpointing recomputes (srift/simulate/recompute.py);
    ``dispatcher`` and ``ep_overlap``: a mixture of experts' token dispatcher and whether its
    all-to-alls overlap another micro-batch's compute (srift/simulate/moe.py).
    ``lora`` fine-tunes LoRA adapters over the frozen base (``BlockParts.frozen_base``).
    ``reduce_dtype``: what ``fsdp``/``hsdp`` reduce-scatter gradients in (torchtitan's default fp32).
    ``op_sac``: ``selective`` is torchtitan's per-op policy (``BlockParts.op_sac_saved_bytes``)
    instead of Megatron-Core's recompute modules. ``fp8_attention``: with ``fp8``, the attention
    core runs in FP8 too (Transformer Engine's ``fp8_dot_product_attention``). ``mtp_layers``:
    Megatron-Core's multi-token prediction layers (``mtp_num_layers``: ``pipeline_blocks``).
    ``stage_blocks``: the blocks each pipeline stage holds (its virtual stages' together), as a
    job's own pipeline layout places them (Megatron-Core's ``pipeline_model_parallel_layout``);
    default ``stage_layers``' even split.

    Raises:
        SriftError: when the layout does not use the cluster's GPUs or cannot split the model.
    """
    if layout.gpus != cluster.gpus:
        raise SriftError(f"layout {layout.label} uses {layout.gpus} GPUs, the cluster has {cluster.gpus}.",
                         "make tp x pp x cp x dp the cluster's GPU count.")
    if checkpointing not in LAYOUT_CHECKPOINTING:
        raise ValueError(f"checkpointing must be one of {LAYOUT_CHECKPOINTING}")
    if not isinstance(mtp_layers, int) or mtp_layers < 0:
        raise ValueError(f"mtp_layers must be a whole number of layers, got {mtp_layers!r}")
    if stage_blocks is not None and (len(stage_blocks) != layout.pp or min(stage_blocks) < 0
                                     or sum(stage_blocks) != pipeline_blocks(arch, mtp_layers)):
        raise ValueError(f"stage_blocks {stage_blocks} must place the {pipeline_blocks(arch, mtp_layers)} blocks "
                         f"on the {layout.pp} stages")
    if dp_flavour not in DP_FLAVOURS:
        raise ValueError(f"dp_flavour must be one of {DP_FLAVOURS}")
    comm = comm or CommModel.for_cluster(cluster)
    g = comm.topology.gpus_per_node
    why = check_layout(arch, layout, seq_len, g) or check_sharded(dp_flavour, layout.ep, lora)
    if why:
        raise SriftError(f"layout {layout.label} cannot run {arch.name}: {why}.",
                         "choose another --layout, or --layout auto.")
    gpu = cluster.node_groups[0].gpu
    parts = scaled_parts(block_parts(arch, layout.tp, layout.cp, layout.micro_batch, seq_len, precision, gpu,
                                     layout.ep, imbalance, fp8, recompute_modules, lora, op_sac, fp8_attention,
                                     dispatcher, not pytorch_stack(dp_flavour), pytorch_stack(dp_flavour)),
                         compute_factor_of(dp_flavour, compute_factor))
    if op_sac:
        parts = dataclasses.replace(parts, selective_saved_bytes=parts.op_sac_saved_bytes, selective_f_s=parts.op_sac_f_s)
    plan = _plan(arch, cluster, layout, seq_len, precision, checkpointing, dp_flavour, comm, quantile, gpu, parts,
                 default_tp_overlap(dp_flavour) if tp_overlap is None else tp_overlap, dispatcher, ep_overlap,
                 reduce_dtype, op_sac, mtp_layers, stage_blocks)
    return dataclasses.replace(plan, recompute_modules=check_modules(recompute_modules)) if checkpointing == SELECTIVE \
        else plan


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
    tp_comm = comm.subgroup(t, t) if t > 1 else None
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
    if pair is None:
        return BlockComm(tp_f, tp_b, tp_hidden, tp_end, tp_sac_s=tp_sac)
    step_bytes = cp_ring_step_bytes(micro_batch, seq_len, c, parts.kv_width, element_bytes)
    step_f = float(pair.broadcast_time_s(step_bytes, quantile))
    step_b = float(pair.broadcast_time_s(2.0 * step_bytes, quantile))
    cp_f = cp_ring_exposed_s(step_f, parts.attention_f_s, c)
    cp_b = cp_ring_exposed_s(step_b, parts.attention_b_s, c)
    return BlockComm(tp_f, tp_b, tp_hidden, tp_end, cp_f, cp_b, (c - 1) * (step_f + step_b) - cp_f - cp_b, step_f, step_b,
                     tp_sac)


def fsdp_unit_params(parts: BlockParts, first: bool, last: bool) -> tuple[float, float]:
    """(root, block) parameters of a stage's FSDP units on this TP rank: the root holds the
    embedding on the first stage and the final norm and head on the last; each block is a unit
    (its routed experts with it: ``ep`` is 1 under FSDP)."""
    root = (parts.local_embed_params if first else 0.0) + (parts.local_head_params if last else 0.0)
    return root, parts.local_block_params + parts.local_expert_params


def fsdp_unit_bytes(parts: BlockParts, blocks: int, first: bool, last: bool,
                    reduce_dtype: str = "fp32") -> tuple[np.ndarray, np.ndarray]:
    """Per FSDP unit of a stage of ``blocks`` blocks (the root first, then each block): the bytes
    its all-gather assembles (this TP rank's parameters in bf16) and its reduce-scatter reduces
    (their gradients in ``reduce_dtype``), each over the CP x DP group."""
    root, block = fsdp_unit_params(parts, first, last)
    params = np.array([root] + [block] * blocks)
    return params * PARAM_BYTES, params * float(REDUCE_BYTES_PER_ELEMENT[reduce_dtype])  # type: ignore[index]


def fsdp_stage_comm(parts: BlockParts, blocks: int, first: bool, last: bool, block_s: tuple[float, float], end_s: float,
                    dcomm: CommModel, dp_flavour: str, reduce_dtype: str, pp: int, micro_batches: int,
                    quantile: float = 0.5) -> tuple[float, float, float]:
    """(exposed, hidden, total) seconds a step of a stage's FSDP2 collectives over its CP x DP
    group ``dcomm``, scheduled beside the stage's compute by srift/simulate/sharded.py's
    ``simulate_step`` (the data-parallel path's schedule: a unit's all-gather waited for, the
    next one prefetched behind it, each unit's reduce-scatter (and, ``hsdp``, cross-node
    all-reduce) issued after its backward).

    ``block_s``: one block's forward and backward seconds on a micro-batch (TP, CP waits and
    recompute in them); ``end_s``: the embedding's or head's TP collectives. Parameters are
    gathered in bf16, gradients reduced in ``reduce_dtype``.

    Without a pipeline every micro-batch gathers each block in forward, re-gathers it in backward
    (``reshard_after_forward``) and reduce-scatters its gradients (no ``no_sync``, as the
    data-parallel path). Under a pipeline (torchtitan: ``reshard_after_forward=False`` when PP is
    on, and the pipeline schedule defers gradient sync to the last micro-batch) a stage gathers
    its blocks once, on its first micro-batch's forward, and reduce-scatters them all after its
    last backward: the gathers' waits lie on the warm-up's path through every stage (``pp`` of
    them), the reduce-scatters wait at the end of the flush on the first stage, which ends last.
    """
    gathered, reduced = fsdp_unit_bytes(parts, blocks, first, last, reduce_dtype)
    ag, rs, ar = unit_collective_s(dcomm, gathered, reduced, dp_flavour, quantile)
    f, b = block_s
    runs = ((0,) if first else ()) + tuple(range(1, blocks + 1)) + ((0,) if last else ())
    fwd = tuple((parts.first_f_s if first and i == 0 else parts.last_f_s) + end_s if u == 0 else f
                for i, u in enumerate(runs))
    bwd = tuple((parts.first_b_s if first and i == 0 else parts.last_b_s) + end_s if u == 0 else b
                for i, u in enumerate(runs))
    if pp == 1:
        st = simulate_step(StepInputs(runs, fwd, bwd, tuple(ag.tolist()), tuple(rs.tolist()), tuple(ar.tolist()),
                                      regather=True))
        return micro_batches * sum(st.exposed_s), micro_batches * st.hidden_s, micro_batches * sum(st.comm_s)
    zeros = (0.0,) * len(gathered)
    st = simulate_step(StepInputs(runs, fwd, bwd, tuple(ag.tolist()), zeros, zeros, regather=False))
    reduce_s = float(rs.sum() + ar.sum())
    gather_s = float(ag.sum())
    waited = sum(st.exposed_s)
    return pp * waited + reduce_s, max(0.0, gather_s - waited), gather_s + reduce_s


def _plan(arch: DecoderArch, cluster: Cluster, layout: Layout, seq_len: int, precision: str, checkpointing: str,
          dp_flavour: str, comm: CommModel, quantile: float, gpu: str, parts: BlockParts,
          tp_overlap: bool = True, dispatcher: MoeDispatcher = "alltoall", ep_overlap: bool = False,
          reduce_dtype: str = "fp32", op_sac: bool = False, mtp_layers: int = 0,
          stage_blocks: tuple[int, ...] | None = None) -> LayoutPlan:
    t, p, c, d, v, m = layout.tp, layout.pp, layout.cp, layout.dp, layout.vp, layout.grad_accum
    dtensor = pytorch_stack(dp_flavour)
    g = comm.topology.gpus_per_node
    interference = comm.params.overlap_interference
    tokens = layout.micro_batch * seq_len // c
    e = PARAM_BYTES if precision in HALF_PRECISIONS else 4.0
    layers = stage_blocks or stage_layers(pipeline_blocks(arch, mtp_layers), p, not pytorch_stack(dp_flavour))
    heads = 1 + mtp_layers  # the last stage's final norm, head and loss, once more per MTP layer
    # ---- per micro-batch on each stage ----
    bc = block_comm(arch, comm, t, c, layout.micro_batch, seq_len, e, parts, quantile, tp_overlap,
                    dtensor_rate(gpu, precision, dtensor))
    tp_f, tp_b_exposed, tp_b_hidden, tp_end = bc.tp_f_s, bc.tp_b_s, bc.tp_hidden_s, bc.tp_end_s
    if op_sac and checkpointing == SELECTIVE:  # the all-gathers torchtitan's per-op policy recomputes
        tp_b_exposed += bc.tp_sac_s
    cp_f, cp_b, cp_hidden, step_f, step_b = bc.cp_f_s, bc.cp_b_s, bc.cp_hidden_s, bc.cp_step_f_s, bc.cp_step_b_s
    recompute = parts.block_f_s if checkpointing == FULL_CHECKPOINTING else (parts.selective_f_s if checkpointing == SELECTIVE else 0.0)
    # Expert parallelism: dispatch and combine all-to-alls in the EP group (innermost: up to a
    # node's GPUs over NVLink), exposed, per (average) block: srift/simulate/moe.py.
    ep_f = ep_b = ep_hidden = 0.0
    if layout.ep > 1 and parts.moe_fraction > 0:
        ep_node = ep_ranks_per_node(layout.ep, g)
        a2a = ep_exchange_s(arch, comm.subgroup(layout.ep, ep_node), layout.ep, ep_node, parts.dispatch_bytes,
                            quantile, dispatcher)
        ep_f = ep_b = 2.0 * a2a * parts.moe_fraction
        if ep_overlap:  # beside another micro-batch's forward or backward (Megatron's EP A2A overlap)
            ep_hidden = min(ep_f + ep_b, parts.block_f_s + parts.block_b_s)
            ep_f = ep_b = (ep_f + ep_b - ep_hidden) / 2.0
    # What backward's recompute runs again of the forward's exposed collectives: full, the TP and
    # EP ones; selective of whole MoE layers, their all-to-alls.
    full = checkpointing == FULL_CHECKPOINTING
    rerun_tp = tp_f if full else 0.0
    rerun_ep = ep_f if full or (checkpointing == SELECTIVE and parts.moe_recomputed) else 0.0
    blk_f = parts.block_f_s + tp_f + cp_f + ep_f
    blk_b = parts.block_b_s + tp_b_exposed + cp_b + ep_b + recompute + rerun_tp + rerun_ep
    stage_f, stage_b = [], []
    for i, n in enumerate(layers):
        f = n * blk_f + (parts.first_f_s + tp_end if i == 0 else 0.0) + (heads * (parts.last_f_s + tp_end) if i == p - 1 else 0.0)
        b = n * blk_b + (parts.first_b_s + tp_end if i == 0 else 0.0) + (heads * (parts.last_b_s + tp_end) if i == p - 1 else 0.0)
        stage_f.append(f)
        stage_b.append(b)
    slow = max(range(p), key=lambda i: stage_f[i] + stage_b[i])
    sf, sb = stage_f[slow], stage_b[slow]
    n_slow = layers[slow]
    # ---- pipeline point-to-point ----
    p2p = 0.0
    if p > 1:
        act_bytes = tokens * arch.hidden * e / t
        crossing = t * c * p > g  # the pipeline spans nodes: its slowest sends cross the network
        pair = comm.subgroup(2, 1 if crossing else 2, net_share=(1.0 / g) if crossing else None)  # a rail, as CP's
        p2p = float(pair.broadcast_time_s(act_bytes, quantile))
    slot = sf + sb
    if layout.schedule == INTERLEAVED and p > 1 and v > 1:
        pipe_p2p = 2.0 * p2p * (p - 1)  # only the bubble's path waits for the sends
        hidden_p2p = 2.0 * p2p * m * v
    else:
        pipe_p2p = 2.0 * p2p * (m + p - 1) if p > 1 else 0.0
        hidden_p2p = 0.0
    idle_slots = (p - 1) / v
    bubble = idle_slots * slot
    # ---- data parallelism after the flush ----
    stage_params = parts.trainable(n_slow, slow == 0, slow == p - 1)  # what reduces its gradients and steps
    dp_group = c * d
    dp_exposed = dp_hidden = dp_total = 0.0
    # Routed experts reduce their gradients over the expert data-parallel group instead
    # (tp x cp x dp / ep ranks; ep innermost, so g / ep of them share a node).
    expert_params = n_slow * parts.trainable_expert_params
    edp = t * c * d // layout.ep
    groups = []
    sharded = dp_flavour in SHARDED_FLAVOURS
    if dp_group > 1:
        dcomm = comm.subgroup(dp_group, dp_ranks_per_node(g, t, c, p, d))
        if sharded:
            fsdp = fsdp_stage_comm(parts, n_slow, slow == 0, slow == p - 1, (blk_f, blk_b), tp_end, dcomm, dp_flavour,
                                   reduce_dtype, p, m, quantile)
            dp_exposed, dp_hidden, dp_total = fsdp
        else:
            groups.append((dcomm, stage_params))
    if expert_params > 0 and edp > 1:
        groups.append((comm.subgroup(edp, _even_ranks_per_node(_group_ranks_per_node(g, layout.ep, edp), edp)), expert_params))
    rs = ag = 0.0
    for dcomm, n_params in groups:
        if dp_flavour == ZERO1:
            rs += float(dcomm.reduce_scatter_time_s(n_params * GRAD_BYTES, quantile))
            ag += float(dcomm.all_gather_time_s(n_params * PARAM_BYTES, quantile))
        else:
            rs += float(dcomm.allreduce_time_s(n_params * GRAD_BYTES, quantile))
    if groups:
        dp_exposed = max(0.0, rs - sb) + max(0.0, ag - sf)
        dp_hidden = rs + ag - dp_exposed
        dp_total = rs + ag
    shard = state_shard(dp_flavour, g, t, c, p, d)
    expert_shard = edp if dp_flavour == ZERO1 else 1
    rates = kernel_rates(gpu, precision)
    optimizer = ((stage_params / shard + expert_params / expert_shard) * (MASTER_BYTES * 3 + 2 * ADAM_STATE_BYTES)
                 / rates.memory_bytes_per_s)
    overhead = load_compute_params().overhead_s
    interf = (interference * dp_hidden + ep_interference(gpu, dispatcher, layout.ep) * ep_hidden * n_slow * m
              + p2p_interference(gpu) * (cp_hidden * n_slow * m + hidden_p2p)
              + tp_interference(comm, gpu, tp_overlap, dtensor) * tp_b_hidden * n_slow * m)
    seconds: dict[Phase, float] = {
        FORWARD: m * (sf - n_slow * (tp_f + cp_f + ep_f)),
        BACKWARD: m * (sb - n_slow * (tp_b_exposed + cp_b + ep_b + recompute + rerun_tp + rerun_ep)),
        RECOMPUTE: m * n_slow * recompute,
        EXPOSED_TP: m * n_slow * (tp_f + tp_b_exposed + rerun_tp),
        EXPOSED_CP: m * n_slow * (cp_f + cp_b),
        EXPOSED_EP: m * n_slow * (ep_f + ep_b + rerun_ep),
        EXPOSED_PP: pipe_p2p,
        BUBBLE: bubble,
        EXPOSED_DP: dp_exposed,
        COMM_INTERFERENCE: interf,
        OPTIMIZER: optimizer,
        OVERHEAD: overhead,
    }
    # ---- memory: the most loaded stage (of an even split only the first, second and last can be:
    # _peak_memory; a job's own layout may load any stage most) ----
    candidates = memory_stages(p, parts.kinds is not None) if stage_blocks is None else list(range(p))
    mems = dict(zip(candidates, _stage_memories(arch, layout, parts, checkpointing, dp_flavour, candidates, shard,
                                                reduce_dtype, mtp_layers, layers)))
    stage = max(candidates, key=lambda i: sum(mems[i].values()))
    worst = (sum(mems[stage].values()), mems[stage], stage)
    gpu_mem = min(gr.gpu_memory_gib if gr.gpu_memory_gib is not None else gpu_spec(gr.gpu).memory_gib
                  for gr in cluster.node_groups)
    comm_s = {"tp": m * n_slow * (tp_f + tp_b_exposed + tp_b_hidden), "cp": m * n_slow * (c - 1) * (step_f + step_b),
              "ep": m * n_slow * (ep_f + ep_b + ep_hidden),
              "pp": pipe_p2p + hidden_p2p, "dp": dp_total}
    breakdown = Breakdown.of(LAYOUT_PHASES, seconds, sum(comm_s.values()))
    iteration = breakdown.total_s
    return LayoutPlan(layout, iteration, breakdown, comm_s, worst[0], worst[1], worst[2], fits(worst[0], gpu_mem),
                      layout.global_batch * seq_len / iteration, checkpointing, dp_flavour,
                      memory_state=fit_state(worst[0], gpu_mem))


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


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


Degrees = tuple[int, int, int, int, int, int, int, int]


def _expert_degrees(arch: DecoderArch, request: LayoutRequest, tcd: int) -> list[int]:
    """Expert-parallel sizes to try over ``tcd`` = TP x CP x DP ranks: the requested one, or (a
    mixture of experts under search) each of SEARCH_EXPERT that divides the experts and ``tcd``."""
    if request.ep is not None:
        return [request.ep] if check_ep(arch, request.ep, tcd) is None else []
    if not arch.is_moe:
        return [1]
    return [e for e in SEARCH_EXPERT if e <= tcd and check_ep(arch, e, tcd) is None]


def _degrees(arch: DecoderArch, gpus: int, gpus_per_node: int, seq_len: int, global_batch: int,
             request: LayoutRequest, micro_batches: tuple[int, ...]) -> list[Degrees]:
    """Every ``(tp, pp, cp, dp, micro_batch, grad_accum, vp, ep)`` that divides ``arch`` and
    ``gpus`` (``check_layout``'s rules, applied per degree; vp 1 is 1F1B, more is interleaved)."""
    out = []
    tps = [request.tp] if request.tp is not None else [t for t in _divisors(gpus_per_node) if t <= gpus]
    cps = [request.cp] if request.cp is not None else list(SEARCH_CONTEXT)
    for t in tps:
        if t > gpus_per_node or arch.heads % t or (arch.kv_heads % t and t % arch.kv_heads):
            continue
        for c in cps:
            if gpus % (t * c) or (c > 1 and seq_len % (2 * c)):
                continue
            pps = [request.pp] if request.pp is not None else _divisors(gpus // (t * c))
            for p in pps:
                if gpus % (t * c * p) or p > arch.n_layers:
                    continue
                d = gpus // (t * c * p)
                for ep in _expert_degrees(arch, request, t * c * d):
                    for mb in micro_batches:
                        if global_batch % (mb * d):
                            continue
                        m = global_batch // (mb * d)
                        out.append((t, p, c, d, mb, m, 1, ep))
                        if p > 1 and m % p == 0:
                            out.extend((t, p, c, d, mb, m, v, ep) for v in SEARCH_VIRTUAL_STAGES[1:]
                                       if p * v <= arch.n_layers + 2)
    return out


@functools.lru_cache(maxsize=65536)
def has_layout(arch: DecoderArch, gpus: int, gpus_per_node: int, seq_len: int, global_batch: int) -> bool:
    """Whether any layout of ``_degrees``'s rules divides ``arch`` and ``gpus`` at ``global_batch``
    sequences a step (micro-batch 1; a search's cheap test of a GPU count, cached)."""
    for t in _divisors(gpus_per_node):
        if t > gpus or arch.heads % t or (arch.kv_heads % t and t % arch.kv_heads):
            continue
        for c in SEARCH_CONTEXT:
            if gpus % (t * c) or (c > 1 and seq_len % (2 * c)):
                continue
            for p in _divisors(gpus // (t * c)):
                if p <= arch.n_layers and global_batch % (gpus // (t * c * p)) == 0 and \
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


def search_layouts(arch: DecoderArch, cluster: Cluster, seq_len: int, global_batch: int, precision: str = "bf16",
                   request: LayoutRequest = LayoutRequest(), dp_flavour: str = "zero1",
                   checkpointing: tuple[str, ...] = ("none", "full"), comm: CommModel | None = None,
                   compute_factor: float | None = None, tp_overlap: bool | None = None,
                   imbalance: float = BALANCED_ROUTING, lora: LoraSpec | None = None,
                   reduce_dtype: str = "fp32", fp8: Fp8Recipe | None = None, dispatcher: MoeDispatcher = "alltoall",
                   ep_overlap: bool = False, mtp_layers: int = 0) -> LayoutSearch:
    """The fastest layout of ``arch`` on ``cluster`` that fits (``request`` fixes any degree).

    Every candidate gets a lower bound on its time (the slowest stage's compute, recomputation
    included, over ``M + (p - 1) / V`` slots); in order of it, each one's memory is checked (each
    checkpointing policy in turn: the least recompute that fits) and those that fit are
    simulated, until the bound passes the best time found. When none fits, the one with the least
    memory comes back as ``smallest``. ``fp8``, ``dispatcher``, ``ep_overlap``, ``mtp_layers``: as
    ``plan_layout``'s.
    """
    comm = comm or CommModel.for_cluster(cluster)
    g = comm.topology.gpus_per_node
    gpu = cluster.node_groups[0].gpu
    factor = compute_factor_of(dp_flavour, compute_factor)
    tp_overlap = default_tp_overlap(dp_flavour) if tp_overlap is None else tp_overlap
    pytorch = pytorch_stack(dp_flavour)
    cap = min(gr.gpu_memory_gib if gr.gpu_memory_gib is not None else gpu_spec(gr.gpu).memory_gib
              for gr in cluster.node_groups) * 2**30 * USABLE_FRACTION
    degrees = _degrees(arch, cluster.gpus, g, seq_len, global_batch, request, SEARCH_MICRO_BATCHES)
    if dp_flavour in SHARDED_FLAVOURS:  # FSDP is modelled without expert parallelism (check_sharded)
        degrees = [r for r in degrees if r[7] == 1]
    # Whatever the layout, each parameter's 16 bytes (bf16 weight and gradient, fp32 master and
    # Adam moments) are spread over at most all the GPUs: below that nothing fits.
    # (LoRA: the frozen weights' 2 bytes.)
    per_param = PARAM_BYTES if lora is not None else PARAM_BYTES + GRAD_BYTES + MASTER_BYTES + ADAM_STATE_BYTES
    hopeless = params_count(arch) * per_param / cluster.gpus > cap
    if hopeless or not degrees:
        return LayoutSearch(None, _most_sharded(arch, cluster, degrees, seq_len, precision, checkpointing[-1], dp_flavour,
                                                comm, gpu, factor, tp_overlap, imbalance, lora, reduce_dtype, fp8,
                                                dispatcher, ep_overlap, mtp_layers),
                            len(degrees), len(degrees), 0)
    parts_of: dict[tuple[int, int, int, int], BlockParts] = {}
    slot_of: dict[tuple[int, int, int, int], tuple[float, float]] = {}
    e = PARAM_BYTES if precision in HALF_PRECISIONS else 4.0
    k_tp = tp_interference(comm, gpu, tp_overlap, pytorch)
    copy_rate = dtensor_rate(gpu, precision, pytorch)
    k_p2p = p2p_interference(gpu)
    ranked = []
    for t, p, c, d, mb, m, v, ep in degrees:
        key = (t, c, mb, ep)
        parts = parts_of.get(key)
        if parts is None:
            parts = parts_of[key] = scaled_parts(block_parts(arch, t, c, mb, seq_len, precision, gpu, ep, imbalance, fp8,
                                                             lora=lora, dispatcher=dispatcher, fused_fc1=not pytorch,
                                                             pytorch_kernels=pytorch),
                                                 factor)
            bc = block_comm(arch, comm, t, c, mb, seq_len, e, parts, 0.5, tp_overlap, copy_rate)
            # The flat all-to-all bounds the alltoall dispatcher's exposed time; flex's per-node
            # dispatch and an overlapped one can take less, so they add nothing to the bound.
            a2a = (4.0 * parts.moe_fraction * float(comm.subgroup(ep, ep_ranks_per_node(ep, g)).all_to_all_time_s(parts.dispatch_bytes))
                   if ep > 1 and dispatcher != FLEX and not ep_overlap else 0.0)
            slot_of[key] = (parts.block_f_s + parts.block_b_s + bc.tp_f_s + bc.tp_b_s + bc.cp_f_s + bc.cp_b_s + a2a,
                            k_tp * bc.tp_hidden_s + k_p2p * bc.cp_hidden_s)
        blk, hidden = slot_of[key]
        n = max(stage_layers(pipeline_blocks(arch, mtp_layers), p, not pytorch))
        ranked.append(((m + (p - 1) / v) * n * blk + m * n * hidden, t, p, c, d, mb, m, v, ep))
    ranked.sort()
    best: LayoutPlan | None = None
    simulated = rejected = 0
    # The one fit rule (srift.simulate.memory.fit_state): layouts that fit for sure first; those
    # that may not fit (within the memory's typical error) when none does.
    for limit in (sure_fit_bytes(cap), cap):
        rejected = 0
        for bound, t, p, c, d, mb, m, v, ep in ranked:
            if best is not None and bound >= best.iteration_s:
                break
            parts = parts_of[(t, c, mb, ep)]
            chosen = next((k for k in checkpointing
                           if _peak_memory_of(arch, p, v, m, state_shard(dp_flavour, g, t, c, p, d), parts, k, dp_flavour,
                                              t * c * d // ep, reduce_dtype, mtp_layers) <= limit), None)
            if chosen is None:
                rejected += 1
                continue
            lay = Layout(t, p, c, d, v, mb, m, "interleaved" if v > 1 else "1f1b", ep)
            if chosen == FULL_CHECKPOINTING and best is not None and \
                    bound * (1.0 + parts.block_f_s / (parts.block_f_s + parts.block_b_s)) >= best.iteration_s:
                continue
            plan = _plan(arch, cluster, lay, seq_len, precision, chosen, dp_flavour, comm, 0.5, gpu, parts, tp_overlap,
                         dispatcher, ep_overlap, reduce_dtype=reduce_dtype, mtp_layers=mtp_layers)
            simulated += 1
            if best is None or plan.iteration_s < best.iteration_s:
                best = plan
        if best is not None:
            break
    smallest = None if best is not None else _most_sharded(arch, cluster, degrees, seq_len, precision, checkpointing[-1],
                                                            dp_flavour, comm, gpu, factor, tp_overlap, imbalance, lora,
                                                            reduce_dtype, fp8, dispatcher, ep_overlap, mtp_layers)
    return LayoutSearch(best, smallest, len(degrees), rejected, simulated)


def _most_sharded(arch: DecoderArch, cluster: Cluster, degrees: list[Degrees],
                  seq_len: int, precision: str, checkpointing: str, dp_flavour: str, comm: CommModel, gpu: str,
                  factor: float, tp_overlap: bool, imbalance: float = BALANCED_ROUTING,
                  lora: LoraSpec | None = None, reduce_dtype: str = "fp32", fp8: Fp8Recipe | None = None,
                  dispatcher: MoeDispatcher = "alltoall", ep_overlap: bool = False,
                  mtp_layers: int = 0) -> LayoutPlan | None:
    """When nothing fits: the plan that needs the least memory among the most model-parallel
    layouts of the smallest micro-batch (what comes closest, for the error)."""
    if not degrees:
        return None
    top = max(t * p * c for t, p, c, *_ in degrees)
    mb_min = min(r[4] for r in degrees if r[0] * r[1] * r[2] == top)
    best: tuple[float, Degrees, BlockParts] | None = None
    for r in degrees:
        t, p, c, d, mb, m, v, ep = r
        if t * p * c != top or mb != mb_min:
            continue
        parts = scaled_parts(block_parts(arch, t, c, mb, seq_len, precision, gpu, ep, imbalance, fp8, lora=lora,
                                         dispatcher=dispatcher, fused_fc1=not pytorch_stack(dp_flavour),
                                         pytorch_kernels=pytorch_stack(dp_flavour)), factor)
        mem = _peak_memory_of(arch, p, v, m, state_shard(dp_flavour, comm.topology.gpus_per_node, t, c, p, d), parts,
                              checkpointing, dp_flavour, t * c * d // ep, reduce_dtype, mtp_layers)
        if best is None or mem < best[0]:
            best = (mem, r, parts)
    assert best is not None
    t, p, c, d, mb, m, v, ep = best[1]
    return _plan(arch, cluster, Layout(t, p, c, d, v, mb, m, "interleaved" if v > 1 else "1f1b", ep), seq_len, precision,
                 checkpointing, dp_flavour, comm, 0.5, gpu, best[2], tp_overlap, dispatcher, ep_overlap,
                 reduce_dtype=reduce_dtype, mtp_layers=mtp_layers)


def memory_stages(pp: int, blocks_differ: bool = False) -> list[int]:
    """The stages that can be the most loaded of ``stage_layers``' even split: the first, second
    and last (every middle stage holds at most the second's blocks and fewer micro-batches in
    flight), or every stage when the blocks differ (one holding dense blocks holds no experts)."""
    return list(range(pp)) if blocks_differ else sorted({0, min(1, pp - 1), pp - 1})


def _peak_memory(arch: DecoderArch, layout: Layout, parts: BlockParts, checkpointing: str, dp_flavour: str,
                 gpus_per_node: int = 8, reduce_dtype: str = "fp32") -> float:
    """The most loaded stage's bytes per GPU (the same count as ``_plan``'s, without the times).

    Only stages 0, 1 and the last can be it: every middle stage holds at most stage 1's blocks
    (``stage_layers``) and fewer micro-batches in flight."""
    return _peak_memory_of(arch, layout.pp, layout.vp if layout.schedule == INTERLEAVED else 1, layout.grad_accum,
                           state_shard(dp_flavour, gpus_per_node, layout.tp, layout.cp, layout.pp, layout.dp), parts,
                           checkpointing, dp_flavour, layout.tp * layout.cp * layout.dp // layout.ep, reduce_dtype)


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
    for i in memory_stages(p, moe_blocks is not None):  # the arithmetic of _stage_memories, without the dicts
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
            allocated = sum(sharded_state_bytes(params_i + n * parts.local_expert_params, root, block, PARAM_BYTES,
                                                ADAM_STATE_BYTES, dp_flavour, float(shard), reduce_dtype, p == 1).values())
            allocated += acts  # no FP8 weight workspace (stage_memory_bytes)
        else:
            allocated = (params_i * PARAM_BYTES + parts.trainable(n, i == 0, i == p - 1) * per_param
                         + n * (parts.local_expert_params * per_expert + parts.fp8_weight_bytes) + acts)
        peak = max(peak, allocated + allocator_bytes(allocated))
    return peak


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
        out.append(stage_memory_bytes(params_i, shard, per_mb, flight, extra, dp_flavour, n * parts.local_expert_params,
                                      layout.tp * layout.cp * layout.dp // layout.ep, n * parts.fp8_weight_bytes,
                                      parts.trainable(n, i == 0, i == p - 1) if parts.frozen_base else None,
                                      root, block, reduce_dtype, p == 1))
    return out
