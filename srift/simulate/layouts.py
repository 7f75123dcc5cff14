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

from srift.simulate.layout.plan import (ADAM_STATE_BYTES, DP_FLAVOURS, FLEX_DISPATCH_SMS, GRAD_BYTES,
                                        LAYOUT_CHECKPOINTING, LAYOUT_PARAMS_SCHEMA, NCCL_MAX_P2P_CHANNELS, P2P_CHANNELS,
                                        PARAM_BYTES, SCHEDULES, SEARCH_CONTEXT, SEARCH_EXPERT, SEARCH_MICRO_BATCHES,
                                        SEARCH_VIRTUAL_STAGES, _SECONDS, SHARDED_FLAVOURS, UB_PIPELINE_COLLECTIVES,
                                        UB_PIPELINE_SMS, UB_RING_EXCHANGE_COLLECTIVES, UB_RING_EXCHANGE_SMS, Layout,
                                        LayoutParams, LayoutPlan, check_layout, check_sharded, compute_factor_of,
                                        default_tp_overlap, dp_ranks_per_node, ep_ranks_per_node, _even_ranks_per_node,
                                        _group_ranks_per_node, load_layout_params, pytorch_stack, state_shard)
from srift.simulate.layout.pipeline import (_LAYOUT_GROUP, _LAYOUT_REPEAT, bubble_fraction, megatron_stage_blocks,
                                            pipeline_blocks, stage_layers, stage_moe_blocks)
from srift.simulate.layout.blocks import BlockMemory, BlockOptions, BlockParts, block_parts, _block_parts, scaled_parts, split_arch
from srift.simulate.layout.collectives import (BlockComm, TpBlockComm, block_comm, _block_comm, cp_ring_exposed_s,
                                               cp_ring_step_bytes, dtensor_rate, dtensor_tp_block_s, ep_interference,
                                               FsdpStage, fsdp_stage_comm, fsdp_unit_bytes, fsdp_unit_params, p2p_interference,
                                               tp_block_comm, tp_interference, tp_overlap_share)
from srift.simulate.layout.memory import (eager_loss_bytes, _kept_block_bytes, memory_stages, _peak_memory,
                                          _peak_memory_of, _rebuilt_block_bytes, _stage_memories, StageStates,
                                          stage_memory_bytes)
from srift.simulate.layout.step import PlanSettings, _plan, plan_layout, reprice
from srift.simulate.layout.search import (Degrees, LayoutSearch, candidate_layouts, _degrees, _divisors,
                                          _expert_degrees, has_layout, _most_sharded, search_layouts)

__all__ = [
    "ADAM_STATE_BYTES",
    "DP_FLAVOURS",
    "FLEX_DISPATCH_SMS",
    "GRAD_BYTES",
    "LAYOUT_CHECKPOINTING",
    "_LAYOUT_GROUP",
    "LAYOUT_PARAMS_SCHEMA",
    "_LAYOUT_REPEAT",
    "NCCL_MAX_P2P_CHANNELS",
    "P2P_CHANNELS",
    "PARAM_BYTES",
    "SCHEDULES",
    "SEARCH_CONTEXT",
    "SEARCH_EXPERT",
    "SEARCH_MICRO_BATCHES",
    "SEARCH_VIRTUAL_STAGES",
    "_SECONDS",
    "SHARDED_FLAVOURS",
    "UB_PIPELINE_COLLECTIVES",
    "UB_PIPELINE_SMS",
    "UB_RING_EXCHANGE_COLLECTIVES",
    "UB_RING_EXCHANGE_SMS",
    "BlockComm",
    "BlockMemory",
    "BlockOptions",
    "BlockParts",
    "Degrees",
    "Layout",
    "LayoutParams",
    "LayoutPlan",
    "LayoutSearch",
    "PlanSettings",
    "TpBlockComm",
    "_block_comm",
    "block_comm",
    "_block_parts",
    "block_parts",
    "bubble_fraction",
    "candidate_layouts",
    "check_layout",
    "check_sharded",
    "compute_factor_of",
    "cp_ring_exposed_s",
    "cp_ring_step_bytes",
    "default_tp_overlap",
    "_degrees",
    "_divisors",
    "dp_ranks_per_node",
    "dtensor_rate",
    "dtensor_tp_block_s",
    "eager_loss_bytes",
    "ep_interference",
    "ep_ranks_per_node",
    "_even_ranks_per_node",
    "_expert_degrees",
    "FsdpStage",
    "fsdp_stage_comm",
    "fsdp_unit_bytes",
    "fsdp_unit_params",
    "_group_ranks_per_node",
    "has_layout",
    "_kept_block_bytes",
    "load_layout_params",
    "megatron_stage_blocks",
    "memory_stages",
    "_most_sharded",
    "p2p_interference",
    "_peak_memory",
    "_peak_memory_of",
    "pipeline_blocks",
    "_plan",
    "plan_layout",
    "pytorch_stack",
    "reprice",
    "_rebuilt_block_bytes",
    "scaled_parts",
    "search_layouts",
    "split_arch",
    "stage_layers",
    "_stage_memories",
    "StageStates",
    "stage_memory_bytes",
    "stage_moe_blocks",
    "state_shard",
    "tp_block_comm",
    "tp_interference",
    "tp_overlap_share",
]
