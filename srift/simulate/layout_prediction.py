"""A decoder LLM's TP x PP x CP x DP layout as a Prediction: the job's layout settings, the plan
or the search (srift/simulate/layouts.py), and the memory error that names a layout that fits.

The Predictor calls ``predict_layout`` from one place when the job names a layout.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from srift.cluster import Cluster
from srift.errors import SriftError
from srift.hardware import gpu as gpu_spec
from srift.perf.comm import CommModel
from srift.perf.fp8 import fp8_unsupported
from srift.job import (
    ALLTOALL, AUTO, FLEX, DEFAULT_RECOMPUTE_MODULES, INTERLEAVED, NO_CHECKPOINTING, NVFP4, ONE_F_ONE_B, ZERO1, Fp8Recipe, Job,
    LayoutRequest, MoeDispatcher, parse_layout,
)
from srift.simulate.layouts import (
    DP_FLAVOURS, SHARDED_FLAVOURS, SCHEDULES, Layout, LayoutPlan, check_layout, check_sharded, load_layout_params,
    PlanSettings, plan_layout,
    pytorch_stack, reprice, search_layouts, state_shard,
)
from srift.simulate.assemble import LayoutFacts, PlanGroup, PricedPlan, assemble, typical_error_of
from srift.simulate.breakdown import COMM_INTERFERENCE
from srift.simulate.door import refuse_expert_options, refuse_ignored
from srift.simulate.finetune import LoraSpec, layout_lora
from srift.simulate.memory import FITS, USABLE_FRACTION
from srift.simulate.plans import MemoryFit
from srift.simulate.prediction import BatchShare, Prediction
from srift.simulate.varlen import arch_for_job
from srift.simulate.moe import BALANCED_ROUTING, REAL_ROUTING, expert_shard_of, expert_tp
from srift.simulate.recompute import AUTO_LADDER, modules_present
from srift.stacks import ResolvedStack, job_stack, layout_parallelism, stack_note
from srift.zoo.llm import DecoderArch, active_params_count, model_flops_per_token, params_count


@dataclass(frozen=True)
class LayoutSettings:
    """What the job says about its layout.

    Attributes:
        request: ``--layout`` parsed (fixed degrees, or ``auto``).
        micro_batch: Sequences per micro-batch (None: 1 for a fixed layout, searched under auto).
        global_batch: Sequences per optimizer step (None: micro-batch x DP x ``grad_accum``).
        grad_accum: Micro-batches per step when no global batch is given.
        schedule: One of SCHEDULES (None: ``interleaved`` when ``virtual_stages`` > 1, else 1F1B;
            searched under auto).
        virtual_stages: Virtual stages per pipeline rank (interleaved).
        dp_flavour: One of DP_FLAVOURS.
        checkpointing: ``none``, ``selective``, ``full``, or None (the least recompute that fits).
        routing_imbalance: A mixture of experts' busiest-rank load over the mean (srift/simulate/moe.py:
            REAL_ROUTING for predictions, BALANCED_ROUTING for force-balanced benchmarks).
        lora: LoRA over the frozen base (``--finetune lora``), or None (pre-training and full
            fine-tuning, which trains every weight as pre-training does).
        reduce_dtype: What ``fsdp``/``hsdp`` reduce gradients in (``--reduce-dtype``).
        fp8: The blocks' GEMMs in FP8 under this recipe (``--fp8``; srift/perf/fp8.py), or None (bf16).
        dispatcher: A mixture of experts' token dispatcher (``--moe-dispatcher``).
        ep_overlap: Its all-to-alls overlap another micro-batch's compute (``--moe-ep-overlap``).
        mtp_layers: Multi-token prediction layers trained (``--mtp-layers``; ``pipeline_blocks``).
        stack: The training stack (``--stack``; srift/stacks.py): its TP-communication and
            gradient-reduce overlap price the plan; None: Megatron-Core's (both overlapped).
    """

    request: LayoutRequest
    micro_batch: int | None = None
    global_batch: int | None = None
    grad_accum: int = 1
    schedule: str | None = None
    virtual_stages: int = 1
    dp_flavour: str = "zero1"
    checkpointing: str | None = None
    routing_imbalance: float = REAL_ROUTING
    lora: LoraSpec | None = None
    reduce_dtype: str = "fp32"
    fp8: Fp8Recipe | None = None
    dispatcher: MoeDispatcher = ALLTOALL
    ep_overlap: bool = False
    mtp_layers: int = 0
    stack: ResolvedStack | None = None

    @property
    def tp_overlap(self) -> bool | None:
        """The stack's TP-communication overlap (None: the data parallelism's default)."""
        return None if self.stack is None else self.stack.spec.tp_overlap

    @property
    def grad_overlap(self) -> bool:
        """The stack overlaps the data-parallel gradient reduction with backward."""
        return True if self.stack is None else self.stack.spec.grad_reduce_overlap.value

    @property
    def grad_accum_bytes(self) -> float:
        """The stack's per-micro-batch gradient-summing pass, bytes per trainable parameter."""
        return 0.0 if self.stack is None else self.stack.spec.grad_accum_bytes

    @classmethod
    def of(cls, job: Job) -> "LayoutSettings":
        """The settings of a job with a ``layout`` (see srift.job.Job)."""
        assert job.layout is not None
        return cls(parse_layout(job.layout), job.micro_batch_size, job.global_batch_size, job.grad_accum,
                   job.pipeline_schedule, job.virtual_stages, layout_parallelism(job),
                   None if job.activation_checkpointing == AUTO else job.activation_checkpointing, job.moe_imbalance,
                   layout_lora(job), job.reduce_dtype, job.fp8, job.moe_dispatcher, job.moe_ep_overlap,
                   job.mtp_layers or 0, job_stack(job))

    def __post_init__(self) -> None:
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise SriftError(f"unknown pipeline schedule '{self.schedule}'.",
                             f"use --pipeline-schedule with one of {', '.join(SCHEDULES)}.")
        if self.dp_flavour not in DP_FLAVOURS:
            raise SriftError(f"--parallelism {self.dp_flavour} is not modelled with --layout.",
                             f"use --parallelism {' or '.join(DP_FLAVOURS)} with --layout (zero1: Megatron's "
                             "distributed optimizer).")
        why = check_sharded(self.dp_flavour, self.request.ep or 1, self.lora)
        if why:
            raise SriftError(f"{why}.", f"drop --parallelism {self.dp_flavour}, or use zero1.")
        if self.virtual_stages > 1 and self.schedule == ONE_F_ONE_B:
            raise SriftError("--virtual-stages needs the interleaved schedule.",
                             "add --pipeline-schedule interleaved, or drop --virtual-stages.")


class LayoutPredictor:
    """A ``--layout`` job's predictions on many clusters, from the architecture's blocks alone: no
    profile and no data-parallel workload are built for it (srift/simulate/door.py).

    Args:
        arch: The decoder LLM's architecture.
        job: The job, with its ``layout`` and ``precision``.
        seq_len: Tokens per sequence (the job's, else the model's default).
    """

    def __init__(self, arch: DecoderArch, job: Job, seq_len: int) -> None:
        assert job.layout is not None and job.precision is not None
        refuse_ignored(job, layout_path=True)
        # Packed samples attending within themselves (srift/simulate/varlen.py): the blocks' attention.
        self.arch, self.job, self.seq_len, self.precision = arch_for_job(arch, job, seq_len), job, seq_len, job.precision
        self.settings = LayoutSettings.of(job)
        self.flops_per_token = model_flops_per_token(arch, seq_len)
        self._last: tuple[Cluster, tuple[LayoutPlan, LayoutPlan | None]] | None = None

    def predict(self, cluster: Cluster) -> Prediction:
        """The job's prediction on ``cluster`` (``predict_layout``)."""
        check_options(self.arch, cluster, self.settings)
        planned = plan_for(self.arch, cluster, self.settings, self.seq_len, self.precision)
        self._last = (cluster, planned)
        return layout_prediction(self.arch, cluster, self.settings, self.seq_len, self.precision, self.flops_per_token,
                                 *planned)

    def on_network(self, cluster: Cluster) -> Prediction:
        """The plan of the last ``predict`` on the same GPUs, priced on ``cluster``'s network (what a
        launcher that sets up less of the network gets of the plan it launches:
        srift.api.network_fallbacks); ``predict`` when there is none."""
        if self._last is None or [(g.gpu, g.gpus) for g in self._last[0].node_groups] != \
                [(g.gpu, g.gpus) for g in cluster.node_groups]:
            return self.predict(cluster)
        plan, alternative = self._last[1]
        plan = reprice(self.arch, cluster, plan, self.seq_len, _plan_settings(plan, self.settings, self.precision, 0.5))
        return layout_prediction(self.arch, cluster, self.settings, self.seq_len, self.precision, self.flops_per_token,
                                 plan, alternative)


# How a prediction's notes name the data-parallel flavour of a layout.
DP_WORDS = {ZERO1: "distributed optimizer (zero1)", "ddp": "DDP",
            "fsdp": "FSDP2 over CP x DP (per-block all-gather and reduce-scatter, as torchtitan)",
            "hsdp": "HSDP (FSDP2 within a node, replicated across nodes)"}


def _routing_note(ep: int, settings: LayoutSettings) -> str:
    """What the note says of the dispatch and the routing: without expert parallelism every rank
    holds (a slice of) every expert and sends nothing, so no rank waits on a busier one."""
    if ep == 1:
        return ("ep=1: every rank computes every expert (a TP slice of each under expert TP): no all-to-all, and "
                "routing imbalance slows no rank")
    overlap = "overlapped with another micro-batch (the rest: exposed_ep)" if settings.ep_overlap else "exposed (exposed_ep)"
    how = "force-balanced" if settings.routing_imbalance == BALANCED_ROUTING else "estimated for trained routers"
    return (f"ep={ep}: dispatch and combine all-to-alls {overlap}; routing imbalance x{settings.routing_imbalance:g} "
            f"({how})")


def fixed_layout(arch: DecoderArch, cluster: Cluster, settings: LayoutSettings, seq_len: int) -> Layout:
    """The layout a fixed ``--layout`` names on ``cluster`` (data parallelism takes the rest).

    Raises:
        SriftError: when the degrees do not divide the GPUs, the batch does not divide, or the
            model cannot be split so.
    """
    r = settings.request
    t, p, c = r.tp or 1, r.pp or 1, r.cp or 1
    if cluster.gpus % (t * p * c):
        raise SriftError(f"--layout tp={t},pp={p},cp={c} needs a multiple of {t * p * c} GPUs; "
                         f"{cluster.name} has {cluster.gpus}.",
                         "choose degrees whose product divides the GPU count, or --layout auto.")
    d = cluster.gpus // (t * p * c)
    mb = settings.micro_batch or 1
    gb = settings.global_batch or mb * d * settings.grad_accum
    if gb % (mb * d):
        raise SriftError(f"the global batch {gb:,} is not a multiple of micro-batch {mb} x data parallelism {d}.",
                         "choose --global-batch-size as a multiple of --micro-batch-size x DP.")
    v = settings.virtual_stages
    schedule = settings.schedule or ("interleaved" if v > 1 else "1f1b")
    layout = Layout(t, p, c, d, v, mb, gb // (mb * d), schedule, r.ep or 1)
    why = check_layout(arch, layout, seq_len, cluster.node_groups[0].domain_gpus)  # TP within an NVLink domain
    if why:
        raise SriftError(f"--layout {layout.label} cannot run {arch.name}: {why}.", "choose another --layout, or --layout auto.")
    return layout


def plan_for(arch: DecoderArch, cluster: Cluster, settings: LayoutSettings, seq_len: int, precision: str,
             quantile: float = 0.5) -> tuple[LayoutPlan, LayoutPlan | None]:
    """The plan of the job's layout (or of the search's choice) and, when it does not fit, the
    fastest layout that does (None when none does)."""
    if len(cluster.node_groups) > 1:
        raise SriftError("--layout is modelled on clusters of one node type.", "drop --mixed, or name one instance type.")
    comm = CommModel.for_cluster(cluster)
    ckpts = (settings.checkpointing,) if settings.checkpointing else ("none", "full")
    if settings.request.auto:
        gb = settings.global_batch or cluster.gpus * (settings.micro_batch or 1) * settings.grad_accum
        found = search_layouts(arch, cluster, seq_len, gb, _search_settings(settings, precision), settings.request, ckpts,
                               comm)
        if found.best is not None:
            return found.best, None
        if found.smallest is None:  # nothing divides, or nothing the stack runs (srift/simulate/layout_rules.py)
            raise SriftError(f"no layout of {arch.name} that the stack runs divides {cluster.gpus:,} GPUs at a global batch "
                             f"of {gb:,}.", "choose another GPU count or --global-batch-size, or name a --layout.")
        return found.smallest, None
    layout = fixed_layout(arch, cluster, settings, seq_len)
    plans: list[LayoutPlan] = []
    # auto: the least recompute that fits, Megatron-Core's selective modules before full recompute;
    # as the data-parallel plans choose (srift/simulate/plans.py), what fits for sure first, then
    # what may not fit (srift.simulate.memory.fit_state).
    ladder = ((settings.checkpointing, DEFAULT_RECOMPUTE_MODULES),) if settings.checkpointing else AUTO_LADDER
    for policy, modules in ladder:
        plans.append(plan_layout(arch, cluster, layout, seq_len,
                                 PlanSettings(precision=precision, checkpointing=policy,
                                              dp_flavour=settings.dp_flavour, quantile=quantile,
                                              imbalance=settings.routing_imbalance,
                                              recompute_modules=modules or DEFAULT_RECOMPUTE_MODULES,
                                              lora=settings.lora, reduce_dtype=settings.reduce_dtype, fp8=settings.fp8,
                                              dispatcher=settings.dispatcher, ep_overlap=settings.ep_overlap,
                                              mtp_layers=settings.mtp_layers, tp_overlap=settings.tp_overlap,
                                              grad_overlap=settings.grad_overlap,
                                              grad_accum_bytes=settings.grad_accum_bytes),
                                 comm=comm))
        if plans[-1].memory_state == FITS:
            return plans[-1], None
    plan = next((p for p in plans if p.fits), plans[-1])
    found = search_layouts(arch, cluster, seq_len, layout.global_batch, _search_settings(settings, precision),
                           LayoutRequest(), ("none", "full"), comm)
    # The layout offered instead fits for sure.
    return plan, found.best if found.best is not None and found.best.memory_state == FITS else None


def predict_layout(arch: DecoderArch, cluster: Cluster, settings: LayoutSettings, seq_len: int, precision: str,
                   model_flops_per_token: float) -> Prediction:
    """The Prediction of ``arch`` laid out on ``cluster`` (breakdown: srift.simulate.breakdown.LAYOUT_PHASES).

    Raises:
        SriftError: for a MoE dispatcher asked of a dense model, FP8 on a GPU without FP8 tensor
            cores, or a layout that cannot run (``plan_for``).
    """
    check_options(arch, cluster, settings)
    plan, alternative = plan_for(arch, cluster, settings, seq_len, precision)
    return layout_prediction(arch, cluster, settings, seq_len, precision, model_flops_per_token, plan, alternative)


def layout_prediction(arch: DecoderArch, cluster: Cluster, settings: LayoutSettings, seq_len: int, precision: str,
                      model_flops_per_token: float, plan: LayoutPlan, alternative: LayoutPlan | None) -> Prediction:
    """The Prediction of ``plan`` (``plan_for``'s on ``cluster``, with its ``alternative``)."""
    lay = plan.layout
    total, active = param_counts(arch)
    # The 90th percentile: the same plan's step at the collectives' 90th percentile.
    p90_plan = reprice(arch, cluster, plan, seq_len, _plan_settings(plan, settings, precision, 0.9))
    breakdown = plan.breakdown
    params = load_layout_params()
    notes = [f"layout {lay.label}: Megatron-Core placement (TP in a node, then CP, PP, DP), sequence parallelism, "
             f"{'interleaved' if lay.schedule == INTERLEAVED else '1F1B'} pipeline, "
             f"{DP_WORDS.get(plan.dp_flavour, plan.dp_flavour)}; "
             + ("PyTorch's stack: DTensor TP (vanilla: every collective waited for), PyTorch's kernels (compute "
                "model as fitted, FlashAttention-2)" if pytorch_stack(plan.dp_flavour) else
                f"compute x {params.megatron_compute_factor:.3f} (Megatron-Core / Transformer Engine, fitted)")]
    if settings.stack is not None:
        notes.append(stack_note(settings.stack, layout=True))
    domain = cluster.node_groups[0].domain_gpus
    if lay.tp > domain:
        notes.append(f"tensor parallelism across nodes: each TP group of {lay.tp} spans {lay.tp // domain} nodes of "
                     f"{domain} GPUs, its collectives priced over the network (far slower than NVLink)")
    if settings.request.auto:
        notes.append("layout chosen by srift's search (--layout auto)")
    if plan.recompute_modules:
        notes.append(f"selective recompute of Megatron-Core's modules {', '.join(modules_present(arch, plan.recompute_modules))} "
                     "(their outputs dropped, their forward run again in backward)")
    if settings.lora is not None:
        notes.append(f"LoRA rank {settings.lora.rank} on {settings.lora.targets} (one adapter pair per fused projection, "
                     "as NeMo's LoRALinear): base weights frozen, no weight-gradient GEMM for them; gradients, optimizer "
                     "and data-parallel reduction for the adapters only")
    if arch.is_moe:
        notes.append(f"mixture of experts: {total / 1e9:,.2f}B parameters, {active / 1e9:,.2f}B "
                     f"active ({arch.experts_per_token} of {arch.experts} experts); {_routing_note(lay.ep, settings)}; "
                     "MFU = tokens/s x (6 x active parameters + attention) / peak")
    notes.extend(f"not modelled: {what}" for what in arch.unmodelled)
    if arch.sample_attention_len:  # srift/simulate/varlen.py
        notes.append(f"attention within each packed sample (--varlen-attention): E[l^2]/E[l] = "
                     f"{arch.sample_attention_len:,.0f} tokens of the {seq_len:,}-token pack")
    if arch.is_moe and expert_tp(lay.tp, lay.ep) > 1:
        notes.append(f"expert tensor parallelism {lay.tp} (megatron-core's expert_tensor_parallel_size default, TP, "
                     "without expert parallelism): each expert's weights and GEMMs split over the TP ranks, its routed "
                     "rows all-gathered and reduce-scattered over the TP group")
    if settings.fp8 == NVFP4:
        notes.append("NVFP4 GEMMs (Transformer Engine's NVFP4BlockScaling): the blocks' Linears at the GPU's dense FP4 "
                     "peak plus their quantizing passes (an E4M3 scale per 16 values, a per-tensor amax, the Hadamard "
                     "transform and stochastic rounding taken inside the passes: an estimate); attention, weights, "
                     "activations and communication in bf16; no NVFP4 run was measured, the FP8 runs' error is quoted")
    elif settings.fp8 is not None:
        notes.append(f"FP8 GEMMs ({settings.fp8} scaling"
                     + (", torchao float8 under FSDP2" if pytorch_stack(plan.dp_flavour) else ", Transformer Engine")
                     + "): the blocks' Linears at the GPU's FP8 peak plus their quantizing casts (srift/perf/fp8.py); "
                     "weights, activations and communication in bf16")
    if arch.is_moe and lay.ep > 1 and pytorch_stack(plan.dp_flavour):
        edp = expert_shard_of(state_shard(plan.dp_flavour, cluster.node_groups[0].gpus_per_node, lay.tp, lay.cp, lay.pp,
                                          lay.dp), lay.tp, lay.ep)
        notes.append(f"{plan.dp_flavour.upper()} with expert parallelism (torchtitan 0.3.0's meshes): each GPU's "
                     f"{arch.experts // lay.ep} routed experts of a block sharded over the expert data-parallel group of "
                     f"{edp} rank(s) (efsdp = dp_shard x cp x tp / ep), gathered and reduce-scattered there, the rest "
                     "over CP x DP; no FSDP2 + EP run is measured: the typical error is the Megatron-Core MoE group's")
    if arch.is_moe and lay.ep > 1:
        notes.append(f"MoE token dispatcher {settings.dispatcher} (Megatron-Core's moe_token_dispatcher_type"
                     + (": DeepEP/HybridEP, one copy of a token per node" if settings.dispatcher == FLEX else "")
                     + ")")
    if settings.mtp_layers:
        notes.append(f"{settings.mtp_layers} multi-token prediction layer(s) (--mtp-layers): a block each on the last "
                     "pipeline stage, and the head and its loss once more per layer")
    elif arch.mtp_layers:
        notes.append(f"{arch.name}'s config has {arch.mtp_layers} multi-token prediction layer(s) "
                     f"(num_nextn_predict_layers), not priced: --mtp-layers {arch.mtp_layers} trains them (as "
                     "Megatron-Bridge's DeepSeek-V3 recipes do)")
    if alternative is not None:
        notes.append(f"fits instead: --layout tp={alternative.layout.tp},pp={alternative.layout.pp},"
                     f"cp={alternative.layout.cp}{f',ep={alternative.layout.ep}' if alternative.layout.ep > 1 else ''}"
                     f" --micro-batch-size {alternative.layout.micro_batch}"
                     + (f" --pipeline-schedule interleaved --virtual-stages {alternative.layout.vp}"
                        if alternative.layout.vp > 1 else "")
                     + (f" --activation-checkpointing {alternative.checkpointing}" if alternative.checkpointing != NO_CHECKPOINTING
                        else "")
                     + f" ({alternative.memory_per_gpu_bytes / 2**30:,.1f} GiB per GPU, {alternative.iteration_s:,.2f} s)")
    error = typical_error_of(PlanGroup(cluster, layout=True, sharded=plan.dp_flavour in SHARDED_FLAVOURS,
                                       finetune=settings.lora is not None, moe=arch.is_moe, fp8=settings.fp8 is not None,
                                       stack=settings.stack.name if settings.stack is not None else None),
                             beyond=("NVFP4 GEMMs (no measured run)",) if settings.fp8 == NVFP4 else ())
    return assemble(PricedPlan(
        cluster=cluster, parallelism=plan.dp_flavour, checkpointing=plan.checkpointing, breakdown=breakdown,
        p90_s=p90_plan.iteration_s, comm_cost_s=breakdown.exposed_comm_s + breakdown[COMM_INTERFERENCE],
        memory=MemoryFit(plan.fits, plan.memory_per_gpu_bytes, plan.memory_breakdown_bytes, plan.memory_state),
        global_batch=lay.global_batch,
        batch_split=[BatchShare(g.label, g.gpu, lay.micro_batch * lay.grad_accum, g.gpus) for g in cluster.node_groups],
        grad_accum=lay.grad_accum, micro_batch_size=lay.micro_batch, state_bytes=total * 16.0 / cluster.nodes,
        error=error, precision=precision, notes=notes, seq_len=seq_len, tokens_per_sample=seq_len,
        flops_per_token=model_flops_per_token, model_flops_per_token=model_flops_per_token, data_loading="tokens",
        stack=settings.stack.name if settings.stack is not None else None, pair_group="moe" if arch.is_moe else "layouts",
        layout=LayoutFacts(layout=lay, memory_stage=plan.memory_stage,
                           layout_alternative=None if alternative is None else alternative.layout,
                           params_total=total, params_active=active,
                           moe_imbalance=settings.routing_imbalance if arch.is_moe else None, fp8=settings.fp8,
                           moe_dispatcher=settings.dispatcher if arch.is_moe else None)))


@functools.lru_cache(maxsize=256)
def param_counts(arch: DecoderArch) -> tuple[int, int]:
    """``arch``'s parameters and those one token uses (cached: a search predicts a model many times)."""
    return params_count(arch), active_params_count(arch)


def _search_settings(settings: LayoutSettings, precision: str) -> PlanSettings:
    """What ``search_layouts`` prices the job's candidate layouts under (the median step)."""
    return PlanSettings(precision=precision, dp_flavour=settings.dp_flavour, imbalance=settings.routing_imbalance,
                        lora=settings.lora, reduce_dtype=settings.reduce_dtype, fp8=settings.fp8,
                        dispatcher=settings.dispatcher, ep_overlap=settings.ep_overlap, mtp_layers=settings.mtp_layers,
                        tp_overlap=settings.tp_overlap, grad_overlap=settings.grad_overlap,
                        grad_accum_bytes=settings.grad_accum_bytes)


def _plan_settings(plan: LayoutPlan, settings: LayoutSettings, precision: str, quantile: float) -> PlanSettings:
    """The settings ``plan`` was priced under (``plan_for``'s), at ``quantile`` of the collectives."""
    return PlanSettings(precision=precision, checkpointing=plan.checkpointing, dp_flavour=plan.dp_flavour,
                        quantile=quantile, imbalance=settings.routing_imbalance,
                        recompute_modules=plan.recompute_modules or DEFAULT_RECOMPUTE_MODULES, lora=settings.lora,
                        reduce_dtype=settings.reduce_dtype, fp8=settings.fp8, dispatcher=settings.dispatcher,
                        ep_overlap=settings.ep_overlap, mtp_layers=settings.mtp_layers, tp_overlap=settings.tp_overlap,
                        grad_overlap=settings.grad_overlap, grad_accum_bytes=settings.grad_accum_bytes)


def check_options(arch: DecoderArch, cluster: Cluster, settings: LayoutSettings) -> None:
    """Refuse what the job's model or GPUs cannot run: a MoE option for a dense model, FP8
    GEMMs on GPUs without FP8 tensor cores.

    Raises:
        SriftError: saying which, and how to fix it.
    """
    refuse_expert_options(arch, settings.routing_imbalance, settings.dispatcher, settings.ep_overlap)
    if settings.fp8 is not None:
        for g in cluster.node_groups:
            why = fp8_unsupported(g.gpu, settings.fp8)
            if why:
                raise SriftError(f"--fp8 {settings.fp8}: {why}.",
                                 "drop --fp8, or choose GPUs that run it (tensorwise: Hopper and newer; mxfp8 and nvfp4: Blackwell).")


def layout_memory_error(cluster: Cluster, pred: Prediction, model: str) -> SriftError:
    """The error for a layout that does not fit: its most loaded stage, and a layout that fits."""
    lay = pred.layout
    assert lay is not None  # a layout prediction's
    cap = min(g.gpu_memory_gib if g.gpu_memory_gib is not None else gpu_spec(g.gpu).memory_gib for g in cluster.node_groups)
    parts = pred.memory_breakdown_bytes
    largest = max(parts, key=lambda k: parts[k]) if parts else ""
    alt = pred.layout_alternative
    alt_ep = f",ep={alt.ep}" if alt is not None and alt.ep > 1 else ""
    fix = ("lower --micro-batch-size, add --activation-checkpointing full, or choose GPUs with more memory"
           if alt is None else
           f"--layout tp={alt.tp},pp={alt.pp},cp={alt.cp}{alt_ep} --micro-batch-size {alt.micro_batch}"
           + (f" --pipeline-schedule interleaved --virtual-stages {alt.vp}" if alt.vp > 1 else "")
           + " fits (srift's search)")
    return SriftError(
        f"{model} does not fit in GPU memory on {cluster.name} with layout tp={lay.tp},pp={lay.pp},"
        f"cp={lay.cp},dp={lay.dp}: pipeline stage {pred.memory_stage} needs "
        f"{pred.memory_per_gpu_bytes / 2**30:,.1f} GiB per GPU ({largest.replace('_', ' ')}: "
        f"{parts.get(largest, 0.0) / 2**30:,.1f} GiB), and a {cluster.node_groups[0].gpu} has {cap:g} GiB "
        f"({USABLE_FRACTION:.0%} of it usable).", fix + ".")
