"""One iteration of a layout: ``plan_layout`` prices the step schedule (pipeline slots,
collectives, recompute, the data-parallel reduction and the optimizer step).

Part of the layout simulator (srift/simulate/layouts.py: the model as a whole)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from srift.cluster import Cluster
from srift.errors import SriftError
from srift.hardware import gpu as gpu_spec
from srift.perf.comm import CommModel
from srift.job import (BF16, DEFAULT_RECOMPUTE_MODULES, FULL_CHECKPOINTING, HALF_PRECISIONS, INTERLEAVED, SELECTIVE, ZERO1,
                       Fp8Recipe, MoeDispatcher, RecomputeModule)
from srift.perf.compute import kernel_rates, load_params as load_compute_params
from srift.simulate.breakdown import (BACKWARD, BUBBLE, COMM_INTERFERENCE, EXPOSED_CP, EXPOSED_DP, EXPOSED_EP,
                                      EXPOSED_PP, EXPOSED_TP, FORWARD, LAYOUT_PHASES, OPTIMIZER, OVERHEAD, RECOMPUTE,
                                      Breakdown, Phase)
from srift.simulate.finetune import LoraSpec
from srift.simulate.memory import MASTER_BYTES, fit_state, fits
from srift.simulate.moe import BALANCED_ROUTING, ep_exchange_s, expert_dp, expert_shard_of, expert_tp
from srift.simulate.recompute import check_modules
from srift.zoo.llm import DecoderArch
from srift.simulate.layout.plan import (ADAM_STATE_BYTES, DP_FLAVOURS, GRAD_BYTES, LAYOUT_CHECKPOINTING, PARAM_BYTES,
                                        SHARDED_FLAVOURS, Layout, LayoutPlan, check_layout, check_sharded,
                                        compute_factor_of, default_tp_overlap, dp_ranks_per_node, ep_ranks_per_node,
                                        _even_ranks_per_node, _group_ranks_per_node, pytorch_stack, state_shard)
from srift.simulate.layout.pipeline import pipeline_blocks, stage_layers, stage_moe_blocks
from srift.simulate.layout.blocks import BlockOptions, BlockParts, block_parts, scaled_parts
from srift.simulate.layout.collectives import (FsdpStage, block_comm, dtensor_rate, ep_interference, fsdp_stage_comm,
                                               p2p_interference, tp_interference)
from srift.simulate.layout.memory import memory_stages, peak_stages, _stage_memories


@dataclass(frozen=True)
class PlanSettings:
    """How a layout runs besides its degrees: everything ``plan_layout`` prices it under (each
    field as ``plan_layout``'s docstring says; the defaults: Megatron-Core's bf16 pre-training
    with its distributed optimizer, no recompute, the median iteration)."""

    precision: str = "bf16"
    checkpointing: str = "none"
    dp_flavour: str = "zero1"
    quantile: float = 0.5
    tp_overlap: bool | None = None
    compute_factor: float | None = None
    imbalance: float = BALANCED_ROUTING
    fp8: Fp8Recipe | None = None
    recompute_modules: tuple[RecomputeModule, ...] = DEFAULT_RECOMPUTE_MODULES
    dispatcher: MoeDispatcher = "alltoall"
    ep_overlap: bool = False
    lora: LoraSpec | None = None
    reduce_dtype: str = "fp32"
    op_sac: bool = False
    fp8_attention: bool = False
    mtp_layers: int = 0
    stage_blocks: tuple[int, ...] | None = None
    grad_overlap: bool = True  # the stack overlaps the DP reduction with backward (srift/stacks.py)
    grad_accum_bytes: float = 0.0  # per trainable parameter and micro-batch, summing gradients outside the GEMMs (srift/stacks.py)


def plan_layout(arch: DecoderArch, cluster: Cluster, layout: Layout, seq_len: int,
                settings: PlanSettings = PlanSettings(), comm: CommModel | None = None) -> LayoutPlan:
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
    st = settings
    checkpointing, dp_flavour, tp_overlap, mtp_layers, stage_blocks = (st.checkpointing, st.dp_flavour, st.tp_overlap,
                                                                        st.mtp_layers, st.stage_blocks)
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
    why = check_layout(arch, layout, seq_len, g) or check_sharded(dp_flavour, layout.ep, st.lora)
    if why:
        raise SriftError(f"layout {layout.label} cannot run {arch.name}: {why}.",
                         "choose another --layout, or --layout auto.")
    gpu = cluster.node_groups[0].gpu
    plan = _plan(arch, cluster, layout, seq_len, settings, comm, gpu, _parts(arch, layout, seq_len, settings, gpu),
                 default_tp_overlap(dp_flavour) if tp_overlap is None else tp_overlap)
    return dataclasses.replace(plan, recompute_modules=check_modules(st.recompute_modules)) if checkpointing == SELECTIVE \
        else plan


def _parts(arch: DecoderArch, layout: Layout, seq_len: int, settings: PlanSettings, gpu: str) -> BlockParts:
    """The blocks' work on one ``gpu`` of ``layout`` under ``settings`` (``block_parts``, scaled by
    the stack's compute factor; torchtitan's per-op selective figures under ``op_sac``)."""
    st = settings
    pytorch = pytorch_stack(st.dp_flavour)
    parts = scaled_parts(block_parts(arch, layout.tp, layout.cp, layout.micro_batch, seq_len, st.precision, gpu,
                                     layout.ep, BlockOptions(st.imbalance, st.fp8, st.recompute_modules, st.lora, st.op_sac,
                                                             st.fp8_attention, st.dispatcher, not pytorch, pytorch)),
                         compute_factor_of(st.dp_flavour, st.compute_factor))
    if st.op_sac:
        parts = dataclasses.replace(parts, selective_saved_bytes=parts.op_sac_saved_bytes, selective_f_s=parts.op_sac_f_s)
    return parts


def reprice(arch: DecoderArch, cluster: Cluster, plan: LayoutPlan, seq_len: int, settings: PlanSettings,
            comm: CommModel | None = None) -> LayoutPlan:
    """``plan`` (``plan_layout``'s under ``settings``, on a cluster of the same GPUs) with its step
    priced again on ``cluster`` at ``settings.quantile`` of the collectives: the same layout,
    recompute and memory (which no network or quantile changes), the times of this network. A
    prediction's 90th percentile and its network fall-backs (srift.api.network_fallbacks)."""
    comm = comm or CommModel.for_cluster(cluster)
    gpu = cluster.node_groups[0].gpu
    tp_overlap = default_tp_overlap(settings.dp_flavour) if settings.tp_overlap is None else settings.tp_overlap
    breakdown, comm_s = _step(arch, plan.layout, seq_len, settings, comm, gpu,
                              _parts(arch, plan.layout, seq_len, settings, gpu), tp_overlap)
    return dataclasses.replace(plan, iteration_s=breakdown.total_s, breakdown=breakdown, comm_s=comm_s,
                               tokens_per_s=plan.layout.global_batch * seq_len / breakdown.total_s)


def _plan(arch: DecoderArch, cluster: Cluster, layout: Layout, seq_len: int, settings: PlanSettings, comm: CommModel,
          gpu: str, parts: BlockParts, tp_overlap: bool = True) -> LayoutPlan:
    """``plan_layout``'s iteration of ``parts`` (the blocks' work on ``gpu``) under ``settings``,
    ``tp_overlap`` resolved (``settings.tp_overlap`` is not read): the step (``_step``) and the
    most loaded stage's memory."""
    st = settings
    checkpointing, dp_flavour, reduce_dtype, mtp_layers, stage_blocks = (st.checkpointing, st.dp_flavour, st.reduce_dtype,
                                                                          st.mtp_layers, st.stage_blocks)
    t, p, c, d, v = layout.tp, layout.pp, layout.cp, layout.dp, layout.vp
    g = comm.topology.gpus_per_node
    layers = stage_blocks or stage_layers(pipeline_blocks(arch, mtp_layers), p, not pytorch_stack(dp_flavour))
    breakdown, comm_s = _step(arch, layout, seq_len, settings, comm, gpu, parts, tp_overlap)
    shard = state_shard(dp_flavour, g, t, c, p, d)
    # ---- memory: the most loaded stage (of an even split only the first, second and last can be:
    # _peak_memory; a job's own layout may load any stage most) ----
    moe_blocks = stage_moe_blocks(arch, layers, v if layout.schedule == INTERLEAVED else 1, mtp_layers) \
        if parts.kinds is not None else None
    candidates = memory_stages(p) if stage_blocks is None and moe_blocks is None else peak_stages(layers, moe_blocks)
    mems = dict(zip(candidates, _stage_memories(arch, layout, parts, checkpointing, dp_flavour, candidates, shard,
                                                reduce_dtype, mtp_layers, layers)))
    stage = max(candidates, key=lambda i: sum(mems[i].values()))
    worst = (sum(mems[stage].values()), mems[stage], stage)
    gpu_mem = min(gr.gpu_memory_gib if gr.gpu_memory_gib is not None else gpu_spec(gr.gpu).memory_gib
                  for gr in cluster.node_groups)
    iteration = breakdown.total_s
    return LayoutPlan(layout, iteration, breakdown, comm_s, worst[0], worst[1], worst[2], fits(worst[0], gpu_mem),
                      layout.global_batch * seq_len / iteration, checkpointing, dp_flavour,
                      memory_state=fit_state(worst[0], gpu_mem))


def _step(arch: DecoderArch, layout: Layout, seq_len: int, settings: PlanSettings, comm: CommModel,
          gpu: str, parts: BlockParts, tp_overlap: bool) -> tuple[Breakdown, dict[str, float]]:
    """One step's seconds by phase and communication seconds by group (``_plan``'s), at
    ``settings.quantile`` of the collectives."""
    st = settings
    precision, checkpointing, dp_flavour, quantile = st.precision, st.checkpointing, st.dp_flavour, st.quantile
    t, p, c, d, v, m = layout.tp, layout.pp, layout.cp, layout.dp, layout.vp, layout.grad_accum
    dtensor = pytorch_stack(dp_flavour)
    g = comm.topology.gpus_per_node
    e = PARAM_BYTES if precision in HALF_PRECISIONS else 4.0
    layers = st.stage_blocks or stage_layers(pipeline_blocks(arch, st.mtp_layers), p, not pytorch_stack(dp_flavour))
    # ---- per micro-batch on each stage ----
    bc = block_comm(arch, comm, t, c, layout.micro_batch, seq_len, e, parts, quantile, tp_overlap,
                    dtensor_rate(gpu, precision, dtensor))
    tp_f, tp_b_exposed, tp_b_hidden, tp_end = bc.tp_f_s, bc.tp_b_s, bc.tp_hidden_s, bc.tp_end_s
    if st.op_sac and checkpointing == SELECTIVE:  # the all-gathers torchtitan's per-op policy recomputes
        tp_b_exposed += bc.tp_sac_s
    cp_f, cp_b, cp_hidden, step_f, step_b = bc.cp_f_s, bc.cp_b_s, bc.cp_hidden_s, bc.cp_step_f_s, bc.cp_step_b_s
    recompute = parts.block_f_s if checkpointing == FULL_CHECKPOINTING else (parts.selective_f_s if checkpointing == SELECTIVE else 0.0)
    ep_f, ep_b, ep_hidden = _ep_exchange(arch, layout, comm, parts, settings)
    # What backward's recompute runs again of the forward's exposed collectives: full, the TP and
    # EP ones; selective of whole MoE layers, their all-to-alls.
    full = checkpointing == FULL_CHECKPOINTING
    rerun_tp = tp_f if full else 0.0
    rerun_ep = ep_f if full or (checkpointing == SELECTIVE and parts.moe_recomputed) else 0.0
    blk_f = parts.block_f_s + tp_f + cp_f + ep_f
    blk_b = parts.block_b_s + tp_b_exposed + cp_b + ep_b + recompute + rerun_tp + rerun_ep
    stage_f, stage_b = _stage_seconds(layers, parts, (blk_f, blk_b), tp_end, settings, gpu)
    slow = max(range(p), key=lambda i: stage_f[i] + stage_b[i])
    sf, sb = stage_f[slow], stage_b[slow]
    n_slow = layers[slow]
    pipe_p2p, hidden_p2p = _pipeline_sends(arch, layout, comm, seq_len, e, quantile)
    bubble = (p - 1) / v * (sf + sb)
    # ---- data parallelism after the flush ----
    stage_params = parts.trainable(n_slow, slow == 0, slow == p - 1)  # what reduces its gradients and steps
    expert_params = n_slow * parts.trainable_expert_params
    stage = FsdpStage(parts, n_slow, slow == 0, slow == p - 1, (blk_f, blk_b), tp_end)
    dp_exposed, dp_hidden, dp_total = _dp_reduction(layout, settings, comm, stage, (stage_params, expert_params),
                                                    (sf, sb))
    shard = state_shard(dp_flavour, g, t, c, p, d)
    sharded = dp_flavour in SHARDED_FLAVOURS
    expert_shard = expert_shard_of(shard, t, layout.ep) if dp_flavour == ZERO1 or sharded else 1
    rates = kernel_rates(gpu, precision)
    optimizer = ((stage_params / shard + expert_params / expert_shard) * (MASTER_BYTES * 3 + 2 * ADAM_STATE_BYTES)
                 / rates.memory_bytes_per_s)
    overhead = load_compute_params().overhead_s
    interf = (comm.params.overlap_interference * dp_hidden + ep_interference(gpu, st.dispatcher, layout.ep) * ep_hidden * n_slow * m
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
    comm_s = {"tp": m * n_slow * (tp_f + tp_b_exposed + tp_b_hidden), "cp": m * n_slow * (c - 1) * (step_f + step_b),
              "ep": m * n_slow * (ep_f + ep_b + ep_hidden),
              "pp": pipe_p2p + hidden_p2p, "dp": dp_total}
    return Breakdown.of(LAYOUT_PHASES, seconds, sum(comm_s.values())), comm_s


def _ep_exchange(arch: DecoderArch, layout: Layout, comm: CommModel, parts: BlockParts,
                 settings: PlanSettings) -> tuple[float, float, float]:
    """Expert parallelism's dispatch and combine all-to-alls in the EP group (innermost: up to a
    node's GPUs over NVLink) per (average) block: forward and backward seconds exposed, and the
    seconds hidden beside another micro-batch (srift/simulate/moe.py)."""
    if not (layout.ep > 1 and parts.moe_fraction > 0):
        return 0.0, 0.0, 0.0
    ep_node = ep_ranks_per_node(layout.ep, comm.topology.gpus_per_node)
    a2a = ep_exchange_s(arch, comm.subgroup(layout.ep, ep_node), layout.ep, ep_node, parts.dispatch_bytes,
                        settings.quantile, settings.dispatcher)
    ep_f = ep_b = 2.0 * a2a * parts.moe_fraction
    ep_hidden = 0.0
    if settings.ep_overlap:  # beside another micro-batch's forward or backward (Megatron's EP A2A overlap)
        ep_hidden = min(ep_f + ep_b, parts.block_f_s + parts.block_b_s)
        ep_f = ep_b = (ep_f + ep_b - ep_hidden) / 2.0
    return ep_f, ep_b, ep_hidden


def _stage_seconds(layers: list[int] | tuple[int, ...], parts: BlockParts, block_s: tuple[float, float], tp_end: float,
                   settings: PlanSettings, gpu: str) -> tuple[list[float], list[float]]:
    """Each pipeline stage's forward and backward seconds on one micro-batch: its blocks
    (``block_s``, their exposed collectives and recompute in them), the embedding on the first
    stage, the head and loss (once more per MTP layer) on the last."""
    blk_f, blk_b = block_s
    p = len(layers)
    heads = 1 + settings.mtp_layers  # the last stage's final norm, head and loss, once more per MTP layer
    stage_f, stage_b = [], []
    accum_rate = kernel_rates(gpu, settings.precision).memory_bytes_per_s
    for i, n in enumerate(layers):
        f = n * blk_f + (parts.first_f_s + tp_end if i == 0 else 0.0) + (heads * (parts.last_f_s + tp_end) if i == p - 1 else 0.0)
        b = n * blk_b + (parts.first_b_s + tp_end if i == 0 else 0.0) + (heads * (parts.last_b_s + tp_end) if i == p - 1 else 0.0)
        # A stack that sums each micro-batch's gradients in a pass of its own: DeepSpeed's
        # BF16_Optimizer under bf16 (fp16 runs its FP16_Optimizer, which accumulates in .grad).
        if settings.precision == BF16:
            b += settings.grad_accum_bytes * (parts.trainable(n, i == 0, i == p - 1) + n * parts.trainable_expert_params) / accum_rate
        stage_f.append(f)
        stage_b.append(b)
    return stage_f, stage_b


def _pipeline_sends(arch: DecoderArch, layout: Layout, comm: CommModel, seq_len: int, elem_bytes: float,
                    quantile: float) -> tuple[float, float]:
    """The pipeline's point-to-point sends of activations over a step: seconds exposed and seconds
    hidden (interleaved schedules send beside compute; only the bubble's path waits)."""
    t, p, c, v, m = layout.tp, layout.pp, layout.cp, layout.vp, layout.grad_accum
    g = comm.topology.gpus_per_node
    p2p = 0.0
    if p > 1:
        act_bytes = layout.micro_batch * seq_len // c * arch.hidden * elem_bytes / t
        crossing = t * c * p > g  # the pipeline spans nodes: its slowest sends cross the network
        pair = comm.subgroup(2, 1 if crossing else 2, net_share=(1.0 / g) if crossing else None)  # a rail, as CP's
        p2p = float(pair.broadcast_time_s(act_bytes, quantile))
    if layout.schedule == INTERLEAVED and p > 1 and v > 1:
        return 2.0 * p2p * (p - 1), 2.0 * p2p * m * v  # only the bubble's path waits for the sends
    return (2.0 * p2p * (m + p - 1) if p > 1 else 0.0), 0.0


def _dp_reduction(layout: Layout, settings: PlanSettings, comm: CommModel, stage: FsdpStage,
                  params: tuple[float, float], slot: tuple[float, float]) -> tuple[float, float, float]:
    """The slowest stage's data-parallel gradient reduction (and ZeRO-1's parameter gather) after
    the pipeline's flush: seconds exposed, hidden and in all. ``params`` are the stage's dense and
    routed-expert trainable parameters, ``slot`` its forward and backward seconds on a micro-batch.
    Routed experts reduce their gradients over the expert data-parallel group (tp x cp x dp / ep
    ranks; ep innermost, so g / ep of them share a node)."""
    st = settings
    t, p, c, d, m = layout.tp, layout.pp, layout.cp, layout.dp, layout.grad_accum
    g = comm.topology.gpus_per_node
    stage_params, expert_params = params
    sf, sb = slot
    dp_group = c * d
    edp = expert_dp(t, c, d, layout.ep)
    groups: list[tuple[CommModel, float]] = []
    sharded = st.dp_flavour in SHARDED_FLAVOURS
    dcomm = comm.subgroup(dp_group, dp_ranks_per_node(g, t, c, p, d)) if dp_group > 1 else None
    ecomm = comm.subgroup(edp, _even_ranks_per_node(_group_ranks_per_node(g, layout.ep * expert_tp(t, layout.ep), edp), edp)) \
        if expert_params > 0 and edp > 1 else None
    if sharded and (dcomm is not None or ecomm is not None):
        # FSDP2: the routed experts gathered and reduced over the expert group when EP splits them
        # (torchtitan's efsdp mesh), else with their block over CP x DP.
        return fsdp_stage_comm(stage, dcomm, st.dp_flavour, st.reduce_dtype, p, m, st.quantile,
                               ecomm if layout.ep > 1 else None)
    if not sharded:
        for gc, n_params in ((dcomm, stage_params), (ecomm, expert_params)):
            if gc is not None:
                groups.append((gc, n_params))
    rs = ag = 0.0
    for gcomm, n_params in groups:
        if st.dp_flavour == ZERO1:
            rs += float(gcomm.reduce_scatter_time_s(n_params * GRAD_BYTES, st.quantile))
            ag += float(gcomm.all_gather_time_s(n_params * PARAM_BYTES, st.quantile))
        else:
            rs += float(gcomm.allreduce_time_s(n_params * GRAD_BYTES, st.quantile))
    if not groups:
        return 0.0, 0.0, 0.0
    # Overlapped: the reduction runs under the last micro-batch's backward, the gather under
    # the next forward; a stack without the overlap (Megatron-DeepSpeed) waits for both.
    dp_exposed = max(0.0, rs - sb) + max(0.0, ag - sf) if st.grad_overlap else rs + ag
    return dp_exposed, rs + ag - dp_exposed, rs + ag
